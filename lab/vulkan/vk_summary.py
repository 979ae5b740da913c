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
        peers[(r["H"], r["S"], r["D"], r.get("mask", ""))] = r
    elif "kernel" in r:
        rows.append(r)
# the unmasked line of the same shape and kernel: a masked line's time as a fraction of it
plain = {(r["B"], r["H"], r["S"], r["D"], r["kernel"]): r for r in rows if not r.get("mask")}
print("| (B,H,S,D) | mask | kernel | kernel ms | x unmasked | TFLOP/s | rel_l2 | bitwise | vs PyTorch fp32 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    mask = r.get("mask", "")
    p = peers.get((r["H"], r["S"], r["D"], mask))
    ratio = f"{r['kernel_tflops'] / p['tflops']:.2f}x of {p['tflops']}" if p else "-"
    base = plain.get((r["B"], r["H"], r["S"], r["D"], r["kernel"]))
    frac = f"{r['kernel_ms_median'] / base['kernel_ms_median']:.3f}" if base and mask else "-"
    print(
        f"| ({r['B']},{r['H']},{r['S']},{r['D']}) | {mask or '-'} | {r['kernel']} | {r['kernel_ms_median']:.3f} | "
        f"{frac} | {r['kernel_tflops']:.2f} | {r['rel_l2']:.2g} {r['gate']} | {r['bitwise_repeat']} | {ratio} |"
    )
for (h, s, d, mask), p in sorted(peers.items()):
    print(
        f"| (1,{h},{s},{d}) | {mask or '-'} | torch_sdpa_fp32 {p['torch']} | {p['ms_median']:.3f} | - | {p['tflops']} | "
        f"{p['rel_l2']} | - | - |"
    )
