# zctl data synth / tokenize through the real binary.
zt_add_script_test(NAME test_data_cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_data_cli.sh
                   LABELS integration TIMEOUT 120)
# The default synth corpus is learnable to within 10% of its floor in 200 steps by a PyTorch
# model (about two CPU-minutes; a reference measurement, so it runs with the benchmarks —
# engine_demo_floor checks the same promise with zerotrain itself in the test suite).
zt_add_script_test(NAME test_synth_learnable
                   COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/synth_learnable.py
                   LABELS "bench" TIMEOUT 900)
