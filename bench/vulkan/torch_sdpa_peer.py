"""The same-run peer of bench/vulkan: PyTorch fp32 scaled_dot_product_attention on CUDA, TF32 off.

usage: python3 torch_sdpa_peer.py S[:D] [S[:D] ...]   (B=1, H=24, D=128 unless given, head-major inputs)
Prints one JSON line per shape: the median of 20 calls timed with CUDA events (after 3 warm-ups),
TFLOP/s from 4*B*H*S*S*D, and rel_l2 against float64 SDPA of the same inputs."""

import json
import sys

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

for arg in sys.argv[1:]:
    s, d = (int(x) for x in (arg.split(":") + ["128"])[:2])
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 24, s, d, device="cuda", generator=g) for _ in range(3))
    for _ in range(3):
        out = F.scaled_dot_product_attention(q, k, v)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = F.scaled_dot_product_attention(q, k, v)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    ms = times[len(times) // 2]
    print(
        json.dumps(
            {
                "peer": "torch_sdpa_fp32",
                "torch": torch.__version__,
                "B": 1,
                "H": 24,
                "S": s,
                "D": d,
                "ms_median": round(ms, 4),
                "tflops": round(4 * 24 * s * s * d / ms * 1e-9, 2),
                "rel_l2": float(f"{rel:.3g}"),
            }
        ),
        flush=True,
    )
