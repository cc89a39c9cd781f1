# tests/web: the dashboard in a real browser (Debian's chromium driven by playwright-core from
# the repository's node_modules, installed by `npm ci`; scripts/install-deps.sh runs it) against
# the real binaries. Without chromium, node or playwright-core it skips, except in CI (CI=true),
# where it fails. It trains on the CPUs like tests/e2e, so it takes their lock.
find_program(ZT_NODE node)
if(TARGET zagent AND TARGET zcoord AND TARGET zworker AND TARGET zctl)
  if(ZT_NODE)
    zt_add_script_test(NAME web_dashboard
                       COMMAND ${ZT_NODE} --test --test-reporter=tap ${CMAKE_CURRENT_LIST_DIR}/test_dashboard.mjs
                       LABELS integration TIMEOUT 300)
    set_tests_properties(web_dashboard PROPERTIES RESOURCE_LOCK zt_e2e_cluster
                         SKIP_REGULAR_EXPRESSION "# SKIP zt-browser-unavailable")
  else()
    # no node: a test that says so (and fails in CI, where install-deps.sh installs it)
    zt_add_script_test(NAME web_dashboard
                       COMMAND sh -c "echo 'node (Debian nodejs) is not installed: scripts/install-deps.sh installs it'; [ -z \"$CI\" ] && exit 77; exit 1"
                       LABELS integration TIMEOUT 30)
  endif()
endif()
