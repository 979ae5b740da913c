"""The numpy front end: host arrays to one run of a cached jattn plan on the host backends.

numpy strides are in bytes; jattn's are in elements, so every stride of q, k, v and ``out``
must be a multiple of 4 bytes (any array of float32 that numpy creates itself is). Each call
looks up the plan made for its kind of call (``_plan``; shapes, byte strides, options, the mask's
structure, the pointers' alignment class) and runs it with the calling thread's ``jattn_ctx``. The
GIL is released during the C call (ctypes.CDLL). numpy has no autograd: the forward only.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from . import _clib, _context, _plan, _problem
from ._errors import invalid, raise_for_status
from ._options import Options
from ._problem import MaskArrays

_F32 = np.dtype(np.float32)  # native byte order
_I64 = np.dtype(np.int64)
_FWD = _clib.JATTN_PASS_FORWARD


def _float32_view(name: str, a: object) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    if type(a) is not np.ndarray and not isinstance(a, np.ndarray):
        raise TypeError(f"jattn: {name} is a {type(a).__name__}; with numpy inputs every array must be a numpy.ndarray")
    if a.dtype is not _F32 and a.dtype != _F32:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"{name}: dtype {a.dtype}; jattn takes float32 arrays (native byte order; nothing is cast silently: pass "
            f"{name}.astype(numpy.float32))",
        )
    return a.shape, _elements(name, a.strides, 4)


def _elements(name: str, strides: Tuple[int, ...], size: int) -> Tuple[int, ...]:
    if any(s % size for s in strides):
        raise invalid(
            _clib.JATTN_ERROR_INVALID_STRIDE, f"{name}: byte strides {strides} are not whole elements of {size} bytes"
        )
    return tuple([s // size for s in strides])


def _array(name: str, a: object, dtypes: Tuple[np.dtype, ...], what: str, contiguous: bool) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"jattn: {name} is a {type(a).__name__}, must be a numpy array like q")
    if a.dtype not in dtypes:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"{name}: dtype {a.dtype}, must be {what}")
    if contiguous:
        return np.ascontiguousarray(a)
    if a.ndim >= 1 and a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
        return np.ascontiguousarray(a)  # rows; only this case is copied
    return a


_OFFSETS = "int64 offsets"


def _mask_arrays(masks: MaskArrays) -> MaskArrays:
    padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k = masks
    if padding_mask is not None:
        padding_mask = _array("key_padding_mask", padding_mask, (np.dtype(np.bool_), np.dtype(np.uint8)),
                              "bool or uint8 (True / nonzero = attend)", False)  # fmt: skip
    if kv_len is not None:
        kv_len = _array("kv_len", kv_len, (_I64,), "int64", True)
    if block_q is not None:
        block_q = _array("block_offsets", block_q, (_I64,), _OFFSETS, True)
    if block_kv is not None:
        block_kv = _array("block_offsets[1]", block_kv, (_I64,), _OFFSETS, True)
    if bias is not None:
        bias = _array("key_bias", bias, (_F32,), "float32 (additive; -inf leaves a key out)", False)
    if cu_q is not None:
        cu_q = _array("cu_seqlens_q", cu_q, (_I64,), _OFFSETS, True)
    if cu_k is not None:
        cu_k = _array("cu_seqlens_k", cu_k, (_I64,), _OFFSETS, True)
    return MaskArrays(padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k)


def _mask_key(arrays: MaskArrays) -> tuple:
    return tuple(None if a is None else (a.shape, a.strides) for a in arrays)


def _plan_of(opts: Options, q: np.ndarray, k: np.ndarray, v: np.ndarray, out: Optional[np.ndarray],
             arrays: Optional[MaskArrays], alignment: int) -> _plan.Plan:  # fmt: skip
    """The plan of a call (made on its kind's first call, then cached)."""
    mask_key = None if arrays is None else _mask_key(arrays)
    out_key = None if out is None else (out.shape, out.strides)
    key = ("numpy", opts, q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, out_key, mask_key, alignment)
    plan = _plan.cached(key)
    if plan is not None:
        return plan
    views = [_float32_view(name, a) for name, a in (("q", q), ("k", k), ("v", v))]
    out_view = _float32_view("out", out) if out is not None else None
    problem = _problem.make_problem(opts, views[0], views[1], views[2], out_view)
    mask_views = None
    if arrays is not None:
        mask_views = MaskArrays(*(None if a is None else (a.shape, _elements(name, a.strides, a.itemsize))
                                  for name, a in zip(_problem.MASK_NAMES, arrays)))  # fmt: skip
    mask = _problem.make_mask(problem, opts, mask_views)
    plan = _plan.make_plan(_FWD, problem, None, mask, opts, False, alignment)
    plan.extra = _problem.lse_shape(q.ndim, problem)
    return _plan.remember(key, plan)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    opts: Options,
    out: Optional[np.ndarray],
    masks: Optional[MaskArrays],
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """One jattn forward on numpy arrays with validated options; returns ``(out, lse or None)``."""
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out)):
        if a is not None and (type(a) is not np.ndarray or a.dtype is not _F32):
            _float32_view(name, a)  # raises for anything but a float32 ndarray (subclasses pass)
    if out is not None and not out.flags.writeable:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, "out: a read-only array")
    arrays = _mask_arrays(masks) if masks is not None else None
    result = np.empty(q.shape, dtype=_F32) if out is None else out
    qp, kp, vp, op = _address(q), _address(k), _address(v), _address(result)
    # a fresh output is 16-byte aligned at least (numpy's allocator): the plan assumes no more of it
    alignment = _plan.alignment_of(qp | kp | vp | (16 if out is None else op), _plan.HOST_ALIGNMENT)
    plan = _plan_of(opts, q, k, v, out, arrays, alignment)
    lse = np.empty(plan.extra, dtype=_F32) if opts.return_lse else None
    mask = None
    if plan.mask is not None:
        mask = plan.mask
        if arrays is not None:
            mask = _problem.fill_mask(mask, MaskArrays(*(None if a is None else _address(a) for a in arrays)))
    status = _clib.plan_forward(plan.handle, _context.thread_context(), None, None, 0, qp, kp, vp, mask, op,
                                _address(lse) if lse is not None else None)  # fmt: skip
    if status:
        raise_for_status(status)
    return result, lse


def plan_of_call(q: np.ndarray, k: np.ndarray, v: np.ndarray, opts: Options, masks: Optional[MaskArrays]) -> _plan.Plan:
    """The plan ``attention`` makes and runs for these arrays (nothing is computed)."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        _float32_view(name, a)
    arrays = _mask_arrays(masks) if masks is not None else None
    alignment = _plan.alignment_of(_address(q) | _address(k) | _address(v) | 16, _plan.HOST_ALIGNMENT)
    return _plan_of(opts, q, k, v, None, arrays, alignment)
