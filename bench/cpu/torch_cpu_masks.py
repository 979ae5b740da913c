"""PyTorch CPU SDPA on the cases of bench_masks.c (the peer of the cpu backend's masks).

usage: python3 torch_cpu_masks.py THREADS REPS H S D [fwd|bwd|both [CASE...]]
prints one JSON line per variant in bench_masks' format (method torch_sdpa_cpu; ms the median
wall time of REPS after a warm-up, cpu_ms the median process CPU time, ratio and cpu_ratio
against the case's first variant), or {"method", "skipped"} without torch:
  causal    unmasked against is_causal=True (top-left) at Sq = Skv
  gqa       kv heads H (MHA) against H / 4 and 1 with enable_gqa=True
  segments  a padded batch of 4 x L = S / 4 against the same tokens in one row with a
            block-diagonal boolean attn_mask (SDPA's way to pack sequences on the CPU)
  bias      unmasked against an additive float attn_mask [1, 1, 1, S] (per key), and one with
            10 % -inf
q, k, v float32 [B, H, S, D] head-major, standard normal; the backward is autograd's with a
standard-normal gradient of the output (gflop: 2.5x the forward's useful FLOPs)."""

import json
import statistics
import sys
import time


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    threads, reps, H, S, D = (int(x) for x in sys.argv[1:6])
    passes = sys.argv[6] if len(sys.argv) > 6 else "fwd"
    only = set(sys.argv[7:])
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # no torch here: say so, do not fail the run
        print(json.dumps({"method": "torch_sdpa_cpu", "skipped": "no torch: %s" % e}))
        return 0
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    L = S // 4
    seg = torch.zeros(S, S, dtype=torch.bool)
    for s in range(4):
        seg[s * L : (s + 1) * L, s * L : (s + 1) * L] = True
    bias = randn(1, 1, 1, S)
    bias_inf = bias.clone()
    bias_inf[torch.rand(1, 1, 1, S, generator=g) < 0.1] = float("-inf")
    full, causal_pairs = float(H) * S * S, float(H) * S * (S + 1) / 2
    cases = {
        "causal": [
            ("unmasked", (1, H, H, S), {}, full),
            ("causal", (1, H, H, S), {"is_causal": True}, causal_pairs),
        ],
        "gqa": [
            ("mha", (1, H, H, S), {}, full),
            ("gqa4", (1, H, H // 4, S), {"enable_gqa": True}, full),
            ("mqa", (1, H, 1, S), {"enable_gqa": True}, full),
        ],
        "segments": [
            ("padded-batch", (4, H, H, L), {}, 4.0 * H * L * L),
            ("segments", (1, H, H, S), {"attn_mask": seg}, 4.0 * H * L * L),
        ],
        "bias": [
            ("unmasked", (1, H, H, S), {}, full),
            ("bias", (1, H, H, S), {"attn_mask": bias}, full),
            ("bias-10%-inf", (1, H, H, S), {"attn_mask": bias_inf}, H * S * float((bias_inf != float("-inf")).sum())),
        ],
    }
    for bwd in (False, True):
        if (bwd and passes == "fwd") or (not bwd and passes == "bwd"):
            continue
        for name, variants in cases.items():
            if only and name not in only:
                continue
            inputs = []
            for _, (B, Hq, Hkv, Sx), _, _ in variants:
                q, k, v = randn(B, Hq, Sx, D), randn(B, Hkv, Sx, D), randn(B, Hkv, Sx, D)
                for t in (q, k, v):
                    t.requires_grad_(bwd)
                inputs.append((q, k, v, randn(B, Hq, Sx, D)))
            wall = [[] for _ in variants]
            cpu = [[] for _ in variants]
            for rep in range(-1, reps):
                for i, (_, _, kw, _) in enumerate(variants):
                    q, k, v, dout = inputs[i]
                    w0, c0 = time.perf_counter(), time.process_time()
                    if bwd:
                        out = F.scaled_dot_product_attention(q, k, v, **kw)
                        out.backward(dout)
                        q.grad = k.grad = v.grad = None
                    else:
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, **kw)
                    c1, w1 = time.process_time(), time.perf_counter()
                    if rep >= 0:
                        wall[i].append(w1 - w0)
                        cpu[i].append(c1 - c0)
            base_w, base_c = statistics.median(wall[0]), statistics.median(cpu[0])
            for i, (vname, (B, Hq, Hkv, Sx), _, pairs) in enumerate(variants):
                w, c = statistics.median(wall[i]), statistics.median(cpu[i])
                gflop = 4.0 * D * pairs * (2.5 if bwd else 1.0) * 1e-9
                print(
                    json.dumps(
                        {
                            "method": "torch_sdpa_cpu",
                            "case": name,
                            "variant": vname,
                            "pass": "bwd" if bwd else "fwd",
                            "B": B,
                            "H": Hq,
                            "Hkv": Hkv,
                            "Sq": Sx,
                            "Skv": Sx,
                            "D": D,
                            "threads": threads,
                            "reps": reps,
                            "ms": round(w * 1e3, 3),
                            "cpu_ms": round(c * 1e3, 3),
                            "gflop": round(gflop, 4),
                            "gflops": round(gflop / w, 2),
                            "ratio": round(w / base_w, 4),
                            "cpu_ratio": round(c / base_c, 4),
                            "torch": torch.__version__,
                        }
                    ),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
