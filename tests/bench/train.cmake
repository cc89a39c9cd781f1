# Training benchmarks (label bench; `make bench` runs them). Each prints its comparison table.
zt_add_program(NAME zt_sgemm_peak SOURCES ${CMAKE_CURRENT_LIST_DIR}/sgemm_peak.c
               LIBS zt_kernels zt_common DIR bin)
zt_add_script_test(NAME bench_cpu_train COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/cpu_train.py
                   LABELS bench TIMEOUT 3600)
zt_add_script_test(NAME bench_zero_scaling COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/zero_scaling.py
                   LABELS bench TIMEOUT 3600)
zt_add_script_test(NAME bench_ckpt_io COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/ckpt_io.py
                   LABELS bench TIMEOUT 3600)
# The host half of an offloaded optimizer step: kernels/cpu AdamW vs torch.optim.AdamW over a
# GPT-2 124M shard, every thread count, with the machine's memcpy bandwidth.
zt_add_program(NAME bench_host_adamw SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_adamw.c
               LIBS zt_kernels zt_common DIR bin)
zt_add_script_test(NAME bench_host_adamw COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/host_adamw.py
                   LABELS bench TIMEOUT 1800)
