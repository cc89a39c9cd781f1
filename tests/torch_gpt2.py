"""zerotrain's PyTorch reference: GPT-2 exactly as llm.c defines it, llm.c file
formats, docs/formats.md's sample order, and DeepSpeed's optimizer/schedule semantics as zerotrain
documents them. Used by the equivalence tests and the CPU benchmark. Run with /usr/bin/python3
(Debian's python3-torch)."""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from ztutil import *  # noqa: F401,F403  (formats and helpers)
from ztutil import DECAY, KINDS, read_shard  # noqa: F401


class Data:
    """docs/formats.md 'Sample order', for the whole global batch."""

    def __init__(self, files, T):
        self.T = T
        self.shards = [read_shard(f) for f in sorted(files)]
        self.counts = [(len(s) - 1) // T for s in self.shards]
        self.total = sum(self.counts)

    def sample(self, k):
        for s, c in zip(self.shards, self.counts):
            if k < c:
                x = s[k * self.T: k * self.T + self.T + 1]
                return x[:-1], x[1:]
            k -= c
        raise IndexError(k)

    def batch(self, step, tb):
        xs, ys = zip(*(self.sample((step * tb + i) % self.total) for i in range(tb)))
        return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))


class GPT2(torch.nn.Module):
    def __init__(self, cfg, params, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict(
            {k: torch.nn.Parameter(torch.tensor(v, dtype=dtype)) for k, v in params.items()})

    def forward(self, idx, targets):
        cfg, p = self.cfg, self.p
        B, T = idx.shape
        C, NH, L, V = cfg["C"], cfg["NH"], cfg["L"], cfg["V"]
        hs = C // NH
        x = p["wte"][idx] + p["wpe"][:T]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(L):
            h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
            qkv = F.linear(h, p["qkvw"][l], p["qkvb"][l])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
            h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
            h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
            x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
        x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
        logits = F.linear(x, p["wte"])[..., :V]  # padded logits never enter the softmax
        return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1), reduction="sum")


def lr_at(sched, base_lr, t):
    """zerotrain's schedule: optimizer step k uses t = k - 1."""
    if not sched:
        return base_lr
    kind, prm = sched["type"], sched.get("params", {})
    W = max(2, prm.get("warmup_num_steps", 1000))
    wtype = prm.get("warmup_type", "log")

    def gamma(t):
        return t / W if wtype == "linear" else math.log(t + 1) / math.log(W)

    if kind == "WarmupLR":
        lo, hi = prm.get("warmup_min_lr", 0.0), prm.get("warmup_max_lr", 0.001)
        return lo + (hi - lo) * (gamma(t) if t < W else 1.0)
    if kind == "WarmupDecayLR":
        lo, hi, T = prm.get("warmup_min_lr", 0.0), prm.get("warmup_max_lr", 0.001), prm["total_num_steps"]
        g = gamma(t) if t < W else max(0.0, (T - t) / max(1, T - W))
        return lo + (hi - lo) * g
    if kind == "WarmupCosineLR":
        wmr, cmr, T = prm.get("warmup_min_ratio", 0.0), prm.get("cos_min_ratio", 1e-4), prm["total_num_steps"]
        if t < W:
            r = wmr + (1 - wmr) * gamma(t)
        else:
            r = max(0.0, cmr + (1 - cmr) * (1 + math.cos(math.pi * (t - W + 1) / (T - W))) / 2)
        return base_lr * r
    raise ValueError(kind)


def train(cfg, params, data, ds, steps, threads=None, log=None):
    """Trains like zerotrain's engine on one rank with the whole global batch; returns
    (losses per step, final params as numpy dict)."""
    if threads:
        torch.set_num_threads(threads)
    model = GPT2(cfg, params)
    opt_cfg = ds.get("optimizer", {"type": "AdamW", "params": {}})
    op = opt_cfg.get("params", {})
    lr = op.get("lr", 1e-3)
    wd = op.get("weight_decay", 0.0)
    betas = tuple(op.get("betas", (0.9, 0.999)))
    eps = op.get("eps", 1e-8)
    decay = [model.p[k] for k in KINDS if k in DECAY]
    nodecay = [model.p[k] for k in KINDS if k not in DECAY]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps)
    tb = ds["train_batch_size"]
    micro = ds.get("train_micro_batch_size_per_gpu", tb)
    clip = ds.get("gradient_clipping", 0.0)
    T = cfg["T"]
    losses = []
    for step in range(steps):
        x, y = data.batch(step, tb)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(0, tb, micro):
            loss = model(x[m:m + micro], y[m:m + micro]) / (tb * T)
            loss.backward()
            total += loss.item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        cur = lr_at(ds.get("scheduler"), lr, step)
        for g in opt.param_groups:
            g["lr"] = cur
        opt.step()
        losses.append(total)
        if log:
            log(step + 1, total)
    return losses, {k: v.detach().numpy().copy() for k, v in model.p.items()}


def blas_info():
    cfg = torch.__config__.show()
    for line in cfg.splitlines():
        if "BLAS_INFO" in line or "LAPACK_INFO" in line:
            return line.strip()
    return "unknown"
