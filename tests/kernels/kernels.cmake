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
