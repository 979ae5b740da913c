"""jattn.attention on CPU torch tensors and numpy arrays against a float64 reference: both
layouts, 3-d and 4-d, cross-attention, strided views (the fused QKV view), out=, lse, scale,
threads and backends; outputs poisoned with NaN before each call and checked element by element."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
from jattn import _clib
from jattn_testing import DISTRIBUTIONS, assert_gate, draw_qkv, fused_qkv, reference

# (B, H, Sq, Skv, D): the origin parity set, sizes that are no tile multiple, batch > 1, cross-attention
SHAPES = [
    (1, 2, 8, 8, 128),
    (1, 2, 40, 40, 128),
    (1, 1, 50, 50, 128),
    (2, 3, 33, 65, 64),
    (1, 2, 127, 129, 72),
    (3, 1, 7, 1, 16),
    (1, 4, 1, 77, 1),
]


def shape_of(layout: str, b: int, h: int, s: int, d: int, three_d: bool):
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    return shape[1:] if three_d else shape


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_parity_torch_and_numpy(rng, shape, layout, dist):
    b, h, sq, skv, d = shape
    three_d = b == 1 and sq % 2 == 0  # half of the batch-1 cases as 3-d tensors
    q, k, v, scale = draw_qkv(rng, shape_of(layout, b, h, sq, d, three_d), shape_of(layout, b, h, skv, d, three_d),
                              dist, d)  # fmt: skip
    ref, ref_lse = reference(q, k, v, layout, scale)
    out_t, lse_t = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), layout=layout,
                                   scale=scale, return_lse=True)  # fmt: skip
    assert out_t.shape == q.shape and out_t.dtype == torch.float32 and out_t.is_contiguous()
    assert lse_t.shape == ref_lse.shape
    assert_gate(out_t.numpy(), ref, what=f"torch {layout} {dist}")
    assert_gate(lse_t.numpy(), ref_lse, what="lse")
    out_n = np.full(q.shape, np.nan, dtype=np.float32)
    res = jattn.attention(q, k, v, layout=layout, scale=scale, out=out_n)
    assert res is out_n
    assert np.array_equal(out_n, out_t.numpy())  # numpy and torch: the same call, the same bits


def test_fused_qkv_views_are_read_in_place(rng):
    q, k, v, qkv = fused_qkv(rng, 2, 96, 3, 64)
    assert not q.flags.c_contiguous
    ref, _ = reference(q, k, v, "bshd")
    tq, tk, tv = torch.from_numpy(qkv).unbind(2)
    assert tq.data_ptr() == torch.from_numpy(qkv).data_ptr()  # a view, not a copy
    assert_gate(jattn.attention(tq, tk, tv, layout="bshd").numpy(), ref, what="torch fused qkv")
    assert_gate(jattn.attention(q, k, v, layout="bshd"), ref, what="numpy fused qkv")
    # the same views as bhsd (a permuted view of [B, S, H, D])
    out = jattn.attention(tq.transpose(1, 2), tk.transpose(1, 2), tv.transpose(1, 2))
    assert_gate(out.numpy(), np.swapaxes(ref, 1, 2), what="bhsd view of the fused qkv")


def test_out_with_its_own_strides(rng):
    q, k, v, _ = draw_qkv(rng, (2, 3, 20, 32), (2, 3, 24, 32), "normal", 32)
    ref, _ = reference(q, k, v)
    # out as a bhsd view of a token-major [B, S, H*D] buffer with padded rows
    buf = torch.full((2, 20, 3 * 32 + 8), float("nan"))
    out = buf[:, :, : 3 * 32].unflatten(2, (3, 32)).transpose(1, 2)
    res = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), out=out)
    assert res is out
    assert_gate(out.numpy(), ref, what="strided out")
    assert torch.isnan(buf[:, :, 3 * 32 :]).all(), "the padding beyond out was written"


def test_out_and_return_lse(rng):
    q, k, v, _ = draw_qkv(rng, (1, 30, 2, 16), (1, 30, 2, 16), "peaky", 16)
    ref, ref_lse = reference(q, k, v, "bshd")
    out = torch.full((1, 30, 2, 16), float("nan"))
    res, lse = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), layout="bshd",
                               out=out, return_lse=True)  # fmt: skip
    assert res is out and lse.shape == (1, 2, 30) and lse.dtype == torch.float32
    assert_gate(out.numpy(), ref, what="out")
    assert_gate(lse.numpy(), ref_lse, what="lse")


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_explicit_scale(rng, kind):
    q, k, v, _ = draw_qkv(rng, (2, 17, 48), (2, 19, 48), "normal", 48)
    ref, _ = reference(q, k, v, scale=0.37)
    args = (q, k, v) if kind == "numpy" else tuple(map(torch.from_numpy, (q, k, v)))
    out = jattn.attention(*args, scale=0.37)
    assert_gate(np.asarray(out), ref, what="scale 0.37")


def test_threads_give_the_same_bits(rng):
    q, k, v, _ = draw_qkv(rng, (1, 4, 200, 64), (1, 4, 300, 64), "normal", 64)
    one = jattn.attention(q, k, v, threads=1)
    two = jattn.attention(q, k, v, threads=2)
    every = jattn.attention(q, k, v)  # threads=0: all cores
    assert np.array_equal(one, two) and np.array_equal(one, every)
    assert jattn.select(q, k, v, threads=1).threads == 1
    assert jattn.select(q, k, v, threads=2).threads == 2


def test_ref_backend_is_the_reference(rng):
    q, k, v, _ = draw_qkv(rng, (1, 2, 9, 24), (1, 2, 11, 24), "uniform", 24)
    ref, _ = reference(q, k, v)
    out = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), backend="ref")
    m = assert_gate(out.numpy(), ref, what="ref backend")
    assert m["rel_l2"] <= 1e-7  # float64 inside: only the final rounding to float32


def test_inputs_are_not_modified(rng):
    q, k, v, _ = draw_qkv(rng, (1, 2, 16, 32), (1, 2, 16, 32), "normal", 32)
    copies = [x.copy() for x in (q, k, v)]
    for x in (q, k, v):
        x.flags.writeable = False  # read-only inputs are fine
    jattn.attention(q, k, v)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), copies))


def test_select_and_backends():
    q = torch.zeros(1, 24, 1536, 128)
    sel = jattn.select(q, q, q)
    assert sel.backend == "cpu" and sel.kernel.startswith("cpu_") and sel.threads >= 1
    assert jattn.select(q, q, q, backend="ref").backend == "ref"
    assert jattn.select(q.numpy(), q.numpy(), q.numpy()).kernel == sel.kernel
    listed = jattn.backends()
    found = {b.name: b for b in listed}
    # every backend the library numbers, once (jattn_backend_name, another C call than the list's)
    names = {_clib.backend_name(i).decode() for i in range(_clib.JATTN_BACKEND_AUTO + 1, _clib.JATTN_BACKEND_COUNT)}
    assert len(listed) == len(found) == len(names) and set(found) == names
    assert found["ref"].available and found["cpu"].available and sel.kernel in found["cpu"].detail
    # backend="auto" on host tensors: the first backend, in the library's order, that computes on the CPU
    assert sel.backend == next(b.name for b in listed if not b.is_gpu)
    for b in listed:
        assert b.memory in ("host", "device") and (b.available or "JATTN_ERROR_" in b.detail), b


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_vk_backend_on_host_tensors(rng, layout):
    """backend="vk" on CPU torch tensors and numpy arrays (host memory), lse included; skipped
    where no Vulkan device is usable (CI runs it on lavapipe)."""
    vk = {b.name: b for b in jattn.backends()}["vk"]
    if not vk.available:
        pytest.skip(f"vk: {vk.detail}")
    q, k, v, scale = draw_qkv(rng, shape_of(layout, 2, 3, 70, 64, False), shape_of(layout, 2, 3, 90, 64, False),
                              "normal", 64)  # fmt: skip
    ref, ref_lse = reference(q, k, v, layout, scale)
    out_t, lse_t = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), layout=layout,
                                   scale=scale, return_lse=True, backend="vk")  # fmt: skip
    assert_gate(out_t.numpy(), ref)
    assert_gate(lse_t.numpy(), ref_lse)
    out_n = jattn.attention(q, k, v, layout=layout, scale=scale, backend="vk")
    assert np.array_equal(out_n, out_t.numpy())  # deterministic, whatever the container
    assert jattn.select(q, k, v, layout=layout, backend="vk").kernel.startswith("vk_flash_f32_d64")
