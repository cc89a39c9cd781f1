# tests/e2e: submit -> train -> done with the real binaries (zcoord, zagent, zworker, zctl) on
# loopback; each test tears down what it started, also when it fails. They share the CPUs of a
# small machine and time heartbeats, so they run one at a time (RESOURCE_LOCK). test_demo runs
# scripts/demo.sh, what `make demo` runs, with a short job.
if(TARGET zagent AND TARGET zcoord AND TARGET zworker AND TARGET zctl)
  foreach(t submit two_agents restart agent_lost cancel coord_restart agent_errors agent_worker_io
            ckpt_keep demo hang ckpt_bad mtls)
    zt_add_script_test(NAME e2e_${t}
                       COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_${t}.py
                       LABELS integration TIMEOUT 300)
    set_tests_properties(e2e_${t} PROPERTIES RESOURCE_LOCK zt_e2e_cluster)
  endforeach()
  zt_add_script_test(NAME bench_agent COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/bench_agent.py
                     LABELS bench TIMEOUT 600)
  set_tests_properties(bench_agent PROPERTIES RESOURCE_LOCK zt_e2e_cluster)
endif()
