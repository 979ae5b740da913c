#!/usr/bin/env python3
"""How far the cpu backend's training chain (its forward's out and lse, then its backward) sits from
docs/DESIGN.md section 2's float32 floor on small calls, where no other row averages one row's error:
dq's rel_l2 over the floor's (the larger of the float64 backward from the float64 forward's out and lse
rounded to float32 once, with the logits rounded once and exact), per draw; the median, p90 and
largest ratio and the draws past 3x, over shapes of a few rows with near one-hot rows (scale 0.3: logits
of standard deviation 0.3 sqrt(D)), unmasked and causal (grouped heads 2 / 1).

Written for the keyword fuzz's miss of 2026-12-07 (lab/python/keyword_fuzz.py, seed 6 case 165): the
forward's out carried an error common to each row (its row sum rounded to float, then 1 / l rounded), which
the backward's Dl = sum(dO O) does not average away; run with a package whose library predates the fix
(PYTHONPATH) for the before.

usage: cpu_chain_small_calls.py [--draws 60] [--seed 1]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from jattn import _options, _torch_impl
from jattn._problem import MaskArrays


def floor_rel(q, k, v, dout, c, out32, lse32, allowed, ref):
    worst = 0.0
    for rounded in (True, False):
        s = (q.double() @ k.double().transpose(-1, -2)) * c
        if rounded:
            s = s.float().double()
        p = torch.exp(s - lse32.double()[..., None]) * allowed
        ds = p * (dout.double() @ v.double().transpose(-1, -2) - (dout.double() * out32.double()).sum(-1, keepdim=True))
        worst = max(worst, float((c * ds @ k.double() - ref).norm() / ref.norm()))
    return worst


def ratios(causal: bool, head_dim: int, seq: int, draws: int, scale: float = 0.3, heads: int = 2):
    c = float(np.float32(scale))
    allowed = torch.ones(seq, seq).tril() if causal else torch.ones(seq, seq)
    kw = {"backend": "cpu", "scale": scale, "is_causal": causal, "enable_gqa": True}
    masks = MaskArrays(torch.ones(1, seq, dtype=torch.bool), None, None, None, None, None, None) if causal else None
    out = []
    for _ in range(draws):
        q, dout = (torch.randn(1, heads, seq, head_dim) for _ in range(2))
        k, v = (torch.randn(1, 1, seq, head_dim) for _ in range(2))
        opts = _options.options(**kw)
        o, lse = _torch_impl.attention(q, k, v, opts._replace(return_lse=True), None, None, masks)
        dq = _torch_impl.backward(q, k, v, o, lse, dout, None, opts, masks)[0]
        kk, vv = k.repeat_interleave(heads, 1), v.repeat_interleave(heads, 1)
        q64, k64, v64 = q.double().requires_grad_(True), kk.double(), vv.double()
        s = ((q64 @ k64.transpose(-1, -2)) * c).masked_fill(allowed == 0, float("-inf"))
        o64, l64 = torch.softmax(s, -1) @ v64, torch.logsumexp(s, -1)
        (o64 * dout.double()).sum().backward()
        fl = floor_rel(q, kk, vv, dout, c, o64.detach().float(), l64.detach().float(), allowed, q64.grad)
        out.append(float((dq.double() - q64.grad).norm() / q64.grad.norm()) / fl)
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    print("| mask | head_dim | Sq = Skv | dq / floor median | p90 | max | draws past 3x |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for causal in (False, True):
        for head_dim, seq in ((256, 2), (128, 2), (256, 8), (64, 2)):
            r = ratios(causal, head_dim, seq, a.draws)
            print(f"| {'causal' if causal else 'none'} | {head_dim} | {seq} | {np.median(r):.2f} | "
                  f"{np.quantile(r, 0.9):.2f} | {r.max():.2f} | {(r > 3).sum()} / {a.draws} |")  # fmt: skip


if __name__ == "__main__":
    main()
