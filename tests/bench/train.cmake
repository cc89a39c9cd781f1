# Training benchmarks (label bench; `make bench` runs them). Each prints its comparison table.
add_executable(zt_sgemm_peak ${CMAKE_CURRENT_LIST_DIR}/sgemm_peak.c)
target_include_directories(zt_sgemm_peak PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(zt_sgemm_peak PRIVATE zt_kernels zt_common)
set_target_properties(zt_sgemm_peak PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
zt_add_script_test(NAME bench_cpu_train COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/cpu_train.py
                   LABELS bench TIMEOUT 3600)
zt_add_script_test(NAME bench_zero_scaling COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/zero_scaling.py
                   LABELS bench TIMEOUT 3600)
zt_add_script_test(NAME bench_ckpt_io COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/ckpt_io.py
                   LABELS bench TIMEOUT 3600)
# The host half of an offloaded optimizer step: kernels/cpu AdamW vs torch.optim.AdamW over a
# GPT-2 124M shard, every thread count, with the machine's memcpy bandwidth.
add_executable(bench_host_adamw ${CMAKE_CURRENT_LIST_DIR}/host_adamw.c)
target_include_directories(bench_host_adamw PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(bench_host_adamw PRIVATE zt_kernels zt_common)
set_target_properties(bench_host_adamw PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
zt_add_script_test(NAME bench_host_adamw COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/host_adamw.py
                   LABELS bench TIMEOUT 1800)
