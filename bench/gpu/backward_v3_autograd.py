"""Forward + backward through autograd: jattn.attention against PyTorch's fp32 SDPA, on the GPU, in one
process (issue 29's training figure). The jattn package is imported from PYTHONPATH (its _lib/libjattn.so
the build under test); the kernels are whatever the environment forces (JATTN_CUDA_KERNEL,
JATTN_CUDA_BWD_KERNEL) or AUTO picks.

Per shape (B, H, S, D), head-major float32 q, k, v with requires_grad, dout ~ N(0, 1): one step is
out = f(q, k, v); out.backward(dout). Timed with CUDA events, the two implementations alternating within
each round, median of the rounds; TF32 off. Also each one's forward alone (no grad) and the gradients'
rel_l2 between the two (a sanity check, not the gate).

usage: python3 backward_v3_autograd.py B,H,S,D [...]
prints: RESULT <B> <H> <S> <D> <jattn fwd+bwd ms> <torch fwd+bwd ms> <ratio torch/jattn> <jattn fwd ms>
        <torch fwd ms> <max rel_l2 of dq, dk, dv between the two> <jattn backward kernel>
"""

import statistics
import sys

import torch
import torch.nn.functional as F

import jattn


def timed(fns, reps):
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
    return [statistics.median(ts) for ts in times]


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    for arg in sys.argv[1:]:
        bsz, heads, seq, dim = (int(x) for x in arg.split(","))
        g = torch.Generator(device=dev).manual_seed(7)
        q, k, v = (torch.randn(bsz, heads, seq, dim, device=dev, generator=g).requires_grad_() for _ in range(3))
        dout = torch.randn(bsz, heads, seq, dim, device=dev, generator=g)

        def step(f):
            def run():
                for t in (q, k, v):
                    t.grad = None
                f(q, k, v).backward(dout)

            return run

        def fwd(f):
            def run():
                with torch.no_grad():
                    f(q, k, v)

            return run

        jf = lambda a, b, c: jattn.attention(a, b, c)  # noqa: E731
        tf = F.scaled_dot_product_attention
        reps = 10 if seq <= 2048 else 5
        j_ms, t_ms = timed([step(jf), step(tf)], reps)
        jf_ms, tf_ms = timed([fwd(jf), fwd(tf)], reps)
        step(jf)()
        gj = [t.grad.double() for t in (q, k, v)]
        step(tf)()
        gt = [t.grad.double() for t in (q, k, v)]
        rel = max(float((a - b).norm() / b.norm()) for a, b in zip(gj, gt))
        kernel = "?"
        try:
            sel = jattn.select(q.detach(), k.detach(), v.detach())
            kernel = getattr(sel, "kernel", "?")
        except Exception:  # noqa: BLE001 - only a label
            pass
        print(
            f"RESULT {bsz} {heads} {seq} {dim} {j_ms:.3f} {t_ms:.3f} {t_ms / j_ms:.2f} {jf_ms:.3f} {tf_ms:.3f} "
            f"{rel:.2e} fwd:{kernel}",
            flush=True,
        )


if __name__ == "__main__":
    main()
