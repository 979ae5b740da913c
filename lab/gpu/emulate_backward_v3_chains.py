"""The backward v3's S and dP schemes compared on peaky and `large` inputs with the tensor core's
truncating accumulation modelled (emulate_backward_v3.py --tc-model): hi*hi in chains of CHAIN k16
slices added in fp32 (JATTN_BWD_V3_CHAIN, default 2) against per-slice Kahan (JATTN_BWD_V3_KAHAN=1).
Prints rel_l2 of dq, dk, dv against float64 per case and seed for both, and the worst per scheme.
2026-12-04, two seeds: D = 128 peaky worst 5.9e-6 with chains of 4, 3.8e-6 with 2 (seed 0; 1 slice
5.4e-6), 4.2e-6 Kahan; D = 96 large 2.3e-6 (4) against 1.3e-6 (Kahan).

usage: python3 lab/gpu/emulate_backward_v3_chains.py [seeds] [chain]
"""

import sys

import emulate_backward_v3 as emu
import numpy as np


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    emu.CHAIN = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    emu.TC_TRUNCATE = True
    cases = [
        (1, 1, 24, 40, 128, 2, 2, False, False, "peaky"),
        (1, 1, 24, 40, 96, 2, 2, False, False, "large"),
        (1, 1, 16, 24, 256, 2, 2, False, False, "peaky"),
    ]
    worst = {False: 0.0, True: 0.0}
    orig = emu.exact_product
    for c in cases:
        for seed in range(seeds):
            line = []
            for kahan in (False, True):
                emu.exact_product = lambda *a, _k=kahan, **kw: orig(*a[:9], kahan=_k)
                res = emu.case(np.random.default_rng(100 + seed), *c)
                w = max(r for _, r in res)
                worst[kahan] = max(worst[kahan], w)
                line.append(("kahan " if kahan else "chains ") + " ".join(f"{n} {r:.2e}" for n, r in res))
            print(f"D={c[4]} {c[9]} seed {seed}: " + " | ".join(line), flush=True)
    emu.exact_product = orig
    print(f"worst rel_l2: chains {worst[False]:.2e}, kahan {worst[True]:.2e} (gate 5e-6)")


if __name__ == "__main__":
    main()
