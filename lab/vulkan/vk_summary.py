"""Short table of a vk H200 run: the kernel TFLOP/s (GPU timestamps) and rel_l2 of each vk_bench line,
beside PyTorch fp32 SDPA of the same shape. usage: python3 vk_summary.py bench.jsonl"""

import json
import sys

rows, peers = [], {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("peer"):
        peers[(r["H"], r["S"], r["D"])] = r
    elif "kernel" in r:
        rows.append(r)
print("| (B,H,S,D) | kernel | kernel ms | TFLOP/s | rel_l2 | bitwise | vs PyTorch fp32 |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    p = peers.get((r["H"], r["S"], r["D"]))
    ratio = f"{r['kernel_tflops'] / p['tflops']:.2f}x of {p['tflops']}" if p else "-"
    print(
        f"| ({r['B']},{r['H']},{r['S']},{r['D']}) | {r['kernel']} | {r['kernel_ms_median']:.3f} | "
        f"{r['kernel_tflops']:.2f} | {r['rel_l2']:.2g} {r['gate']} | {r['bitwise_repeat']} | {ratio} |"
    )
for (h, s, d), p in sorted(peers.items()):
    print(
        f"| (1,{h},{s},{d}) | torch_sdpa_fp32 {p['torch']} | {p['ms_median']:.3f} | {p['tflops']} | {p['rel_l2']} | - | - |"
    )
