# zctl data synth / tokenize through the real binary.
zt_add_script_test(NAME test_data_cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_data_cli.sh
                   LABELS integration TIMEOUT 120)
