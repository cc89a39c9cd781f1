# tests/bench/coordinator_load: 1,000 simulated agents heartbeating 10 times a second plus
# submitters against one zcoord; prints heartbeats/s and latency next to the empty-call
# ceiling (label bench: `make bench`). A small smoke run keeps the generator working in
# the regular suite.
# The simulated agents speak gRPC through nghttp2 (tests/bench/h2_unary.c): a lighter client
# than the gRPC core's, so the generator takes less of the cores it shares with zcoord.
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
zt_add_test(NAME coordinator_load SOURCES ${CMAKE_CURRENT_LIST_DIR}/coordinator_load.c
            ${CMAKE_CURRENT_LIST_DIR}/h2_unary.c
            LIBS zt_test_zcoord_harness zt_rpc PkgConfig::NGHTTP2 LABELS bench TIMEOUT 300
            ARGS --seconds 10)
add_dependencies(coordinator_load zcoord)
# the same with 20 browsers' worth of HTTP readers (event stream + /metrics every second each)
add_test(NAME coordinator_load_http COMMAND coordinator_load --seconds 10 --http-readers 20
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
set_tests_properties(coordinator_load_http PROPERTIES LABELS bench TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "ZT_BIN=${CMAKE_BINARY_DIR}/bin")
add_test(NAME coordinator_load_smoke COMMAND coordinator_load --agents 50 --seconds 2
         --submit-rate 20 --http-readers 2 WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
set_tests_properties(coordinator_load_smoke PROPERTIES LABELS integration TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "ZT_BIN=${CMAKE_BINARY_DIR}/bin")
# the same through the gRPC core client (--grpc-agents), the client zagent uses
add_test(NAME coordinator_load_smoke_grpc COMMAND coordinator_load --agents 50 --seconds 2
         --submit-rate 20 --grpc-agents WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
set_tests_properties(coordinator_load_smoke_grpc PROPERTIES LABELS integration TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "ZT_BIN=${CMAKE_BINARY_DIR}/bin")
