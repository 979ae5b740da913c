"""The short table of lab/cpu/xeon_run.sh, from the files it wrote.

usage: python3 lab/cpu/xeon_summary.py OUT_DIR

Per interleaved run (il-MODE-H-S-THREADS.txt: one JSON line per call of each library and of
PyTorch): median wall-clock GFLOP/s of this tree's jattn (the last library), of the base (the
first, when two ran) and of PyTorch's CPU SDPA; jattn's share of the FMA peak (fma_peak.txt: one
thread's, times the thread count: the threads are pinned to distinct physical cores); and the
medians of the per-round ratios of the wall times PyTorch / jattn ("jattn x PyTorch": jattn's
speed-up) and base / jattn ("jattn x base"), the calls of one round having run side by side. Issue 31's targets beside: forward >= 85 % of the peak and >= 1.5x
PyTorch, backward >= 75 % and >= 1.3x. Then the loop lab's lines, the bit check and AMX."""

import glob
import json
import os
import re
import statistics as st
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/xeon-out"
    peak = None
    try:
        m = re.search(r"([\d.]+) GFLOP/s wall", open(os.path.join(out, "fma_peak.txt")).read())
        peak = float(m.group(1)) if m else None
    except OSError:
        pass
    print("## cpu backend on this Xeon (lab/cpu/xeon_run.sh)\n")
    try:
        print("".join("    " + l for l in open(os.path.join(out, "machine.txt"))))
    except OSError:
        pass
    print("FMA peak, 1 thread (wall): %s GFLOP/s\n" % (peak if peak else "?"))
    print(
        "| run | threads | jattn GFLOP/s | % FMA peak | base GFLOP/s | PyTorch GFLOP/s | jattn x PyTorch | jattn x base "
        "| target |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    runs = []
    for path in glob.glob(os.path.join(out, "il-*.txt")):
        rows = []
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
        if rows:
            runs.append(rows)
    runs.sort(key=lambda r: (r[0]["threads"], r[0]["mode"] != "fwd", r[0]["S"]))
    for rows in runs:
        r0 = rows[0]
        mode, H, S, D, t = r0["mode"], r0["H"], r0["S"], r0["D"], r0["threads"]
        flop = 4.0 * H * S * S * D * (2.5 if mode == "bwd" else 1.0)
        by = {}
        for r in rows:
            by.setdefault(r["who"], {})[r["round"]] = r["wall_ms"] / 1e3
        jn = sorted(k for k in by if k.startswith("jattn"))
        new, base = jn[-1], (jn[0] if len(jn) > 1 else None)

        def gf(who):
            return flop / st.median(by[who].values()) / 1e9 if who in by else None

        def ratio(a, b):  # median over rounds of time(a) / time(b)
            if a not in by or b not in by:
                return None
            common = sorted(set(by[a]) & set(by[b]))
            return st.median(by[a][k] / by[b][k] for k in common) if common else None

        g, gb, gt = gf(new), gf(base) if base else None, gf("torch")
        pct = 100.0 * g / (peak * t) if peak else None
        rt, rb = ratio("torch", new), ratio(base, new) if base else None
        target = "85 %, 1.5x" if mode == "fwd" else "75 %, 1.3x"
        fmt = lambda x, f: (f % x) if x is not None else "-"  # noqa: E731
        print(
            "| %s (1,%d,%d,%d) | %d | %s | %s | %s | %s | %s | %s | %s |"
            % (
                mode,
                H,
                S,
                D,
                t,
                fmt(g, "%.1f"),
                fmt(pct, "%.0f %%"),
                fmt(gb, "%.1f"),
                fmt(gt, "%.1f"),
                fmt(rt, "%.2fx"),
                fmt(rb, "%.2fx"),
                target,
            )
        )
    print()
    for name, title in (
        ("loop_lab.txt", "loop lab (GFLOP per CPU-s, % of the FMA peak of the same run)"),
        ("hashes.txt", "bits, base against this tree"),
        ("amx_split.txt", "AMX bf16-split products"),
    ):
        try:
            text = open(os.path.join(out, name)).read().rstrip("\n")
        except OSError:
            continue
        print("%s:\n" % title)
        print("\n".join("    " + l for l in text.split("\n")))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
