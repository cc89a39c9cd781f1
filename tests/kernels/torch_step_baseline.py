# zerotrain: the PyTorch baseline for tests/bench/kernels_cpu.c's "step" line: the same GPT-2
# (n_layer 4, n_embd 256, n_head 4, block 256, batch 8, vocab 256), fp32, AdamW, on N threads.
# Not a test; run by hand:  /usr/bin/python3 tests/kernels/torch_step_baseline.py [threads]
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

NT = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(NT)
L, C, NH, T, B, V = 4, 256, 4, 256, 8, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = att.masked_fill(self.mask == 0, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


torch.manual_seed(0)
model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))


def step():
    opt.zero_grad(set_to_none=False)
    loss = model(idx, tgt)
    loss.backward()
    opt.step()


for _ in range(2):
    step()
times = []
for _ in range(10):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
best, mean = min(times), sum(times) / len(times)
print(f"torch {torch.__version__} threads={NT}: step best {best * 1e3:.2f} ms "
      f"(mean {mean * 1e3:.2f} ms over {len(times)}), {B * T / best:.0f} tokens/s")
