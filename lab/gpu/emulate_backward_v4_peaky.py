"""Which error of the backward v4's arithmetic dominates dq and dk on test_backward's floor case B=2 H=1 Sq=160
Skv=200 D=128 dist=peaky64 (normal q, k times 8: logits of std 64), and the ratio to the test's float32 floor
(tests/test_backward.c input_floor: the larger of the float64 gradients from the float32 out and lse with the
logits rounded to float32 once and exact; the gate is 3x, kit/metrics.c jattn_metrics_pass_backward_floor).

The kernel (src/cuda/backward_v4_sm90_fa3_f16x2.cu) at matrix level, float32 and fp16 as on the GPU, over the whole
head at once (each output element's k16 chain does not depend on the tiling; the tile scales are per-row factors):
the records (q * scale rounded to float32, one power of two per 64-row tile, hi/lo fp16); S^T as X (corrections,
hi*hi slices 0-1) plus fresh pairs of slices added in fp32; P = 2^y (1 + yl ln 2) from t = S - lse rounded once;
dP^T one chain; dS = P ((dP - Dl_hi) - Dl_lo); the P >= THRESH elements (3b) from float64 dots of the caller's
inputs; each query's power of two over its item's 128 keys with the K-tile factor and the split; dK per key row
split (m-block of 64 queries: lo*hi, hi*lo, hi*hi), the stream-K parts (one unit a CTA at this shape) summed in
order; dQ partials (24-step chain over the item's 128 keys) times 2^-s u_ref, the items' copies summed in order,
times the scale. The wgmma k16 step: the exact products and the accumulator aligned to the largest exponent,
truncated to 24 bits, summed, truncated to float32 (Fasi et al.; bench/gpu/emulate_backward_v3.py --tc-model),
or with --tc-rn exact-then-rounded. ex2.approx: 2^y (1 + U(-2, 2) 2^-24).

Each stage can be made exact (float64) to see its share: --exact S,P,DP,DS,DK,DQ (comma list; S: the score in
float64 from the caller's q, k; P: exp(S - lse) in float64 of the S used; DP: dO.v in float64; DS: P (dP - Dl) in
float64 of the P, dP used; DK / DQ: the last products in float64 of the dS used); --s-split: S as the exact float64
sum of the records' three split products (the split error alone, no accumulation error); --s-f32: S exact, rounded
to float32 once (as the floor's rounded logits). --thresh X [--lse-min L]: 3b also takes the elements with
P >= X in rows whose |lse| >= L (default L 0: every row); P >= 1/2 always. --fix s-chain: S^T in one chain.

usage: /tmp/fresh3/.venv/bin/python lab/gpu/emulate_backward_v4_peaky.py [--seeds N] [--seed0 S] [--tc-rn]
       [--exact LIST] [--s-split] [--s-f32] [--thresh X] [--lse-min L] [--fix s-chain] [--dv] [--verbose]
prints per variant the distribution over seeds of dq, dk (and dv with --dv) rel_l2 / floor: median, 90%, max,
and the count over 3.
"""

import sys

import numpy as np
from emulate_backward_v4 import rz_f32  # rounding toward zero to float32

np.seterr(invalid="ignore")

F16, F32, F64 = np.float16, np.float32, np.float64
TILE, TARGET, D = 64, 14, 128
L2E = F32(1.4426950408889634)
L2E_LO = F32(1.4426950408889634074 - float(L2E))
LN2 = F32(0.6931471805599453)
OPT = {
    "tc_rn": False,
    "exact": set(),
    "s_split": False,
    "s_f32": False,
    "thresh": 0.5,
    "lse_min": 0.0,
    "fix": "",
    "dv": False,
}


def tc_step(acc, a, b):
    """acc (M, N) float32 (None: zero) + a (M, 16) @ b (16, N): one wgmma k16 step."""
    a64, b64 = a.astype(F64), b.astype(F64)
    if OPT["tc_rn"]:
        s = a64 @ b64
        return (s if acc is None else acc.astype(F64) + s).astype(F32)
    terms = a64[:, None, :] * b64.T[None, :, :]  # (M, N, 16)
    if acc is not None:
        terms = np.concatenate([terms, acc.astype(F64)[:, :, None]], axis=2)
    mx = np.max(np.abs(terms), axis=2, keepdims=True)
    _, e = np.frexp(mx)
    quantum = np.ldexp(1.0, e - 24)
    quantum[mx == 0] = 1.0
    return rz_f32(np.sum(np.trunc(terms / quantum) * quantum, axis=2))


def chain(pairs, acc=None):
    for a, b in pairs:
        acc = tc_step(acc, a, b)
    return acc


def sl(m, s, axis=1):
    return m[:, 16 * s : 16 * s + 16] if axis == 1 else m[16 * s : 16 * s + 16]


def split(x):
    x = np.asarray(x, F32)
    hi = x.astype(F16).astype(F32)
    return hi, (x - hi).astype(F16).astype(F32)


def expo(amax, target=TARGET):
    """f16x2_exponent, vectorized: target - floor(log2 amax), clamped; 0 for amax == 0."""
    amax = np.asarray(amax, F64)
    e = np.zeros(amax.shape, np.int64)
    ok = amax > 0
    e[ok] = target - (np.frexp(amax[ok])[1] - 1)
    return np.clip(e, -126, 126)


def records(x, rows):
    """x (S, D) float32 -> hi, lo (rows, D) and the per-row unscale u (the tile's 2^-e)."""
    xp = np.zeros((rows, x.shape[1]), F32)
    xp[: x.shape[0]] = x
    e = expo(np.abs(xp).reshape(rows // TILE, -1).max(axis=1))
    up = np.repeat(np.ldexp(1.0, e), TILE).astype(F32)
    hi, lo = split(xp * up[:, None])
    return hi, lo, (1.0 / up).astype(F32)


def ex2_approx(a, rng):
    y = np.exp2(a.astype(F64)) * (1.0 + rng.uniform(-2.0, 2.0, a.shape) * 2.0**-24)
    y = y.astype(F32)
    y[y < np.finfo(F32).tiny] = 0
    return y


def kernel(q, k, v, dout, out32, lse32, c, rng):
    """dq, dk (dv) of one head as the backward v4 computes them (with the stage options)."""
    Sq, Skv = q.shape[0], k.shape[0]
    tq, N = -(-Sq // TILE), -(-Skv // 128)
    RQ, RK = tq * TILE, N * 128
    ex = OPT["exact"]
    qs = (q * c).astype(F32)
    Qh, Ql, uq = records(qs, RQ)
    Gh, Gl, udo = records(dout, RQ)
    Kh, Kl, uk = records(k, RK)
    Vh, Vl, uv = records(v, RK)
    lse_p = np.full(RQ, np.inf, F32)
    lse_p[:Sq] = lse32
    dl64 = np.zeros(RQ)
    dl64[:Sq] = (dout.astype(F64) * out32.astype(F64)).sum(axis=1)
    dlh = dl64.astype(F32)
    dll = (dl64 - dlh).astype(F32)
    qp, kp, vp, gp = (np.zeros((r, D)) for r in (RQ, RK, RK, RQ))
    qp[:Sq], kp[:Skv], vp[:Skv], gp[:Sq] = q, k, v, dout
    s64 = float(c) * (qp @ kp.T).T  # (keys, queries): the score from the caller's inputs
    dp64 = (gp @ vp.T).T
    us = (uk[:, None] * uq[None, :]).astype(F32)  # powers of two: exact
    # 1. S^T
    if "S" in ex:
        x = s64 / us
    elif OPT["s_f32"]:
        x = s64.astype(F32) / us
    elif OPT["s_split"]:
        x = (Kh.astype(F64) @ Qh.T + Kh.astype(F64) @ Ql.T + Kl.astype(F64) @ Qh.T).astype(F32)
    else:
        pairs = []
        for s in range(D // 16):
            pairs += [(sl(Kh, s), sl(Ql, s).T), (sl(Kl, s), sl(Qh, s).T)]
        if OPT["fix"] == "s-chain":
            x = chain(pairs + [(sl(Kh, s), sl(Qh, s).T) for s in range(D // 16)])
        else:
            x = chain(pairs + [(sl(Kh, s), sl(Qh, s).T) for s in range(2)])
            for s0 in range(2, D // 16, 2):
                st = chain([(sl(Kh, s), sl(Qh, s).T) for s in (s0, s0 + 1)])
                x = (x + st).astype(F32)
    # 2. P
    if "P" in ex:
        P = np.exp(x.astype(F64) * us - lse_p[None, :].astype(F64))
    else:
        t = (x.astype(F64) * us - lse_p[None, :]).astype(F32)
        y = (t * L2E).astype(F32)
        yl = np.fmax((t.astype(F64) * L2E_LO + (t.astype(F64) * L2E - y)).astype(F32), F32(-1))
        p0 = ex2_approx(y, rng)
        P = (p0.astype(F64) * (yl * LN2).astype(F32) + p0).astype(F32)
    P[Skv:, :] = 0
    # 3. dP^T, dS
    if "DP" in ex:
        dpu = dp64
    else:
        pairs = []
        for s in range(D // 16):
            pairs += [(sl(Vh, s), sl(Gl, s).T), (sl(Vl, s), sl(Gh, s).T)]
        dp = chain(pairs + [(sl(Vh, s), sl(Gh, s).T) for s in range(D // 16)])
        dpu = dp.astype(F64) * (uv[:, None] * udo[None, :]).astype(F32)  # exact scaling
    if "DS" in ex:
        dS = P.astype(F64) * (dpu - dl64[None, :])
    else:
        t1 = (dpu.astype(F64) - dlh[None, :]).astype(F32)
        dS = (P * (t1 - dll[None, :]).astype(F32)).astype(F32)
    # 3b. the dominant elements, from float64 dots of the caller's inputs
    lse_big = np.abs(lse_p) >= OPT["lse_min"]  # per query (rows past seq_q: +inf, P = 0 there)
    kk, qq = np.nonzero((P >= 0.5) | ((P >= OPT["thresh"]) & lse_big[None, :]))
    if len(kk):
        arg = (s64[kk, qq] - lse_p[qq].astype(F64)).astype(F32)
        pe = np.exp(arg.astype(F64)).astype(F32)
        dse = (pe.astype(F64) * (dp64[kk, qq] - (dlh[qq].astype(F64) + dll[qq]))).astype(F32)
        P = P.copy()
        P[kk, qq] = pe
        dS = dS.copy()
        dS[kk, qq] = dse
    n_dom = len(kk)
    # 6. dK (per unit: m-block m, the 64 keys of a warpgroup; per key row split over the m-block's queries)
    dk = np.zeros((RK, D), F64 if "DK" in ex else F32)
    dv = np.zeros((RK, D), F32)
    for m in range(tq):
        cols = slice(TILE * m, TILE * m + TILE)
        for which, X, Bh, Bl, ub, acc in (("dk", dS, Qh, Ql, uq, dk), ("dv", P, Gh, Gl, udo, dv)):
            if which == "dv" and not OPT["dv"]:
                continue
            Xm = X[:, cols]
            if which == "dk" and "DK" in ex:
                acc += Xm.astype(F64) @ (qp[cols] * float(c))
                continue
            e = expo(np.abs(Xm).max(axis=1))
            xh, xl = split(Xm.astype(F32) * np.ldexp(1.0, e).astype(F32)[:, None])
            f = (np.ldexp(1.0, -e) * ub[TILE * m]).astype(F32)
            for t in range(D // 64):
                dc = slice(64 * t, 64 * t + 64)
                bh, bl = Bh[cols, dc], Bl[cols, dc]
                pairs = [(sl(xl, s), sl(bh, s, 0)) for s in range(4)]
                pairs += [(sl(xh, s), sl(bl, s, 0)) for s in range(4)]
                pairs += [(sl(xh, s), sl(bh, s, 0)) for s in range(4)]
                tile = chain(pairs)
                acc[:, dc] = (acc[:, dc].astype(F64) + (tile.astype(F64) * f[:, None]).astype(F32)).astype(F32)
    # 4, 5, 8. dQ per item: each query's power of two over the item's 128 keys (kfac), split; 24-step chain
    dq = np.zeros((RQ, D), F64 if "DQ" in ex else F32)
    for n in range(N):
        keys = slice(128 * n, 128 * n + 128)
        dsn = dS[keys, :].T  # (queries, 128 keys)
        if "DQ" in ex:
            dq += dsn.astype(F64) @ kp[keys]
            continue
        ukn = uk[keys]
        u_ref = ukn.max()
        kfac = (ukn / u_ref).astype(F32)
        mx = (np.abs(dsn) * kfac[None, :]).max(axis=1).astype(F32)
        e = expo(mx)
        a = (dsn * (np.ldexp(1.0, e)[:, None] * kfac[None, :]).astype(F32)).astype(F32)
        ah, al = split(a)
        kh, kl = Kh[keys], Kl[keys]
        part = np.zeros((RQ, D), F32)
        for t in range(D // 64):
            dc = slice(64 * t, 64 * t + 64)
            pairs = [(sl(al, s), sl(kh[:, dc], s, 0)) for s in range(8)]
            pairs += [(sl(ah, s), sl(kl[:, dc], s, 0)) for s in range(8)]
            pairs += [(sl(ah, s), sl(kh[:, dc], s, 0)) for s in range(8)]
            part[:, dc] = chain(pairs)
        f = (np.ldexp(1.0, -e) * u_ref).astype(F32)
        dq = (dq + (part.astype(F64) * f[:, None]).astype(F32)).astype(F32)
    dq = (dq.astype(F64) * (1.0 if "DQ" in ex else float(c))).astype(F32)
    return dq[:Sq], dk[:Skv].astype(F32), dv[:Skv], n_dom


def grads64(q, k, v, dout, c, out_given=None, lse_given=None, round_logits=False):
    """The test's reference_grads for one head (no mask, no dlse)."""
    q, k, v, dout = (x.astype(F64) for x in (q, k, v, dout))
    s = float(c) * (q @ k.T)
    if round_logits:
        s = s.astype(F32).astype(F64)
    if lse_given is None:
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        P = e / e.sum(axis=1, keepdims=True)
        lse = (m + np.log(e.sum(axis=1, keepdims=True)))[:, 0]
    else:
        P = np.exp(s - lse_given.astype(F64)[:, None])
        lse = None
    out = P @ v if out_given is None else out_given.astype(F64)
    Dl = (dout * out).sum(axis=1, keepdims=True)
    dS = P * (dout @ v.T - Dl) * float(c)
    return (dS @ k).astype(F32), (dS.T @ q).astype(F32), (P.T @ dout).astype(F32), out, lse


def rel(got, ref):
    return np.linalg.norm(got.astype(F64) - ref) / max(np.linalg.norm(ref), 1e-300)


def case(seed, B=2, Sq=160, Skv=200):
    rng = np.random.default_rng(seed)
    c = F32(1.0 / np.sqrt(D))
    got, refs, flo = {g: [] for g in "qkv"}, {g: [] for g in "qkv"}, {g: [[], []] for g in "qkv"}
    ndom = 0
    for _b in range(B):
        q = rng.standard_normal((Sq, D)).astype(F32) * F32(8)
        k = rng.standard_normal((Skv, D)).astype(F32) * F32(8)
        v = rng.standard_normal((Skv, D)).astype(F32)
        dout = rng.standard_normal((Sq, D)).astype(F32)
        rq, rk, rv, out, lse = grads64(q, k, v, dout, c)  # the float64 reference (and forward)
        out32, lse32 = out.astype(F32), lse.astype(F32)
        for i, rl in enumerate((True, False)):
            fq, fk, fv, _, _ = grads64(q, k, v, dout, c, out32, lse32, round_logits=rl)
            flo["q"][i].append(fq), flo["k"][i].append(fk), flo["v"][i].append(fv)
        gq, gk, gv, nd = kernel(q, k, v, dout, out32, lse32, c, rng)
        ndom += nd
        for g, a, r in (("q", gq, rq), ("k", gk, rk), ("v", gv, rv)):
            got[g].append(a), refs[g].append(r)
    res = {}
    for g in "qkv":
        ref = np.concatenate(refs[g]).astype(F64)
        fl = max(rel(np.concatenate(flo[g][0]), ref), rel(np.concatenate(flo[g][1]), ref))
        res[g] = (rel(np.concatenate(got[g]), ref), fl)
    return res, ndom


def main():
    a = sys.argv
    seeds = int(a[a.index("--seeds") + 1]) if "--seeds" in a else 40
    seed0 = int(a[a.index("--seed0") + 1]) if "--seed0" in a else 1
    OPT["tc_rn"] = "--tc-rn" in a
    OPT["s_split"] = "--s-split" in a
    OPT["s_f32"] = "--s-f32" in a
    OPT["dv"] = "--dv" in a
    if "--exact" in a:
        OPT["exact"] = set(a[a.index("--exact") + 1].upper().split(","))
    if "--thresh" in a:
        OPT["thresh"] = float(a[a.index("--thresh") + 1])
    if "--lse-min" in a:
        OPT["lse_min"] = float(a[a.index("--lse-min") + 1])
    if "--fix" in a:
        OPT["fix"] = a[a.index("--fix") + 1]
    ratios = {g: [] for g in "qkv"}
    for s in range(seed0, seed0 + seeds):
        res, nd = case(s)
        for g in "qkv":
            ratios[g].append(res[g][0] / res[g][1])
        if "--verbose" in a:
            print(
                f"seed {s}: "
                + " ".join(f"d{g} {res[g][0]:.3g} (floor {res[g][1]:.3g}, {res[g][0] / res[g][1]:.2f}x)" for g in "qkv")
                + f" 3b elements {nd}",
                flush=True,
            )
    opts = " ".join(x for x in a[1:] if x != "--verbose")
    line = f"[{opts or 'kernel'}] {seeds} seeds:"
    for g in "qk" + ("v" if OPT["dv"] else ""):
        r = np.array(ratios[g])
        line += (
            f" d{g} median {np.median(r):.2f} p90 {np.quantile(r, 0.9):.2f} max {r.max():.2f}"
            f" over3 {int((r > 3).sum())} |"
        )
    print(line)


if __name__ == "__main__":
    main()
