"""The same-run peer of bench/vulkan: PyTorch fp32 scaled_dot_product_attention on CUDA, TF32 off.

usage: python3 torch_sdpa_peer.py S[:D][:causal][:kv=N] [...]   (B=1, H=24, D=128 unless given,
head-major inputs; causal: is_causal=True; kv=N: N key/value heads, enable_gqa=True)
Prints one JSON line per shape: the median of 20 calls timed with CUDA events (after 3 warm-ups),
TFLOP/s from 4*B*H*D*(attended query-key pairs) (S*S, or S(S+1)/2 causal, as vk_bench counts),
and rel_l2 against float64 SDPA of the same inputs. "mask" names the options as vk_bench does."""

import json
import sys

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

for arg in sys.argv[1:]:
    parts = arg.split(":")
    s = int(parts[0])
    d = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 128
    words = [w for w in parts[1:] if not w.isdigit()]
    causal = "causal" in words
    hkv = next((int(w[3:]) for w in words if w.startswith("kv=")), 24)
    opts = {"is_causal": causal}
    if hkv != 24:
        opts["enable_gqa"] = True
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 24, s, d, device="cuda", generator=g)
    k, v = (torch.randn(1, hkv, s, d, device="cuda", generator=g) for _ in range(2))
    for _ in range(3):
        out = F.scaled_dot_product_attention(q, k, v, **opts)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = F.scaled_dot_product_attention(q, k, v, **opts)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **opts)
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    ms = times[len(times) // 2]
    pairs = s * (s + 1) / 2 if causal else s * s
    print(
        json.dumps(
            {
                "peer": "torch_sdpa_fp32",
                "torch": torch.__version__,
                "B": 1,
                "H": 24,
                "S": s,
                "D": d,
                "mask": " ".join(words),
                "ms_median": round(ms, 4),
                "tflops": round(4 * 24 * pairs * d / ms * 1e-9, 2),
                "rel_l2": float(f"{rel:.3g}"),
            }
        ),
        flush=True,
    )
