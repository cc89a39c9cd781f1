# GPU training benchmark (label bench): zerotrain vs PyTorch on GPT-2 124M, largest micro batch,
# tokens/s, MFU, peak memory, and the Twin-Flow offload curve. Exits 77 without a GPU.
zt_add_script_test(NAME bench_gpu_train COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/gpu_train.py
                   LABELS bench TIMEOUT 5400)
