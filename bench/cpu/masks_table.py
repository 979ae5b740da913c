"""The tables of a bench/cpu/masks_run.sh directory: jattn (bench_masks) and PyTorch (torch_cpu_masks.py)
per case, variant, pass and thread count, as markdown.

usage: python3 masks_table.py DIR
Each row: the median wall and CPU milliseconds, the GFLOP/s of the useful FLOPs per CPU-second of
the process (all its threads' CPU time together), and the time ratio to
the case's first variant by CPU time (wall beside); PyTorch's CPU-time rate on the same variant and
jattn / PyTorch (CPU time). On a machine shared with other work the wall time says mostly how much
CPU the scheduler gave the call; the CPU-time figures are the comparable ones."""

import glob
import json
import os
import sys


def load(pattern):
    rows = {}
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "case" not in d:
                continue
            rows[(d["case"], d["variant"], d["pass"], d["threads"], d["Sq"] if d["B"] == 1 else d["Sq"] * d["B"])] = d
    return rows


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    jattn = load(os.path.join(d, "bench_masks_*.jsonl"))
    torch = load(os.path.join(d, "torch_*.jsonl"))
    print(
        "| case | variant | pass | threads | tokens | jattn ms (CPU) | jattn GFLOP/s per CPU-s | ratio CPU (wall) "
        "| PyTorch GFLOP/s per CPU-s | PyTorch ratio CPU | jattn / PyTorch |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, j in jattn.items():
        case, variant, pas, t, tokens = key
        rate = j["gflop"] / (j["cpu_ms"] * 1e-3)
        tp = torch.get(key)
        trate = tp["gflop"] / (tp["cpu_ms"] * 1e-3) if tp else None
        print(
            "| %s | %s | %s | %d | %d | %.1f (%.1f) | %.1f | %.3f (%.3f) | %s | %s | %s |"
            % (
                case,
                variant,
                pas,
                t,
                tokens,
                j["ms"],
                j["cpu_ms"],
                rate,
                j["cpu_ratio"],
                j["ratio"],
                "%.1f" % trate if trate else "-",
                "%.3f" % tp["cpu_ratio"] if tp else "-",
                "%.2fx" % (rate / trate) if trate else "-",
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
