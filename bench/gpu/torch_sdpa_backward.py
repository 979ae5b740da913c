"""PyTorch's fp32 SDPA backward on the GPU, the peer of `jattn bench --backward --backend cuda`.

TF32 off (matmul and cuDNN); fp32 inputs; out = SDPA(q, k, v) (PyTorch's own choice: the
memory-efficient fp32 kernel), then out.backward(dout) timed alone with CUDA events, median of
reps; the default mode and torch.use_deterministic_algorithms(True); and the fp32 forward.
FLOPs of a backward = 10 B H Sq Skv D (2.5x the forward's).

usage: python3 torch_sdpa_backward.py [B,H,S,D ...]
prints: RESULT <mode> <B> <H> <S> <D> <median ms> <TFLOP/s>
"""

import sys

import torch
import torch.nn.functional as F

DEFAULT = [(1, 24, 1536, 128), (1, 24, 4608, 128)]


def median_ms(fn, setup, reps):
    times = []
    for i in range(reps + 2):
        setup()
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[1:]] or DEFAULT
    dev = torch.device("cuda")
    for bsz, heads, seq, dim in shapes:
        g = torch.Generator(device=dev).manual_seed(1)
        q, k, v = (torch.randn(bsz, heads, seq, dim, device=dev, generator=g, requires_grad=True) for _ in range(3))
        dout = torch.randn(bsz, heads, seq, dim, device=dev, generator=g)
        flops = 10.0 * bsz * heads * seq * seq * dim
        reps = 20 if seq <= 2048 else 8
        with torch.no_grad():
            fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v), lambda: None, reps)
        print(f"RESULT forward {bsz} {heads} {seq} {dim} {fwd:.3f} {flops / 2.5 / fwd / 1e9:.1f}", flush=True)
        for mode in ("default", "deterministic"):
            torch.use_deterministic_algorithms(mode == "deterministic")
            state = {}

            def setup():
                for t in (q, k, v):
                    t.grad = None
                state["out"] = F.scaled_dot_product_attention(q, k, v)

            ms = median_ms(lambda: state["out"].backward(dout), setup, reps if mode == "default" else 4)
            print(f"RESULT backward-{mode} {bsz} {heads} {seq} {dim} {ms:.3f} {flops / ms / 1e9:.1f}", flush=True)
        torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
