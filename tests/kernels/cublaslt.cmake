# kernels/cuda/cublaslt_dl.c: cuBLASLt opened at run time; needs the toolkit, not a GPU
if(ZT_HAVE_CUDA)
  zt_add_test(NAME test_cublaslt_dl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cublaslt_dl.c
              LIBS zt_kernels zt_common LABELS unit)
endif()
