zt_add_test(NAME test_gpt2_init SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_init.c LIBS ztengine LABELS unit)
