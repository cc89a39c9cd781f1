# tests/bench/kernels_cpu: speed of every CPU op at the reference training config, plus a large
# sgemm as the machine's peak; prints GFLOP/s or GB/s per op on 1 and 2 threads.
zt_add_test(NAME bench_kernels_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu.c
            LIBS zt_kernels zt_common LABELS bench TIMEOUT 600)
