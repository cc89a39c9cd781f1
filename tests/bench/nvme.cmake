# NVMe offload benchmarks (label bench): the swap files next to fio on the same directory.
zt_add_program(NAME bench_nvme_swap SOURCES ${CMAKE_CURRENT_LIST_DIR}/nvme_swap.c
               LIBS zt_nvme zt_common DIR bin)
zt_add_script_test(NAME bench_nvme_swap COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/nvme_swap.py
                   LABELS bench TIMEOUT 1200)
zt_add_script_test(NAME bench_nvme_offload COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/nvme_offload.py
                   LABELS bench TIMEOUT 1800)
