# Tests of the data path: token shards and the loader, llm.c model files, corpus generation.
zt_add_test(NAME test_dataloader SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dataloader.c
            LIBS ztengine LABELS unit TIMEOUT 60)
zt_add_test(NAME test_modelfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_modelfile.c
            LIBS ztengine LABELS unit TIMEOUT 60)
zt_add_test(NAME test_datagen SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_datagen.c
            LIBS ztengine LABELS unit TIMEOUT 120)
zt_add_test(NAME bench_dataloader SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_dataloader.c
            LIBS ztengine LABELS bench TIMEOUT 120)
# NVMe offload's asynchronous I/O (engine/nvme/): both backends, errors named with file and offset.
zt_add_test(NAME test_nvme_aio SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nvme_aio.c
            LIBS zt_nvme LABELS unit TIMEOUT 120)
zt_add_test(NAME test_nvme_swap SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nvme_swap.c
            LIBS zt_nvme LABELS unit TIMEOUT 120)
