# Collectives (engine/comm/): N ranks as forked processes talking TCP over loopback.
# One executable per file; each part runs as its own ctest entry so that they stay short and
# run in parallel. `test_comm_tcp` itself runs the all-collectives sweep over worlds 1..4 and
# `test_comm_tcp_fail` the rank-dies-mid-collective case.
zt_add_test(NAME test_comm_tcp SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_tcp.c
            LIBS ztengine LABELS unit TIMEOUT 240 ARGS worlds)
zt_add_test(NAME test_comm_tcp_fail SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_tcp_fail.c
            LIBS ztengine LABELS unit TIMEOUT 60 ARGS exit_mid)

function(zt_comm_test_part exe part)
  add_test(NAME ${exe}_${part} COMMAND ${exe} ${part} WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(${exe}_${part} PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "ZT_SOURCE_DIR=${CMAKE_SOURCE_DIR};ZT_BUILD_DIR=${CMAKE_BINARY_DIR};ZT_BIN=${CMAKE_BINARY_DIR}/bin")
endfunction()
foreach(part api reduce determinism async addresses)
  zt_comm_test_part(test_comm_tcp ${part})
endforeach()
foreach(part stall mismatch session no_rank0 late_rank0 abort destroy_pending)
  zt_comm_test_part(test_comm_tcp_fail ${part})
endforeach()

# NCCL backend on real GPUs (skips with exit 77 when there is none).
if(ZT_HAVE_CUDA)
  zt_add_test(NAME test_comm_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_nccl.c
              LIBS ztengine CUDA::cudart LABELS gpu TIMEOUT 600)
endif()
