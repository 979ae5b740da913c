#!/usr/bin/env python3
"""Does any combination of jattn.attention's keywords disagree with float64? Random calls, each
drawn fresh: shapes (B, H, Hkv, Sq, Skv, D up to 256), both layouts, strided views (the last
dimension contiguous), grouped and multi-query heads, causal in both alignments, segments (one row
of offsets, some queries or keys past the last segment), block-causal (one tensor or a pair), key
padding (a boolean mask, one row or one per batch, or kv_len), a key bias of every accepted shape
with some -inf, a scale, return_lse; the forward (out, lse) and the gradients of q, k, v through
autograd (the lse's too when returned), against a float64 evaluation written here from jattn's
docstring (not from the library, not from python/tests/mask_testing.py), with the scale as the library
applies it (rounded to float32).

The gates: out within rel_l2 2e-6, lse 1e-6 where finite, and the rows with no key -inf; dq, dk,
dv within rel_l2 5e-6. A miss is excused only where the ref backend (float64 inside, from the same
float32 inputs; for the gradients, from its own float32 out and lse) errs alike: within 4x its
error for out, 3x for a gradient (docs/DESIGN.md section 2's floors, in their simplest form).

usage: keyword_fuzz.py [--device cpu|cuda] [--backend auto] [--seed S] [--cases N]
Each case's seed is printed with a miss (rerun it alone: --seed S --first I --cases 1).
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter

import torch

import jattn


def float64_attention(q, k, v, allowed, bias, scale, groups):
    """out [B, H, Sq, D] and lse [B, H, Sq] in float64, differentiable; q [B, H, Sq, D], k, v [B, Hkv, Skv, D]."""
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    out = (e / safe) @ v
    lse = torch.where(total[..., 0] > 0, (m + torch.log(safe))[..., 0], torch.full_like(m[..., 0], float("-inf")))
    return out, lse


def offsets(rng: random.Random, length: int, parts: int, cover: bool) -> list:
    """parts + 1 sorted offsets from 0; the last is length (cover) or may stop short."""
    cuts = sorted(rng.randint(0, length) for _ in range(parts - 1))
    last = length if cover or rng.random() < 0.6 else rng.randint(cuts[-1] if cuts else 0, length)
    return [0] + cuts + [last]


def draw_case(rng: random.Random, device: str):
    """One random call: (q, k, v) float32 in their layout, the keywords, and what they mean:
    (allowed [B, H or 1, Sq, Skv], bias float64 broadcastable to [B, H, Sq, Skv] or None)."""
    kv_heads = rng.choice([1, 2, 3])
    heads = kv_heads * rng.choice([1, 1, 2, 4])
    batch = rng.choice([1, 1, 2, 3])
    head_dim = rng.choice([1, 3, 8, 16, 32, 40, 64, 72, 96, 128, 160, 256])
    sq = rng.choice([1, 2, 7, 16, 33, 64, 100, 257])
    skv = rng.choice([sq, sq, 1, 5, 17, 64, 130])
    layout = rng.choice(["bhsd", "bshd"])
    kw: dict = {"layout": layout}
    allowed = torch.ones(batch, 1, sq, skv, dtype=torch.bool)
    i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
    causal = rng.random() < 0.35
    alignment = rng.choice(["top_left", "bottom_right"])
    if causal:
        kw["is_causal"], kw["causal_alignment"] = True, alignment
    if rng.random() < 0.25:  # segments: one row of offsets for every batch
        n = rng.choice([1, 2, 3])
        cq, ck = offsets(rng, sq, n, False), offsets(rng, skv, n, False)
        kw["cu_seqlens_q"], kw["cu_seqlens_k"] = torch.tensor(cq), torch.tensor(ck)
        inside = torch.zeros(sq, skv, dtype=torch.bool)
        for s in range(n):
            q0, q1, k0, k1 = cq[s], cq[s + 1], ck[s], ck[s + 1]
            t, u = torch.arange(q1 - q0)[:, None], torch.arange(k1 - k0)[None, :]
            shift = (k1 - k0) - (q1 - q0) if alignment == "bottom_right" else 0
            inside[q0:q1, k0:k1] = (u <= t + shift) if causal else True
        allowed &= inside
    elif causal:
        allowed &= j <= i + (skv - sq if alignment == "bottom_right" else 0)
    if rng.random() < 0.2:  # block-causal: a query of block a attends the keys below block_kv[a + 1]
        n = rng.choice([1, 2, 3])
        if sq == skv and rng.random() < 0.5:
            bq = bk = offsets(rng, sq, n, True)
            kw["block_offsets"] = torch.tensor(bq)
        else:
            bq, bk = offsets(rng, sq, n, True), offsets(rng, skv, n, True)
            kw["block_offsets"] = (torch.tensor(bq), torch.tensor(bk))
        block_of_q = torch.bucketize(torch.arange(sq), torch.tensor(bq[1:]), right=True).clamp(max=n - 1)
        allowed &= j < torch.tensor(bk)[block_of_q + 1][:, None]
    if rng.random() < 0.25:  # key padding
        if rng.random() < 0.5:
            mask = torch.rand(rng.choice([batch, 1]), skv) < 0.8
            kw["key_padding_mask"] = mask
            allowed &= mask.reshape(-1, 1, 1, skv)
        else:
            lengths = torch.tensor([rng.randint(0, skv) for _ in range(batch)])
            kw["kv_len"] = lengths
            allowed &= (j < lengths[:, None, None, None]).expand(batch, 1, sq, skv)
    bias = None
    if rng.random() < 0.25:
        b = rng.choice([batch, 1])
        shape = rng.choice([(skv,), (b, skv), (b, 1, skv), (b, heads, skv), (b, 1, 1, skv)])
        kb = torch.randn(shape) * rng.choice([0.5, 3.0])
        if rng.random() < 0.3:
            kb = kb.masked_fill(torch.rand(shape) < 0.2, float("-inf"))
        kw["key_bias"] = kb
        bias = kb.double()
        if bias.dim() == 1:  # [Skv]
            bias = bias.reshape(1, 1, 1, skv)
        elif bias.dim() == 2:  # [B, Skv]
            bias = bias[:, None, None, :]
        elif bias.dim() == 3:  # [B, 1 or H, Skv]
            bias = bias[:, :, None, :]
    if kv_heads != heads or rng.random() < 0.2:
        kw["enable_gqa"] = True
    if rng.random() < 0.5:
        kw["scale"] = rng.choice([0.3, 1.0 / 7])
    kw["return_lse"] = rng.random() < 0.3

    def tensor(h: int, s: int) -> torch.Tensor:
        shape = (batch, h, s, head_dim) if layout == "bhsd" else (batch, s, h, head_dim)
        if rng.random() < 0.3:  # a view of a wider tensor (the last dimension contiguous)
            return torch.randn(*shape[:-1], head_dim + rng.choice([1, 4, 64]), device=device)[..., :head_dim]
        return torch.randn(shape, device=device)

    q, k, v = tensor(heads, sq), tensor(kv_heads, skv), tensor(kv_heads, skv)
    kw = {n: (t.to(device) if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    if isinstance(kw.get("block_offsets"), tuple):
        kw["block_offsets"] = tuple(t.to(device) for t in kw["block_offsets"])
    return (q, k, v), kw, allowed, bias


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    n = float(b.norm())
    d = float((a - b).norm())
    return d / n if n > 0 else d


def run(qkv, kw, backend: str, dout, dlse):
    """out, lse (or None) and the gradients of q, k, v of one jattn call on copies of the inputs."""
    leaves = [t.detach().clone().requires_grad_(True) for t in qkv]
    res = jattn.attention(*leaves, backend=backend, **kw)
    out, lse = res if kw["return_lse"] else (res, None)
    loss = (out * dout).sum()
    if lse is not None:
        loss = loss + (torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)) * dlse).sum()
    loss.backward()
    return out, lse, [t.grad for t in leaves]


def check(rng: random.Random, device: str, backend: str):
    """None, or what missed (with the ref backend's error beside it)."""
    qkv, kw, allowed, bias = draw_case(rng, device)
    q, k, v = qkv
    layout = kw["layout"]
    bhsd = (lambda t: t) if layout == "bhsd" else (lambda t: t.transpose(1, 2))
    heads, kv_heads, head_dim = bhsd(q).shape[1], bhsd(k).shape[1], q.shape[-1]
    scale = float(torch.tensor(kw.get("scale", 1.0 / math.sqrt(head_dim)), dtype=torch.float32))  # as jattn applies it
    q64, k64, v64 = (bhsd(t).detach().cpu().double().requires_grad_(True) for t in qkv)
    ref_out, ref_lse = float64_attention(q64, k64, v64, allowed, bias, scale, heads // kv_heads)
    dout = torch.randn(q.shape, device=device)
    dlse = torch.randn(ref_lse.shape, device=device)
    finite = torch.isfinite(ref_lse)
    loss = (ref_out * bhsd(dout).cpu().double()).sum()
    if kw["return_lse"]:
        loss = loss + (torch.where(finite, ref_lse, torch.zeros_like(ref_lse)) * dlse.cpu().double()).sum()
    loss.backward()
    refs = [bhsd(t.grad) for t in (q64, k64, v64)]  # in the call's layout again (a transpose is its own inverse)

    out, lse, grads = run(qkv, kw, backend, dout, dlse)
    floor = None

    def ref_backend():
        nonlocal floor
        if floor is None:
            cpu = [t.detach().cpu() for t in qkv]
            ckw = {n: (t.cpu() if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
            if isinstance(ckw.get("block_offsets"), tuple):
                ckw["block_offsets"] = tuple(t.cpu() for t in ckw["block_offsets"])
            floor = run(cpu, ckw, "ref", dout.cpu(), dlse.cpu())
        return floor

    e = rel_l2(bhsd(out), ref_out)
    if e > 2e-6 and e > 4 * rel_l2(bhsd(ref_backend()[0]), ref_out):
        return f"out rel_l2 {e:.2e} (ref backend {rel_l2(bhsd(ref_backend()[0]), ref_out):.2e})", kw
    if lse is not None:
        if not torch.equal(torch.isfinite(lse).cpu(), finite):
            return "lse: the rows with no key differ", kw
        e = rel_l2(lse.cpu()[finite], ref_lse[finite])
        if e > 1e-6:
            return f"lse rel_l2 {e:.2e}", kw
    for name, g, r, i in zip(("dq", "dk", "dv"), grads, refs, range(3)):
        e = rel_l2(g, r)
        if not math.isfinite(e) or e > 5e-6:
            ef = rel_l2(ref_backend()[2][i], r)
            if not math.isfinite(e) or e > 3 * ef:
                return f"{name} rel_l2 {e:.2e} (ref backend {ef:.2e})", kw
    return None, kw


def describe(kw: dict) -> str:
    parts = []
    for n, t in kw.items():
        if isinstance(t, torch.Tensor):
            parts.append(f"{n}={list(t.shape)}")
        elif isinstance(t, tuple):
            parts.append(f"{n}=pair")
        else:
            parts.append(f"{n}={t}")
    return " ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--cases", type=int, default=200)
    a = ap.parse_args()
    misses, seen = 0, Counter()
    for i in range(a.first, a.first + a.cases):
        rng = random.Random(a.seed * 1_000_003 + i)
        torch.manual_seed(a.seed * 1_000_003 + i)
        try:
            miss, kw = check(rng, a.device, a.backend)
        except Exception as ex:  # noqa: BLE001 - a call that raises is a finding too
            miss, kw = f"raised {type(ex).__name__}: {ex}", {}
        seen.update(n for n in kw if n not in ("layout", "return_lse", "causal_alignment"))
        if miss:
            misses += 1
            print(f"MISS seed {a.seed} case {i}: {miss}; {describe(kw)}")
    print(f"keyword_fuzz {a.device} {a.backend} seed {a.seed}: {misses} of {a.cases} missed; keywords drawn: "
          + ", ".join(f"{n} {c}" for n, c in sorted(seen.items())))  # fmt: skip


if __name__ == "__main__":
    main()
