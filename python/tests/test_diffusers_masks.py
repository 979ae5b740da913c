"""jattn.diffusers' mask recognition (``jattn._sdpa_masks``): every SDPA mask form the models
pass becomes jattn's parts that describe exactly the same attention, element for element (the
parts are expanded here by the C header's own definitions and compared with the mask); the
forms it does not describe are refused; a mask tensor is read once while it is unchanged. Pure
torch: no libjattn call."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import pytest
import torch

from jattn import _sdpa_masks

NEG = float("-inf")


@pytest.fixture(autouse=True)
def fresh_cache():
    _sdpa_masks.clear_cache()
    yield
    _sdpa_masks.clear_cache()


def expand_parts(kwargs: Dict[str, Any], query_rows: Optional[torch.Tensor], b: int, h: int, sq: int, skv: int,
                 single_key=None):  # fmt: skip
    """The dense (allowed bool, bias float64) ``[b, h, sq, skv]`` that jattn's parts describe
    (include/jattn.h: jattn_mask, jattn_key_padding; a query row outside ``query_rows`` attends
    nothing; a row of ``single_key`` attends its one key)."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    allowed = torch.ones(b, h, sq, skv, dtype=torch.bool)
    bias = torch.zeros(b, h, sq, skv, dtype=torch.float64)
    kpm = kwargs.get("key_padding_mask")
    if kpm is not None:
        allowed &= kpm.reshape(-1, 1, 1, skv).bool()
    kb = kwargs.get("key_bias")
    if kb is not None:
        kb = kb.double()
        kb = kb.reshape((1,) * (3 - kb.dim()) + tuple(kb.shape))[:, :, None, :]  # [b|1, h|1, 1, skv]
        bias = bias + kb
        allowed &= kb != NEG
    if kwargs.get("is_causal"):
        shift = skv - sq if kwargs.get("causal_alignment") == "bottom_right" else 0
        allowed &= j <= i + shift
    offsets = kwargs.get("block_offsets")
    if offsets is not None:
        q_off, kv_off = offsets if isinstance(offsets, tuple) else (offsets, offsets)
        block = torch.bucketize(torch.arange(sq), q_off[1:-1].cpu(), right=True)
        allowed &= j < kv_off[1:].cpu()[block][:, None]
    cq, ck = kwargs.get("cu_seqlens_q"), kwargs.get("cu_seqlens_k")
    if cq is not None:
        cq, ck = cq.cpu().reshape(-1, cq.shape[-1]), ck.cpu().reshape(-1, ck.shape[-1])
        for bi in range(b):
            row_q, row_k = cq[min(bi, cq.shape[0] - 1)], ck[min(bi, ck.shape[0] - 1)]
            seg_q = torch.bucketize(torch.arange(sq), row_q[1:], right=True)  # n: past the last segment
            seg_k = torch.bucketize(torch.arange(skv), row_k[1:], right=True)
            inside = (seg_q[:, None] == seg_k[None, :]) & (seg_q[:, None] < row_q.numel() - 1)
            allowed[bi] &= inside
    if query_rows is not None:
        allowed &= query_rows.reshape(-1, 1, sq, 1)
    if single_key is not None:
        rows, index = single_key
        one = torch.nn.functional.one_hot(index, skv).bool()[:, None]  # [b|1, 1, sq, skv]
        allowed = torch.where(rows.reshape(-1, 1, sq, 1), one, allowed)
    return allowed, bias


def assert_describes(mask: torch.Tensor, b: int, h: int, sq: int, skv: int, features=None):
    """``recognise`` finds parts (of these ``features``, if given) that mean what the mask means."""
    plan = _sdpa_masks.recognise(mask, b, h, sq, skv, torch.float32)
    assert plan is not None, "not recognised"
    if features is not None:
        assert set(plan.features) == set(features), plan.features
    allowed, bias = expand_parts(plan.kwargs, plan.query_rows, b, h, sq, skv, plan.single_key)
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)).expand(b, h, sq, skv)
    if m.dtype is torch.bool:
        assert torch.equal(allowed, m)
    else:
        want = m != NEG
        assert torch.equal(allowed, want)
        assert torch.equal(torch.where(want, bias, 0), torch.where(want, m.double(), 0))
    return plan


def key_mask(g, b, skv, p=0.7):
    m = torch.rand(b, skv, generator=g) < p
    m[:, 0] = True
    return m


def test_key_masks_by_strides(seed):
    g = torch.Generator().manual_seed(seed)
    b, h, sq, skv = 2, 3, 5, 7
    m = key_mask(g, b, skv)
    for form in (m[:, None, None, :], m[:, None, None, :].expand(b, 1, sq, skv), m[:, None, None, :].expand(b, h, sq, skv),
                 m[:1, None, None, :], m[0]):  # fmt: skip
        plan = assert_describes(form, b, h, sq, skv, ["key_padding"])
        assert plan.kwargs["key_padding_mask"].dtype is torch.bool
    per_head = torch.rand(b, h, 1, skv, generator=g) < 0.5
    assert_describes(per_head, b, h, sq, skv, ["key_bias"])


def test_float_key_masks(seed):
    """LTX-Video / LTX-2: (1 - mask) * -10000, repeated for every head by copies; Cosmos: -inf."""
    g = torch.Generator().manual_seed(seed)
    b, h, sq, skv = 2, 3, 5, 7
    m = key_mask(g, b, skv)
    m[0, -1] = False  # a key left out (an all-True draw, 1 in 70, has no -10000 to find)
    ltx = ((1 - m.float()) * -10000.0)[:, None, :]  # [B, 1, Skv]
    ltx = ltx.repeat_interleave(h, dim=0).view(b, h, -1, skv)  # prepare_attention_mask, then the view
    plan = assert_describes(ltx, b, h, sq, skv, ["key_bias"])
    assert plan.kwargs["key_bias"].dtype is torch.float32 and float(plan.kwargs["key_bias"].min()) == -10000.0
    inf = torch.zeros(b, 1, 1, skv).masked_fill(~m[:, None, None, :], NEG)
    assert_describes(inf, b, h, sq, skv, ["key_bias"])
    assert_describes(inf.expand(b, 1, sq, skv).contiguous(), b, h, sq, skv, ["key_padding"])  # 0 / -inf: padding
    assert_describes(torch.zeros(b, 1, sq, skv), b, h, sq, skv, [])  # nothing at all


@pytest.mark.parametrize("sq,skv", [(6, 6), (4, 9), (9, 4)])
def test_causal_masks(sq, skv):
    b, h = 2, 2
    tl = torch.ones(sq, skv, dtype=torch.bool).tril()
    plan = assert_describes(tl, b, h, sq, skv)
    assert plan.kwargs.get("causal_alignment") == "top_left" or sq > skv  # rows past Skv: q-rows or TL
    br = torch.ones(sq, skv, dtype=torch.bool).tril(skv - sq)
    plan = assert_describes(br, b, h, sq, skv)
    assert plan.kwargs.get("is_causal")


def test_qwenimage21_text_segment_mask(seed):
    """Qwen-Image 2.1's prefill: a text segment sees every key before it and a causal triangle
    over its own keys (bottom-right causal), and the key padding."""
    g = torch.Generator().manual_seed(seed)
    b, h, start, seg = 2, 2, 6, 5
    end = start + seg
    tri = torch.cat([torch.ones(seg, start, dtype=torch.bool), torch.ones(seg, seg, dtype=torch.bool).tril()], 1)
    valid = key_mask(g, b, end)
    mask = tri[None, None] & valid[:, None, None, :]
    plan = assert_describes(mask, b, h, seg, end)
    assert plan.kwargs["is_causal"] and plan.kwargs["causal_alignment"] == "bottom_right"


def test_block_causal_masks(seed):
    g = torch.Generator().manual_seed(seed)
    b, h = 2, 2
    q_off = torch.tensor([0, 3, 4, 9, 12])
    kv_off = torch.tensor([0, 2, 6, 6, 10])
    sq, skv = 12, 10
    block = torch.bucketize(torch.arange(sq), q_off[1:-1], right=True)
    bc = torch.arange(skv)[None, :] < kv_off[1:][block][:, None]
    plan = assert_describes(bc, b, h, sq, skv, ["block_causal"])
    assert plan.kwargs["block_offsets"][0].dtype is torch.int64
    plan = assert_describes(bc[None, None] & key_mask(g, b, skv)[:, None, None, :], b, h, sq, skv)
    assert "block_causal" in plan.features
    # video frames, each attending itself and the frames before it (self-attention)
    frames = torch.arange(12) // 4
    assert_describes(frames[None, :] <= frames[:, None], b, h, 12, 12, ["block_causal"])


def test_segment_masks_ideogram4(seed):
    """Ideogram 4: (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None], other segments
    per batch (packed samples of different lengths)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3], [0, 1, 1, 1, 1, 1, 1, 2, 2, 2]])
    mask = (ids.unsqueeze(2) == ids.unsqueeze(1)).unsqueeze(1)
    plan = assert_describes(mask, 2, 3, 10, 10, ["segments"])
    assert plan.kwargs["cu_seqlens_q"].shape == (2, 5)
    same = mask[:1].expand(2, 1, 10, 10)
    plan = assert_describes(same, 2, 3, 10, 10, ["segments"])
    assert plan.kwargs["cu_seqlens_q"].shape == (5,)
    padded = mask & key_mask(g, 2, 10, 0.8)[:, None, None, :]
    assert_describes(padded, 2, 3, 10, 10)


def test_pairwise_mask_hunyuanvideo15(seed):
    """HunyuanVideo 1.5: the key mask padded at the front with True, then m ⊗ m."""
    g = torch.Generator().manual_seed(seed)
    b, s = 2, 12
    text = key_mask(g, b, 5, 0.5)
    m = torch.nn.functional.pad(text, (s - 5, 0), value=True)
    m1 = m.view(b, 1, 1, s).repeat(1, 1, s, 1)
    mask = m1 & m1.transpose(2, 3)
    plan = assert_describes(mask, b, 2, s, s, ["key_padding", "query_rows"])
    assert torch.equal(plan.query_rows, m)


def test_pairwise_mask_with_key_zero_hunyuanvideo_refiner(seed):
    """HunyuanVideo's token refiner and HunyuanImage: m ⊗ m with key 0 forced on, so padded queries
    attend key 0 alone (their output: value row 0)."""
    b, s = 2, 10
    m = K_lengths([10, 6], s)
    m1 = m.view(b, 1, 1, s).repeat(1, 1, s, 1)
    mask = (m1 & m1.transpose(2, 3)).bool()
    mask[:, :, :, 0] = True
    plan = assert_describes(mask, b, 2, s, s, ["key_padding", "query_rows", "single_key_rows"])
    assert torch.equal(plan.single_key[0], ~m)


def K_lengths(lengths, total):
    return torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]


def test_float_structured_masks(seed):
    g = torch.Generator().manual_seed(seed)
    sq = skv = 8
    bias = torch.randn(2, 1, 1, skv, generator=g)
    causal = torch.zeros(sq, skv).masked_fill(~torch.ones(sq, skv, dtype=torch.bool).tril(), NEG)
    plan = assert_describes(causal + bias, 2, 2, sq, skv)
    assert plan.kwargs["is_causal"] and "key_bias" in plan.features


def test_unrecognised_masks_are_refused(seed):
    g = torch.Generator().manual_seed(seed)
    b, h, sq, skv = 2, 3, 6, 7
    pattern = torch.rand(b, 1, sq, skv, generator=g) < 0.5
    pattern[..., 0] = True
    pattern[..., 0, 1:] = ~pattern[..., 1, 1:]  # no structure
    assert _sdpa_masks.recognise(pattern, b, h, sq, skv, torch.float32) is None
    per_head = torch.ones(b, h, sq, skv, dtype=torch.bool).tril()
    per_head[:, 1] = True
    assert _sdpa_masks.recognise(per_head, b, h, sq, skv, torch.float32) is None
    rows_differ = torch.randn(b, 1, sq, skv, generator=g)
    assert _sdpa_masks.recognise(rows_differ, b, h, sq, skv, torch.float32) is None
    nan = torch.zeros(b, 1, sq, skv)
    nan[0, 0, 1, 2] = float("nan")
    assert _sdpa_masks.recognise(nan, b, h, sq, skv, torch.float32) is None
    assert _sdpa_masks.recognise(torch.zeros(b, 1, sq, skv, dtype=torch.float64), b, h, sq, skv, torch.float32) is None
    assert _sdpa_masks.recognise(torch.ones(b, 1, sq, 1, dtype=torch.bool), b, h, sq, skv, torch.float32) is None


def test_a_mask_is_read_once_while_unchanged(monkeypatch):
    reads = []
    real = _sdpa_masks._read
    monkeypatch.setattr(_sdpa_masks, "_read", lambda m: reads.append(1) or real(m))
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool).tril()
    for _ in range(5):
        assert _sdpa_masks.recognise(mask, 1, 2, 8, 8, torch.float32).kwargs["is_causal"]
    assert len(reads) == 1
    mask[..., 0, 5] = True  # in place: a new version, read again (and no longer causal)
    assert _sdpa_masks.recognise(mask, 1, 2, 8, 8, torch.float32) is None
    assert len(reads) == 2
    for _ in range(3 * _sdpa_masks._CACHE_LIMIT):  # the cache stays bounded
        _sdpa_masks.recognise(torch.ones(1, 1, 8, 8, dtype=torch.bool).tril(), 1, 2, 8, 8, torch.float32)
    assert len(_sdpa_masks._cache) <= _sdpa_masks._CACHE_LIMIT


def test_reading_a_mask_costs_little():
    """One read of a 4096 x 4096 segment mask (batch 2), against one float32 SDPA call of 8 heads
    of 64 at that size; printed (the numbers of the README), asserted only loosely."""
    s = 4096
    ids = torch.arange(s) // 1000
    mask = (ids[None, :, None] == ids[None, None, :]).unsqueeze(1).expand(2, 1, s, s).contiguous()
    t = time.perf_counter()
    plan = _sdpa_masks.recognise(mask, 2, 8, s, s, torch.float32)
    read = time.perf_counter() - t
    assert plan is not None and "segments" in plan.features
    t = time.perf_counter()
    _sdpa_masks.recognise(mask, 2, 8, s, s, torch.float32)
    cached = time.perf_counter() - t
    q = torch.randn(2, 8, s, 64)
    t = time.perf_counter()
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    sdpa = time.perf_counter() - t
    print(f"mask read {read * 1e3:.1f} ms, cached {cached * 1e6:.0f} us, SDPA (2, 8, {s}, 64) {sdpa * 1e3:.1f} ms")
    assert cached < 5e-3 and read < 2 * sdpa + 0.5


def test_lowest_value_masks():
    """finfo.min on masked entries (OmniGen, transformers' text encoders): read as left out, since
    beside an attended key it adds exactly 0 weight; a row with every key at finfo.min (SDPA then
    averages every key) is refused."""
    lowest = torch.finfo(torch.float32).min
    m = torch.ones(9, 9).tril()
    m[6:, :] = 1  # the last block bidirectional
    mask = ((1 - m) * lowest)[None, None]
    plan = _sdpa_masks.recognise(mask, 1, 2, 9, 9, torch.float32)
    assert plan is not None and plan.features == ("block_causal",)
    allowed, _ = expand_parts(plan.kwargs, plan.query_rows, 1, 2, 9, 9)
    assert torch.equal(allowed[0, 0], m.bool())
    mask[..., 0, :] = lowest  # row 0 attends nothing: SDPA's uniform average
    assert _sdpa_masks.recognise(mask, 1, 2, 9, 9, torch.float32) is None
