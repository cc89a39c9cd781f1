# tests/agent: zagent's parts on their own (settings, confinement of jobs), and the confinement
# end to end (test_agent_confine.py: the real zcoord, zagent and zctl with a scripted worker; it
# takes the e2e tests' lock). The rest of the agent against the real zcoord, zworker and zctl is
# tested end to end in tests/e2e.
if(TARGET zt_agent)
  zt_add_test(NAME test_agent_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_agent_config.c
              LIBS zt_agent LABELS unit TIMEOUT 30)
  zt_add_test(NAME test_confine SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_confine.c
              LIBS zt_agent LABELS unit TIMEOUT 30)
endif()
if(TARGET zagent AND TARGET zcoord AND TARGET zctl)
  zt_add_script_test(NAME e2e_agent_confine
                     COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_agent_confine.py
                     LABELS integration TIMEOUT 300)
  set_tests_properties(e2e_agent_confine PROPERTIES RESOURCE_LOCK zt_e2e_cluster)
endif()
