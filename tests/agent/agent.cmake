# tests/agent: zagent's parts on their own (report-line parser, settings). The agent against
# the real zcoord, zworker and zctl is tested end to end in tests/e2e.
if(TARGET zt_agent)
  zt_add_test(NAME test_reportline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reportline.c
              LIBS zt_agent LABELS unit TIMEOUT 30)
  zt_add_test(NAME test_agent_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_agent_config.c
              LIBS zt_agent LABELS unit TIMEOUT 30)
endif()
