# tests/bench/e2e_overhead: what the system costs a job. The same small job through `zctl submit
# --follow` on a local zcoord with two agents and through `zctl run`: the wall time of each, the
# difference and submission to first step (label bench: `make bench`). It starts a cluster on
# loopback, so it takes the e2e tests' lock.
if(TARGET zagent AND TARGET zcoord AND TARGET zworker AND TARGET zctl)
  zt_add_script_test(NAME bench_e2e_overhead COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/e2e_overhead.py
                     LABELS bench TIMEOUT 900)
  set_tests_properties(bench_e2e_overhead PROPERTIES RESOURCE_LOCK zt_e2e_cluster)
endif()
