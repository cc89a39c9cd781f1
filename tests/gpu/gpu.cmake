# tests/gpu/: the CUDA op table against the CPU one, a GPU fault's report, the GPU engine
# against the CPU engine (every ZeRO stage on the NCCL path), and compute-sanitizer over a
# training step. Label gpu; every test exits 77 where the build has no CUDA or no GPU is usable.
zt_add_test(NAME test_gpu_ops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_ops.c
            LIBS zt_kernels zt_common LABELS gpu TIMEOUT 600)
if(ZT_HAVE_CUDA) # its cases that call kernels/cuda/ directly (cuda_int.h)
  target_compile_definitions(test_gpu_ops PRIVATE ZT_TEST_CUDA=1)
endif()
zt_add_test(NAME test_gpu_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_fault.c
            LIBS zt_kernels zt_common LABELS gpu TIMEOUT 120)

# exit 0 when a GPU is usable, 77 when not: the scripts below ask it first
zt_add_program(NAME zt_gpu_probe SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_probe.c
               LIBS zt_kernels zt_common DIR tests)

zt_add_script_test(NAME gpu_engine COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_gpu_engine.py
                   LABELS gpu TIMEOUT 1800)
zt_add_script_test(NAME gpu_sanitizer COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_gpu_sanitizer.py
                   LABELS gpu TIMEOUT 1800)
