"""PyTorch's fp32 SDPA on the GPU for the attention variants jattn serves (the peer of `jattn run
--causal / --kv-heads / --segments` in bench/gpu/perf.sh): plain, is_causal=True, enable_gqa=True, and
a padded batch standing for packed sequences (each sequence its own batch row, padded to the longest,
a boolean key mask), forward and forward + backward, timed with CUDA events (median of reps). TF32
off; fp32 inputs; PyTorch picks its kernel.

usage: python3 torch_sdpa_variants.py plain B,H,S,D | causal B,H,S,D | gqa B,H,HKV,S,D |
                                      padded H,D,L1+L2+... [--backward]
prints: RESULT <variant> <spec> <fwd|fwd+bwd> <median ms>
"""

import sys

import torch
import torch.nn.functional as F


def median_ms(fn, reps=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def run(variant: str, spec: str, backward: bool) -> float:
    dev = "cuda"
    kw = {}
    if variant == "padded":
        h, d, lens = spec.split(",")
        h, d = int(h), int(d)
        lens = [int(x) for x in lens.split("+")]
        b, s = len(lens), max(lens)
        q, k, v = (torch.randn(b, h, s, d, device=dev, requires_grad=backward) for _ in range(3))
        keep = torch.zeros(b, 1, 1, s, dtype=torch.bool, device=dev)
        for i, n in enumerate(lens):
            keep[i, :, :, :n] = True
        kw["attn_mask"] = keep
    elif variant == "gqa":
        b, h, hkv, s, d = (int(x) for x in spec.split(","))
        q = torch.randn(b, h, s, d, device=dev, requires_grad=backward)
        k, v = (torch.randn(b, hkv, s, d, device=dev, requires_grad=backward) for _ in range(2))
        kw["enable_gqa"] = True
    else:
        b, h, s, d = (int(x) for x in spec.split(","))
        q, k, v = (torch.randn(b, h, s, d, device=dev, requires_grad=backward) for _ in range(3))
        kw["is_causal"] = variant == "causal"

    def step():
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        if backward:
            out.backward(torch.ones_like(out))

    return median_ms(step)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args = [a for a in sys.argv[1:] if a != "--backward"]
    backward = "--backward" in sys.argv
    variant, spec = args[0], args[1]
    ms = run(variant, spec, backward)
    print(f"RESULT {variant} {spec} {'fwd+bwd' if backward else 'fwd'} {ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
