"""From tensor shapes and element strides to a ``jattn_problem`` and a ``jattn_mask``, for any
array library.

The torch and numpy front ends reduce their arrays to ``(shape, element strides)`` tuples and
call :func:`make_problem` and :func:`make_mask`; everything about layouts, 3-d versus 4-d tensors,
grouped-query heads, the mask arrays' shapes and the checks that give a clear message before the C
library is reached lives here, once. What they make is the structure a plan is made for
(``_plan``): the mask's arrays are given per run, by :func:`fill_mask`.

Layouts (``D`` = head_dim, always the last, contiguous dimension):

- ``"bhsd"``: q ``[B, H, Sq, D]``, k and v ``[B, H, Skv, D]`` (head-major);
- ``"bshd"``: q ``[B, Sq, H, D]``, k and v ``[B, Skv, H, D]`` (token-major, as diffusers and
  FlashAttention hold them).

3-d tensors drop ``B`` (``B = 1``). k and v may have fewer heads than q (``enable_gqa``: a divisor
of q's). The output has q's shape and layout; lse is float32 ``[B, H, Sq]`` (``[H, Sq]`` for 3-d
inputs), contiguous. Any of B, H, Sq and Skv may be 0 (PyTorch's answers: a query row with no key
gives 0, lse -inf).
"""

from __future__ import annotations

from ctypes import addressof, c_int64
from typing import NamedTuple, Optional, Sequence, Tuple

from . import _clib
from ._clib import Mask, Problem, Strides
from ._errors import invalid
from ._options import Options

Dims = Tuple[int, int, int, int, Strides]  # (batch, heads, seq, head_dim, strides)
View = Tuple[Sequence[int], Sequence[int]]  # (shape, element strides)


class MaskArrays(NamedTuple):
    """The arrays of a call's mask, in the order of the torch ops' schemas: each one array (a
    tensor, an ndarray, a view, a pointer: whatever the stage at hand holds) or None."""

    key_padding_mask: object = None  #: bool / uint8 [B, Skv], [1, Skv] or [Skv]; True = attend
    kv_len: object = None  #: int64 [B]: batch b attends keys j < kv_len[b]
    block_q: object = None  #: int64 [num_blocks + 1]: the query offsets of the blocks
    block_kv: object = None  #: int64 [num_blocks + 1]: the key offsets (None: block_q's)
    key_bias: object = None  #: float32 [Skv], [B, Skv], [B, 1|H, Skv] or [B, 1|H, 1, Skv]
    cu_seqlens_q: object = None  #: int64 [n + 1] or [B, n + 1]: the segments' query offsets
    cu_seqlens_k: object = None  #: int64, cu_seqlens_q's shape: the segments' key offsets


MASK_NAMES = MaskArrays._fields


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
    if sd != 1 and d != 1 and 0 not in shape:  # (a tensor of no element may have any strides)
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


def _mismatch(name: str, what: str, got: int, want: int, ref: str) -> Exception:
    return invalid(_clib.JATTN_ERROR_INVALID_DIMENSION, f"{name}: {what} {got} does not match {ref}'s {want}")


def make_problem(opts: Options, q: View, k: View, v: View, out: Optional[View]) -> Problem:
    """The ``jattn_problem`` of q, k, v (and ``out``, or a contiguous output of q's layout),
    each given as ``(shape, element strides)``, with the layout, scale and ``enable_gqa`` of
    ``opts``; raises ``JattnValueError`` on a mismatch."""
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
    if hv != hk:
        raise _mismatch("v", "heads", hv, hk, "k")
    kv_heads = 0
    if hk != hq:
        if not opts.enable_gqa:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"k: heads {hk} does not match q's {hq}; for grouped-query attention (k and v with fewer heads, "
                "dividing q's) pass enable_gqa=True",
            )
        if hk == 0 or hq % hk != 0:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"k, v: {hk} heads must divide q's {hq} (grouped-query attention: each key/value head serves "
                "q's heads / k's heads query heads)",
            )
        kv_heads = hk
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
    return Problem(bq, hq, sq, sk, dq, scale_value, _clib.JATTN_DTYPE_F32, q_strides, k_strides, v_strides, out_strides,
                   kv_heads)  # fmt: skip


def contiguous_out_strides(layout: str, heads: int, seq: int, head_dim: int) -> Strides:
    """Strides of a contiguous output of the layout (extent-1 dimensions get 0, as in tensor_dims)."""
    if layout == "bhsd":
        return Strides(heads * seq * head_dim, seq * head_dim if heads != 1 else 0, head_dim if seq != 1 else 0)
    return Strides(heads * seq * head_dim, head_dim if heads != 1 else 0, heads * head_dim if seq != 1 else 0)


def contiguous_view(shape: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """``(shape, element strides)`` of a contiguous tensor of the shape (as torch gives them)."""
    strides = []
    step = 1
    for extent in reversed(tuple(shape)):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(shape), tuple(reversed(strides))


def lse_shape(q_ndim: int, problem: Problem) -> Tuple[int, ...]:
    """lse's shape: ``[B, H, Sq]``, or ``[H, Sq]`` for 3-d inputs."""
    if q_ndim == 3:
        return (problem.heads, problem.seq_q)
    return (problem.batch, problem.heads, problem.seq_q)


# ---- the mask --------------------------------------------------------------------------------
_CAUSAL = {
    (False, "top_left"): _clib.JATTN_CAUSAL_NONE,
    (False, "bottom_right"): _clib.JATTN_CAUSAL_NONE,
    (True, "top_left"): _clib.JATTN_CAUSAL_TOP_LEFT,
    (True, "bottom_right"): _clib.JATTN_CAUSAL_BOTTOM_RIGHT,
}


def causal_of(opts: Options) -> int:
    """The ``jattn_causal`` of the options."""
    return _CAUSAL[opts.is_causal, opts.causal_alignment]


# Where an array without elements would be NULL (a tensor of no element may have no storage), runs
# pass this address: the C library reads nothing there, and a NULL would read as "no such part".
_NOTHING = (c_int64 * 8)()
NOTHING = addressof(_NOTHING)


def _dims(name: str, what: str, got: int, want: int) -> Exception:
    return invalid(_clib.JATTN_ERROR_INVALID_DIMENSION, f"{name}: {what} {got}, must be {want}")


def _contiguous_last(name: str, shape: Sequence[int], strides: Sequence[int]) -> None:
    if shape and shape[-1] > 1 and strides[-1] != 1 and 0 not in shape:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_STRIDE,
            f"{name}: the last dimension must be contiguous (stride 1), its stride is {strides[-1]}",
        )


def _offsets(name: str, view: View) -> int:
    """The number of blocks or segments of a 1-d offsets array ``[n + 1]``, n >= 1."""
    shape, strides = view
    if len(shape) != 1 or shape[0] < 2:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"{name}: shape {list(shape)}, must be [n + 1] with n >= 1 (int64 offsets from 0)",
        )
    _contiguous_last(name, shape, strides)
    return shape[0] - 1


def _key_padding(m: Mask, problem: Problem, mask: Optional[View], kv_len: Optional[View]) -> None:
    padding = m.padding
    if mask is not None:
        shape, strides = mask
        if len(shape) == 1:
            rows, row_stride, keys = 1, 0, shape[0]
        elif len(shape) == 2:
            rows, keys = shape
            row_stride = strides[0]
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
        _contiguous_last("key_padding_mask", shape, strides)
        if rows == 1 or row_stride == 0:  # one row for every batch (a broadcast row too)
            padding.mask_batch, padding.mask_batch_stride = 1, 0
        else:
            padding.mask_batch, padding.mask_batch_stride = rows, row_stride
        padding.mask = NOTHING
        padding.mask_keys = keys
    if kv_len is not None:
        shape, strides = kv_len
        if tuple(shape) != (problem.batch,):
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"kv_len: shape {list(shape)}, must be [batch] = [{problem.batch}]",
            )
        _contiguous_last("kv_len", shape, strides)
        padding.kv_len = NOTHING


def _blocks(m: Mask, problem: Problem, block_q: View, block_kv: Optional[View]) -> None:
    n = _offsets("block_offsets", block_q)
    if block_kv is None:
        if problem.seq_q != problem.seq_kv:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"block_offsets: one tensor of offsets serves self-attention (seq_q == seq_kv), here seq_q "
                f"{problem.seq_q} and seq_kv {problem.seq_kv}: pass a pair (q_offsets, kv_offsets)",
            )
    elif _offsets("block_offsets[1]", block_kv) != n:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"block_offsets: {n + 1} query offsets and {block_kv[0][0]} key offsets; the pair must have as many",
        )
    m.block_q = m.block_kv = NOTHING
    m.num_blocks = n


def _segments(m: Mask, problem: Problem, cu_q: Optional[View], cu_k: Optional[View]) -> None:
    if cu_q is None or cu_k is None:
        given, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_k is None else ("cu_seqlens_k", "cu_seqlens_q")
        raise invalid(_clib.JATTN_ERROR_NULL_POINTER, f"{missing}: None while {given} is given (segments need both)")
    (shape, strides), (kshape, kstrides) = cu_q, cu_k
    if tuple(kshape) != tuple(shape):
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"cu_seqlens_k: shape {list(kshape)}, must be cu_seqlens_q's {list(shape)}",
        )
    if len(shape) not in (1, 2) or shape[-1] < 2:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"cu_seqlens_q: shape {list(shape)}, must be [n + 1] or [batch, n + 1] with n >= 1 (int64 offsets from 0)",
        )
    _contiguous_last("cu_seqlens_q", shape, strides)
    _contiguous_last("cu_seqlens_k", kshape, kstrides)
    stride = 0
    if len(shape) == 2:
        if shape[0] not in (1, problem.batch):
            raise _dims("cu_seqlens_q", "rows", shape[0], f"1 or batch ({problem.batch})")
        if shape[0] > 1:
            if strides[0] != kstrides[0]:
                raise invalid(
                    _clib.JATTN_ERROR_INVALID_STRIDE,
                    f"cu_seqlens_k: row stride {kstrides[0]}, must be cu_seqlens_q's {strides[0]}",
                )
            stride = strides[0]
    m.cu_seqlens_q = m.cu_seqlens_kv = NOTHING
    m.num_segments = shape[-1] - 1
    m.segments_batch_stride = stride


def _key_bias(m: Mask, problem: Problem, bias: View) -> None:
    shape, strides = bias
    nd = len(shape)
    if nd < 1 or nd > 4:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"key_bias: a {nd}-d tensor; it must be [Skv], [B, Skv], [B, 1 or H, Skv] or [B, 1 or H, 1, Skv]",
        )
    if shape[-1] != problem.seq_kv:
        raise _dims("key_bias", "last dimension", shape[-1], f"seq_kv ({problem.seq_kv})")
    _contiguous_last("key_bias", shape, strides)
    batch_stride = head_stride = 0
    if nd >= 2:
        if shape[0] not in (1, problem.batch):
            raise _dims("key_bias", "dimension 0 (batch)", shape[0], f"1 or batch ({problem.batch})")
        batch_stride = strides[0] if shape[0] > 1 else 0
    if nd >= 3:
        if shape[1] not in (1, problem.heads):
            raise _dims("key_bias", "dimension 1 (heads)", shape[1], f"1 or q's heads ({problem.heads})")
        head_stride = strides[1] if shape[1] > 1 else 0
    if nd == 4 and shape[2] != 1 and strides[2] != 0:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION,
            f"key_bias: dimension 2 (queries) {shape[2]}, must be 1: jattn takes a bias per key, the same for every "
            "query",
        )
    m.key_bias = NOTHING
    m.key_bias_batch_stride, m.key_bias_head_stride = batch_stride, head_stride


def make_mask(problem: Problem, opts: Options, arrays: Optional[MaskArrays]) -> Optional[Mask]:
    """The ``jattn_mask`` structure of a call (what a plan is made for): causal from ``opts``, and
    each array of ``arrays`` given as ``(shape, element strides)`` (None: no such part; ``arrays``
    None: none). Its pointers are placeholders (:func:`fill_mask` gives a run's). None when the
    call has no mask at all. Raises ``JattnValueError`` for an array of the wrong shape."""
    causal = causal_of(opts)
    if arrays is None:
        if causal == _clib.JATTN_CAUSAL_NONE:
            return None
        arrays = MaskArrays()
    m = Mask()
    m.causal = causal
    padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k = arrays
    if padding_mask is not None or kv_len is not None:
        _key_padding(m, problem, padding_mask, kv_len)
    if block_q is not None:
        _blocks(m, problem, block_q, block_kv)
    elif block_kv is not None:
        raise invalid(_clib.JATTN_ERROR_NULL_POINTER, "block_offsets: key offsets without query offsets")
    if cu_q is not None or cu_k is not None:
        _segments(m, problem, cu_q, cu_k)
    if bias is not None:
        _key_bias(m, problem, bias)
    return m


def fill_mask(structure: Mask, pointers: MaskArrays) -> Mask:
    """A run's ``jattn_mask``: the plan's structure with the arrays' addresses (each an int, 0 for
    an array without elements, or None where the structure has no such part)."""
    m = Mask.from_buffer_copy(structure)
    padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k = pointers
    if padding_mask is not None or kv_len is not None:
        padding = m.padding
        if padding_mask is not None:
            padding.mask = padding_mask or NOTHING
        if kv_len is not None:
            padding.kv_len = kv_len or NOTHING
    if block_q is not None:
        m.block_q = block_q or NOTHING
        m.block_kv = (block_q if block_kv is None else block_kv) or NOTHING
    if cu_q is not None:
        m.cu_seqlens_q = cu_q or NOTHING
        m.cu_seqlens_kv = cu_k or NOTHING
    if bias is not None:
        m.key_bias = bias or NOTHING
    return m
