"""Key padding (key_padding_mask=, kv_len=) against a float64 reference that leaves the padded
keys out: on the ref backend now, and on the cpu backend as soon as it implements key padding
(until then a padded cpu call raises JATTN_ERROR_UNSUPPORTED and those tests report skipped)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
from jattn_testing import assert_gate, draw_qkv, reference

B, H, SQ, SKV, D = 3, 2, 21, 40, 32


def padded_inputs(rng, layout="bhsd"):
    q_shape = (B, H, SQ, D) if layout == "bhsd" else (B, SQ, H, D)
    kv_shape = (B, H, SKV, D) if layout == "bhsd" else (B, SKV, H, D)
    q, k, v, _ = draw_qkv(rng, q_shape, kv_shape, "normal", D)
    mask = rng.random((B, SKV)) < 0.7
    mask[1, :] = False  # one batch attends no key: its rows are 0, lse -inf
    return q, k, v, mask


def lengths_as_mask(kv_len):
    return np.arange(SKV)[None, :] < np.asarray(kv_len)[:, None]


def cpu_padding_or_skip(q, k, v, **padding):
    try:
        return jattn.attention(q, k, v, backend="cpu", return_lse=True, **padding)
    except jattn.JattnNotImplementedError as e:
        assert e.status_name == "JATTN_ERROR_UNSUPPORTED" and "key_padding" in e.message
        pytest.skip(f"the cpu backend has no key padding yet ({e.message})")


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_key_padding_mask(rng, backend, kind, layout):
    q, k, v, mask = padded_inputs(rng, layout)
    k[~np.broadcast_to(mask[:, None, :, None] if layout == "bhsd" else mask[:, :, None, None], k.shape)] = np.nan
    ref, ref_lse = reference(q, k, v, layout, key_mask=mask)  # masked keys hold NaN: never read
    args = (q, k, v, mask) if kind == "numpy" else tuple(map(torch.from_numpy, (q, k, v, mask)))
    if backend == "cpu":
        out, lse = cpu_padding_or_skip(*args[:3], layout=layout, key_padding_mask=args[3])
    else:
        out, lse = jattn.attention(*args[:3], layout=layout, backend="ref", key_padding_mask=args[3], return_lse=True)
    out, lse = np.asarray(out), np.asarray(lse)
    assert_gate(out, ref, what=f"{backend} {kind} masked")
    assert (out[1] == 0).all() and np.isneginf(lse[1]).all()  # no key attended: 0 and -inf
    assert_gate(np.where(np.isinf(lse), 0, lse), np.where(np.isinf(ref_lse), 0, ref_lse), what="lse")


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_kv_len_and_mask_together(rng, backend):
    q, k, v, mask = padded_inputs(rng)
    kv_len = np.array([SKV, 13, 0], dtype=np.int64)
    both = mask & lengths_as_mask(kv_len)
    ref, _ = reference(q, k, v, key_mask=both)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    padding = {"key_padding_mask": torch.from_numpy(mask), "kv_len": torch.from_numpy(kv_len)}
    if backend == "cpu":
        out, _ = cpu_padding_or_skip(tq, tk, tv, **padding)
    else:
        out = jattn.attention(tq, tk, tv, backend="ref", **padding)
    assert_gate(out.numpy(), ref, what="kv_len and mask")
    only_len, _ = reference(q, k, v, key_mask=lengths_as_mask(kv_len))
    out_len = jattn.attention(q, k, v, backend="ref", kv_len=kv_len)
    assert_gate(out_len, only_len, what="kv_len")


def test_mask_rows_broadcast_and_strided(rng):
    q, k, v, mask = padded_inputs(rng)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    row = torch.from_numpy(mask[0].copy())
    want, _ = reference(q, k, v, key_mask=mask[0])
    for m in (row, row[None, :], row.expand(B, SKV)):  # [Skv], [1, Skv], a stride-0 broadcast
        assert_gate(jattn.attention(tq, tk, tv, backend="ref", key_padding_mask=m).numpy(), want, what=str(m.shape))
    wide = torch.from_numpy(np.repeat(mask, 2, axis=1).astype(np.uint8))  # uint8, [B, 2*Skv]
    strided = wide[:, ::2]  # last dimension not contiguous: copied
    want, _ = reference(q, k, v, key_mask=mask)
    assert_gate(jattn.attention(tq, tk, tv, backend="ref", key_padding_mask=strided).numpy(), want, what="strided")
    padded_rows = torch.zeros(B, SKV + 7, dtype=torch.bool)
    padded_rows[:, :SKV] = torch.from_numpy(mask)
    view = padded_rows[:, :SKV]  # rows SKV + 7 bytes apart: read in place
    assert_gate(jattn.attention(tq, tk, tv, backend="ref", key_padding_mask=view).numpy(), want, what="row stride")


def test_padding_errors(rng):
    q, k, v, mask = padded_inputs(rng)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    m = torch.from_numpy(mask)
    cases = [
        (dict(key_padding_mask=m[:, :-1]), ValueError, "JATTN_ERROR_INVALID_DIMENSION"),
        (dict(key_padding_mask=m[:2]), ValueError, "JATTN_ERROR_INVALID_DIMENSION"),
        (dict(key_padding_mask=m[None]), ValueError, "JATTN_ERROR_INVALID_DIMENSION"),
        (dict(key_padding_mask=m.float()), ValueError, "JATTN_ERROR_INVALID_ARGUMENT"),
        (dict(key_padding_mask=m.to("meta")), ValueError, "JATTN_ERROR_INVALID_ARGUMENT"),
        (dict(kv_len=torch.tensor([1, 2, 3], dtype=torch.int32)), ValueError, "JATTN_ERROR_INVALID_ARGUMENT"),
        (dict(kv_len=torch.tensor([1, 2], dtype=torch.int64)), ValueError, "JATTN_ERROR_INVALID_DIMENSION"),
        (dict(kv_len=torch.tensor([1, SKV + 1, 3])), ValueError, "JATTN_ERROR_INVALID_ARGUMENT"),  # the library's
        (dict(kv_len=torch.tensor([1, -1, 3])), ValueError, "JATTN_ERROR_INVALID_ARGUMENT"),
    ]
    out = torch.full((B, H, SQ, D), 5.0)
    for kwargs, exc, status in cases:
        with pytest.raises(exc) as info:
            jattn.attention(tq, tk, tv, backend="ref", out=out, **kwargs)
        assert info.value.status_name == status, (kwargs, str(info.value))
    assert (out == 5.0).all()
    with pytest.raises(TypeError):
        jattn.attention(tq, tk, tv, key_padding_mask=mask)  # a numpy mask with torch tensors
