# tests/gpu/emu/: the CUDA backend's own code (kernels/cuda/: ops_cuda.c, blas_*.c and the
# kernels of the .cu files, compiled by g++) run on the CPU through an emulation of the CUDA
# runtime, of kernel launches and of cuBLASLt, and test_gpu_ops against it. Needs the
# toolkit's headers only (no nvcc, no GPU): it runs in CI, in the sanitizer build too, where
# AddressSanitizer sees every kernel's memory accesses.
find_path(ZT_CUDA_EMU_INCLUDE NAMES cublasLt.h PATHS /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS})
if(ZT_CUDA_EMU_INCLUDE AND EXISTS ${ZT_CUDA_EMU_INCLUDE}/cuda_runtime.h)
  set(ZT_EMU_DIR ${CMAKE_CURRENT_LIST_DIR})
  # one g++ translation unit for each .cu file of kernels/cuda/
  set(ZT_EMU_KERNELS ${ZT_EMU_DIR}/gpt2_cuda_emu.cpp ${ZT_EMU_DIR}/layernorm_cuda_emu.cpp
      ${ZT_EMU_DIR}/gelu_cuda_emu.cpp ${ZT_EMU_DIR}/loss_cuda_emu.cpp
      ${ZT_EMU_DIR}/optim_cuda_emu.cpp ${ZT_EMU_DIR}/attn_cuda_emu.cpp
      ${ZT_EMU_DIR}/attn_tc_cuda_emu.cpp)
  file(GLOB ZT_EMU_CPU_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cpu/*.c)
  add_library(zt_kernels_emu STATIC
              ${ZT_EMU_CPU_SRC} ${CMAKE_SOURCE_DIR}/kernels/ops_common.c
              ${CMAKE_SOURCE_DIR}/kernels/attn_graph.c ${CMAKE_SOURCE_DIR}/kernels/cuda/cuda_plan.c
              ${CMAKE_SOURCE_DIR}/kernels/cuda/ops_cuda.c ${CMAKE_SOURCE_DIR}/kernels/cuda/blas_cuda.c
              ${CMAKE_SOURCE_DIR}/kernels/cuda/blas_gemm.c
              ${CMAKE_SOURCE_DIR}/kernels/cuda/attn_cudnn.c
              ${ZT_EMU_KERNELS}
              ${ZT_EMU_DIR}/emu_sched.c ${ZT_EMU_DIR}/emu_runtime.c ${ZT_EMU_DIR}/emu_cublaslt.c)
  target_include_directories(zt_kernels_emu PUBLIC ${CMAKE_SOURCE_DIR} ${DNNL_INCLUDE_DIR})
  target_include_directories(zt_kernels_emu PRIVATE ${ZT_EMU_DIR} ${CMAKE_SOURCE_DIR}/kernels/cuda)
  target_include_directories(zt_kernels_emu SYSTEM PRIVATE ${ZT_CUDA_EMU_INCLUDE})
  target_link_libraries(zt_kernels_emu PUBLIC zt_common ${DNNL_LIBRARY} OpenMP::OpenMP_C m)
  # C++ only for the .cu files: ISO C++ (no FMA contraction, as the CPU kernels), warnings as
  # errors, and the sanitizers of the C code; shared memory is reinterpreted as the GPU allows
  # (16-bit P over its fp32 scores), so no type-based alias analysis. Optimised in the Debug
  # build (the sanitizers' tree) too, as are the scheduler and runtime below: unoptimised, the
  # CUDA headers' one-line conversions and each emulated thread's fiber switches take most of
  # the time there; optimised, the sanitizers still check every access that runs.
  set_source_files_properties(${ZT_EMU_KERNELS} PROPERTIES COMPILE_OPTIONS
                              "$<$<CONFIG:Debug>:-O2>;-std=c++17;-Wall;-Wextra;-Werror;-ffp-contract=off;-fno-strict-aliasing;${ZT_SAN_FLAGS}")
  set_source_files_properties(${ZT_EMU_DIR}/emu_sched.c ${ZT_EMU_DIR}/emu_runtime.c
                              PROPERTIES COMPILE_OPTIONS "$<$<CONFIG:Debug>:-O2>")
  add_library(zt_cuda_emu_selftest STATIC ${ZT_EMU_DIR}/emu_selftest.cpp ${ZT_EMU_DIR}/emu_sched.c
              ${ZT_EMU_DIR}/emu_runtime.c)
  target_include_directories(zt_cuda_emu_selftest PUBLIC ${ZT_EMU_DIR})
  target_include_directories(zt_cuda_emu_selftest SYSTEM PUBLIC ${ZT_CUDA_EMU_INCLUDE})
  set_source_files_properties(${ZT_EMU_DIR}/emu_selftest.cpp PROPERTIES COMPILE_OPTIONS
                              "-std=c++17;-Wall;-Wextra;-Werror;-ffp-contract=off;${ZT_SAN_FLAGS}")
  # the reference GEMMs optimised in every build type (the sanitizers still see them)
  set_source_files_properties(${ZT_EMU_DIR}/emu_cublaslt.c PROPERTIES COMPILE_OPTIONS "-O2")
  zt_add_test(NAME test_cuda_emu SOURCES ${ZT_EMU_DIR}/test_cuda_emu.c
              LIBS zt_cuda_emu_selftest zt_common LABELS unit emu TIMEOUT 120)
  target_compile_options(test_cuda_emu PRIVATE -ffp-contract=off) # exact products to compare
  zt_add_test(NAME test_gpu_ops_emu SOURCES ${CMAKE_CURRENT_LIST_DIR}/../test_gpu_ops.c
              LIBS zt_kernels_emu zt_common LABELS unit emu TIMEOUT 900)
  target_compile_definitions(test_gpu_ops_emu PRIVATE ZT_TEST_EMU=1) # its emulation-only cases
  # the kernels under a second schedule (the threads of a block in reverse order between
  # barriers; the default is a random order): a race shows as a result that changes with it
  if(NOT ZT_SAN_FLAGS)
    add_test(NAME test_gpu_ops_emu_reverse COMMAND test_gpu_ops_emu
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    set_tests_properties(test_gpu_ops_emu_reverse PROPERTIES LABELS "unit;emu" TIMEOUT 900
                         SKIP_RETURN_CODE 77
                         ENVIRONMENT "ZT_CUDA_EMU_SCHEDULE=reverse;ZT_TEST_QUICK=1")
  endif()
  # tests/bench/kernels_gpu.c once at small shapes: the GPU op benchmark proven to run
  zt_add_test(NAME bench_kernels_gpu_emu SOURCES ${CMAKE_SOURCE_DIR}/tests/bench/kernels_gpu.c
              LIBS zt_kernels_emu zt_common LABELS unit emu TIMEOUT 300 ARGS --small)
  target_compile_definitions(bench_kernels_gpu_emu PRIVATE ZT_BENCH_CUDA_INTERNALS=1)
  target_include_directories(bench_kernels_gpu_emu SYSTEM PRIVATE ${ZT_CUDA_EMU_INCLUDE})

  # The engine on the emulated GPUs, its collectives through engine/comm/comm_nccl.c and an
  # emulation of NCCL across processes (emu_nccl.c): zworker_emu and zt_gpu_probe_emu, which
  # test_gpu_engine.py --emu drives through the real zctl run.
  file(GLOB ZT_EMU_ENGINE_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/*.c
       ${CMAKE_SOURCE_DIR}/engine/comm/*.c ${CMAKE_SOURCE_DIR}/engine/data/*.c)
  list(FILTER ZT_EMU_ENGINE_SRC EXCLUDE REGEX ".*/(zworker|comm_nccl_none)\\.c$")
  add_library(ztengine_emu STATIC ${ZT_EMU_ENGINE_SRC} ${ZT_EMU_DIR}/emu_nccl.c)
  target_include_directories(ztengine_emu PUBLIC ${CMAKE_SOURCE_DIR})
  target_include_directories(ztengine_emu PRIVATE ${ZT_EMU_DIR})
  target_include_directories(ztengine_emu SYSTEM PRIVATE ${ZT_CUDA_EMU_INCLUDE})
  pkg_check_modules(ZT_EMU_JANSSON REQUIRED IMPORTED_TARGET jansson)
  target_link_libraries(ztengine_emu PUBLIC zt_nvme zt_kernels_emu zt_common PkgConfig::ZT_EMU_JANSSON
                        Threads::Threads m)
  # engine/comm/comm_nccl.c's own test, on four emulated GPUs: a world of one, then of four ranks
  zt_add_test(NAME test_comm_nccl_emu SOURCES ${CMAKE_SOURCE_DIR}/tests/engine/test_comm_nccl.c
              LIBS ztengine_emu LABELS unit emu TIMEOUT 300)
  target_include_directories(test_comm_nccl_emu SYSTEM PRIVATE ${ZT_CUDA_EMU_INCLUDE})
  target_compile_definitions(test_comm_nccl_emu PRIVATE ZT_TEST_EMU=1) # the misuse cases
  set_property(TEST test_comm_nccl_emu APPEND PROPERTY ENVIRONMENT "ZT_CUDA_EMU_DEVICES=4")
  add_executable(zworker_emu ${CMAKE_SOURCE_DIR}/engine/zworker.c)
  target_link_libraries(zworker_emu PRIVATE ztengine_emu)
  set_target_properties(zworker_emu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  zt_add_program(NAME zt_gpu_probe_emu SOURCES ${CMAKE_CURRENT_LIST_DIR}/../gpu_probe.c
                 LIBS zt_kernels_emu zt_common DIR tests)
  # a subset in the sanitizer build, where each step is four times slower
  set(ZT_EMU_ENGINE_ARGS --emu)
  if(ZT_SAN_FLAGS)
    list(APPEND ZT_EMU_ENGINE_ARGS --quick)
  endif()
  # tests/bench/gpu_train.py's zerotrain side on the emulation with a small model: the GPU
  # benchmark's driver proven before a GPU runs it (not in the sanitizer build: its engine
  # paths are gpu_engine_emu's)
  if(NOT ZT_SAN_FLAGS)
    zt_add_script_test(NAME bench_gpu_train_emu
                       COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/bench/gpu_train.py --emu
                       LABELS integration emu TIMEOUT 600)
  endif()
  zt_add_script_test(NAME gpu_engine_emu
                     COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/../test_gpu_engine.py
                             ${ZT_EMU_ENGINE_ARGS}
                     LABELS integration emu TIMEOUT 1200)
  # the longest tests of a run: started first where ctest has no timings yet (a fresh tree), so
  # that a parallel run does not end on one of them alone
  set_tests_properties(test_gpu_ops_emu gpu_engine_emu PROPERTIES COST 100)
endif()
