#!/usr/bin/env python3
"""Why a forward through autograd costs the host more than the same forward without it (issue 36).

On an H100 (bench/results/h100-2026-12-07-windows/call3-time/timeline-base.md) the host time of
jattn's forward inside a training step at (1,24,256,64) was 107.7 µs against SDPA's 51.1, while the
forward without grad enqueued in 19.6 µs (bench/results/h100-2026-12-07-verify/). This probe times
the forward alone, layer by layer, with grad and without, jattn beside SDPA and beside an empty
autograd.Function, in two conditions: right after a synchronisation (the device idle, as
host_cost.py's "host enqueue" and the step timeline measure) and back to back (the device busy).
Each row is the median of many calls, the rows interleaved round by round.

  SDPA / jattn no grad          the plain forward of each
  SDPA / jattn grad             the forward of a differentiated call (the graph made and dropped)
  EmptyAttention.apply          an autograd.Function that allocates out and lse, saves, computes nothing
  EagerAttention.apply          jattn's Function, called directly (no keyword handling)
  _run_forward(differentiated)  jattn's run of that Function, outside autograd
  bare C forward                jattn_plan_forward through ctypes, a kept plan, the workspace allocated

usage: forward_grad_probe.py [--shape 1,24,256,64] [--calls 400] [--device cuda|cpu]
(--device cpu: a smoke test of the script on a machine without a GPU.)
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
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    dev = a.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    q, k, v = (torch.randn(shape, device=dev) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    opts = _options.with_lse(_options.options())
    index = q.get_device()
    _, _, plan = _torch_impl._run_forward(q, k, v, opts, None, None, None, index, True)

    def bare():
        out = torch.empty_like(q)
        lse = torch.empty(plan.extra, dtype=torch.float32, device=dev)
        qp, kp, vp, op, lp = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()
        if index < 0:
            from jattn import _context

            return _torch_impl._plan_forward(plan.handle, _context.thread_context(), None, None, 0, qp, kp, vp,
                                             plan.mask, op, lp)  # fmt: skip
        return _torch_impl._forward_cuda(plan, index, q.device, qp, kp, vp, plan.mask, op, lp)

    rows = {
        "SDPA no grad": lambda: F.scaled_dot_product_attention(q, k, v),
        "SDPA grad": lambda: F.scaled_dot_product_attention(qg, kg, vg),
        "jattn no grad": lambda: jattn.attention(q, k, v),
        "jattn grad": lambda: jattn.attention(qg, kg, vg),
        "EmptyAttention.apply": lambda: EmptyAttention.apply(qg, kg, vg),
        "EagerAttention.apply": lambda: _torch_impl.EagerAttention.apply(qg, kg, vg, opts, None),
        "_run_forward(differentiated)": lambda: _torch_impl._run_forward(
            qg, kg, vg, opts, None, None, None, index, True
        ),
        "bare C forward": bare,
    }
    for fn in rows.values():
        for _ in range(20):
            fn()
    sync()
    after_sync = {n: [] for n in rows}
    busy = {n: [] for n in rows}
    for _ in range(a.calls):
        for n, fn in rows.items():
            sync()
            t = time.perf_counter_ns()
            r = fn()
            after_sync[n].append(time.perf_counter_ns() - t)
            del r
        for n, fn in rows.items():  # back to back: the device still runs the calls before
            t = time.perf_counter_ns()
            r = fn()
            busy[n].append(time.perf_counter_ns() - t)
            del r
    sync()
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"\n### forward host time, {shape}, {name}, torch {torch.__version__}: µs, median of {a.calls}\n")
    print("| call | after a sync | back to back |\n| --- | ---: | ---: |")
    for n in rows:
        print(f"| {n} | {statistics.median(after_sync[n]) / 1e3:.1f} | {statistics.median(busy[n]) / 1e3:.1f} |")


if __name__ == "__main__":
    main()
