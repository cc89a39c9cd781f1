zt_add_test(NAME test_status SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_status.c LIBS zt_common LABELS unit)
zt_add_test(NAME test_dtype SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dtype.c LIBS zt_common LABELS unit)
zt_add_test(NAME test_crc32c SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_crc32c.c LIBS zt_common LABELS unit)
zt_add_test(NAME test_netutil SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_netutil.c LIBS zt_common LABELS unit)
