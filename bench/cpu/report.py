"""Table (markdown) and plot (PNG) of a bench/cpu/run.sh measurement.

usage: python3 report.py RESULTS.jsonl OUT.md OUT.png "COMMAND" "MACHINE"
The table: for each seq and thread count, GFLOP/s and % of the FMA peak measured in the same
run for jattn, the BLAS baseline and PyTorch CPU SDPA (where present), and jattn's ratio to
each. The plot: GFLOP/s against seq, one line per method and thread count; peaks dashed."""

import json
import sys


def main():
    src, out_md, out_png, command, machine = sys.argv[1:6]
    rows = [json.loads(l) for l in open(src) if l.strip().startswith("{")]
    peak = {r["threads"]: r["gflops"] for r in rows if r["method"] == "fma_peak" and "gflops" in r}
    peak_isa = {r["threads"]: r.get("isa", "") for r in rows if r["method"] == "fma_peak" and "gflops" in r}
    meas = {}
    skipped = []
    for r in rows:
        if "skipped" in r:
            skipped.append("%s: %s" % (r["method"], r["skipped"]))
            continue
        if r["method"] == "fma_peak":
            continue
        meas[(r["method"], r["seq"], r["threads"])] = r
    seqs = sorted({k[1] for k in meas})
    threads = sorted({k[2] for k in meas})
    kernel = next((r.get("kernel") for r in rows if r["method"] == "jattn_cpu" and "kernel" in r), "?")
    H = next((r.get("heads") for r in rows if "heads" in r), "?")
    D = next((r.get("dim") for r in rows if "dim" in r), "?")

    def cell(m, s, t):
        r = meas.get((m, s, t))
        if not r:
            return "-", "-"
        pk = peak.get(t)
        return "%.1f" % r["gflops"], ("%.0f%%" % (100 * r["gflops"] / pk)) if pk else "-"

    def ratio(a, b, s, t):
        ra, rb = meas.get((a, s, t)), meas.get((b, s, t))
        return "%.2fx" % (ra["gflops"] / rb["gflops"]) if ra and rb else "-"

    lines = [
        "# CPU attention, %s" % machine,
        "",
        "jattn `--backend cpu` (kernel `%s`) beside the BLAS attention baseline (OpenBLAS sgemm "
        "Q K^T, softmax, sgemm P V per head) and PyTorch CPU SDPA where installed; B=1, H=%s, "
        "D=%s, float32, q/k/v head-major, out token-major, seq_q = seq_kv = seq. GFLOP/s = "
        "4 H S^2 D / median time (jattn's fastest repeat in parentheses); %% = of the FMA peak "
        "measured in the same run." % (kernel, H, D),
        "",
        "FMA peak: " + ", ".join("%d thread(s) %.1f GFLOP/s (%s)" % (t, peak[t], peak_isa[t]) for t in sorted(peak)),
        "",
        "| seq | threads | jattn GFLOP/s | jattn % peak | BLAS GFLOP/s | BLAS % peak | jattn / BLAS "
        "| torch GFLOP/s | torch % peak | jattn / torch |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in seqs:
        for t in threads:
            j, jp = cell("jattn_cpu", s, t)
            r = meas.get(("jattn_cpu", s, t))
            if r and "best_gflops" in r:
                j += " (%.1f)" % r["best_gflops"]
            b, bp = cell("blas_attention", s, t)
            o, op = cell("torch_sdpa_cpu", s, t)
            lines.append(
                "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |"
                % (
                    s,
                    t,
                    j,
                    jp,
                    b,
                    bp,
                    ratio("jattn_cpu", "blas_attention", s, t),
                    o,
                    op,
                    ratio("jattn_cpu", "torch_sdpa_cpu", s, t),
                )
            )
    if len(threads) > 1:
        lines += ["", "Scaling from 1 to %d threads (GFLOP/s ratio):" % threads[-1]]
        for m in ("jattn_cpu", "blas_attention", "torch_sdpa_cpu"):
            sc = []
            for s in seqs:
                a, b = meas.get((m, s, threads[0])), meas.get((m, s, threads[-1]))
                if a and b:
                    sc.append("seq %d: %.2fx" % (s, b["gflops"] / a["gflops"]))
            if sc:
                lines.append("- %s: %s" % (m, ", ".join(sc)))
    if skipped:
        lines += ["", "Not measured here:"] + ["- " + x for x in sorted(set(skipped))]
    lines += [
        "",
        "Command (repository root):",
        "",
        "    " + command,
        "",
        "Raw measurements: `%s`; plot: `%s`." % (src.split("/")[-1], out_png.split("/")[-1]),
        "",
    ]
    open(out_md, "w").write("\n".join(lines))
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print("no plot: matplotlib missing (%s)" % e)
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = {"jattn_cpu": "jattn cpu", "blas_attention": "BLAS attention", "torch_sdpa_cpu": "PyTorch CPU SDPA"}
    for m in ("jattn_cpu", "blas_attention", "torch_sdpa_cpu"):
        for t in threads:
            pts = [(s, meas[(m, s, t)]["gflops"]) for s in seqs if (m, s, t) in meas]
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker="o",
                    label="%s, %d thread%s" % (names[m], t, "s" if t > 1 else ""),
                )
    for t in threads:
        if t in peak:
            ax.axhline(peak[t], linestyle="--", linewidth=0.8, color="gray")
            ax.text(seqs[0], peak[t], " FMA peak, %d thread%s" % (t, "s" if t > 1 else ""), va="bottom", fontsize=8)
    ax.set_xlabel("seq (B=1, H=%s, D=%s)" % (H, D))
    ax.set_ylabel("GFLOP/s")
    ax.set_title("float32 attention on the CPU, %s" % machine)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    print("plot: %s" % out_png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
