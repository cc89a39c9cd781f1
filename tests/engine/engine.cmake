# Engine tests: against PyTorch, across ZeRO stages and rank counts, checkpoints.
zt_add_test(NAME test_optim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_optim.c LIBS ztengine LABELS unit)
zt_add_script_test(NAME engine_vs_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_vs_torch.py
                   LABELS integration TIMEOUT 600)
