# tests/kernels/: the CPU op table (kernels/cpu) against double-precision references, each
# program registered twice so that both the serial and the OpenMP paths run.
function(zt_kernels_cpu_test name src)
  zt_add_test(NAME ${name} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${src} LIBS zt_kernels zt_common
              LABELS unit TIMEOUT 300)
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT "OMP_NUM_THREADS=1")
  add_test(NAME ${name}_2t COMMAND ${name} WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(${name}_2t PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=2;ZT_SOURCE_DIR=${CMAKE_SOURCE_DIR};ZT_BUILD_DIR=${CMAKE_BINARY_DIR};ZT_BIN=${CMAKE_BINARY_DIR}/bin")
endfunction()

zt_kernels_cpu_test(test_kernels_cpu_gpt2 test_kernels_cpu_gpt2.c)
zt_kernels_cpu_test(test_kernels_cpu_optim test_kernels_cpu_optim.c)

# against the real torch.optim (skipped when /usr/bin/python3 has no torch)
zt_add_test(NAME test_kernels_cpu_adamw_torch
            SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_cpu_adamw_torch.c
            LIBS zt_kernels zt_common LABELS unit TIMEOUT 120)

# The CPU kernels as a portable build compiles them (-march=x86-64: no AVX, no FMA, the
# element-wise loops dispatched at load time to their AVX-512 / AVX2 clones, see cpu_int.h),
# checked by the same tests, so that a build for other machines is tested too.
if(ZT_NATIVE AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  file(GLOB ZT_KERNELS_CPU_PORTABLE_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cpu/*.c)
  add_library(zt_kernels_portable STATIC ${ZT_KERNELS_CPU_PORTABLE_SRC}
              ${CMAKE_SOURCE_DIR}/kernels/ops_common.c ${CMAKE_SOURCE_DIR}/kernels/ops_nocuda.c)
  target_include_directories(zt_kernels_portable PUBLIC ${CMAKE_SOURCE_DIR} ${DNNL_INCLUDE_DIR})
  target_link_libraries(zt_kernels_portable PUBLIC zt_common ${DNNL_LIBRARY} OpenMP::OpenMP_C m)
  target_compile_options(zt_kernels_portable PRIVATE -march=x86-64 -mtune=generic)
  foreach(t test_kernels_cpu_gpt2 test_kernels_cpu_optim test_kernels_cpu_adamw_torch)
    zt_add_test(NAME ${t}_portable SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
                LIBS zt_kernels_portable zt_common LABELS unit TIMEOUT 300)
  endforeach()
endif()
