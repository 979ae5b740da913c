"""The table of lab/gpu/v7_run.sh: kernel v7 and the backward v3 beside AUTO and PyTorch's fp32 SDPA.

usage: python3 v7_table.py OUT_DIR   (reads bench.log, torch_fwd.log, torch_bwd.log, autograd.log there)
Forward TFLOP/s = 4 B H S^2 D / time; backward 10 B H S^2 D / time (docs/DESIGN.md §1).
"""

import json
import sys

NAN = float("nan")


def main() -> None:
    out = sys.argv[1]
    rows: dict = {}
    checks = []
    tag = "?"
    for line in open(f"{out}/bench.log"):
        if line.startswith("TAG "):
            tag = line.split()[1]
        elif line.startswith("{"):
            j = json.loads(line)
            if tag == "check_v7":
                checks.append(j)
                continue
            key = (j["batch"], j["heads"], j["seq_q"], j["dim"])
            rows.setdefault(key, {})[tag] = j["ms"]
            rows[key][tag + "_kernel"] = j.get("kernel", "?")
    for name in ("torch_fwd", "torch_bwd"):
        try:
            lines = open(f"{out}/{name}.log").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if not line.startswith("RESULT"):
                continue
            key = tuple(int(x) for x in f[2:6])
            if name == "torch_fwd":
                if f[1].endswith("-f32"):
                    rows.setdefault(key, {})["torch_fwd"] = float(f[6]) / 1e3
            else:
                rows.setdefault(key, {})["torch " + f[1]] = float(f[6])
    try:
        for line in open(f"{out}/autograd.log"):
            if line.startswith("RESULT"):
                f = line.split()
                r = rows.setdefault(tuple(int(x) for x in f[1:5]), {})
                r["ag_j"], r["ag_t"], r["ag_rel"] = float(f[5]), float(f[6]), f[10]
    except OSError:
        pass

    print("H200; ms (medians); forward TFLOP/s = 4 B H S^2 D / t")
    print("| (B,H,S,D) | v7 fwd | TF/s | auto fwd (kernel) | torch fp32 fwd | torch / v7 | torch / auto |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for key in sorted(rows, key=lambda k: (k[3], k[2])):
        r = rows[key]
        if "fwd_v7" not in r:
            continue
        b, h, s, d = key
        g = lambda c: r.get(c, NAN)  # noqa: E731
        fl = 4.0 * b * h * s * s * d
        ak = r.get("fwd_auto_kernel", "?").replace("cuda_", "").split("_flash")[0]
        print(
            f"| {key} | {g('fwd_v7'):.3f} | {fl / g('fwd_v7') / 1e9:.1f} | "
            f"{g('fwd_auto'):.3f} ({ak}) | {g('torch_fwd'):.3f} | {g('torch_fwd') / g('fwd_v7'):.2f}x | "
            f"{g('torch_fwd') / g('fwd_auto'):.2f}x |"
        )
    print()
    print(
        "| (B,H,S,D) | v3 bwd | TF/s | torch bwd | torch / v3 | torch det. / v3 | fwd+bwd autograd v7+v3 / torch | ratio | grads rel |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for key in sorted(rows, key=lambda k: (k[3], k[2])):
        r = rows[key]
        if "bwd_v3" not in r:
            continue
        b, h, s, d = key
        g = lambda c: r.get(c, NAN)  # noqa: E731
        fl = 10.0 * b * h * s * s * d
        print(
            f"| {key} | {g('bwd_v3'):.3f} | {fl / g('bwd_v3') / 1e9:.1f} | {g('torch backward-default'):.3f} | "
            f"{g('torch backward-default') / g('bwd_v3'):.2f}x | {g('torch backward-deterministic') / g('bwd_v3'):.2f}x | "
            f"{g('ag_j'):.3f} / {g('ag_t'):.3f} | {g('ag_t') / g('ag_j'):.2f}x | {r.get('ag_rel', '-')} |"
        )
    autos = [(k, r) for k, r in sorted(rows.items()) if "bwd_auto" in r]
    if autos:
        print()
        print("| (B,H,S,D) | AUTO bwd (kernel) | torch bwd | torch / AUTO |")
        print("| --- | --- | ---: | ---: |")
        for key, r in autos:
            t = r.get("torch backward-default", NAN)
            print(
                f"| {key} | {r['bwd_auto']:.3f} ({r.get('bwd_auto_kernel', '?')}) | {t:.3f} | {t / r['bwd_auto']:.2f}x |"
            )
    print()
    for j in checks:
        print(
            f"check v7 (1,4,1000,{j['dim']}): {j.get('kernel')} rel_l2 {j.get('rel_l2')} max_abs {j.get('max_abs')} "
            f"pass {j.get('pass')}"
        )


if __name__ == "__main__":
    main()
