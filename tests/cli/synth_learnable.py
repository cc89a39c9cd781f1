#!/usr/bin/env python3
"""Checks the promise of `zctl data synth`'s defaults: a small GPT-2 (4 layers, n_embd 128,
block 128, vocab 256; llm.c's architecture, written here in PyTorch as an independent reference)
trained for 200 AdamW steps (lr 1e-3, the job file's default) of 16x128 tokens, in docs/formats.md's
sample order, reaches a validation loss within 10% of the printed entropy floor.
Exits 77 (skip) when PyTorch is not installed."""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("PyTorch/numpy not installed: skipping")
    sys.exit(77)

T, B, C, L, H, V, STEPS, LR = 128, 16, 128, 4, 4, 256, 200, 1e-3


def load(path):
    h = np.fromfile(path, dtype="<i4", count=256)
    assert h[0] == 20240520 and h[1] == 1, path
    t = np.fromfile(path, dtype="<u2", offset=1024)
    assert len(t) == h[2], path
    return t.astype(np.int64)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(C, 2))
        a = (q @ k.transpose(-1, -2)) / math.sqrt(c // H)
        a = a.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        x = x + self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scaled = "proj" in name  # residual projections, GPT-2 init
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if scaled else 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, x):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for blk in self.h:
            h = blk(h)
        return self.lnf(h) @ self.wte.weight.T


def batch(tokens, ks):
    x = np.stack([tokens[k * T:k * T + T] for k in ks])
    y = np.stack([tokens[k * T + 1:k * T + T + 1] for k in ks])
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    zctl = os.path.join(os.environ["ZT_BIN"], "zctl")
    torch.manual_seed(1337)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="zt_synth_learnable.") as d:
        out = subprocess.run([zctl, "-o", "json", "data", "synth", "--out", d], check=True,
                             capture_output=True, text=True).stdout
        floor = json.loads(out)["entropy_floor_nats"]
        train = load(os.path.join(d, "synth_train_000.bin"))
        val = load(os.path.join(d, "synth_val_000.bin"))
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    n = (len(train) - 1) // T
    for step in range(STEPS):
        x, y = batch(train, [(step * B + i) % n for i in range(B)])
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == STEPS - 1:
            print("step %d loss %.4f" % (step + 1, loss.item()), flush=True)
    with torch.no_grad():
        losses = []
        for j in range(0, 160, B):
            x, y = batch(val, range(j, j + B))
            losses.append(F.cross_entropy(model(x).view(-1, V), y.view(-1)).item())
    v = sum(losses) / len(losses)
    print("val loss %.4f, entropy floor %.4f: %.1f%% above the floor" % (v, floor, 100 * (v / floor - 1)))
    if not v <= 1.10 * floor:
        print("FAIL: the default synth corpus is not learned to within 10% of its floor in 200 steps")
        sys.exit(1)
    if v < floor - 0.01:
        print("FAIL: the validation loss is below the entropy floor: the floor is wrong")
        sys.exit(1)


if __name__ == "__main__":
    main()
