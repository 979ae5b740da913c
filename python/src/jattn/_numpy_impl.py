"""The numpy front end: host arrays to one jattn call on the host backends.

numpy strides are in bytes; jattn's are in elements, so every stride of q, k, v and ``out``
must be a multiple of 4 bytes (any array of float32 that numpy creates itself is). The GIL is
released during the C call (ctypes.CDLL).
"""

from __future__ import annotations

from ctypes import byref
from typing import Dict, Optional, Tuple

import numpy as np

from . import _clib, _context, _exec, _problem
from ._errors import invalid, raise_for_status

_F32 = np.dtype(np.float32)  # native byte order


def _float32_view(name: str, a: object) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    if type(a) is not np.ndarray and not isinstance(a, np.ndarray):
        raise TypeError(f"jattn: {name} is a {type(a).__name__}; with numpy inputs every array must be a numpy.ndarray")
    if a.dtype is not _F32 and a.dtype != _F32:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"{name}: dtype {a.dtype}; jattn takes float32 arrays (native byte order; nothing is cast silently: pass "
            f"{name}.astype(numpy.float32))",
        )
    strides = a.strides
    if any(s & 3 for s in strides):
        raise invalid(_clib.JATTN_ERROR_INVALID_STRIDE, f"{name}: byte strides {strides} are not whole float32 elements")
    return a.shape, tuple([s >> 2 for s in strides])


def _mask_view(mask: object) -> Tuple[np.ndarray, Tuple]:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"jattn: key_padding_mask is a {type(mask).__name__}, must be a numpy array like q")
    if mask.dtype not in (np.bool_, np.uint8):
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"key_padding_mask: dtype {mask.dtype}, must be bool or uint8 (True / nonzero = attend)",
        )
    if mask.ndim >= 1 and mask.shape[-1] > 1 and mask.strides[-1] != 1:
        mask = np.ascontiguousarray(mask)  # rows of bytes; only this case is copied
    return mask, (mask.shape, mask.strides, mask.ctypes.data)


def _kv_len_view(kv_len: object) -> Tuple[np.ndarray, Tuple]:
    if not isinstance(kv_len, np.ndarray):
        raise TypeError(f"jattn: kv_len is a {type(kv_len).__name__}, must be a numpy array like q")
    if kv_len.dtype != np.dtype(np.int64):
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"kv_len: dtype {kv_len.dtype}, must be int64")
    kv_len = np.ascontiguousarray(kv_len)
    return kv_len, (kv_len.shape, kv_len.ctypes.data)


_PROBLEMS: Dict[tuple, _clib.Problem] = {}


def _problem_of(
    layout: str, scale: Optional[float], q: np.ndarray, k: np.ndarray, v: np.ndarray, out: Optional[np.ndarray]
) -> _clib.Problem:
    """The problem of the arrays, memoised on their shapes and byte strides (see
    ``_problem.cached_problem``; the struct is shared: read it, never write it)."""
    key = (layout, scale, q.shape, q.strides, k.shape, k.strides, v.shape, v.strides,
           None if out is None else (out.shape, out.strides))  # fmt: skip
    problem = _PROBLEMS.get(key)
    if problem is None:
        views = [_float32_view(name, a) for name, a in (("q", q), ("k", k), ("v", v))]
        ov = _float32_view("out", out) if out is not None else None
        problem = _problem.make_problem(layout, scale, views[0], views[1], views[2], ov)
        if len(_PROBLEMS) >= 1024:
            _PROBLEMS.clear()
        _PROBLEMS[key] = problem
    return problem


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    out: Optional[np.ndarray],
    return_lse: bool,
    key_padding_mask: Optional[np.ndarray],
    kv_len: Optional[np.ndarray],
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """One jattn call on numpy arrays; returns ``(out, lse or None)``."""
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out)):
        if a is not None and (type(a) is not np.ndarray or a.dtype is not _F32):
            _float32_view(name, a)  # raises for anything but a float32 ndarray (subclasses pass)
    if out is not None and not out.flags.writeable:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, "out: a read-only array")
    problem = _problem_of(layout, scale, q, k, v, out)
    padding = None
    keep = None
    if key_padding_mask is not None or kv_len is not None:
        mask_a, mask_info = _mask_view(key_padding_mask) if key_padding_mask is not None else (None, None)
        len_a, len_info = _kv_len_view(kv_len) if kv_len is not None else (None, None)
        padding = _problem.key_padding(problem, mask_info, len_info)
        keep = (mask_a, len_a)
    exec_ = _exec.host_exec(backend, precision, threads)
    result = np.empty(q.shape, dtype=_F32) if out is None else out
    lse = np.empty(_problem.lse_shape(q.ndim, problem), dtype=_F32) if return_lse else None
    status = _clib.forward_padded(
        _context.thread_context(), byref(problem), byref(exec_), q.ctypes.data, k.ctypes.data, v.ctypes.data,
        byref(padding) if padding is not None else None, result.ctypes.data,
        lse.ctypes.data if lse is not None else None,
    )  # fmt: skip
    del keep
    raise_for_status(status)
    return result, lse


def select(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, layout: str, scale: Optional[float], backend: str, precision: str,
    threads: int,
) -> _clib.Selection:  # fmt: skip
    """``jattn_select`` for the call ``attention`` would make on these arrays."""
    problem = _problem.make_problem(
        layout, scale, _float32_view("q", q), _float32_view("k", k), _float32_view("v", v), None
    )
    exec_ = _exec.make_exec(backend, precision, threads, False)
    selection = _clib.Selection()
    raise_for_status(_clib.select(byref(problem), byref(exec_), byref(selection)))
    return selection
