"""The table of bench/gpu/masks_backward_run.sh: the cuda backward with masks and grouped-query heads beside the
same shape unmasked (the backward v3, and AUTO's kernel) and beside PyTorch's fp32 SDPA backward.

Reads the RESULT lines of masks_backward_bench (AUTO: auto.txt; JATTN_CUDA_BWD_KERNEL=v3: v3.txt) and of
torch_sdpa_masks_backward.py (torch.txt) in the folder given; prints one row per case:
  case, attended fraction, jattn ms (AUTO's kernel), / v3 unmasked (the same B,H,S,D with Hkv = H and no mask,
  v3 forced: what the mask saves the same kernel; causal at Sq = Skv should be <= 0.55), / AUTO unmasked,
  PyTorch ms, PyTorch / jattn.
usage: python3 masks_backward_table.py FOLDER
"""

import os
import sys


def read(path, who):
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0] == "RESULT" and f[1] == who:
            rows[f[2]] = f[3:]
    return rows


def unmasked_key(case):
    dims, _ = case.split(":")
    v = dims.split(",")
    v[2] = v[1]  # Hkv = H
    return ",".join(v) + ":none"


def main() -> None:
    folder = sys.argv[1]
    auto = read(os.path.join(folder, "auto.txt"), "jattn")
    v3 = read(os.path.join(folder, "v3.txt"), "jattn")
    torch = read(os.path.join(folder, "torch.txt"), "torch")
    head = (
        "| case (B,H,Hkv,S,D[,Skv]:mask) | attended | jattn ms (kernel) | / v3 unmasked | / AUTO unmasked "
        "| PyTorch ms | PyTorch / jattn |"
    )
    print(head)
    print("| " + " | ".join(["---"] * 7) + " |")

    def ratio(a, b):
        return f"{a / b:.3f}" if a and b else "-"

    for case, f in auto.items():
        ms, frac, kernel = float(f[0]), float(f[2]), f[3]
        base = unmasked_key(case)
        v3_base = float(v3[base][0]) if base in v3 else None
        auto_base = float(auto[base][0]) if base in auto else None
        t = float(torch[case][0]) if case in torch else None
        short = kernel.replace("cuda_bwd_", "")
        print(
            f"| {case} | {frac:.3f} | {ms:.3f} ({short}) | {ratio(ms, v3_base)} | {ratio(ms, auto_base)} "
            f"| {t:.3f} | {t / ms:.2f} |"
            if t
            else f"| {case} | {frac:.3f} | {ms:.3f} ({short}) | {ratio(ms, v3_base)} | {ratio(ms, auto_base)} | - | - |"
        )


if __name__ == "__main__":
    main()
