"""Merges RESULT lines (jattn_gpu_bench, torch_sdpa_peer) into one markdown table:
shape, implementation, us, TFLOP/s, ratio to PyTorch fp32 SDPA (time), rel_l2 and max_abs
against float64 (sampled rows). usage: python3 table.py results.txt ..."""

import sys

rows = []
for path in sys.argv[1:]:
    for line in open(path):
        f = line.split()
        if f and f[0] == "RESULT":
            skv = next((int(x[4:]) for x in f[10:] if x.startswith("skv=")), int(f[4]))
            rows.append(
                dict(
                    impl=f[1],
                    shape=tuple(int(x) for x in f[2:6]) + (skv,),
                    us=float(f[6]),
                    tflops=float(f[7]),
                    rel=f[8],
                    mx=f[9],
                )
            )
torch_us = {r["shape"]: r["us"] for r in rows if r["impl"] == "torch-sdpa-f32"}
print("| (B,H,S,D) | implementation | us | TFLOP/s | speed vs PyTorch fp32 | rel_l2 | max_abs |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")


def label(s):
    """(B,H,S,D), or (B,H,Sq x Skv,D) for cross-attention."""
    seq = str(s[2]) if s[4] == s[2] else f"{s[2]}x{s[4]}"
    return f"({s[0]},{s[1]},{seq},{s[3]})"


for shape in sorted({r["shape"] for r in rows}, key=lambda s: (s[3] != 128, s[0] * s[1] * s[2] * s[4])):
    for r in sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["impl"]):
        ratio = f"{torch_us[shape] / r['us']:.2f}x" if shape in torch_us else "-"
        print(
            f"| {label(shape)} | {r['impl']} | {r['us']:.0f} | {r['tflops']:.1f} | {ratio} | {r['rel']} | {r['mx']} |"
        )
