"""Interleaved timing of jattn builds and PyTorch's CPU SDPA in ONE process, call by call.

usage: python interleaved.py fwd|bwd H S THREADS ROUNDS LIBJATTN.so [LIBJATTN2.so ...]
       (INTERLEAVED_TORCH=0: the jattn libraries only, no PyTorch; then numpy makes the inputs)

Each round times one call of every jattn library (loaded side by side through ctypes; each
call: jattn_forward, or jattn_backward on the out and lse of a forward) and one of PyTorch's
F.scaled_dot_product_attention (the forward under no_grad, or o.backward(g) after an untimed
forward), all on the same float32 head-major [1, H, S, 128] tensors, standard normal. Per call
it records wall time and this process's CPU time (user + system of every thread): on a machine
shared with other work the wall time of a call depends on how much of the CPU the scheduler
gave it, its CPU time much less so. Prints one JSON line per call and a summary: medians, and
per round the ratio torch / jattn of each clock (and jattn0 / jattnN in CPU time: the speed-up of
library N over the first). GFLOP/s: 4 H S^2 D per forward, 2.5x that
per backward (the FlashAttention convention). Requires torch (this is a peer benchmark)."""

import ctypes as C
import json
import statistics as st
import sys
import time

import numpy as np

WITH_TORCH = __import__("os").environ.get("INTERLEAVED_TORCH", "1") != "0"
if WITH_TORCH:
    import torch
    import torch.nn.functional as F


class Strides(C.Structure):
    _fields_ = [("batch", C.c_int64), ("head", C.c_int64), ("token", C.c_int64)]


class Problem(C.Structure):
    _fields_ = [
        ("batch", C.c_int64),
        ("heads", C.c_int64),
        ("seq_q", C.c_int64),
        ("seq_kv", C.c_int64),
        ("head_dim", C.c_int64),
        ("scale", C.c_float),
        ("dtype", C.c_int),
        ("q", Strides),
        ("k", Strides),
        ("v", Strides),
        ("out", Strides),
    ]


class Exec(C.Structure):
    _fields_ = [
        ("backend", C.c_int),
        ("precision", C.c_int),
        ("memory", C.c_int),
        ("threads", C.c_int),
        ("cuda_stream", C.c_void_p),
        ("workspace", C.c_void_p),
        ("workspace_bytes", C.c_size_t),
    ]


def main() -> int:
    if len(sys.argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    mode, H, S, threads, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    D = 128
    libs = []
    for path in sys.argv[6:]:
        lib = C.CDLL(path)
        lib.jattn_problem_flux.restype = Problem
        lib.jattn_strides_head_major.restype = Strides
        lib.jattn_last_error.restype = C.c_char_p
        libs.append(lib)
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, H, S, D), dtype=np.float32) for _ in range(4))
    out, lse = np.empty_like(q), np.empty((1, H, S), np.float32)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    ex = Exec(backend=2, threads=threads)  # JATTN_BACKEND_CPU
    ptr = lambda t: C.c_void_p(t.ctypes.data)
    if WITH_TORCH:
        torch.set_num_threads(threads)
        tq, tk, tv, tdout = (torch.from_numpy(t) for t in (q, k, v, dout))  # the same memory

    def jattn_call(lib):
        p = lib.jattn_problem_flux(1, H, S, S, D)
        p.q = p.k = p.v = p.out = lib.jattn_strides_head_major(H, S, D)
        if mode == "fwd":
            return lambda: lib.jattn_forward(None, C.byref(p), C.byref(ex), ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse))
        st0 = lib.jattn_forward(None, C.byref(p), C.byref(ex), ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse))
        assert st0 == 0, lib.jattn_last_error()
        return lambda: lib.jattn_backward(
            None,
            C.byref(p),
            None,
            C.byref(ex),
            ptr(q),
            ptr(k),
            ptr(v),
            ptr(out),
            ptr(lse),
            ptr(dout),
            None,
            None,
            ptr(dq),
            ptr(dk),
            ptr(dv),
        )

    def torch_call():
        if mode == "fwd":
            with torch.no_grad():
                F.scaled_dot_product_attention(tq, tk, tv)
            return 0
        qq, kk, vv = (t.detach().requires_grad_() for t in (tq, tk, tv))
        o = F.scaled_dot_product_attention(qq, kk, vv)
        t0w, t0c = time.perf_counter(), time.process_time()
        o.backward(tdout)
        return (time.perf_counter() - t0w, time.process_time() - t0c)

    calls = [("jattn%d" % i, jattn_call(lib)) for i, lib in enumerate(libs)]
    if WITH_TORCH:
        calls.append(("torch", torch_call))
    flops = 4.0 * H * S * S * D * (2.5 if mode == "bwd" else 1.0)
    rec = {}
    for r in range(rounds + 1):  # round 0: warm-up, not counted
        for name, f in calls:
            t0w, t0c = time.perf_counter(), time.process_time()
            res = f()
            wall, cpu = time.perf_counter() - t0w, time.process_time() - t0c
            if name == "torch" and mode == "bwd":
                wall, cpu = res  # the backward alone
            elif res != 0:
                raise SystemExit("%s failed: %s" % (name, libs[int(name[5:])].jattn_last_error()))
            if r == 0:
                continue
            rec.setdefault(name, []).append((wall, cpu))
            print(
                json.dumps(
                    {
                        "mode": mode,
                        "who": name,
                        "H": H,
                        "S": S,
                        "D": D,
                        "threads": threads,
                        "round": r,
                        "wall_ms": round(wall * 1e3, 2),
                        "cpu_ms": round(cpu * 1e3, 2),
                    }
                ),
                flush=True,
            )
    for name in rec:
        w = [x[0] for x in rec[name]]
        c = [x[1] for x in rec[name]]
        line = "%-6s wall %8.1f ms (%6.1f GFLOP/s)  cpu %8.1f ms (%6.1f GFLOP per cpu-s x threads)" % (
            name,
            1e3 * st.median(w),
            flops / st.median(w) / 1e9,
            1e3 * st.median(c),
            flops / st.median(c) / 1e9 * threads,
        )
        if name != "torch" and "torch" in rec:
            rw = [t[0] / j[0] for t, j in zip(rec["torch"], rec[name])]
            rc = [t[1] / j[1] for t, j in zip(rec["torch"], rec[name])]
            line += "  torch/jattn wall %.2fx [%s]  cpu %.2fx [%s]" % (
                st.median(rw),
                " ".join("%.2f" % x for x in rw),
                st.median(rc),
                " ".join("%.2f" % x for x in rc),
            )
        if name not in ("torch", "jattn0"):
            sp = [b[1] / j[1] for b, j in zip(rec["jattn0"], rec[name])]  # speed-up over jattn0, CPU time
            line += "  jattn0/%s cpu %.3fx [%s]" % (name, st.median(sp), " ".join("%.3f" % x for x in sp))
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
