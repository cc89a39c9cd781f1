zt_add_test(NAME test_secretfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_secretfile.c LIBS zt_common LABELS unit TIMEOUT 30)
