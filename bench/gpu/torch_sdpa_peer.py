"""PyTorch SDPA on the GPU, the peer of bench/gpu/jattn_gpu_bench.c, same shapes, same output.

fp32: SDPBackend.EFFICIENT_ATTENTION (PyTorch's fp32 kernel); bf16: SDPBackend.CUDNN_ATTENTION
(context only). Median of CUDA-event times per call; rel_l2 against a float64 evaluation of
the same sampled query rows as jattn_gpu_bench (every head, 16 rows spread over the sequence).

usage: python3 torch_sdpa_peer.py [B,H,S,D | B,H,Sq,Skv,D ...]
prints: RESULT <impl> <B> <H> <Sq> <D> <median us> <TFLOP/s> <rel_l2> <max_abs> <note> skv=<Skv>
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SAMPLE_ROWS = 16
DEFAULT = [(1, 24, 1536, 128), (1, 24, 4608, 128), (1, 48, 4608, 128), (1, 24, 16384, 128), (1, 24, 1536, 64)]


def time_ms(fn, reps):
    for _ in range(2):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return t[len(t) // 2]


def reference_rows(q, k, v, rows):
    q64 = q[:, :, rows, :].double()
    s = q64 @ k.double().transpose(-1, -2) / (q.shape[-1] ** 0.5)
    return torch.softmax(s, dim=-1) @ v.double()


def main():
    shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or DEFAULT
    torch.manual_seed(torch.seed())
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for shape in shapes:
        B, H, S, Skv, D = shape if len(shape) == 5 else (shape[0], shape[1], shape[2], shape[2], shape[3])
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.float32)
        k, v = (torch.randn(B, H, Skv, D, device="cuda", dtype=torch.float32) for _ in range(2))
        rows = torch.tensor([(r * (S - 1)) // (SAMPLE_ROWS - 1) for r in range(SAMPLE_ROWS)], device="cuda")
        ref = reference_rows(q, k, v, rows)
        flops = 4.0 * B * H * S * Skv * D
        runs = [
            ("torch-sdpa-f32", SDPBackend.EFFICIENT_ATTENTION, torch.float32),
            ("torch-cudnn-bf16", SDPBackend.CUDNN_ATTENTION, torch.bfloat16),
        ]
        for name, backend, dtype in runs:
            qq, kk, vv = (x.to(dtype) for x in (q, k, v))
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: F.scaled_dot_product_attention(qq, kk, vv)
                    out = fn()
                    once = time_ms(fn, 1)
                    reps = max(5, min(50, int(400 / max(once, 1e-3))))
                    ms = time_ms(fn, reps)
            except RuntimeError as e:
                print(f"SKIP {name} {B} {H} {S} {D}: {str(e).splitlines()[0]}", flush=True)
                continue
            o = out[:, :, rows, :].double()
            err = o - ref
            rel = (err.norm() / ref.norm()).item()
            mx = err.abs().max().item()
            print(
                f"RESULT {name} {B} {H} {S} {D} {ms * 1e3:.1f} {flops / (ms * 1e-3) / 1e12:.2f} {rel:.3g} {mx:.3g} "
                f"reps={reps} skv={Skv}",
                flush=True,
            )
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
