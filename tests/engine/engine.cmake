# Engine tests: against PyTorch, across ZeRO stages and rank counts, precision, checkpoints.
zt_add_test(NAME test_optim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_optim.c LIBS ztengine LABELS unit)
zt_add_script_test(NAME engine_vs_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_vs_torch.py
                   LABELS integration TIMEOUT 900)
zt_add_script_test(NAME engine_zero_matrix COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_zero_matrix.py
                   LABELS integration TIMEOUT 1200)
zt_add_script_test(NAME engine_precision COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_precision.py
                   LABELS integration TIMEOUT 900)
zt_add_script_test(NAME engine_ckpt COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_ckpt.py
                   LABELS integration TIMEOUT 900)
zt_add_script_test(NAME engine_ckpt_safety COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_safety.py
                   LABELS integration TIMEOUT 300)
zt_add_script_test(NAME engine_nonfinite COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_nonfinite.py
                   LABELS integration TIMEOUT 300)
# LD_PRELOAD shim with which engine_ckpt makes fsync, mkdir and rename fail on request.
add_library(zt_fault_fs SHARED ${CMAKE_CURRENT_LIST_DIR}/fault_fs.c)
set_target_properties(zt_fault_fs PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
zt_add_script_test(NAME engine_plan COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_plan.py
                   LABELS integration TIMEOUT 300)
# zctl plan's NVMe I/O per step, disk speed (measured in a temporary directory) and largest model.
zt_add_script_test(NAME engine_plan_io COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_plan_io.py
                   LABELS integration TIMEOUT 300)
zt_add_script_test(NAME engine_optimes COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_optimes.py
                   LABELS integration TIMEOUT 300)
zt_add_script_test(NAME engine_rank_failure COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_rank_failure.py
                   LABELS integration TIMEOUT 300)
zt_add_script_test(NAME engine_demo_floor COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_demo_floor.py
                   LABELS "integration;slow" TIMEOUT 1800)
zt_add_script_test(NAME engine_auto_batch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_auto_batch.py
                   LABELS integration TIMEOUT 300)
# Resident memory means nothing under ASan/TSan (shadow memory): test_plan and test_auto_batch
# then check the plan without comparing it with the kernel's figures.
if(ZT_ASAN OR ZT_TSAN)
  set_property(TEST engine_plan engine_auto_batch APPEND PROPERTY ENVIRONMENT "ZT_TEST_SANITIZED=1")
endif()
zt_add_script_test(NAME engine_ds_mechanisms COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_ds_mechanisms.py
                   LABELS integration TIMEOUT 300)
# NVMe optimizer offload: bit-identical to no offload, resumes across it, faults reported.
zt_add_script_test(NAME engine_nvme_offload COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_nvme_offload.py
                   LABELS integration TIMEOUT 600)
# The host-memory budget (ZT_HOST_MEMORY_LIMIT): refuses what does not fit, NVMe trains under it.
zt_add_script_test(NAME engine_host_budget COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_host_budget.py
                   LABELS integration TIMEOUT 300)
# NVMe parameter offload at stage 3: bit-identical to no offload, resumes across it, faults.
zt_add_script_test(NAME engine_param_nvme COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_param_nvme.py
                   LABELS integration TIMEOUT 900)
