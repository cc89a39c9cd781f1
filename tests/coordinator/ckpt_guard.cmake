# tests/coordinator: the checkpoint guards of zcoord (a directory belongs to one job; a
# checkpoint that fails verification on load becomes BAD) with a simulated agent.
zt_add_script_test(NAME test_ckpt_guard COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_guard.py
                   LABELS integration TIMEOUT 120)
