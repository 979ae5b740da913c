"""What the mask tests share: one description of a masked call (:class:`Case`), the float64
evaluation of what it means (explicit softmax over a dense mask, in torch, so that autograd gives
the reference gradients), and the arrays a case hands jattn.

The reference states each mask part as PyTorch and FlashAttention define it, independently of
jattn: key padding (True / j < kv_len[b] attends), causal (top-left: key j <= query i; bottom-right:
j <= i + Skv - Sq, both in a segment's own positions when there are segments), blocks (a query of
block a attends keys below block_kv[a + 1]), segments (a query attends keys of its own segment;
queries past the last one none), an additive key bias (-inf leaves a key out), grouped-query heads
(query head h reads key/value head h // (H // Hkv)). A row with no attended key gives 0 (lse -inf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

import numpy as np
import torch


@dataclass(frozen=True)
class Case:
    """A masked call: shape (B, H, Hkv, Sq, Skv, D) and the mask parts (offsets as tuples)."""

    batch: int = 2
    heads: int = 4
    kv_heads: int = 4
    seq_q: int = 13
    seq_kv: int = 19
    head_dim: int = 16
    causal: Optional[str] = None  # None, "top_left", "bottom_right"
    key_mask: bool = False  # a boolean [B, Skv] key mask
    kv_len: Optional[Tuple[int, ...]] = None  # [B]
    blocks: Optional[Tuple[Tuple[int, ...], Optional[Tuple[int, ...]]]] = None  # (q offsets, kv offsets or None)
    bias_shape: Optional[Tuple[int, ...]] = None  # a key bias of this shape (with some -inf)
    segments: Optional[Tuple[Tuple, Tuple]] = None  # (cu_q, cu_k): [n + 1] or [B][n + 1]
    extra: Dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    def with_(self, **changes) -> Case:
        return replace(self, **changes)


def draw(case: Case, rng: np.random.Generator, layout: str = "bhsd", dist: str = "normal"):
    """float32 q, k, v of the case in the layout, and the mask arrays (torch CPU tensors) as
    jattn.attention's keywords."""
    b, h, hkv, sq, skv, d = case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim

    def shape(heads, seq):
        return (b, heads, seq, d) if layout == "bhsd" else (b, seq, heads, d)

    scale_qk = {"normal": 1.0, "uniform": 1.0, "peaky": math.sqrt(8.0)}[dist]
    gen = rng.uniform if dist == "uniform" else None

    def sample(shp, s=1.0):
        x = rng.uniform(-1, 1, shp) if gen is not None else rng.standard_normal(shp)
        return torch.from_numpy((s * x).astype(np.float32)).clone()  # torch's allocation (its alignment)

    q, k, v = sample(shape(h, sq), scale_qk), sample(shape(hkv, skv), scale_qk), sample(shape(hkv, skv))
    kw: Dict[str, object] = {}
    if case.key_mask:
        m = rng.random((b, skv)) < 0.7
        m[:, 0] = True
        if b > 1:
            m[-1, :] = False  # a batch that attends no key
        kw["key_padding_mask"] = torch.from_numpy(m)
    if case.kv_len is not None:
        kw["kv_len"] = torch.tensor(case.kv_len, dtype=torch.int64)
    if case.causal is not None:
        kw["is_causal"] = True
        kw["causal_alignment"] = case.causal
    if case.blocks is not None:
        bq, bkv = case.blocks
        t = torch.tensor(bq, dtype=torch.int64)
        kw["block_offsets"] = t if bkv is None else (t, torch.tensor(bkv, dtype=torch.int64))
    if case.bias_shape is not None:
        bias = rng.standard_normal(case.bias_shape).astype(np.float32)
        bias[rng.random(case.bias_shape) < 0.2] = -np.inf
        kw["key_bias"] = torch.from_numpy(bias)
    if case.segments is not None:
        cu_q, cu_k = case.segments
        kw["cu_seqlens_q"] = torch.tensor(cu_q, dtype=torch.int64)
        kw["cu_seqlens_k"] = torch.tensor(cu_k, dtype=torch.int64)
    if case.kv_heads != case.heads:
        kw["enable_gqa"] = True
    return q, k, v, kw


def _rows_of(offsets, batch: int):
    t = torch.as_tensor(offsets, dtype=torch.int64)
    return [t] * batch if t.dim() == 1 else list(t)


def allowed(case: Case, kw: Dict[str, object]) -> torch.Tensor:
    """bool [B, 1, Sq, Skv]: which keys each query attends."""
    b, sq, skv = case.batch, case.seq_q, case.seq_kv
    ok = torch.ones(b, 1, sq, skv, dtype=torch.bool)
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    if "key_padding_mask" in kw:
        ok &= torch.as_tensor(kw["key_padding_mask"]).reshape(-1, 1, 1, skv).bool()
    if "kv_len" in kw:
        ok &= (j[None, None] < torch.as_tensor(kw["kv_len"]).reshape(-1, 1, 1, 1)).expand(b, 1, sq, skv)
    if "block_offsets" in kw:
        blocks = kw["block_offsets"]
        bq, bkv = blocks if isinstance(blocks, (tuple, list)) else (blocks, blocks)
        block_of_q = torch.bucketize(torch.arange(sq), torch.as_tensor(bq)[1:], right=True)  # a: bq[a] <= i < bq[a+1]
        limit = torch.as_tensor(bkv)[block_of_q + 1]
        ok &= j < limit[:, None]
    seg = "cu_seqlens_q" in kw
    if seg:
        rows_q, rows_k = _rows_of(kw["cu_seqlens_q"], b), _rows_of(kw["cu_seqlens_k"], b)
    for bi in range(b):
        if seg:
            cq, ck = rows_q[bi], rows_k[bi]
            inside = torch.zeros(sq, skv, dtype=torch.bool)
            causal = torch.ones(sq, skv, dtype=torch.bool)
            for s in range(len(cq) - 1):
                q0, q1, k0, k1 = int(cq[s]), int(cq[s + 1]), int(ck[s]), int(ck[s + 1])
                inside[q0:q1, k0:k1] = True
                if case.causal is not None:
                    shift = (k1 - k0) - (q1 - q0) if case.causal == "bottom_right" else 0
                    t = torch.arange(q1 - q0)[:, None]
                    u = torch.arange(k1 - k0)[None, :]
                    causal[q0:q1, k0:k1] = u <= t + shift
            ok[bi, 0] &= inside & causal
        elif case.causal is not None:
            shift = skv - sq if case.causal == "bottom_right" else 0
            ok[bi, 0] &= j <= i + shift
    return ok


def bias_of(case: Case, kw: Dict[str, object]) -> Optional[torch.Tensor]:
    """float64 [B or 1, H or 1, 1, Skv], or None."""
    if "key_bias" not in kw:
        return None
    bias = torch.as_tensor(kw["key_bias"]).double()
    nd = bias.dim()
    if nd == 1:
        bias = bias.reshape(1, 1, 1, -1)
    elif nd == 2:
        bias = bias[:, None, None, :]
    elif nd == 3:
        bias = bias[:, :, None, :]
    return bias


def reference(q, k, v, case: Case, kw: Dict[str, object], layout: str = "bhsd", scale: Optional[float] = None):
    """The float64 attention of the case: (out in the layout, lse [B, H, Sq]), differentiable
    (inputs of any floating dtype; cast to float64 here)."""
    q, k, v = (torch.as_tensor(t) for t in (q, k, v))
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = q.double(), k.double(), v.double()
    groups = case.heads // case.kv_heads
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    c = 1.0 / math.sqrt(case.head_dim) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * c
    bias = bias_of(case, kw)
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~allowed(case, kw), float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    total = e.sum(dim=-1, keepdim=True)
    safe = torch.where(total > 0, total, torch.ones_like(total))  # no NaN gradient through an empty row
    out = (e / safe) @ v
    lse = torch.where(total[..., 0] > 0, (m + torch.log(safe))[..., 0], torch.full_like(total[..., 0], float("-inf")))
    return (out.transpose(1, 2) if layout == "bshd" else out), lse
