"""From tensor shapes and element strides to a ``jattn_problem``, for any array library.

The torch and numpy front ends reduce their arrays to ``(shape, element strides)`` tuples and
call :func:`make_problem`; everything about layouts, 3-d versus 4-d tensors and the checks that
give a clear message before the C library is reached lives here, once.

Layouts (``D`` = head_dim, always the last, contiguous dimension):

- ``"bhsd"``: q ``[B, H, Sq, D]``, k and v ``[B, H, Skv, D]`` (head-major);
- ``"bshd"``: q ``[B, Sq, H, D]``, k and v ``[B, Skv, H, D]`` (token-major, as diffusers and
  FlashAttention hold them).

3-d tensors drop ``B`` (``B = 1``). The output has q's shape and layout; lse is float32
``[B, H, Sq]`` (``[H, Sq]`` for 3-d inputs), contiguous.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from . import _clib
from ._clib import KeyPadding, Problem, Strides
from ._errors import invalid
from ._options import Options

Dims = Tuple[int, int, int, int, Strides]  # (batch, heads, seq, head_dim, strides)


def tensor_dims(name: str, shape: Sequence[int], strides: Sequence[int], layout: str) -> Dims:
    """(B, H, S, D, strides) of one tensor of the given layout; element strides in.

    A dimension of extent 1 gets stride 0 (it is never stepped over, and jattn allows 0 there),
    so the arbitrary strides array libraries give such dimensions never matter.
    """
    nd = len(shape)
    if nd == 4:
        b, x1, x2, d = shape
        sb, s1, s2, sd = strides
    elif nd == 3:
        x1, x2, d = shape
        s1, s2, sd = strides
        b, sb = 1, 0
    else:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"{name}: a {nd}-d tensor; jattn takes 4-d [B, H, S, D] / [B, S, H, D] tensors, or 3-d without B",
        )
    if sd != 1 and d != 1:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_STRIDE,
            f"{name}: the last dimension (head_dim) must be contiguous (stride 1), its stride is {sd}",
        )
    if layout == "bhsd":
        h, s, sh, ss = x1, x2, s1, s2
    else:
        s, h, ss, sh = x1, x2, s1, s2
    return (
        b,
        h,
        s,
        d,
        Strides(sb if b != 1 else 0, sh if h != 1 else 0, ss if s != 1 else 0),
    )


def _mismatch(name: str, what: str, got: int, want: int, ref: str) -> Exception:
    return invalid(_clib.JATTN_ERROR_INVALID_DIMENSION, f"{name}: {what} {got} does not match {ref}'s {want}")


def make_problem(
    opts: Options,
    q: Tuple[Sequence[int], Sequence[int]],
    k: Tuple[Sequence[int], Sequence[int]],
    v: Tuple[Sequence[int], Sequence[int]],
    out: Optional[Tuple[Sequence[int], Sequence[int]]],
) -> Problem:
    """The ``jattn_problem`` of q, k, v (and ``out``, or a contiguous output of q's layout),
    each given as ``(shape, element strides)``, with the layout and scale of ``opts``; raises
    ``JattnValueError`` on a mismatch."""
    layout = opts.layout
    qshape = q[0]
    bq, hq, sq, dq, q_strides = tensor_dims("q", qshape, q[1], layout)
    bk, hk, sk, dk, k_strides = tensor_dims("k", k[0], k[1], layout)
    bv, hv, sv, dv, v_strides = tensor_dims("v", v[0], v[1], layout)
    nd = len(qshape)
    if len(k[0]) != nd or len(v[0]) != nd:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"q, k, v: {nd}-d, {len(k[0])}-d and {len(v[0])}-d tensors; all three must have the same number of dimensions",
        )
    if bk != bq:
        raise _mismatch("k", "batch", bk, bq, "q")
    if bv != bq:
        raise _mismatch("v", "batch", bv, bq, "q")
    if hk != hq:
        raise _mismatch("k", "heads", hk, hq, "q")  # GQA / MQA: not supported
    if hv != hq:
        raise _mismatch("v", "heads", hv, hq, "q")
    if dk != dq:
        raise _mismatch("k", "head_dim", dk, dq, "q")
    if dv != dq:
        raise _mismatch("v", "head_dim", dv, dq, "q")
    if sv != sk:
        raise _mismatch("v", "seq_kv", sv, sk, "k")
    if out is None:
        out_strides = contiguous_out_strides(layout, hq, sq, dq)
    else:
        if tuple(out[0]) != tuple(qshape):
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"out: shape {list(out[0])}, must be q's shape {list(qshape)} (the output has q's layout)",
            )
        out_strides = tensor_dims("out", out[0], out[1], layout)[4]
    scale_value = 0.0 if opts.scale is None else opts.scale  # 0: the library's 1/sqrt(D)
    return Problem(bq, hq, sq, sk, dq, scale_value, _clib.JATTN_DTYPE_F32, q_strides, k_strides, v_strides, out_strides)


_PROBLEMS: Dict[tuple, Problem] = {}
_PROBLEMS_LIMIT = 1024


def cached_problem(
    opts: Options,
    q: Tuple[Sequence[int], Sequence[int]],
    k: Tuple[Sequence[int], Sequence[int]],
    v: Tuple[Sequence[int], Sequence[int]],
    out: Optional[Tuple[Sequence[int], Sequence[int]]],
) -> Problem:
    """:func:`make_problem`, memoised on its (hashable) arguments: a model calls attention with a
    handful of shapes, and building the ctypes struct costs more than the rest of a call. The
    struct returned is shared: read it, never write it."""
    key = (opts.layout, opts.scale, q, k, v, out)
    problem = _PROBLEMS.get(key)
    if problem is None:
        problem = make_problem(opts, q, k, v, out)
        if len(_PROBLEMS) >= _PROBLEMS_LIMIT:
            _PROBLEMS.clear()
        _PROBLEMS[key] = problem
    return problem


def contiguous_out_strides(layout: str, heads: int, seq: int, head_dim: int) -> Strides:
    """Strides of a contiguous output of the layout (extent-1 dimensions get 0, as in tensor_dims)."""
    if layout == "bhsd":
        return Strides(heads * seq * head_dim, seq * head_dim if heads != 1 else 0, head_dim if seq != 1 else 0)
    return Strides(heads * seq * head_dim, head_dim if heads != 1 else 0, heads * head_dim if seq != 1 else 0)


def lse_shape(q_ndim: int, problem: Problem) -> Tuple[int, ...]:
    """lse's shape: ``[B, H, Sq]``, or ``[H, Sq]`` for 3-d inputs."""
    if q_ndim == 3:
        return (problem.heads, problem.seq_q)
    return (problem.batch, problem.heads, problem.seq_q)


def key_padding(
    problem: Problem,
    mask: Optional[Tuple[Sequence[int], Sequence[int], int]],
    kv_len: Optional[Tuple[Sequence[int], int]],
) -> Optional[KeyPadding]:
    """The ``jattn_key_padding`` of a key mask given as ``(shape, byte strides, pointer)``
    (``[B, Skv]``, ``[1, Skv]`` or ``[Skv]``, last dimension contiguous) and/or key lengths
    given as ``(shape, pointer)`` (``[B]``, contiguous int64); None when neither is given."""
    if mask is None and kv_len is None:
        return None
    padding = KeyPadding()
    if mask is not None:
        shape, strides, ptr = mask
        if len(shape) == 1:
            rows, row_stride, keys, key_stride = 1, 0, shape[0], strides[0]
        elif len(shape) == 2:
            rows, keys = shape
            row_stride, key_stride = strides
        else:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"key_padding_mask: a {len(shape)}-d mask; it must be [B, Skv] or [Skv] (True = attend)",
            )
        if keys != problem.seq_kv:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"key_padding_mask: {keys} keys, must equal seq_kv ({problem.seq_kv})",
            )
        if rows not in (1, problem.batch):
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"key_padding_mask: {rows} rows, must be 1 or batch ({problem.batch})",
            )
        if key_stride != 1 and keys != 1:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_STRIDE,
                f"key_padding_mask: the key dimension must be contiguous (stride 1), its stride is {key_stride}",
            )
        if rows == 1 or row_stride == 0:  # one row for every batch (a broadcast row too)
            padding.mask_batch, padding.mask_batch_stride = 1, 0
        else:
            padding.mask_batch, padding.mask_batch_stride = rows, row_stride
        padding.mask = ptr
        padding.mask_keys = keys
    if kv_len is not None:
        shape, ptr = kv_len
        if tuple(shape) != (problem.batch,):
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"kv_len: shape {list(shape)}, must be [batch] = [{problem.batch}]",
            )
        padding.kv_len = ptr
    return padding
