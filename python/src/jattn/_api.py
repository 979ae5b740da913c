"""The public calls: ``attention``, ``attention_varlen``, ``select`` and ``backends``.

``attention`` takes torch tensors (CPU or CUDA) or numpy arrays and hands them to the matching
front end (``_torch_impl``, ``_numpy_impl``). Under ``torch.compile`` (or any tracing that goes
through the dispatcher: tensor subclasses, fake tensors) a torch call goes through the custom
ops of ``_torch_op``; an eager call on plain tensors runs the implementation directly, through
``_torch_impl.EagerAttention`` (an autograd.Function) when autograd differentiates it.
"""

from __future__ import annotations

from ctypes import byref
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _clib, _errors, _options, _plan, _problem
from ._errors import error_from_status
from ._options import OPTIONS as _OPTIONS

try:
    import torch

    from . import _torch_impl, _torch_op

    _Tensor = torch.Tensor
    _is_compiling = torch.compiler.is_compiling
    _grad_enabled = torch.is_grad_enabled
    _EagerAttention = _torch_impl.EagerAttention
    _EagerAttentionLse = _torch_impl.EagerAttentionLse
    _torch_forward = _torch_impl.forward
    _NO_MASKS = _problem.MaskArrays()
except ImportError:  # numpy only
    torch = None  # type: ignore[assignment]
    _Tensor = None  # type: ignore[assignment,misc]

try:
    import numpy

    from . import _numpy_impl
except ImportError:  # torch only
    numpy = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import numpy as np
    import torch as _torch_types

    Array = Union[_torch_types.Tensor, np.ndarray]
else:
    Array = object


class Selection(NamedTuple):
    """What ``jattn.attention`` runs for a call: its plan's selection (``jattn_plan_selection``)."""

    backend: str  #: the backend chosen (a name ``jattn.backends()`` lists)
    kernel: str  #: the kernel that runs, e.g. "cpu_flash_f32_avx512_4x48"
    isa: str  #: its instruction set: "scalar", "avx512", "avx2", "neon", "generic", "sm_90a", ...
    threads: int  #: CPU threads it would use (1 for GPU backends)
    workspace_bytes: int = 0  #: the workspace a call takes (CUDA: from torch's caching allocator; 0: none)


class BackendInfo(NamedTuple):
    """One backend of the library (``jattn.backends()``), as the library describes it."""

    name: str  #: its name, e.g. "cpu"
    available: bool  #: whether it can run here (built in, and its device present)
    detail: str  #: the kernel and instruction set it picks for a FLUX-sized head, or why it cannot run
    is_gpu: bool  #: it computes on a GPU
    memory: str  #: the tensors it takes: "device" (CUDA tensors; CPU tensors are copied) or "host"
    has_backward: bool  #: autograd can differentiate through it


def _is_torch(x: object) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy(x: object) -> bool:
    return numpy is not None and isinstance(x, numpy.ndarray)


def _traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True under torch.compile / export, for tensor subclasses (fake, functional, ...) and meta
    tensors: the call goes through the custom ops."""
    return type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor or q.is_meta or _is_compiling()


def _masks(
    key_padding_mask: Optional[Array],
    kv_len: Optional[Array],
    block_offsets: Union[None, Array, Sequence[Array]],
    key_bias: Optional[Array],
    cu_seqlens_q: Optional[Array],
    cu_seqlens_k: Optional[Array],
) -> Optional[_problem.MaskArrays]:
    """The mask's arrays of a call's keywords, or None when there are none."""
    if (key_padding_mask is None and kv_len is None and block_offsets is None and key_bias is None
            and cu_seqlens_q is None and cu_seqlens_k is None):  # fmt: skip
        return None
    block_q = block_kv = None
    if isinstance(block_offsets, (tuple, list)):
        if len(block_offsets) != 2:
            raise _errors.invalid(
                _clib.JATTN_ERROR_INVALID_ARGUMENT,
                f"block_offsets: a sequence of {len(block_offsets)}; it must be one tensor of offsets "
                "(self-attention) or a pair (q_offsets, kv_offsets)",
            )
        block_q, block_kv = block_offsets
    else:
        block_q = block_offsets
    return _problem.MaskArrays(key_padding_mask, kv_len, block_q, block_kv, key_bias, cu_seqlens_q, cu_seqlens_k)


def _attention_through_ops(q, k, v, opts, out, masks):
    """A torch call through the custom ops (traced code), whose schemas take the options' fields
    and the mask's arrays as plain arguments. When an input requires grad the op is asked for the
    lse (its backward needs it); the caller gets it only if asked."""
    _torch_impl.check_inputs(q, k, v, out, differentiable=True)
    arrays = masks if masks is not None else _NO_MASKS
    if out is None:
        grad = _torch_impl.needs_grad(q, k, v)
        if grad:
            # Refused here rather than at loss.backward(): the backward of this device (its sm,
            # the head_dim, the mask's parts, the loaded library) is asked once and cached (a
            # constant when traced).
            _torch_impl.refuse_unservable_backward(q, k, opts, masks)
        out, lse = torch.ops.jattn.attention(q, k, v, *opts._replace(return_lse=opts.return_lse or grad), *arrays)
        return (out, lse) if opts.return_lse else out
    lse = (
        torch.empty(_torch_op.lse_shape(q, opts.layout), dtype=torch.float32, device=q.device)
        if opts.return_lse
        else None
    )
    torch.ops.jattn.attention_out(q, k, v, out, lse, *opts, *arrays)
    return (out, lse) if opts.return_lse else out


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    layout: str = "bhsd",
    scale: Optional[float] = None,
    backend: str = "auto",
    precision: str = "f32",
    threads: int = 0,
    out: Optional[Array] = None,
    return_lse: bool = False,
    key_padding_mask: Optional[Array] = None,
    kv_len: Optional[Array] = None,
    enable_gqa: bool = False,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    block_offsets: Union[None, Array, Tuple[Array, Array]] = None,
    key_bias: Optional[Array] = None,
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_k: Optional[Array] = None,
) -> Union[Array, Tuple[Array, Array]]:
    """Exact float32 multi-head attention: ``softmax(scale * q k^T + key_bias) v`` per head, over
    the keys each query attends (every key by default, as DiTs attend).

    Args:
        q, k, v: float32 torch tensors (all on one CPU or CUDA device) or numpy arrays.
            ``layout="bhsd"``: q ``[B, H, Sq, D]``, k and v ``[B, Hkv, Skv, D]``;
            ``layout="bshd"``: ``[B, S, H, D]`` (as diffusers and FlashAttention hold them).
            3-d tensors drop ``B``. Any strides with the last dimension contiguous are read as
            they are, without copies (views into a fused QKV projection ``[B, S, 3, H, D]`` too).
            Nothing is cast: other dtypes raise ``ValueError``. B, H, Sq and Skv may be 0 (the
            answers of ``torch.nn.functional.scaled_dot_product_attention``: no key gives 0).
        layout: ``"bhsd"`` or ``"bshd"``.
        scale: the softmax scale; ``None`` means ``1/sqrt(D)``.
        backend: ``"auto"`` (in the library's order, the first backend that can run the call among
            those that compute from device memory for CUDA tensors, and among those that compute
            on the CPU for CPU tensors and numpy arrays), or a backend's name: ``jattn.backends()``
            lists them with what each runs on (``"ref"`` is the float64 reference: slow).
        precision: ``"f32"`` (exact: rel_l2 <= 2e-6 against float64) or ``"tf32"`` (GPU, opt-in).
        threads: CPU threads for the host backends; 0 = all cores.
        out: optional output of q's shape, float32, on q's device, any strides with a contiguous
            last dimension; written in place and returned. Nothing is written on failure.
        return_lse: also return the log-sum-exp of each query row, float32 ``[B, H, Sq]``
            (``[H, Sq]`` for 3-d inputs); ``-inf`` for a row that attends no key.
        key_padding_mask: optional boolean (or uint8) key mask ``[B, Skv]``, ``[1, Skv]`` or
            ``[Skv]``, True = attend, on q's device; read without a copy when its last dimension
            is contiguous. A query row with no key attended gives 0 (lse ``-inf``).
        kv_len: optional int64 ``[B]`` key lengths: batch b attends keys ``j < kv_len[b]``.
        enable_gqa: grouped-query attention, as PyTorch's ``enable_gqa``: k and v may have fewer
            heads ``Hkv`` than q, dividing its ``H`` (``Hkv = 1``: multi-query); query head h reads
            key/value head ``h // (H // Hkv)``, in place. Without it, differing heads raise.
        is_causal: causal attention: query t attends keys ``u <= t`` (with
            ``causal_alignment="top_left"``, PyTorch's ``is_causal``, ``CausalVariant.UPPER_LEFT``)
            or ``u <= t + Skv - Sq`` (``"bottom_right"``: FlashAttention's ``causal``,
            ``CausalVariant.LOWER_RIGHT``: the last query sees every key). With segments, inside
            each segment, in its own positions.
        causal_alignment: ``"top_left"`` or ``"bottom_right"`` (only read with ``is_causal``).
        block_offsets: block-causal attention (streaming and autoregressive video): int64 block
            boundaries, one tensor ``[num_blocks + 1]`` for self-attention (Sq == Skv), or a pair
            ``(q_offsets, kv_offsets)``: offsets from 0 to Sq (and Skv); a query of block a
            attends the keys of blocks 0..a. The same blocks for every batch and head.
        key_bias: an additive float32 bias per key, broadcast over the queries: ``[Skv]``,
            ``[B, Skv]``, ``[B, 1 or H, Skv]`` or ``[B, 1 or H, 1, Skv]`` (as diffusers builds
            float masks; B may be 1); ``-inf`` leaves a key out. A constant of the call: it gets
            no gradient (a key_bias that requires grad raises).
        cu_seqlens_q, cu_seqlens_k: packed sequences (segments; FlashAttention's varlen): int64
            offsets ``[n + 1]`` (one row for every batch) or ``[B, n + 1]``; segment s holds the
            queries ``cu_seqlens_q[s]:cu_seqlens_q[s + 1]`` and the keys
            ``cu_seqlens_k[s]:cu_seqlens_k[s + 1]``, and a query attends only keys of its own
            segment (queries past the last segment attend none).

        The mask parts combine (a key is attended when every part given attends it), with
        grouped-query heads, lse, cross-attention, every layout and autograd. Offsets, lengths,
        masks and biases live on q's device and are never read on the host for CUDA tensors, so
        calls stay asynchronous and capturable (an offset out of range is clamped there; on the
        host it raises).

    Returns:
        The output, with q's layout (a new contiguous tensor or array, or ``out``); with
        ``return_lse=True`` the pair ``(out, lse)``.

    CUDA tensors run on torch's current stream of their own device, with a workspace from
    torch's caching allocator: nothing is cudaMalloc'ed per call, and the call can be captured
    in a CUDA graph. CPU tensors and numpy arrays run on the host with the GIL released. The
    library's plan for each kind of call (shapes, strides, options, the mask's structure) is made
    once and kept: a call runs it (``jattn.select`` names its kernel).

    Raises:
        ValueError (``jattn.JattnValueError``): invalid shapes, layout, strides, scale, dtype,
            devices or mask arrays. NotImplementedError (``jattn.JattnNotImplementedError``): the
            backend cannot run this problem (or, for tensors that require grad, its backward).
            RuntimeError (``jattn.JattnRuntimeError``): the backend is unavailable or failed. Each
            carries ``status_name`` and the library's ``message``.
    """
    masks = (
        None
        if key_padding_mask is None and kv_len is None and block_offsets is None and key_bias is None
        and cu_seqlens_q is None and cu_seqlens_k is None
        else _masks(key_padding_mask, kv_len, block_offsets, key_bias, cu_seqlens_q, cu_seqlens_k)
    )  # fmt: skip
    if type(q) is _Tensor or _is_torch(q):
        if _traced(q, k, v):  # checked without the (guarded) cache
            opts = _options.validated(layout, scale, backend, precision, threads, return_lse, enable_gqa, is_causal,
                                      causal_alignment)  # fmt: skip
            return _attention_through_ops(q, k, v, opts, out, masks)
        key = (layout, scale, backend, precision, threads, return_lse, enable_gqa, is_causal, causal_alignment,
               type(threads), type(scale))  # fmt: skip
        try:
            opts = _OPTIONS.get(key) or _options.remember(key)
        except TypeError:  # an unhashable keyword: checked (and refused or used) without the cache
            opts = _options.validated(*key[:-2])
        if (q.requires_grad or k.requires_grad or v.requires_grad) and _grad_enabled():
            if out is not None:
                _torch_impl.check_inputs(q, k, v, out)  # raises: out= is written in place, not differentiable
            if not opts.return_lse:
                return _EagerAttention.apply(q, k, v, _options.with_lse(opts), masks)
            result, lse = _EagerAttentionLse.apply(q, k, v, opts, masks)
        else:
            result, lse = _torch_forward(q, k, v, opts, out, masks)
    elif _is_numpy(q):
        opts = _options.options(layout, scale, backend, precision, threads, return_lse, enable_gqa, is_causal,
                                causal_alignment)  # fmt: skip
        result, lse = _numpy_impl.attention(q, k, v, opts, out, masks)
    else:
        raise TypeError(f"jattn: q is a {type(q).__name__}; jattn.attention takes torch tensors or numpy arrays")
    return (result, lse) if opts.return_lse else result


def attention_varlen(
    q: Array,
    k: Array,
    v: Array,
    cu_seqlens_q: Array,
    cu_seqlens_k: Array,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    key_bias: Optional[Array] = None,
    backend: str = "auto",
    precision: str = "f32",
    threads: int = 0,
    out: Optional[Array] = None,
    return_lse: bool = False,
) -> Union[Array, Tuple[Array, Array]]:
    """Attention over packed sequences of different lengths, with FlashAttention's
    ``flash_attn_varlen_func`` meaning and layout.

    Args:
        q: ``[total_q, H, D]``, the queries of every sequence back to back; k, v:
            ``[total_k, Hkv, D]`` (``Hkv`` dividing ``H``: grouped-query and multi-query
            attention as FlashAttention takes them). float32, on one device.
        cu_seqlens_q, cu_seqlens_k: int64 ``[n + 1]`` cumulative offsets of the n sequences'
            queries and keys (from 0), on q's device; sequence s attends only itself.
        max_seqlen_q, max_seqlen_k: FlashAttention's launch sizes; accepted for its signature and
            not read (jattn needs no bound, and reading the offsets would synchronise a GPU).
        scale: the softmax scale (FlashAttention's ``softmax_scale``); ``None`` means ``1/sqrt(D)``.
        causal: causal within each sequence, aligned bottom-right as FlashAttention's (query t of
            a sequence of Lq queries and Lk keys attends its keys ``u <= t + Lk - Lq``).
        key_bias, backend, precision, threads, out: as :func:`attention` (``key_bias`` over the
            packed keys: ``[total_k]`` or ``[1, 1 or H, total_k]``).
        return_lse: also return the log-sum-exp, float32 ``[H, total_q]`` (FlashAttention's
            ``softmax_lse`` layout).

    Returns:
        The output ``[total_q, H, D]`` (and the lse with ``return_lse=True``).
    """
    del max_seqlen_q, max_seqlen_k  # FlashAttention's grid sizes: nothing to size here
    return attention(q, k, v, layout="bshd", scale=scale, backend=backend, precision=precision, threads=threads,
                     out=out, return_lse=return_lse, enable_gqa=True, is_causal=causal,
                     causal_alignment="bottom_right", key_bias=key_bias, cu_seqlens_q=cu_seqlens_q,
                     cu_seqlens_k=cu_seqlens_k)  # fmt: skip


def select(
    q: Array,
    k: Array,
    v: Array,
    *,
    layout: str = "bhsd",
    scale: Optional[float] = None,
    backend: str = "auto",
    precision: str = "f32",
    threads: int = 0,
    key_padding_mask: Optional[Array] = None,
    kv_len: Optional[Array] = None,
    enable_gqa: bool = False,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    block_offsets: Union[None, Array, Tuple[Array, Array]] = None,
    key_bias: Optional[Array] = None,
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_k: Optional[Array] = None,
    backward: bool = False,
) -> Selection:
    """Which backend and kernel ``jattn.attention`` runs for these inputs, options and mask (the
    keywords of ``attention``): the selection of the plan the call makes and runs, so the kernel
    named is the kernel that launches. ``backward=True``: the kernel of its backward (torch
    tensors; the gradients of a contiguous output). Nothing is computed. Raises as ``attention``
    would when no backend can run the call."""
    masks = _masks(key_padding_mask, kv_len, block_offsets, key_bias, cu_seqlens_q, cu_seqlens_k)
    opts = _options.options(layout, scale, backend, precision, threads, False, enable_gqa, is_causal,
                            causal_alignment)  # fmt: skip
    if _is_torch(q):
        plan = _torch_impl.plan_of_call(q, k, v, opts, masks, backward)
    elif _is_numpy(q):
        if backward:
            raise TypeError("jattn: select(backward=True) takes torch tensors (numpy arrays have no autograd)")
        plan = _numpy_impl.plan_of_call(q, k, v, opts, masks)
    else:
        raise TypeError(f"jattn: q is a {type(q).__name__}; jattn.select takes torch tensors or numpy arrays")
    sel = plan.selection()
    return Selection(sel.backend_name.decode(), sel.kernel.decode(), sel.isa.decode(), sel.threads,
                     plan.workspace_bytes)  # fmt: skip


def backends() -> List[BackendInfo]:
    """Every backend of the library, in the order its ``auto`` tries them, each with what it runs
    on, whether it can run here and the kernel it picks for a FLUX head (24 heads x 1536 tokens x
    128), or the library's reason."""
    problem = _clib.Problem(1, 24, 1536, 1536, 128, 0.0, _clib.JATTN_DTYPE_F32)
    problem.q = problem.k = problem.v = problem.out = _problem.contiguous_out_strides("bhsd", 24, 1536, 128)
    found = []
    for b in _clib.BACKENDS:
        exec_ = _plan.make_exec(_options.options(backend=b.name), b.id, b.on_device)
        sel = _clib.Selection()
        status = _clib.select(byref(problem), byref(exec_), byref(sel))
        available = status == _clib.JATTN_OK
        detail = (
            f"{sel.kernel.decode()} ({sel.isa.decode()})"
            if available
            else str(error_from_status(status, _clib.last_error()))
        )
        found.append(BackendInfo(b.name, available, detail, b.is_gpu, "device" if b.on_device else "host",
                                 b.has_backward))  # fmt: skip
    return found
