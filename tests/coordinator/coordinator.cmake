# tests/coordinator: the store and the scheduler on their own, then the real zcoord binary
# on loopback (C agents and clients, zctl, a Python grpcio client, SIGKILL durability).
zt_add_test(NAME test_store SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c LIBS zt_coord_store LABELS unit TIMEOUT 60)
zt_add_test(NAME test_sched SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched.c LIBS zt_coord_store LABELS unit TIMEOUT 60)
add_library(zt_test_zcoord_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/zcoord_harness.c)
target_include_directories(zt_test_zcoord_harness PUBLIC ${CMAKE_SOURCE_DIR})
zt_add_test(NAME test_zcoord SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_zcoord.c
            LIBS zt_test_zcoord_harness zt_rpc LABELS integration TIMEOUT 300)
add_dependencies(test_zcoord zcoord)
# Python tests use Debian's interpreter (it sees python3-grpcio); they exit 77 without it.
zt_add_script_test(NAME test_interop COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_interop.py
                   LABELS integration TIMEOUT 180)
zt_add_script_test(NAME test_zctl COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_zctl.py
                   LABELS integration TIMEOUT 240)
zt_add_script_test(NAME test_durability COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_durability.py
                   LABELS integration slow TIMEOUT 600)
zt_add_script_test(NAME test_http_api COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_http_api.py
                   LABELS integration TIMEOUT 120)
zt_add_script_test(NAME test_zcoord_guards COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_zcoord_guards.py
                   LABELS integration TIMEOUT 120)
# who may say what: user tokens, the agent join token, per-agent keys, forged reports
zt_add_script_test(NAME test_trust COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_trust.py
                   LABELS integration TIMEOUT 120)
