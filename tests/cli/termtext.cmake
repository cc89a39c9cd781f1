# cli/termtext.c on its own: what zctl logs does to worker output before a terminal sees it.
zt_add_test(NAME test_termtext SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_termtext.c ${CMAKE_SOURCE_DIR}/cli/termtext.c
            LIBS zt_common LABELS unit TIMEOUT 30)
