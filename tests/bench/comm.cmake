# Bandwidth of the TCP collectives (nccl-tests style table): worlds 2 and 4, 1 KB .. 64 MB.
zt_add_test(NAME comm_bw SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_bw.c
            LIBS ztengine LABELS bench TIMEOUT 1800 ARGS -w 2,4 -b 1K -e 64M -f 4)
