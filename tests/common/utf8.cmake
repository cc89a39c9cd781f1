zt_add_test(NAME test_utf8 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_utf8.c LIBS zt_common LABELS unit)
