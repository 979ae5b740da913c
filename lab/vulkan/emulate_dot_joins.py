#!/usr/bin/env python3
"""How far the vk kernels' float32 dot products move a row of attention at |q|, |k|, |v| up to 1e3
(test_padding's `large` draws: an explicit scale makes the logits' standard deviation 8), against
the float32-logit floor (the logits rounded to float32 once), 2026-12-07.

One row of 300 keys at head_dim 128 per draw: q, k, v uniform in [-1e3, 1e3]; the output computed
in float64 from logits formed as
  floor  the exact dot product rounded to float32 once
  dk16   fma chains over chunks of 16 products, each chunk summed in fresh registers and joined to
         the running sum by a plain add (attn3_f32.comp before; attn_f32.comp's 64-row tiles)
  dk32   the same over chunks of 32 (attn_f32.comp's 32-row tiles before)
  j16    one fma chain joined into the running sum by TwoSum every 16 products, the join's error
         starting the next chain (attn_common.glsl's join_dot with JOIN 16)
  j8     the same every 8 products (JOIN 8: what both kernels do now)
each with a fused fma (NVIDIA) or an unfused one (lavapipe: the product rounded first). Prints, per
way, the row's rel_l2 (median, p99, p99.9, max), the share of rows past 1.5e-6, and how many of the
draws' pairs (a case of two such rows, as test_padding's B=2 Sq=1) miss the gate's 2e-6.

usage: emulate_dot_joins.py fused|unfused DRAWS SEED     (numpy; ~4 minutes for 2000 draws)
Recorded: src/vulkan/NOTES.md ("The few-row tail"), bench/results/lavapipe-2026-12-07-vk-joins/.
"""

import sys

import numpy as np

F32 = np.float32
D, S, A = 128, 300, 1e3
SCALE = np.float32(8.0 / (np.sqrt(D) * A * A / 3))


def two_sum(a, b):
    s = (a + b).astype(F32)
    bb = (s - a).astype(F32)
    return s, ((a - (s - bb)).astype(F32) + (b - bb).astype(F32)).astype(F32)


def dot(q, k, chunk, join, fused):
    """q [D] . k [S, D] as the kernels form it: chunks of `chunk` products joined by a plain add
    (join 0), or one chain joined by TwoSum every `join` products."""
    s = np.zeros(k.shape[0], F32)
    part = np.zeros(k.shape[0], F32)
    for c in range(0, D, chunk):
        if not join:
            part = np.zeros(k.shape[0], F32)
        for d in range(c, c + chunk):
            prod = np.float64(q[d]) * k[:, d].astype(np.float64)
            if not fused:
                prod = prod.astype(F32).astype(np.float64)
            part = (prod + part).astype(F32)
            if join and (d + 1) % join == 0:
                s, part = two_sum(s, part)
        if not join:
            s = (s + part).astype(F32)
    if join:
        s = (s + part).astype(F32)
    return s.astype(np.float64)


def attend(s, v):
    p = np.exp(s - s.max())
    return (p[:, None] * v).sum(0) / p.sum()


def main():
    fused, draws, seed = sys.argv[1] == "fused", int(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng(seed)
    ways = [("dk16", 16, 0), ("dk32", 32, 0), ("j16", 16, 16), ("j8", 16, 8)]
    res = {name: [] for name, _, _ in ways}
    res["floor"] = []
    for _ in range(draws):
        q = rng.uniform(-A, A, D).astype(F32)
        k = rng.uniform(-A, A, (S, D)).astype(F32)
        v = rng.uniform(-A, A, (S, D)).astype(F32)
        s64 = np.float64(SCALE) * (k.astype(np.float64) @ q.astype(np.float64))
        ref = attend(s64, v)
        norm = np.linalg.norm(ref)
        res["floor"].append(np.linalg.norm(attend(s64.astype(F32).astype(np.float64), v) - ref) / norm)
        for name, chunk, join in ways:
            s = (dot(q, k, chunk, join, fused) * np.float64(SCALE)).astype(F32).astype(np.float64)
            res[name].append(np.linalg.norm(attend(s, v) - ref) / norm)
    for name, errs in res.items():
        a = np.array(errs)
        pairs = np.sqrt((a[0::2] ** 2 + a[1::2] ** 2) / 2)
        print(
            f"{sys.argv[1]} {name:6s} median {np.median(a):.2e} p99 {np.percentile(a, 99):.2e} "
            f"p99.9 {np.percentile(a, 99.9):.2e} max {a.max():.2e}  >1.5e-6: {(a > 1.5e-6).mean():.4f}  "
            f"two-row cases > 2e-6: {(pairs > 2e-6).sum()}/{len(pairs)}"
        )


if __name__ == "__main__":
    main()
