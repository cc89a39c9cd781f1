# tests/fuzz: the fuzz targets. The gRPC request decoding: fuzz_requests runs it without libFuzzer in
# every build (seeded mutations for a few seconds); fuzz_requests_libfuzzer builds it with
# clang's libFuzzer and runs it briefly (tests/fuzz/run_libfuzzer.sh; longer by hand).
zt_add_test(NAME fuzz_requests
            SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_main.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_requests.c
            LIBS zt_coord zt_coord_store zt_rpc LABELS unit TIMEOUT 120)
zt_add_script_test(NAME fuzz_requests_libfuzzer
                   COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_libfuzzer.sh ${CMAKE_BINARY_DIR} 10
                   LABELS unit TIMEOUT 300)
# The HTTP server's request decision (coordinator/http.c: zt_http_route_request) the same two
# ways: fuzz_http in every build, fuzz_http_libfuzzer with clang's libFuzzer for 10 s.
zt_add_test(NAME fuzz_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c
            LIBS zt_coord LABELS unit TIMEOUT 120)
target_compile_definitions(fuzz_http PRIVATE ZT_FUZZ_STANDALONE)
zt_add_script_test(NAME fuzz_http_libfuzzer
                   COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_libfuzzer.sh ${CMAKE_BINARY_DIR} 10 http
                   LABELS unit TIMEOUT 300)
