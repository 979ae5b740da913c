#!/usr/bin/env python3
"""The host time to enqueue jattn's CUDA backward at a small shape (the device idle at the start): the call
through _torch_impl (as autograd makes it), the bare ctypes jattn_plan_backward with its workspace made once,
and torch.empty of that workspace; medians of many calls.

usage: backward_enqueue_probe.py [--shape 1,24,256,64] [--calls 400]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from jattn import _clib, _options, _torch_impl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from enqueue_probe import enqueue_us  # noqa: E402  (the same timer as the forward's probe)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,24,256,64")
    ap.add_argument("--calls", type=int, default=400)
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    q, k, v, g = (torch.randn(shape, device="cuda") for _ in range(4))
    opts = _options.with_lse(_options.options())
    out, lse, fwd = _torch_impl._run_forward(q, k, v, opts, None, None, None, q.get_device(), True)
    _torch_impl.backward(q, k, v, out, lse, g, None, opts, None, forward_plan=fwd)
    plan = next(iter(fwd.backward_plans.values()))
    print(f"shape {shape}: backward kernel {plan.selection().kernel.decode()}, workspace {plan.workspace_bytes} bytes")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), g.data_ptr(), None)
    gp = (dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    rows = {
        "_torch_impl.backward (autograd's call)": lambda: _torch_impl.backward(
            q, k, v, out, lse, g, None, opts, None, forward_plan=fwd
        ),  # fmt: skip
        "bare ctypes jattn_plan_backward": lambda: _clib.plan_backward(
            plan.handle, None, stream, ws.data_ptr(), plan.workspace_bytes, *ptrs, None, *gp
        ),  # fmt: skip
        "torch.empty(workspace)": lambda: torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda"),
        "bare ctypes jattn_plan_forward": lambda: _clib.plan_forward(
            fwd.handle,
            None,
            stream,
            ws.data_ptr(),
            fwd.workspace_bytes,
            *ptrs[:3],
            None,
            out.data_ptr(),
            lse.data_ptr(),
        ),  # fmt: skip
    }
    for name, fn in rows.items():
        print(f"| {name} | {enqueue_us(fn, a.calls):.1f} µs |")


if __name__ == "__main__":
    main()
