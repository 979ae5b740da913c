#!/usr/bin/env python3
"""Forward time of jattn.attention at small head dims beside PyTorch's fp32 SDPA, same tensors, one process.

usage: small_head_dim_time.py [--dims 1,2,4,7,8,16] [--shape B,H,S] [--reps N]
JATTN_CUDA_KERNEL (read once per process) forces a forward kernel; run twice to compare AUTO with v7.
Prints one line per head dim: jattn ms, SDPA ms (CUDA events, median of reps), the ratio, and both
outputs' rel_l2 against float64.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F

import jattn


def median_ms(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples)


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="1,2,4,7,8,16")
    ap.add_argument("--shape", default="1,24,4608")
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    B, H, S = (int(x) for x in a.shape.split(","))
    torch.backends.cuda.matmul.allow_tf32 = False
    kern = os.environ.get("JATTN_CUDA_KERNEL", "auto")
    for D in (int(x) for x in a.dims.split(",")):
        g = torch.Generator(device="cuda").manual_seed(D)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        tj = median_ms(lambda: jattn.attention(q, k, v), a.reps)
        ts = median_ms(lambda: F.scaled_dot_product_attention(q, k, v), a.reps)
        ej, es = rel_l2(jattn.attention(q, k, v), ref), rel_l2(F.scaled_dot_product_attention(q, k, v), ref)
        print(
            f"kernel {kern:>4} ({B},{H},{S},{D:>3}) jattn {tj:8.3f} ms  SDPA {ts:8.3f} ms  "
            f"ratio {ts / tj:5.2f}x  rel_l2 jattn {ej:.2e} SDPA {es:.2e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
