#!/usr/bin/env python3
"""Where the host time of a small CUDA forward goes: the time to enqueue (the device idle at the start, no
synchronisation inside) of jattn.attention, of its layers, and of SDPA, medians of many calls.

usage: enqueue_probe.py [--shape 1,24,256,64] [--calls 400]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import jattn
from jattn import _clib, _plan, _torch_impl


def enqueue_us(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,24,256,64")
    ap.add_argument("--calls", type=int, default=400)
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    q, k, v = (torch.randn(shape, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    with torch.no_grad():
        jattn.attention(q, k, v)
    plan = next(p for p in _plan._PLANS.values() if p.pass_ == _clib.JATTN_PASS_FORWARD)
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
    sel = plan.selection()
    print(f"shape {shape}: kernel {sel.kernel.decode()}, workspace {plan.workspace_bytes} bytes")
    rows = {}
    with torch.no_grad():
        rows["SDPA"] = enqueue_us(lambda: F.scaled_dot_product_attention(q, k, v), a.calls)
        rows["jattn.attention"] = enqueue_us(lambda: jattn.attention(q, k, v), a.calls)
        rows["jattn.attention(out=)"] = enqueue_us(lambda: jattn.attention(q, k, v, out=out), a.calls)
        rows["torch.empty(workspace)"] = enqueue_us(
            lambda: torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda"), a.calls
        )
        rows["torch.empty_like(q)"] = enqueue_us(lambda: torch.empty_like(q), a.calls)
        rows["bare ctypes jattn_plan_forward"] = enqueue_us(
            lambda: _clib.plan_forward(
                plan.handle, None, stream, ws.data_ptr(), plan.workspace_bytes, *ptrs, None, out.data_ptr(), None
            ),  # fmt: skip
            a.calls,
        )
        rows["_torch_impl.forward"] = enqueue_us(lambda: _torch_impl.forward(q, k, v, plan.opts, None, None), a.calls)
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} µs |")


if __name__ == "__main__":
    main()
