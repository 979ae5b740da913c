#!/usr/bin/env python3
"""The host floor of a Python autograd.Function on CUDA tensors beside jattn's and SDPA's training step:
the time to enqueue one forward + backward (the device idle at the start, nothing synchronised inside),
medians of many steps, the three interleaved.

usage: autograd_floor_probe.py [--shape 1,24,256,64] [--steps 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import jattn
from jattn import _options, _torch_impl

sys.path.insert(0, "bench/python")
from host_cost import EmptyAttention  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,24,256,64")
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    q, k, v, grad = (torch.randn(shape, device="cuda") for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def step(fn):
        def run():
            qg.grad = kg.grad = vg.grad = None
            fn(qg, kg, vg).backward(grad)

        return run

    opts = _options.with_lse(_options.options())
    index = q.get_device()

    class ForwardOnly(torch.autograd.Function):  # jattn's forward, EmptyAttention's backward
        @staticmethod
        def forward(ctx, q, k, v):  # type: ignore[override]
            out, lse, _ = _torch_impl._run_forward(q, k, v, opts, None, None, None, index, True)
            ctx.save_for_backward(q, k, v, out)
            ctx.lse = lse
            return out

        backward = staticmethod(EmptyAttention.backward)

    _, _, plan = _torch_impl._run_forward(q, k, v, opts, None, None, None, index, True)

    class BackwardOnly(torch.autograd.Function):  # EmptyAttention's forward, jattn's backward
        forward = staticmethod(EmptyAttention.forward)

        @staticmethod
        def backward(ctx, dout):  # type: ignore[override]
            q, k, v, out = ctx.saved_tensors
            return _torch_impl.backward(q, k, v, out, ctx.lse, dout, None, opts, None, forward_plan=plan)

    steps = {"empty autograd.Function": step(EmptyAttention.apply), "jattn forward, empty backward":
             step(ForwardOnly.apply), "empty forward, jattn backward": step(BackwardOnly.apply),
             "EagerAttention.apply": step(lambda a, b, c: _torch_impl.EagerAttention.apply(a, b, c, opts, None)),
             "jattn": step(jattn.attention), "SDPA": step(F.scaled_dot_product_attention)}  # fmt: skip
    samples = {n: [] for n in steps}
    for fn in steps.values():
        for _ in range(30):
            fn()
    for _ in range(a.steps):
        for name, fn in steps.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn()
            samples[name].append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    print(f"host enqueue of one forward + backward at {shape}, µs, median of {a.steps}")
    for name, s in samples.items():
        print(f"| {name} | {statistics.median(s):.1f} |")


if __name__ == "__main__":
    main()
