#!/usr/bin/env python3
"""Where the host time of one training step goes, jattn beside SDPA, timed as bench/python/host_cost.py times its
"host enqueue" (the device idle at the start, nothing synchronised inside; jattn and SDPA alternating with a
synchronised step of the other between them), with timestamps inside jattn's step:

  forward      jattn.attention / SDPA returns
  to backward  .backward(grad) called until jattn's backward starts (autograd's engine, its device thread)
  backward     jattn's backward (the gradients' allocations, the workspace, the C call with its launches)
  after        jattn's backward returns until .backward(grad) returns (AccumulateGrad, the engine's return)
  fwd C call, bwd C call   the library's calls alone (jattn_plan_forward / jattn_plan_backward: the launches),
               inside the forward and the backward above

and, with --kernels, each step's kernels and their device time (torch.profiler, CUDA activity): whether a
synchronised small step waits on the device or on the host. Medians of many steps, µs.

usage: step_timeline_probe.py [--shapes 1,24,256,64:1,24,1536,128] [--steps 300] [--kernels]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import jattn
from jattn import _torch_impl

_NOW = time.perf_counter_ns
marks = {}
SYNC = torch.cuda.synchronize
DEVICE = "cuda"


def instrument() -> None:
    """Wraps jattn's eager backward so that its start and end are stamped."""
    inner = _torch_impl._backward_once

    def stamped(ctx, dout, dlse):
        marks["bwd0"] = _NOW()
        r = inner(ctx, dout, dlse)
        marks["bwd1"] = _NOW()
        return r

    _torch_impl._backward_once = stamped

    for name, mark in (("_plan_forward", "fwdc"), ("_plan_backward", "bwdc")):
        c_call = getattr(_torch_impl, name)

        def timed(*args, _c=c_call, _m=mark):
            t = _NOW()
            r = _c(*args)
            marks[_m] = _NOW() - t
            return r

        setattr(_torch_impl, name, timed)


def timeline(shape, steps: int) -> None:
    q, k, v, grad = (torch.randn(shape, device=DEVICE) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def step(fn):
        qg.grad = kg.grad = vg.grad = None
        marks["t0"] = _NOW()
        out = fn(qg, kg, vg)
        marks["fwd"] = _NOW()
        out.backward(grad)
        marks["end"] = _NOW()

    parts = {"jattn": {}, "SDPA": {}}
    fns = {"jattn": jattn.attention, "SDPA": F.scaled_dot_product_attention}
    for fn in fns.values():
        for _ in range(30):
            step(fn)
    SYNC()
    for _ in range(steps):
        for name, fn in fns.items():
            SYNC()
            marks.clear()
            step(fn)
            p = parts[name]
            p.setdefault("forward", []).append(marks["fwd"] - marks["t0"])
            if "bwd0" in marks:
                p.setdefault("to backward", []).append(marks["bwd0"] - marks["fwd"])
                p.setdefault("backward", []).append(marks["bwd1"] - marks["bwd0"])
                p.setdefault("after", []).append(marks["end"] - marks["bwd1"])
            else:
                p.setdefault("backward (all)", []).append(marks["end"] - marks["fwd"])
            p.setdefault("step", []).append(marks["end"] - marks["t0"])
            for m, part in (("fwdc", "fwd C call"), ("bwdc", "bwd C call")):
                if m in marks:
                    p.setdefault(part, []).append(marks[m])
            SYNC()  # a synchronised step of it between (as host_cost.py's rounds)
            step(fn)
    SYNC()
    print(f"\n### {shape}: host µs, median of {steps} steps (jattn and SDPA alternating)\n")
    print("| part | jattn | SDPA |\n| --- | ---: | ---: |")
    for part in ("forward", "fwd C call", "to backward", "backward", "bwd C call", "after", "backward (all)", "step"):
        cells = [f"{statistics.median(parts[n][part]) / 1e3:.1f}" if part in parts[n] else "" for n in fns]
        print(f"| {part} | {cells[0]} | {cells[1]} |")


def kernels(shape) -> None:
    q, k, v, grad = (torch.randn(shape, device=DEVICE) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    for name, fn in (("jattn", jattn.attention), ("SDPA", F.scaled_dot_product_attention)):
        for _ in range(20):
            fn(qg, kg, vg).backward(grad)
        SYNC()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(50):
                qg.grad = kg.grad = vg.grad = None
                fn(qg, kg, vg).backward(grad)
                SYNC()
        rows = []
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
                total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
                rows.append((e.key[:70], e.count / 50, total / e.count))
        print(f"\n### {shape} {name}: kernels a step (torch.profiler, 50 steps), device µs each\n")
        print("| kernel | a step | µs |\n| --- | ---: | ---: |")
        for key, per, dev in rows:
            print(f"| {key} | {per:.0f} | {dev:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1,24,256,64:1,24,1536,128")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    a = ap.parse_args()
    global SYNC, DEVICE
    if a.device == "cpu":
        SYNC, DEVICE = (lambda: None), "cpu"
    instrument()
    for s in a.shapes.split(":"):
        shape = tuple(int(x) for x in s.split(","))
        timeline(shape, a.steps)
        if a.kernels:
            kernels(shape)


if __name__ == "__main__":
    main()
