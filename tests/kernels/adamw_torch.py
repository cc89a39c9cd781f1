# zerotrain tests: runs torch.optim.AdamW (or torch.optim.Adam with L2 weight decay) on the
# inputs test_kernels_cpu_adamw_torch.c builds and prints the parameters after each step as
# float32 bit patterns, one step per line. Exits 77 when torch is not installed.
#   usage: adamw_torch.py N STEPS adamw|l2 LR BETA1 BETA2 EPS WD
import math
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit(77)

n, steps, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lr, b1, b2, eps, wd = (float(x) for x in sys.argv[4:9])
torch.set_num_threads(1)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


p = torch.tensor([f32(math.sin(i * 0.37) * 0.5) for i in range(n)], dtype=torch.float32)
p.requires_grad_(True)
kw = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
opt = torch.optim.AdamW([p], **kw) if mode == "adamw" else torch.optim.Adam([p], **kw)
for t in range(1, steps + 1):
    g = [f32(math.cos(i * 0.11 + t) * 0.01 * (1 + i % 3)) for i in range(n)]
    p.grad = torch.tensor(g, dtype=torch.float32)
    opt.step()
    bits = struct.unpack("%dI" % n, struct.pack("%df" % n, *p.detach().tolist()))
    print(" ".join("%08x" % b for b in bits))
