"""The accuracy floor of any float32 attention on one problem shape and input distribution.

Simulates the best a float32 evaluation can do: every score rounded once to float32, every
softmax weight exp(s - max) rounded once to float32, and everything else exact (sums, the
division; the output rounded once). Compares with the float64 reference on the same float32
inputs, as the tests do, and counts draws over the f32 gate's rel_l2 <= 2e-6 (docs/DESIGN.md §2).

D = 1 with uniform [-1, 1] inputs is the hard case: every query attends to nearly the same
mean of v, which sometimes cancels to ~1e-3 while the weights' rounding errs by ~1e-8.

usage: python3 fp32_floor.py [Sq Skv D DRAWS SEED]     (default 100 77 1 40000 1)
needs numpy
"""

import math
import sys

import numpy as np


def main():
    args = [int(a) for a in sys.argv[1:]]
    sq, skv, d, draws, seed = args + [100, 77, 1, 40000, 1][len(args) :]
    rng = np.random.default_rng(seed)
    scale = np.float32(1 / math.sqrt(d))
    rels = np.empty(draws)
    for t in range(draws):
        q, k, v = (rng.uniform(-1, 1, (n, d)).astype(np.float32) for n in (sq, skv, skv))
        s = (q.astype(np.float64) @ k.astype(np.float64).T) * np.float64(scale)
        p = np.exp(s - s.max(1, keepdims=True))
        ref = (p @ v) / p.sum(1, keepdims=True)
        s32 = s.astype(np.float32).astype(np.float64)
        p32 = np.exp(s32 - s32.max(1, keepdims=True)).astype(np.float32).astype(np.float64)
        out = ((p32 @ v) / p32.sum(1, keepdims=True)).astype(np.float32)
        rels[t] = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    fails = int((rels > 2e-6).sum())  # JATTN_GATE_F32_REL_L2 of kit/metrics.h
    print(
        f"fp32 floor Sq={sq} Skv={skv} D={d} uniform draws={draws}: rel_l2 p50 {np.median(rels):.3g} "
        f"p99 {np.quantile(rels, 0.99):.3g} max {rels.max():.3g}  over 2e-6: {fails} ({fails / draws:.1e})"
    )


if __name__ == "__main__":
    main()
