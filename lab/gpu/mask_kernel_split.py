#!/usr/bin/env python3
"""Where a masked call's time goes, kernel by kernel, beside the call it should match (issue 35: causal at most
0.55x the unmasked call, a packed batch as fast as the padded batch of the same tokens): each case's kernels and
their device time per call (torch.profiler, CUDA activity, medians over rounds), forward and backward.

Cases (B,H,S,D = 1,24,4608,128 unless --seq): unmasked, causal; the padded batch (4,24,S/4,D) and the same tokens
packed as 4 segments (cu_seqlens), and the padded batch as one segment each (the masked instance and grid on
the padded work). The sum of a call's kernels against the unmasked (or padded) call's says whether
the fixed passes (the records' pre-pass, the dQ reduction) or the main kernel miss the ratio.

usage: mask_kernel_split.py [--seq 4608] [--dim 128] [--rounds 5] [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics

import torch

import jattn


def cases(seq: int, dim: int):
    dev = "cuda"
    big = [torch.randn(1, 24, seq, dim, device=dev) for _ in range(4)]
    quarter = [torch.randn(4, 24, seq // 4, dim, device=dev) for _ in range(4)]
    cu = torch.arange(0, seq + 1, seq // 4, device=dev, dtype=torch.int64)
    yield "unmasked", big, {}
    yield "causal", big, {"is_causal": True}
    yield "padded 4 x S/4", quarter, {}
    yield "packed 4 x S/4", big, {"cu_seqlens_q": cu, "cu_seqlens_k": cu}
    # the padded batch through the masked instance and grid (one segment of every key): what the window's
    # instance costs on the padded work, apart from the packed walk
    one = torch.tensor([0, seq // 4], device=dev, dtype=torch.int64)
    yield "padded 4 x S/4, one segment", quarter, {"cu_seqlens_q": one, "cu_seqlens_k": one}
    yield "padded 4 x S/4, causal", quarter, {"is_causal": True}
    yield (
        "packed 4 x S/4, causal",
        big,
        {"cu_seqlens_q": cu, "cu_seqlens_k": cu, "is_causal": True},
    )


def kernel_times(fn, calls: int):
    acts = [torch.profiler.ProfilerActivity.CUDA]
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
            total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
            name = e.key.replace("void ", "").replace("(anonymous namespace)::", "").split("(")[0][:60]
            out[name] = out.get(name, 0.0) + total / calls
    return out


def call(pass_: str, qkv, qkv_grad, grad, kw):
    """One call of the case: the forward without grad, or the backward of one forward kept."""
    if pass_ == "forward":

        def forward():
            with torch.no_grad():
                jattn.attention(*qkv, **kw)

        return forward
    out = jattn.attention(*qkv_grad, **kw)

    def backward():
        torch.autograd.grad(out, qkv_grad, grad, retain_graph=True)

    return backward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4608)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    print(f"# kernels per call, µs (median of {a.rounds} rounds of {a.calls} calls), {torch.cuda.get_device_name()}\n")
    totals = {}
    for name, (q, k, v, g), kw in cases(a.seq, a.dim):
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        for pass_ in ("forward", "backward"):
            fn = call(pass_, (q, k, v), (qg, kg, vg), g, kw)
            rounds = [kernel_times(fn, a.calls) for _ in range(a.rounds)]
            names = sorted(
                {n for r in rounds for n in r},
                key=lambda n: -statistics.median(r.get(n, 0) for r in rounds),
            )
            med = {n: statistics.median(r.get(n, 0.0) for r in rounds) for n in names}
            total = statistics.median(sum(r.values()) for r in rounds)
            totals[(name, pass_)] = total
            print(f"## {name}, {pass_}: {total:.1f} µs in all\n")
            for n in names:
                print(f"- {n}: {med[n]:.1f}")
            print()
    print("## ratios of the kernels' sums\n\n| pair | forward | backward |\n| --- | ---: | ---: |")
    for masked, base in (("causal", "unmasked"), ("packed 4 x S/4", "padded 4 x S/4"),
                         ("packed 4 x S/4, causal", "padded 4 x S/4, causal"),
                         ("padded 4 x S/4, one segment", "padded 4 x S/4"),
                         ("packed 4 x S/4", "padded 4 x S/4, one segment")):  # fmt: skip
        f = totals[(masked, "forward")] / totals[(base, "forward")]
        b = totals[(masked, "backward")] / totals[(base, "backward")]
        print(f"| {masked} / {base} | {f:.3f} | {b:.3f} |")


if __name__ == "__main__":
    main()
