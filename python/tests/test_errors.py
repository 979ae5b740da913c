"""Every error: each jattn status as its exception (status name and the library's message),
the Python layer's own refusals, and nothing written to out= (nor to any input) on failure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
from jattn import _clib
from jattn._errors import error_from_status


def qkv(shape=(1, 2, 16, 32), dtype=torch.float32):
    return torch.randn(shape).to(dtype), torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)


def expect(exc_type, status_name: str, fn, *, match: str = ""):
    with pytest.raises(exc_type) as info:
        fn()
    err = info.value
    assert isinstance(err, jattn.JattnError)
    assert err.status_name == status_name, str(err)
    assert str(err).startswith(status_name + ": ") and err.message
    if match:
        assert match in err.message, err.message
    return err


def test_every_status_maps_to_its_exception():
    value = {1, 2, 3, 4, 5, 6, 7, 8}
    for code in range(1, _clib.JATTN_STATUS_COUNT):
        err = error_from_status(code, "msg")
        assert err.status == code and err.status_name == _clib.status_name(code)
        if code in value:
            assert isinstance(err, ValueError) and not isinstance(err, RuntimeError)
        elif code == _clib.JATTN_ERROR_UNSUPPORTED:
            assert isinstance(err, NotImplementedError) and isinstance(err, RuntimeError)
        else:
            assert isinstance(err, RuntimeError) and not isinstance(err, ValueError)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int32])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_non_float32_is_refused_not_cast(dtype, which):
    args = list(qkv())
    args[which] = args[which].to(dtype)
    err = expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(*args), match="float32")
    assert "qkv"[which] in err.message
    n = [a.float().numpy() for a in args]
    n[which] = n[which].astype(np.float64)
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(*n), match="float32")


def test_big_endian_numpy_is_refused():
    q, k, v = (x.numpy() for x in qkv())
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q.astype(">f4"), k, v), match="float32")


def test_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError):
        jattn.attention([1.0], k, v)
    with pytest.raises(TypeError):
        jattn.attention(q.numpy(), k, v.numpy())  # numpy q with a torch k


def test_tensors_on_different_devices():
    q, k, v = qkv()
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k.to("meta"), v), match="one device")
    out = torch.empty(1, 2, 16, 32, device="meta")
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k, v, out=out), match="device")


def test_last_dimension_must_be_contiguous():
    q, k, v = qkv((1, 2, 32, 32))
    bad = k.transpose(-1, -2)  # [1, 2, 32(D), 32(S)] with stride 32 over D
    expect(ValueError, "JATTN_ERROR_INVALID_STRIDE", lambda: jattn.attention(q, bad, v), match="contiguous")
    expect(ValueError, "JATTN_ERROR_INVALID_STRIDE",
           lambda: jattn.attention(q.numpy(), bad.numpy(), v.numpy()), match="contiguous")  # fmt: skip


@pytest.mark.parametrize(
    "k_shape, v_shape, what",
    [
        ((2, 2, 16, 32), (2, 2, 16, 32), "batch"),
        ((1, 3, 16, 32), (1, 3, 16, 32), "heads"),
        ((1, 2, 16, 16), (1, 2, 16, 16), "head_dim"),
        ((1, 2, 16, 32), (1, 2, 15, 32), "seq_kv"),
        ((2, 16, 32), (2, 16, 32), "same number of dimensions"),
    ],
)
def test_mismatched_shapes(k_shape, v_shape, what):
    q = torch.randn(1, 2, 16, 32)
    err = expect(ValueError, "JATTN_ERROR_INVALID_DIMENSION",
                 lambda: jattn.attention(q, torch.randn(k_shape), torch.randn(v_shape)))  # fmt: skip
    assert what in err.message


def test_two_d_and_five_d_tensors():
    x = torch.randn(16, 32)
    expect(ValueError, "JATTN_ERROR_INVALID_DIMENSION", lambda: jattn.attention(x, x, x), match="2-d")
    y = torch.randn(1, 1, 2, 16, 32)
    expect(ValueError, "JATTN_ERROR_INVALID_DIMENSION", lambda: jattn.attention(y, y, y), match="5-d")


def test_bad_out():
    q, k, v = qkv()
    for bad, status in [
        (torch.empty(1, 2, 16, 31), "JATTN_ERROR_INVALID_DIMENSION"),
        (torch.empty(1, 16, 2, 32), "JATTN_ERROR_INVALID_DIMENSION"),
        (torch.empty(1, 2, 16, 32, dtype=torch.float64), "JATTN_ERROR_INVALID_ARGUMENT"),
        (torch.empty(1, 2, 32, 16).transpose(-1, -2), "JATTN_ERROR_INVALID_STRIDE"),
    ]:
        bad.fill_(3)
        expect(ValueError, status, lambda: jattn.attention(q, k, v, out=bad))
        assert (bad == 3).all()
    ro = np.zeros((1, 2, 16, 32), dtype=np.float32)
    ro.flags.writeable = False
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q.numpy(), k.numpy(), v.numpy(), out=ro))


def test_nothing_is_written_on_failure():
    q, k, v = qkv()
    keep_q = q.clone()
    # out overlapping q: the library refuses before writing anything (q is unchanged)
    expect(ValueError, "JATTN_ERROR_ALIASING", lambda: jattn.attention(q, k, v, out=q), match="overlaps")
    assert torch.equal(q, keep_q)
    out = torch.full((1, 2, 16, 32), 7.0)
    expect(ValueError, "JATTN_ERROR_INVALID_SCALE", lambda: jattn.attention(q, k, v, scale=-1.0, out=out))
    expect(NotImplementedError, "JATTN_ERROR_UNSUPPORTED",
           lambda: jattn.attention(q, k, v, precision="tf32", backend="cpu", out=out), match="precision")  # fmt: skip
    assert (out == 7.0).all()


def test_scale():
    q, k, v = qkv()
    expect(ValueError, "JATTN_ERROR_INVALID_SCALE", lambda: jattn.attention(q, k, v, scale=0.0), match="None means")
    expect(ValueError, "JATTN_ERROR_INVALID_SCALE", lambda: jattn.attention(q, k, v, scale=float("nan")))
    expect(ValueError, "JATTN_ERROR_INVALID_SCALE", lambda: jattn.attention(q, k, v, scale=-0.5))


def test_bad_options():
    q, k, v = qkv()
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k, v, layout="bsdh"), match="layout")
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k, v, backend="gpu"), match="backend")
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k, v, precision="bf16"))
    expect(ValueError, "JATTN_ERROR_INVALID_ARGUMENT", lambda: jattn.attention(q, k, v, threads=-1), match="threads")


def test_library_statuses_come_with_the_librarys_message():
    # a zero head_dim: the library's dimension check (zero batch, heads and sequences are served)
    z = torch.empty(1, 2, 16, 0)
    expect(ValueError, "JATTN_ERROR_INVALID_DIMENSION", lambda: jattn.attention(z, z, z), match="head_dim")
    q, k, v = qkv()
    # tokens overlapping each other: the library's self-overlap check
    base = torch.randn(64)
    overlapping = base.as_strided((1, 2, 16, 32), (0, 0, 1, 1))
    expect(ValueError, "JATTN_ERROR_SELF_OVERLAP", lambda: jattn.attention(q, overlapping, v))
    # a negative stride (numpy only) and an overflowing extent
    qn, kn, vn = (x.numpy() for x in qkv())
    expect(ValueError, "JATTN_ERROR_INVALID_STRIDE", lambda: jattn.attention(qn, kn[:, :, ::-1], vn))
    qn, kn, vn = (x.numpy() for x in qkv((1, 5, 16, 32)))
    # heads 2^61 - 1 elements apart: 4 strides overflow int64 (refused before anything is read)
    huge = np.lib.stride_tricks.as_strided(kn, (1, 5, 16, 32), (0, 2**63 - 4, 128, 4))
    expect(ValueError, "JATTN_ERROR_OVERFLOW", lambda: jattn.attention(qn, huge, vn))


@pytest.mark.skipif(any(b.name == "cuda" and b.available for b in jattn.backends()), reason="a GPU is present")
def test_cuda_backend_unavailable_here():
    q, k, v = qkv()
    expect(RuntimeError, "JATTN_ERROR_BACKEND_UNAVAILABLE", lambda: jattn.attention(q, k, v, backend="cuda"))
    expect(RuntimeError, "JATTN_ERROR_BACKEND_UNAVAILABLE", lambda: jattn.select(q, k, v, backend="cuda"))


def test_autograd_where_it_cannot_be_served():
    """out= writes in place: never differentiable (test_autograd.py checks the gradients where they
    are served)."""
    q, k, v = qkv()
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="cannot be differentiated"):
        jattn.attention(q, k, v, out=torch.empty(q.shape))
    with torch.no_grad():
        jattn.attention(q, k, v)


def test_select_raises_like_attention():
    q, k, v = qkv()
    expect(ValueError, "JATTN_ERROR_INVALID_DIMENSION", lambda: jattn.select(q, torch.randn(1, 3, 16, 32), v))
    expect(
        NotImplementedError, "JATTN_ERROR_UNSUPPORTED", lambda: jattn.select(q, k, v, precision="tf32", backend="cpu")
    )
