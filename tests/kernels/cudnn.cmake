# kernels/attn_graph.c: the attention graph cuDNN is given, evaluated on the CPU against the
# op table's attention (every build: it needs neither CUDA nor cuDNN)
zt_add_test(NAME test_attn_graph SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_attn_graph.c
            LIBS zt_kernels zt_common LABELS unit TIMEOUT 300)

# kernels/cuda/attn_cudnn.c: cuDNN's fused attention graphs, checked without a GPU (cuDNN
# builds plans for given device properties, up to loading their kernels, for which the
# toolkit's stub driver stands in)
if(ZT_HAVE_CUDA)
  find_file(ZT_CUDA_STUB_DRIVER libcuda.so HINTS ${CUDAToolkit_LIBRARY_DIR}/stubs
            ${CUDAToolkit_LIBRARY_ROOT}/lib64/stubs NO_DEFAULT_PATH)
  zt_add_test(NAME test_cudnn_plans SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cudnn_plans.c
              LIBS zt_kernels zt_common LABELS unit TIMEOUT 300)
  target_compile_definitions(test_cudnn_plans PRIVATE
                             ZT_CUDA_STUB_DRIVER="${ZT_CUDA_STUB_DRIVER}")
endif()
