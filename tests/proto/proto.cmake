# tests/proto: the RPC layer (zt_rpc) in one process over loopback.
zt_add_test(NAME test_rpc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rpc.c LIBS zt_rpc LABELS unit TIMEOUT 120)
if(ZT_RPC_HAVE_ABSL)
  zt_add_test(NAME test_rpc_absl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rpc_absl.cc LIBS zt_rpc
              LABELS unit TIMEOUT 60)
endif()
