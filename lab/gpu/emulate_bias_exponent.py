"""The key bias in the cuda forward's exponent (src/cuda/NOTES.md, "Masks"; v6 and v7, kMask 2), emulated in
numpy float32 against float64: the kernels take the row maximum over fl(s kq + b) and weigh each key by
2^(s c + fl(b log2 e + fl(15 - m log2 e))), so the bias joins the row's constant before the score is added and
the score's part is never rounded at the bias' magnitude; the naive form rounds the biased logit fl(s kq + b)
first (what missed the gate on the vk backend: a text encoder's -10000). 200 rows of 512 keys per case, D 64,
max_abs / max(1, max|ref|) against the f32 gate's 1e-5 (ex2.approx's own error left out).

usage: python3 lab/gpu/emulate_bias_exponent.py
"""

import numpy as np

f32 = np.float32
L2E = f32(1.4426950408889634)


def fma32(a, b, c):  # float32 fma: exact product and sum in float64 (a*b exact), one rounding
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(f32)


def kernel(s, kq, b, v, naive=False):
    # s: float32 raw scores (units of kq), kq power of two; b bias; v values [N,D]
    cexp = f32(kq * L2E)
    if naive:
        x = (s.astype(np.float64) * kq + b).astype(f32)  # the biased logit rounded to float32
        m = x.max()
        C = f32(15 - np.float64(m) * np.float64(L2E))
        e = fma32(x, L2E, C)
    else:
        x = fma32(s, kq, b)
        m = x.max()  # max over fl(s kq + b)
        C = f32(f32(15) - f32(np.float64(m) * np.float64(L2E)))  # 15 - m log2e, rounded
        e = fma32(s, cexp, fma32(b, L2E, C))
    p = np.exp2(e.astype(np.float64)).astype(f32)
    return (p.astype(np.float64) @ v) / p.astype(np.float64).sum()


def exact(s, kq, b, v):
    x = s.astype(np.float64) * kq + b.astype(np.float64)
    x -= x.max()
    p = np.exp(x)
    return (p @ v) / p.sum()


rng = np.random.default_rng(1)
for name, gen in [
    ("bias -10000, logits ~N(0,3)", lambda n: (rng.normal(0, 3, n), np.full(n, -10000.0))),
    ("bias 4N(0,1), logits ~N(0,3)", lambda n: (rng.normal(0, 3, n), 4 * rng.normal(size=n))),
    (
        "bias 4N(0,1) or -10000, logits N(0,30)",
        lambda n: (rng.normal(0, 30, n), np.where(rng.random(n) < 0.5, -10000.0, 4 * rng.normal(size=n))),
    ),
    ("bias -10000 + N(0,1), logits N(0,1)", lambda n: (rng.normal(0, 1, n), -10000 + rng.normal(size=n))),
]:
    worst = [0, 0]
    for _ in range(200):
        n = 512
        D = 64
        logit, b = gen(n)
        kq = f32(2.0**-20)
        s = (logit / np.float64(kq)).astype(f32)
        b = b.astype(f32)
        v = rng.normal(size=(n, D))
        ref = exact(s, kq, b, v)
        for k, naive in enumerate((False, True)):
            out = kernel(s, kq, b, v, naive)
            err = np.abs(out - ref).max() / max(1, np.abs(ref).max())
            worst[k] = max(worst[k], err)
    print(
        "%-42s max_abs/max(1,|ref|): kernel %.2e   naive fl32(logit+bias) %.2e   (gate 1e-5)"
        % (name, worst[0], worst[1])
    )
