"""What a ZeRO step must cost, computed from the model shape and docs/zero.md's rules, independently
of the engine: parameter units, their padding to the rank count, and the exact bytes one rank
sends per optimizer step in the TCP rings. Shared by test_zero_matrix.py and test_precision.py.

Units: unit 0 holds wte (Vp x C) and wpe (T x C), units 1..L one transformer block each
(12 C^2 + 13 C), unit L+1 the final LayerNorm (2 C). Each is padded to a multiple of
16 x ranks elements and split into equal shards S_u.

Bytes rank r sends per step (ring collectives: a reduce-scatter or all-gather of S elements per
rank sends S (N-1) elements; an all-reduce of n elements sends n - own chunk + n - next
rank's chunk), with G the gradient and P the parameter element size:
  stage 0: all-reduce of the padded gradients (sum S_u N elements, G bytes)
  stage 1: reduce-scatter of every unit's gradient once (G), all-gather of the updated shards (P)
  stage 2: reduce-scatter of every unit every micro-step (G), all-gather of the updated shards (P)
  stage 3: reduce-scatter every micro-step (G), all-gathers of the parameters as the schedule
           gathers them (P): see stage3_gathers
and every step one all-reduce of 4 fp32 values (gradient sum of squares, non-finite count,
loss, checkpoint flag)."""


def round_up(x, m):
    return (x + m - 1) // m * m


def unit_numels(L, C, T, Vp):
    return [Vp * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C]


def psi(L, C, T, Vp):
    return sum(unit_numels(L, C, T, Vp))


def shards(L, C, T, Vp, n):
    """S_u: each unit's per-rank shard after padding to a multiple of 16 n."""
    return [round_up(u, 16 * n) // n for u in unit_numels(L, C, T, Vp)]


def ring_chunk(count, n, i):
    base, rem = divmod(count, n)
    return base + (1 if i < rem else 0)


def allreduce_bytes(count, es, n, rank=0):
    if n == 1:
        return 0
    return es * (2 * count - ring_chunk(count, n, rank) - ring_chunk(count, n, (rank + 1) % n))


def stage3_gathers(L, gas, reuse):
    """All-gathers of each unit per optimizer step in stage 3 (four working slots: one for unit
    0, three shared by the blocks and the final unit; every slot is emptied after the update).
    Default reuse (units stay in their slot until it is needed) with L <= 2: every unit fits,
    so each is gathered once per step, for the first forward. reuse 0 (freed after each use):
    per micro-step unit 0 twice (embedding forward, then the tied output layer in the head,
    kept through the head's backward), each block twice (forward, backward) and the final unit
    once (head forward, kept through its backward)."""
    if reuse is None:
        assert L <= 2, "the closed form holds while blocks and the final unit fit three slots"
        return [1] * (L + 2)
    assert reuse == 0
    return [2 * gas] + [2 * gas] * L + [gas]


def step_bytes(stage, n, gas, L, C, T, Vp, gsize, psize, reuse=None, rank=0):
    """Exact payload bytes rank `rank` sends in one optimizer step."""
    if n == 1:
        return 0
    S = shards(L, C, T, Vp, n)
    small = allreduce_bytes(4, 4, n, rank)
    if stage == 0:
        return allreduce_bytes(sum(S) * n, gsize, n, rank) + small
    rs = sum(S) * (n - 1) * gsize
    if stage == 1:
        return rs + sum(S) * (n - 1) * psize + small
    if stage == 2:
        return gas * rs + sum(S) * (n - 1) * psize + small
    gathers = stage3_gathers(L, gas, reuse)
    return gas * rs + sum(s * g for s, g in zip(S, gathers)) * (n - 1) * psize + small
