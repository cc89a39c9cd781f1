zt_add_script_test(NAME cli_run_errors COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_run_errors.py
                   LABELS integration TIMEOUT 300)
zt_add_script_test(NAME cli_run_procs COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_run_procs.py
                   LABELS integration TIMEOUT 300)
