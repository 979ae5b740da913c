"""The table of bench/gpu/masks_backward_run.sh: the cuda backward with masks and grouped-query heads beside the
same shape unmasked (the backward v3, and AUTO's kernel) and beside PyTorch's fp32 SDPA backward.

Reads the RESULT lines of masks_backward_bench (AUTO: auto.txt; JATTN_CUDA_BWD_KERNEL=v3: v3.txt, and the
windowed cases with v3 forced: v3-windows.txt, where present) and of torch_sdpa_masks_backward.py (torch.txt) in
the folder given; prints one row per case:
  case, attended fraction, jattn ms (AUTO's kernel), / v3 unmasked (the same B,H,S,D with Hkv = H and no mask,
  v3 forced: what the mask saves the same kernel; causal at Sq = Skv should be <= 0.55), / AUTO unmasked,
  / v3 (the same case, v3 forced), PyTorch ms, PyTorch / jattn;
then, for each packed case (1,H,Hkv,S,D:segments=N, alone or with causal) whose padded batch (N,H,Hkv,S/N,D:none or
causal: the same tokens, the same attended pairs) ran too, packed / padded (issue 35: 1.0, as fast per FLOP).
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
    v3_win = read(os.path.join(folder, "v3-windows.txt"), "jattn")
    head = (
        "| case (B,H,Hkv,S,D[,Skv]:mask) | attended | jattn ms (kernel) | / v3 unmasked | / AUTO unmasked "
        "| / v3 | PyTorch ms | PyTorch / jattn |"
    )
    print(head)
    print("| " + " | ".join(["---"] * 8) + " |")

    def ratio(a, b):
        return f"{a / b:.3f}" if a and b else "-"

    for case, f in auto.items():
        ms, frac, kernel = float(f[0]), float(f[2]), f[3]
        base = unmasked_key(case)
        v3_base = float(v3[base][0]) if base in v3 else None
        auto_base = float(auto[base][0]) if base in auto else None
        t = float(torch[case][0]) if case in torch else None
        short = kernel.replace("cuda_bwd_", "")
        same_v3 = float(v3_win[case][0]) if case in v3_win else None
        peer = f"| {t:.3f} | {t / ms:.2f} |" if t else "| - | - |"
        print(
            f"| {case} | {frac:.3f} | {ms:.3f} ({short}) | {ratio(ms, v3_base)} | {ratio(ms, auto_base)} "
            f"| {ratio(ms, same_v3)} {peer}"
        )
    packed = []
    for case, f in auto.items():
        dims, parts = case.split(":")
        v = dims.split(",")
        p = parts.split("+")
        segs = [x for x in p if x.startswith("segments=")]
        rest = [x for x in p if not x.startswith("segments=")]
        if v[0] != "1" or len(segs) != 1 or len(v) != 5 or rest not in ([], ["causal"]):
            continue
        n = int(segs[0].split("=")[1])
        if int(v[3]) % n:
            continue
        padded = f"{n},{v[1]},{v[2]},{int(v[3]) // n},{v[4]}:" + ("+".join(rest) if rest else "none")
        if padded in auto:
            packed.append((case, padded, float(f[0]), float(auto[padded][0]), f[3], auto[padded][3]))
    if packed:
        print()
        print("| packed | padded (the same tokens) | packed ms (kernel) | padded ms (kernel) | packed / padded |")
        print("| --- | --- | --- | --- | --- |")
        for case, padded, a, b, ka, kb in packed:
            ka, kb = ka.replace("cuda_bwd_", ""), kb.replace("cuda_bwd_", "")
            print(f"| {case} | {padded} | {a:.3f} ({ka}) | {b:.3f} ({kb}) | {a / b:.3f} |")


if __name__ == "__main__":
    main()
