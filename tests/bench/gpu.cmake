# GPU training benchmark (label bench): zerotrain vs PyTorch on GPT-2 124M, largest micro batch,
# tokens/s, MFU, peak memory, and the Twin-Flow offload curve. Exits 77 without a GPU.
zt_add_script_test(NAME bench_gpu_train COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/gpu_train.py
                   LABELS bench TIMEOUT 5400)
# Every CUDA op at GPT-2 124M's shapes against the copy and matmul ceilings measured in the same
# run (label bench). Exits 77 without a GPU.
zt_add_test(NAME bench_kernels_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_gpu.c
            LIBS zt_kernels zt_common LABELS bench TIMEOUT 600)
if(ZT_HAVE_CUDA) # its rows of kernels/cuda/'s internal kernels (cuda_int.h)
  target_compile_definitions(bench_kernels_gpu PRIVATE ZT_BENCH_CUDA_INTERNALS=1)
endif()
