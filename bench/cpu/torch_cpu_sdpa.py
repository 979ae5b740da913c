"""PyTorch CPU SDPA: the CPU peer where PyTorch is installed (the GPU machine's Xeon).

usage: python3 torch_cpu_sdpa.py H D REPS THREADS[,..] SEQ[,..]
prints one JSON line per (threads, seq) in the format of bench_cpu: method torch_sdpa_cpu,
ms (median of REPS after a warm-up), gflops = 4*H*S*S*D / time; or {"method", "skipped"}.
q, k, v float32 [1, H, S, D] (head-major, as jattn's FLUX call); the output stays head-major
(jattn writes token-major [S, H*D] directly, so this is the peer's best case).
BENCH_LOGIT_STD=s scales q and k by sqrt(s), as bench_cpu.c does."""

import json
import os
import statistics
import sys
import time

QK_AMP = float(os.environ.get("BENCH_LOGIT_STD", "1")) ** 0.5


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    H, D, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    threads = [int(t) for t in sys.argv[4].split(",")]
    seqs = [int(s) for s in sys.argv[5].split(",")]
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # no torch here: say so, do not fail the run
        print(json.dumps({"method": "torch_sdpa_cpu", "skipped": "no torch: %s" % e}))
        return 0
    for S in seqs:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, H, S, D, generator=g, dtype=torch.float32) for _ in range(3))
        q, k = q * QK_AMP, k * QK_AMP  # BENCH_LOGIT_STD, as bench_cpu.c
        flops = 4.0 * H * S * S * D
        for t in threads:
            torch.set_num_threads(t)
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v)  # warm-up
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    F.scaled_dot_product_attention(q, k, v)
                    ts.append(time.perf_counter() - t0)
            med = statistics.median(ts)
            print(
                json.dumps(
                    {
                        "method": "torch_sdpa_cpu",
                        "heads": H,
                        "seq": S,
                        "dim": D,
                        "threads": t,
                        "ms": round(med * 1e3, 3),
                        "gflops": round(flops / med / 1e9, 2),
                        "torch": torch.__version__,
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
