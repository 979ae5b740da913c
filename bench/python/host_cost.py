#!/usr/bin/env python3
"""The host cost of a call through ``jattn.attention`` beside PyTorch's SDPA, in one run (issue 36).

Two measurements, each a median of many rounds with jattn and SDPA alternating within a round:

1. step: the time of one forward (under ``torch.no_grad``) and of one forward + backward through
   autograd (``out.backward(grad)`` with a fixed gradient), jattn and SDPA on the same float32
   tensors. On the CPU (``torch.set_num_threads(1)`` and jattn's ``threads=1`` by default) the time
   of a call is host time: the wall clock's median, and the thread's CPU time's (steadier on a
   machine other work shares).
   On the GPU three numbers per step: the host time to enqueue it (the device idle at its start,
   timed until the Python call returns, no synchronisation inside), the synchronised time of one
   step (CUDA events around it), and the time per step of a loop of steps (throughput).
2. profile (``--profile``): where the host time of one jattn forward and one forward + backward
   goes, from torch.profiler (the op dispatch, the autograd function, allocations; on the GPU the
   launches too, the device synchronised after each call) and, on the CPU, simple timers (a bare
   ctypes call of the C library on the same tensors, the Python layer above it).

usage: host_cost.py [--device cpu|cuda] [--shapes 1x2x16x32,...] [--threads 1] [--reps N] [--profile]
                    [--json FILE]
Defaults: cpu (1,2,16,32) on one thread; cuda (1,24,1536,128), (1,24,4608,128), (1,12,4096,256),
(1,24,256,64), (1,24,512,128). Prints a markdown report; the tables come last.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import jattn
from jattn import _clib, _context

GPU_SHAPES = "1x24x1536x128,1x24x4608x128,1x12x4096x256,1x24x256x64,1x24x512x128"
CPU_SHAPES = "1x2x16x32"


def step_fns(q, k, v, grad, threads: int = 0):
    """The four steps: forward and forward + backward, jattn (on `threads` CPU threads, 0: all) and
    SDPA (head-major, default scale)."""
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))

    def jattn_fwd():
        with torch.no_grad():
            return jattn.attention(q, k, v, threads=threads)

    def sdpa_fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v)

    def jattn_train():
        qg.grad = kg.grad = vg.grad = None
        jattn.attention(qg, kg, vg, threads=threads).backward(grad)

    def sdpa_train():
        qg.grad = kg.grad = vg.grad = None
        F.scaled_dot_product_attention(qg, kg, vg).backward(grad)

    return {"forward": (jattn_fwd, sdpa_fwd), "forward+backward": (jattn_train, sdpa_train)}


def cpu_times(fns, rounds: int, batch: int, cpu_clock: bool = False):
    """Median seconds per call of each fn: rounds of `batch` calls each, the fns alternating. The
    wall clock, or with ``cpu_clock`` the thread's CPU time (what the call costs the machine,
    less exposed to other work on a shared one)."""
    clock = time.thread_time if cpu_clock else time.perf_counter
    for fn in fns:
        for _ in range(batch):
            fn()
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for fn, s in zip(fns, samples):
            t = clock()
            for _ in range(batch):
                fn()
            s.append((clock() - t) / batch)
    return [statistics.median(s) for s in samples]


def gpu_times(fns, rounds: int, loop: int):
    """Per fn: (median host seconds to enqueue one call with the device idle at its start, median
    synchronised seconds of one call by CUDA events, seconds per call of a loop of `loop` calls)."""
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    host = [[] for _ in fns]
    synced = [[] for _ in fns]
    looped = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            host[i].append(time.perf_counter() - t)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            synced[i].append(start.elapsed_time(end) / 1e3)
        for i, fn in enumerate(fns):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(loop):
                fn()
            end.record()
            end.synchronize()
            looped[i].append(start.elapsed_time(end) / 1e3 / loop)
    return [
        (statistics.median(h), statistics.median(s), statistics.median(lp)) for h, s, lp in zip(host, synced, looped)
    ]


def step_rows(device: str, shapes, reps: int, threads: int):
    rows = []
    gen = torch.Generator(device=device).manual_seed(1)
    for shape in shapes:
        q, k, v, grad = (torch.randn(shape, device=device, generator=gen) for _ in range(4))
        elems = shape[0] * shape[1] * shape[2] * shape[2] * shape[3]
        for step, (fj, fs) in step_fns(q, k, v, grad, threads).items():
            row = {"what": "step", "device": device, "shape": "(%s)" % ",".join(map(str, shape)), "step": step}
            if device == "cuda":
                (hj, sj, lj), (hs, ss, ls) = gpu_times([fj, fs], reps, 20 if elems < 2**28 else 3)
                row.update(jattn_host_us=hj * 1e6, sdpa_host_us=hs * 1e6, jattn_ms=sj * 1e3, sdpa_ms=ss * 1e3,
                           jattn_loop_ms=lj * 1e3, sdpa_loop_ms=ls * 1e3, speedup=ss / sj, loop_speedup=ls / lj)  # fmt: skip
            else:
                batch = max(1, min(200, int(2e5 / max(1, elems))))
                tj, ts = cpu_times([fj, fs], reps, batch)
                cj, cs = cpu_times([fj, fs], reps, batch, cpu_clock=True)
                row.update(jattn_us=tj * 1e6, sdpa_us=ts * 1e6, ratio=tj / ts, jattn_cpu_us=cj * 1e6,
                           sdpa_cpu_us=cs * 1e6, cpu_ratio=cj / cs)  # fmt: skip
            rows.append(row)
    return rows


def profile_report(device: str, shape, threads: int, calls: int = 200) -> str:
    """torch.profiler's table of one jattn forward and one forward + backward (averaged over
    `calls`), and simple timers of the layers of a forward."""
    q, k, v, grad = (torch.randn(shape, device=device) for _ in range(4))
    fns = step_fns(q, k, v, grad, threads)
    lines = []
    for step in ("forward", "forward+backward"):
        fn = fns[step][0]
        for _ in range(50):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn()
                if device == "cuda":
                    torch.cuda.synchronize()  # the host's work per call, the device idle at each start
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60)
        lines += [f"### torch.profiler: jattn {step}, {calls} calls, {shape}", "", "```", table.strip(), "```", ""]
    if device != "cpu":  # on the GPU the profiler's host times are the story (a timed loop would time the GPU)
        return "\n".join(lines) + "\n"
    # simple timers: the layers of one forward (no grad), each the median of many
    out = torch.empty(shape, device=device)
    timers = {}
    with torch.no_grad():
        timers["torch.empty(q.shape) (the output's allocation)"] = lambda: torch.empty(shape, device=device)
        if device == "cpu":
            problem = _clib.Problem(*shape[:3], shape[2], shape[3], 0.0, _clib.JATTN_DTYPE_F32)
            st = _clib.Strides(shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3])
            problem.q = problem.k = problem.v = problem.out = st
            exec_ = _clib.Exec(_clib.JATTN_BACKEND_CPU, _clib.JATTN_PRECISION_F32, _clib.JATTN_MEMORY_HOST, threads)
            ctx = _context.thread_context()
            args = (ctx, ctypes.byref(problem), ctypes.byref(exec_), q.data_ptr(), k.data_ptr(), v.data_ptr(), None,
                    out.data_ptr(), None)  # fmt: skip
            timers["bare ctypes jattn_forward_padded (plans and runs in C per call)"] = lambda: _clib.forward_padded(
                *args
            )
            if hasattr(_clib, "plan_forward"):
                plan = ctypes.c_void_p()
                _clib.plan_create(ctypes.byref(plan), _clib.JATTN_PASS_FORWARD, ctypes.byref(problem), None, None,
                                  ctypes.byref(exec_))  # fmt: skip
                pargs = (plan.value, ctx, None, None, 0, q.data_ptr(), k.data_ptr(), v.data_ptr(), None, out.data_ptr(),
                         None)  # fmt: skip
                timers["bare ctypes jattn_plan_forward (a plan made once)"] = lambda: _clib.plan_forward(*pargs)
        timers["jattn.attention(q, k, v, out=out)"] = lambda: jattn.attention(q, k, v, out=out, threads=threads)
        timers["jattn.attention(q, k, v)"] = lambda: jattn.attention(q, k, v, threads=threads)
        timers["F.scaled_dot_product_attention(q, k, v)"] = lambda: F.scaled_dot_product_attention(q, k, v)
        names = list(timers)
        times = cpu_times([timers[n] for n in names], 41, 200)
    lines += [f"### simple timers: one forward (no grad), {shape}, µs per call (median of 41 x 200)", "",
              "| layer | µs |", "| --- | ---: |"]  # fmt: skip
    lines += [f"| {n} | {t * 1e6:.2f} |" for n, t in zip(names, times)]
    # the forward + backward's floor: a Python autograd.Function (the only autograd a wheel independent of
    # the torch version has) that allocates what jattn's does and computes nothing, beside both steps
    empty = EmptyAttention.apply
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))

    def empty_train():
        qg.grad = kg.grad = vg.grad = None
        empty(qg, kg, vg).backward(grad)

    steps = {"an autograd.Function allocating out, lse, dq, dk, dv and computing nothing": empty_train,
             "jattn.attention(q, k, v).backward(grad)": fns["forward+backward"][0],
             "F.scaled_dot_product_attention(q, k, v).backward(grad)": fns["forward+backward"][1]}  # fmt: skip
    times = cpu_times(list(steps.values()), 41, 100)
    lines += ["", f"### simple timers: one forward + backward, {shape}, µs per step (median of 41 x 100)", "",
              "| step | µs |", "| --- | ---: |"]  # fmt: skip
    lines += [f"| {n} | {t * 1e6:.2f} |" for n, t in zip(steps, times)]
    return "\n".join(lines) + "\n"


class EmptyAttention(torch.autograd.Function):
    """The host cost of jattn's eager autograd with nothing computed: out and lse allocated in the
    forward, q, k, v and out saved; dq, dk, dv allocated in the backward."""

    @staticmethod
    def forward(ctx, q, k, v):  # type: ignore[override]
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device=q.device)
        ctx.save_for_backward(q, k, v, out)
        ctx.lse = lse
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def markdown(rows) -> str:
    cpu = [r for r in rows if r["device"] == "cpu"]
    gpu = [r for r in rows if r["device"] == "cuda"]
    lines = []
    if cpu:
        lines += ["| shape | step | jattn µs | SDPA µs | jattn / SDPA | jattn CPU-time µs | SDPA CPU-time µs | "
                  "jattn / SDPA (CPU time) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        lines += [f"| {r['shape']} | {r['step']} | {r['jattn_us']:.1f} | {r['sdpa_us']:.1f} | {r['ratio']:.2f}x | "
                  f"{r['jattn_cpu_us']:.1f} | {r['sdpa_cpu_us']:.1f} | {r['cpu_ratio']:.2f}x |" for r in cpu]  # fmt: skip
    if gpu:
        lines += ["| shape | step | host enqueue µs jattn / SDPA | synchronised ms jattn / SDPA | SDPA / jattn | "
                  "loop ms per step jattn / SDPA | SDPA / jattn (loop) |", "| --- | --- | --- | --- | ---: | --- | ---: |"]  # fmt: skip
        lines += [f"| {r['shape']} | {r['step']} | {r['jattn_host_us']:.0f} / {r['sdpa_host_us']:.0f} | "
                  f"{r['jattn_ms']:.3f} / {r['sdpa_ms']:.3f} | {r['speedup']:.2f}x | "
                  f"{r['jattn_loop_ms']:.3f} / {r['sdpa_loop_ms']:.3f} | {r['loop_speedup']:.2f}x |" for r in gpu]  # fmt: skip
    return "\n".join(lines)


def git_head() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--shapes", default=None, help=f"BxHxSxD,... (default: cpu {CPU_SHAPES}; cuda {GPU_SHAPES})")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of both (torch.set_num_threads and jattn's "
                   "threads=; default 1)")  # fmt: skip
    p.add_argument("--reps", type=int, default=None, help="rounds (default: cpu 61, cuda 30)")
    p.add_argument("--profile", action="store_true", help="also torch.profiler and the simple timers (CPU)")
    p.add_argument("--json", default=None, help="also write one JSON object per row to this file")
    a = p.parse_args(argv)
    cpu = a.device == "cpu"
    shapes = [tuple(int(x) for x in s.split("x")) for s in (a.shapes or (CPU_SHAPES if cpu else GPU_SHAPES)).split(",")]
    reps = a.reps or (61 if cpu else 30)
    if cpu:
        torch.set_num_threads(a.threads)
    print(
        f"# host cost: jattn {jattn.__version__} (git {git_head()}) beside PyTorch {torch.__version__} SDPA, {a.device}\n"
    )
    print(f"- command: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`")
    print(f"- jattn from {os.path.dirname(jattn.__file__)} (the git commit above is the script's checkout)")
    print(f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
          + (f", {torch.cuda.get_device_name()}" if not cpu else f", torch threads {torch.get_num_threads()}"))  # fmt: skip
    print(f"- Python {platform.python_version()}; load average before: {os.getloadavg()}")
    sel = jattn.select(*(torch.zeros(shapes[0], device=a.device) for _ in range(3)))
    print(f"- jattn kernel at {shapes[0]}: {sel.backend} {sel.kernel}\n")
    threads = a.threads if cpu else 0
    rows = step_rows(a.device, shapes, reps, threads)
    report = profile_report(a.device, shapes[0], threads) if a.profile else ""
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"- load average after: {os.getloadavg()}\n")
    if report:
        print(report)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
