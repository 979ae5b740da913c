"""Where the cuda backward's D = 1 `large` dq error comes from (issue 22), emulated in float64.

The failing gate case of test_backward (Sq 100, Skv 77, D = 1, q, k, v uniform in +-1e3, the
scale that gives logits of std 8) on fresh seeds: dq's rel_l2 against the float64 formula when one
step of the kernel's arithmetic is done in float32 and the rest exactly. Prints median and max
over the seeds per variant.

usage: python3 lab/gpu/emulate_dq_logit.py [seeds]
"""

import sys

import numpy as np


def tf32(x):
    """cvt.rna.tf32.f32: 10 explicit mantissa bits, round to nearest, ties away."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x1000) & 0xFFFFE000).astype(np.uint32)).view(np.float32)


def case(seed, sq=100, skv=77):
    r = np.random.default_rng(seed)
    q, k, v = (r.uniform(-1e3, 1e3, (n, 1)).astype(np.float32) for n in (sq, skv, skv))
    do = r.standard_normal((sq, 1)).astype(np.float32)
    scale = np.float32(8.0 / (1e6 / 3.0))
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    s = float(scale) * f64(q) @ f64(k).T
    lse = np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1)
    p = np.exp(s - lse[:, None])
    o = (p @ f64(v)).astype(np.float32)
    dpd = f64(do) @ f64(v).T - (f64(do) * f64(o)).sum(1)[:, None]  # dP - D, exact
    ref = float(scale) * (p * dpd) @ f64(k)
    lse32 = lse.astype(np.float32)
    s32 = f64((f64(q) @ f64(k).T * float(scale)).astype(np.float32))  # the logit rounded to float32
    arg = f64((s - f64(lse32)[:, None]).astype(np.float32))  # S exact, S - lse rounded once
    p_arg = f64(np.exp(arg).astype(np.float32))
    ds = (p_arg * dpd).astype(np.float32)
    hi_s, hi_k = tf32(ds), tf32(k)
    lo_s, lo_k = tf32(ds - hi_s), tf32(k - hi_k)
    x3 = f64(hi_s) @ f64(hi_k) + f64(hi_s) @ f64(lo_k) + f64(lo_s) @ f64(hi_k)
    variants = {
        "logit float32 (expf((big + cor) - lse))": float(scale) * (np.exp(s32 - f64(lse32)[:, None]) * dpd) @ f64(k),
        "lse float32 only": float(scale) * (np.exp(s - f64(lse32)[:, None]) * dpd) @ f64(k),
        "S - lse rounded once, P float32 (the fix)": float(scale) * (p_arg * dpd) @ f64(k),
        "the fix + dS float32 + 3xTF32 dS K": float(scale) * x3,
    }
    return {name: np.linalg.norm(x - ref) / np.linalg.norm(ref) for name, x in variants.items()}


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rows = [case(s) for s in range(seeds)]
    for name in rows[0]:
        vals = sorted(r[name] for r in rows)
        print(f"{name:45s} median {vals[len(vals) // 2]:.2e}  max {vals[-1]:.2e}")


if __name__ == "__main__":
    main()
