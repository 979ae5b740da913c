"""Where the attention backward loses accuracy on peaky rows (issue 30), emulated in float64.

Inputs as the issue draws them: q, k ~ N(0, 1) * amp (logits of standard deviation amp^2 at the
default scale 1/sqrt(D)), v, dout ~ N(0, 1), float32. The reference is float64 autograd of the
same float32 inputs (its own out and lse). Printed: rel_l2 of dq / dk / dv, summed over the heads.

Part "steps": a float64 backward with one rounding of its own arithmetic at a time (lse, S,
S - lse, P, dP, dS, the out that Dl = dO.O reads); the "float32-input floor" (out and lse rounded
to float32 once, the rest float64) is what any backward handed float32 out and lse can reach.

Part "backends": each backend's arithmetic step by step, forward lse -> backward:
  cpu      the compensated scores (blocks of 16 FMA products, Fast2Sum between blocks, the pair
           (sum, error) kept), the same bits in the forward and the backward; lse in float64 from
           the max's pair, rounded once.
  v6 + v2  cuda forward v6 (2xFP16 wgmma: corrections then hi*hi of d < D/2 into X, hi*hi of
           d >= D/2 into Y, S = X + Y; lse = (log2f(l) - bias) / log2 e in float32) feeding
           backward v2 (hi*hi per k16 slice into a fresh accumulator, Kahan-added: its S errs
           only inside each slice).
  v2 + v1  cuda forward v2 (mma.sync 3xTF32, one accumulator; lse = m + logf(l)) feeding
           backward v1 (k8 steps TwoSum-added).
The tensor core's fp32 accumulation is modelled as exact products summed and truncated toward
zero once per instruction (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021: RZ,
products aligned to the largest); "rn" rounds to nearest instead. A truncated accumulation errs
toward zero, so a forward's S of the dominant key, and its lse with it, is biased low by ~1.5
ulp, and a backward that recomputes S more exactly (v1, v2) turns that bias into a relative error
of every P of the row: the loss of issue 30. "+ lse fix" is the cure the forwards now apply:
the lse chain in float64 and the row's largest-score key's exact score (q . k in float64)
replacing the forward's, weighted by that key's weight.

usage: python3 lab/accuracy/emulate_backward.py [--part steps|backends|all] [--seq 512]
       [--heads 2] [--amps 1,4,8] [--dim 128] [--acc rz|rn]     (needs torch; a few minutes)
"""

import argparse
import math

import torch

F64, F32, F16 = torch.float64, torch.float32, torch.float16
L2E32 = float(torch.tensor(1 / math.log(2), dtype=F32))  # log2 e as the kernels hold it
INV_L2E32 = float(torch.tensor(1.0, dtype=F32) / torch.tensor(L2E32, dtype=F32))


def r32(x):
    return x.to(F32).to(F64)


def rz32(x):
    """x rounded to float32 toward zero."""
    y = x.to(F32)
    toward = torch.nextafter(y, torch.zeros_like(y))
    return torch.where(y.to(F64).abs() > x.abs(), toward, y).to(F64)


def tf32(x):
    """cvt.rna.tf32.f32: 10 explicit mantissa bits, round to nearest, ties away."""
    b = x.to(F32).view(torch.int32).to(torch.int64)
    return ((b + 0x1000) & ~0x1FFF).to(torch.int32).view(F32).to(F64)


def pow2_below(m):
    """2^e with m 2^e in [2^14, 2^15): the 2xFP16 split's scale."""
    return torch.exp2(14 - (torch.floor(torch.log2(m.clamp_min(1e-30))) + 1))


def split16(x):
    hi = x.to(F16).to(F64)
    return hi, (x - hi).to(F16).to(F64)


def tile_scales(k, rows=64):
    return torch.cat(
        [
            pow2_below(k[t : t + rows].abs().amax()).expand(min(rows, k.shape[0] - t), 1)
            for t in range(0, k.shape[0], rows)
        ]
    )


# ---- forward S and lse models ----------------------------------------------------------------


def s_v6(q, k, c, acc):
    """v6's S in natural units (q * c split per row, k per 64-key tile)."""
    qs = r32(q * c)
    eq = pow2_below(qs.abs().amax(1, keepdim=True))
    ek = tile_scales(k)
    qh, ql = split16(qs * eq)
    kh, kl = split16(k * ek)
    d = q.shape[1]
    x = torch.zeros(q.shape[0], k.shape[0], dtype=F64)
    for s in range(0, d, 16):
        x = acc(x + qh[:, s : s + 16] @ kl[:, s : s + 16].T)
        x = acc(x + ql[:, s : s + 16] @ kh[:, s : s + 16].T)
    for s in range(0, d // 2, 16):
        x = acc(x + qh[:, s : s + 16] @ kh[:, s : s + 16].T)
    y = torch.zeros_like(x)
    for s in range(d // 2, d, 16):
        y = acc(y + qh[:, s : s + 16] @ kh[:, s : s + 16].T)
    return r32(x + y) / eq / ek.T


def s_3xtf32(a, b, acc):
    """a b^T by mma.sync 3xTF32 into one accumulator, k8 steps (small products first)."""
    ab, bb = tf32(a), tf32(b)
    as_, bs = tf32(a - ab), tf32(b - bb)
    x = torch.zeros(a.shape[0], b.shape[0], dtype=F64)
    for s in range(0, a.shape[1], 8):
        sl = slice(s, s + 8)
        x = acc(x + as_[:, sl] @ bb[:, sl].T)
        x = acc(x + ab[:, sl] @ bs[:, sl].T)
        x = acc(x + ab[:, sl] @ bb[:, sl].T)
    return x


def s_cpu(q, k, c):
    """The cpu backend's compensated scores: blocks of 16 FMA products into the carried error,
    Fast2Sum into the running sum; the pair's exact sum, times c exactly (the backward keeps c S
    as a pair)."""
    st = torch.zeros(q.shape[0], k.shape[0], dtype=F64)
    cr = torch.zeros_like(st)
    for s in range(0, q.shape[1], 16):
        for d in range(s, min(s + 16, q.shape[1])):
            cr = r32(cr + q[:, d : d + 1] * k[:, d : d + 1].T)  # FMA: exact product, one rounding
        t = r32(st + cr)
        cr = r32(r32(st - t) + cr)
        st = t
    return (st + cr) * c


def lse_v6_chain(s, exact_chain):
    """v6's lse from its S: p = 2^(S log2e + bias), bias = 15 - m log2e (float32), l their sum;
    lse = (log2f(l) - bias) / log2 e in float32, or (exact_chain) in float64."""
    m = s.max(1, keepdim=True).values
    bias = r32(15 - m * L2E32)
    p = r32(torch.exp2(r32(s * L2E32 + bias)))
    l = r32(p.sum(1, keepdim=True))
    if exact_chain:
        return ((torch.log2(l) - bias) / L2E32).squeeze(1), p / l
    return r32(r32(r32(torch.log2(l)) - bias) * INV_L2E32).squeeze(1), p / l


def lse_fix(s_fwd, s_exact, lse, w):
    """The largest-score key's exact score replaces the forward's, weighted by its weight w."""
    j = s_fwd.argmax(1, keepdim=True)
    return lse + (w.gather(1, j) * (s_exact.gather(1, j) - s_fwd.gather(1, j))).squeeze(1)


def lse_plain(s):
    m = s.max(1, keepdim=True).values
    return r32(m.squeeze(1) + r32(torch.log(r32(torch.exp(s - m).sum(1)))))


# ---- backward models -------------------------------------------------------------------------


def backward(q, k, v, do, c, s, lse, out, round_arg=True, round_p=True, round_dp=False, round_ds=True):
    """dq, dk, dv from the backward's own S (s), the lse and out it is handed; float64 but for
    the roundings asked for (the exp argument, P, dP, dS in float32)."""
    arg = s - lse[:, None]
    p = torch.exp(r32(arg) if round_arg else arg)
    p = r32(p) if round_p else p
    dp = do @ v.T
    dp = r32(dp) if round_dp else dp
    ds = p * (dp - (do * out).sum(1, keepdim=True))
    ds = r32(ds) if round_ds else ds
    return c * ds @ k, c * ds.T @ q, p.T @ do


def s_v2_backward(q, k, c, acc):
    """Backward v2's S: corrections in one chain, hi*hi per k16 slice into a fresh accumulator,
    the slices added exactly (Kahan)."""
    qs = r32(q * c)
    eq = tile_scales(qs)
    ek = tile_scales(k)
    qh, ql = split16(qs * eq)
    kh, kl = split16(k * ek)
    x = torch.zeros(q.shape[0], k.shape[0], dtype=F64)
    for s in range(0, q.shape[1], 16):
        x = acc(x + qh[:, s : s + 16] @ kl[:, s : s + 16].T)
        x = acc(x + ql[:, s : s + 16] @ kh[:, s : s + 16].T)
    for s in range(0, q.shape[1], 16):
        x = x + acc(qh[:, s : s + 16] @ kh[:, s : s + 16].T)
    return x / eq / ek.T


def s_v1_backward(q, k, c, acc):
    """Backward v1's S: six TF32 products per k8 step into a fresh accumulator, TwoSum-added."""
    qs = r32(q * c)
    x = torch.zeros(q.shape[0], k.shape[0], dtype=F64)
    for s in range(0, q.shape[1], 8):
        x = x + s_3xtf32(qs[:, s : s + 8], k[:, s : s + 8], acc)
    return x


# ---- the parts -------------------------------------------------------------------------------


def draw(seq, d, amp, gen):
    return tuple(r32(torch.randn(seq, d, generator=gen, dtype=F64) * a) for a in (amp, amp, 1, 1))


def exact(q, k, v, do, c):
    s = c * q @ k.T
    p = torch.softmax(s, 1)
    ds = p * (do @ v.T - (do * (p @ v)).sum(1, keepdim=True))
    return s, torch.logsumexp(s, 1), p @ v, (c * ds @ k, c * ds.T @ q, p.T @ do)


def variants_steps(q, k, v, do, c, s, lse, out):
    o32, l32 = r32(out), r32(lse)
    plain = dict(round_arg=False, round_p=False, round_ds=False)
    return {
        "lse float32 once": backward(q, k, v, do, c, s, l32, out, **plain),
        "out float32 once (Dl)": backward(q, k, v, do, c, s, lse, o32, **plain),
        "S float32 once": backward(q, k, v, do, c, r32(s), lse, out, **plain),
        "S - lse float32 once": backward(q, k, v, do, c, s, lse, out, round_arg=True, round_p=False, round_ds=False),
        "P float32": backward(q, k, v, do, c, s, lse, out, round_arg=False, round_p=True, round_ds=False),
        "dP float32": backward(
            q, k, v, do, c, s, lse, out, round_arg=False, round_p=False, round_dp=True, round_ds=False
        ),
        "dS float32": backward(q, k, v, do, c, s, lse, out, round_arg=False, round_p=False, round_ds=True),
        "float32-input floor (out, lse once)": backward(q, k, v, do, c, s, l32, o32, **plain),
        "S and lse float32 once (consistent)": backward(q, k, v, do, c, r32(s), l32, o32, **plain),
    }


def variants_backends(q, k, v, do, c, s, lse, out, acc):
    o32 = r32(out)
    res = {"float32-input floor": backward(q, k, v, do, c, s, r32(lse), o32, False, False, False, False)}
    sc = s_cpu(q, k, c)
    lse_c = r32(sc.max(1).values + torch.log(torch.exp(sc - sc.max(1, keepdim=True).values).sum(1)))
    res["cpu chain (forward lse -> backward)"] = backward(q, k, v, do, c, sc, lse_c, o32)
    res["cpu backward, lse rounded once"] = backward(q, k, v, do, c, sc, r32(lse), o32)
    s6 = s_v6(q, k, c, acc)
    s2 = s_v2_backward(q, k, c, acc)
    l6, w6 = lse_v6_chain(s6, False)
    res["v6 -> v2 (as 2026-12-02)"] = backward(q, k, v, do, c, s2, l6, o32)
    l6e, w6e = lse_v6_chain(s6, True)
    res["v6 -> v2, lse chain in float64"] = backward(q, k, v, do, c, s2, r32(l6e), o32)
    res["v6 -> v2, + lse fix"] = backward(q, k, v, do, c, s2, r32(lse_fix(s6, s, l6e, w6e)), o32)
    res["v2 backward, lse rounded once"] = backward(q, k, v, do, c, s2, r32(lse), o32)
    sm = r32(s_3xtf32(r32(q * c), k, acc))
    lm = lse_plain(sm)
    s1 = s_v1_backward(q, k, c, acc)
    res["v2 mma -> v1 (as 2026-12-02)"] = backward(q, k, v, do, c, s1, lm, o32)
    wm = torch.softmax(sm, 1)
    lme = sm.max(1).values + torch.log(torch.exp(sm - sm.max(1, keepdim=True).values).sum(1))
    res["v2 mma -> v1, + lse fix"] = backward(q, k, v, do, c, s1, r32(lse_fix(sm, s, lme, wm)), o32)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="all", choices=("steps", "backends", "all"))
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--amps", default="1,4,8")
    ap.add_argument("--acc", default="rz", choices=("rz", "rn"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    acc = rz32 if a.acc == "rz" else r32
    parts = ("steps", "backends") if a.part == "all" else (a.part,)
    for amp in (float(x) for x in a.amps.split(",")):
        gen = torch.Generator().manual_seed(a.seed)
        sums = {}
        for _ in range(a.heads):
            q, k, v, do = draw(a.seq, a.dim, amp, gen)
            c = float(torch.tensor(1 / math.sqrt(a.dim), dtype=F32))
            s, lse, out, ref = exact(q, k, v, do, c)
            res = {}
            if "steps" in parts:
                res.update(variants_steps(q, k, v, do, c, s, lse, out))
            if "backends" in parts:
                res.update(variants_backends(q, k, v, do, c, s, lse, out, acc))
            for name, got in res.items():
                acc_n = sums.setdefault(name, [[0.0, 0.0] for _ in range(3)])
                for t in range(3):
                    acc_n[t][0] += torch.linalg.norm(got[t] - ref[t]).item() ** 2
                    acc_n[t][1] += torch.linalg.norm(ref[t]).item() ** 2
        print(
            f"(seq {a.seq}, D {a.dim}, {a.heads} heads) q, k x {amp:g} (logit std {amp * amp:g}), tensor-core accumulation {a.acc}: dq / dk / dv rel_l2"
        )
        for name, v in sums.items():
            print(f"  {name:38s} " + " / ".join(f"{math.sqrt(x / y):.2e}" for x, y in v))


if __name__ == "__main__":
    main()
