"""The torch front end: CPU and CUDA tensors to one run of a cached jattn plan.

Each call looks up the plan (``_plan``) made for its kind of call: (pass, device, options, the
tensors' shapes and strides, the mask's structure, the pointers' alignment class); the first call
of a kind makes it (``jattn_plan_create``: validation, backend, kernel, workspace size), every call
runs it (``jattn_plan_forward`` / ``jattn_plan_backward``). CUDA tensors run on torch's current
stream of the tensors' own device (made the current device for the call when it is not), with
device memory (``JATTN_MEMORY_DEVICE``) and the plan's workspace from torch's caching allocator, so
that nothing is cudaMalloc'ed per call and the call can be captured in a CUDA graph. CPU tensors
run on the host backends with the calling thread's ``jattn_ctx`` (its grow-only workspace); the GIL
is released during the C call (ctypes.CDLL).

This module is the implementation behind the eager calls of ``jattn.attention`` (directly, and
through :class:`EagerAttention` when autograd differentiates the call) and behind the custom ops
of ``_torch_op.py`` (traced code).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

from . import _clib, _context, _plan, _problem
from ._errors import JattnError, error_from_status, invalid, raise_for_status
from ._options import Options
from ._problem import MaskArrays

_F32 = torch.float32
_I64 = torch.int64
_U8 = torch.uint8
_MASK_DTYPES = (torch.bool, torch.uint8)
_CONTIGUOUS = torch.contiguous_format
_FWD, _BWD = _clib.JATTN_PASS_FORWARD, _clib.JATTN_PASS_BACKWARD
_plan_forward, _plan_backward = _clib.plan_forward, _clib.plan_backward
_cached = _plan.cached
_plans_get = _plan._PLANS.get  # (_plan.cached, without a call around it)
_alignment_of = _plan.alignment_of
_HOST_ALIGNMENT, _DEVICE_ALIGNMENT = _plan.HOST_ALIGNMENT, _plan.DEVICE_ALIGNMENT
_thread_context = _context.thread_context
_fill_mask = _problem.fill_mask
_grad_enabled = torch.is_grad_enabled

try:  # the raw cudaStream_t of the current stream, without building a torch.cuda.Stream
    _raw_stream = torch._C._cuda_getCurrentRawStream  # type: ignore[attr-defined]
    _current_device = torch._C._cuda_getDevice  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - torch built without CUDA

    def _raw_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream

    _current_device = torch.cuda.current_device


def check_float32(name: str, t: object) -> torch.Tensor:
    """Refuses anything but a float32 tensor, with a message that says so."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"jattn: {name} is a {type(t).__name__}; jattn.attention takes torch tensors or numpy arrays")
    if t.dtype != _F32:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"{name}: dtype {t.dtype}; jattn takes float32 tensors (nothing is cast silently: pass "
            f"{name}.float(), or use jattn.diffusers' upcast=True for bf16/fp16 models)",
        )
    return t


def needs_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether autograd will want gradients of this call's q, k or v."""
    return (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled()


def _check_dtypes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dtype is not _F32 or k.dtype is not _F32 or v.dtype is not _F32:
        for name, t in (("q", q), ("k", k), ("v", v)):
            check_float32(name, t)


def _device_index(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: bool = False) -> int:
    """The tensors' device index: -1 for CPU (and, with ``meta``, meta) tensors, the CUDA device's
    index; raises unless all three are on one CPU or CUDA device."""
    index = q.get_device()
    if index < 0:
        ok = q.is_cpu and k.is_cpu and v.is_cpu or meta and q.is_meta and k.is_meta and v.is_meta
    else:
        ok = q.is_cuda and k.is_cuda and v.is_cuda and k.get_device() == index and v.get_device() == index
    if not ok:
        if {t.device.type for t in (q, k, v)} <= {"cpu", "cuda", "meta"}:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_ARGUMENT,
                f"q, k, v: on {q.device}, {k.device} and {v.device}; all three must be on one device",
            )
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"q, k, v: on {q.device}, {k.device} and {v.device}; jattn runs on CPU and CUDA tensors",
        )
    return index


def _check_out(out: torch.Tensor, q: torch.Tensor, index: int) -> None:
    check_float32("out", out)
    if out.get_device() != index or out.is_cpu != q.is_cpu:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"out: on {out.device}, must be on q's device {q.device}")


def check_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: Optional[torch.Tensor], differentiable: bool = False
) -> int:
    """dtype, device and autograd checks shared by the traced wrapper and the ops; returns the
    tensors' device index (-1 for CPU and meta tensors). ``differentiable``: the call's gradients
    are jattn's backward (the ``jattn::attention`` op, :class:`EagerAttention`)."""
    _check_dtypes(q, k, v)
    index = _device_index(q, k, v, meta=True)
    if (out is not None or not differentiable) and needs_grad(q, k, v):
        if out is not None:
            raise RuntimeError(
                "jattn: jattn.attention(out=...) writes in place and cannot be differentiated; drop out= for a "
                "call whose q, k or v require grad, or call it under torch.no_grad()"
            )
        raise RuntimeError(
            "jattn: this entry point computes the forward only; call jattn.attention (differentiable), or call it "
            "under torch.no_grad()"
        )
    if out is not None:
        _check_out(out, q, index)
    return index


# ---- the mask's tensors ---------------------------------------------------------------------------
def _array(name: str, t: object, q: torch.Tensor, dtypes: Tuple[torch.dtype, ...], what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"jattn: {name} is a {type(t).__name__}, must be a torch tensor like q")
    if t.dtype not in dtypes:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"{name}: dtype {t.dtype}, must be {what}")
    if t.device != q.device:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"{name}: on {t.device}, must be on q's device {q.device}")
    return t


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t with its last dimension contiguous (copied only when it is not)."""
    return t.contiguous() if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1 else t


_OFFSETS = "torch.int64 offsets"


def mask_tensors(masks: MaskArrays, q: torch.Tensor) -> MaskArrays:
    """The mask's tensors checked (type, dtype, device; no gradient for the key bias) and laid out
    as the library reads them (key rows contiguous, offsets and lengths contiguous): copied only
    where they are not."""
    padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k = masks
    if padding_mask is not None:
        padding_mask = _rows(_array("key_padding_mask", padding_mask, q, _MASK_DTYPES, "torch.bool or torch.uint8 "
                                    "(True / nonzero = attend)"))  # fmt: skip
    if kv_len is not None:
        kv_len = _array("kv_len", kv_len, q, (_I64,), "torch.int64").contiguous()
    if block_q is not None:
        block_q = _array("block_offsets", block_q, q, (_I64,), _OFFSETS).contiguous()
    if block_kv is not None:
        block_kv = _array("block_offsets[1]", block_kv, q, (_I64,), _OFFSETS).contiguous()
    if bias is not None:
        bias = _array("key_bias", bias, q, (_F32,), "torch.float32 (additive; -inf leaves a key out)")
        if bias.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(
                "jattn: key_bias requires grad, but jattn gives no gradient for the key bias (its backward treats "
                "it as a constant of the call); pass key_bias.detach(), or use "
                "torch.nn.functional.scaled_dot_product_attention with attn_mask for a learned bias"
            )
        bias = _rows(bias)
    if cu_q is not None:
        cu_q = _array("cu_seqlens_q", cu_q, q, (_I64,), _OFFSETS).contiguous()
    if cu_k is not None:
        cu_k = _array("cu_seqlens_k", cu_k, q, (_I64,), _OFFSETS).contiguous()
    return MaskArrays(padding_mask, kv_len, block_q, block_kv, bias, cu_q, cu_k)


def _mask_key(arrays: MaskArrays) -> tuple:
    return tuple(None if t is None else (t.shape, t.stride()) for t in arrays)


def _mask_pointers(arrays: MaskArrays) -> MaskArrays:
    return MaskArrays(*(None if t is None else t.data_ptr() for t in arrays))


def _mask_ref(plan: _plan.Plan, arrays: Optional[MaskArrays]):
    if plan.mask is None:
        return None
    return _fill_mask(plan.mask, _mask_pointers(arrays)) if arrays is not None else plan.mask


# ---- plans ------------------------------------------------------------------------------------------
def _on_device(index: int, fn, *args):
    """fn(*args) with CUDA device `index` current (CPU: -1, as it is)."""
    if index < 0:
        return fn(*args)
    previous = _current_device()  # (CUDA is initialised: a CUDA tensor exists)
    if previous == index:
        return fn(*args)
    torch.cuda.set_device(index)
    try:
        return fn(*args)
    finally:
        torch.cuda.set_device(previous)


def _new_plan(key: tuple, index: int, pass_: int, opts: Options, q, k, v, out_view, grad_views, arrays, alignment):
    """Makes, keeps and returns the plan of `key` (the views are (shape, element strides))."""
    problem = _problem.make_problem(opts, q, k, v, out_view)
    grad = None
    if grad_views is not None:
        layout = opts.layout
        grad = _clib.GradStrides(*(_problem.tensor_dims(name, shape, strides, layout)[4]
                                   for name, (shape, strides) in zip(("dout", "dq", "dk", "dv"), grad_views)))  # fmt: skip
    mask = _problem.make_mask(problem, opts, None if arrays is None else MaskArrays(*_mask_key(arrays)))
    plan = _on_device(index, _plan.make_plan, pass_, problem, grad, mask, opts, index >= 0, alignment)
    plan.extra = _problem.lse_shape(len(q[0]), problem)
    if index < 0 and pass_ == _FWD:
        plan.lse_like = torch.empty(plan.extra, dtype=_F32)
    return _plan.remember(key, plan)


def _view(t: torch.Tensor) -> Tuple[torch.Size, Tuple[int, ...]]:
    return t.shape, t.stride()


def _new_like(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor of t's shape, dtype and device."""
    return torch.empty_like(t) if t.is_contiguous() else torch.empty_like(t, memory_format=_CONTIGUOUS)


def _workspace(plan: _plan.Plan, device: torch.device) -> Optional[torch.Tensor]:
    nbytes = plan.workspace_bytes
    return torch.empty(nbytes, dtype=_U8, device=device) if nbytes else None


# ---- the forward -----------------------------------------------------------------------------------
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    opts: Options,
    out: Optional[torch.Tensor],
    lse: Optional[torch.Tensor],
    masks: Optional[MaskArrays],
    differentiable: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One jattn forward on torch tensors with validated options; returns ``(out, lse or None)``.

    ``out`` and ``lse`` may be given (written in place) or are allocated; ``lse`` is computed
    when given or when ``opts.return_lse``. ``masks``: the mask's tensors (None: none). Nothing is
    written to a given tensor on failure. ``differentiable``: the caller differentiates the call
    with jattn's backward (the ``jattn::attention`` op, :class:`EagerAttention`).
    """
    index = check_inputs(q, k, v, out, differentiable)
    result, lse, _ = _run_forward(q, k, v, opts, out, lse, masks, index, False)
    return result, lse


def forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: Options, out: Optional[torch.Tensor],
    masks: Optional[MaskArrays],
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:  # fmt: skip
    """``attention`` for an eager call that autograd does not differentiate (the caller knows):
    the same run, the checks that call still needs."""
    if q.dtype is not _F32 or k.dtype is not _F32 or v.dtype is not _F32:
        _check_dtypes(q, k, v)
    index = q.get_device()
    if index >= 0 or not (q.is_cpu and k.is_cpu and v.is_cpu):
        index = _device_index(q, k, v)
    if out is not None:
        _check_out(out, q, index)
    result, lse, _ = _run_forward(q, k, v, opts, out, None, masks, index, False)
    return result, lse


def _run_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    opts: Options,
    out: Optional[torch.Tensor],
    lse: Optional[torch.Tensor],
    masks: Optional[MaskArrays],
    index: int,
    differentiated: bool,
) -> Tuple[torch.Tensor, Optional[torch.Tensor], _plan.Plan]:
    """The run of a checked call: its plan looked up (made on its kind's first call) and run.
    ``differentiated``: an eager call autograd differentiates (its plan's backward is asked first)."""
    arrays = mask_key = None
    if masks is not None:
        arrays = mask_tensors(masks, q)
        mask_key = _mask_key(arrays)
    if out is None:  # (the steps of _new_like and _alignment_of, inline: this is every call's path)
        result = torch.empty_like(q) if q.is_contiguous() else torch.empty_like(q, memory_format=_CONTIGUOUS)
        out_key = None
    else:
        result, out_key = out, _view(out)
    qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), result.data_ptr()
    bits = qp | kp | vp | op
    alignment = _DEVICE_ALIGNMENT if index >= 0 else _HOST_ALIGNMENT
    if bits & (alignment - 1):
        alignment = bits & -bits
    key = (_FWD, index, opts, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out_key, mask_key,
           alignment)  # fmt: skip
    plan = _plans_get(key)
    if plan is None:
        plan = _new_plan(key, index, _FWD, opts, _view(q), _view(k), _view(v), out_key, None, arrays, alignment)
    if differentiated and plan.backward_refusal is not None:
        _refuse_unservable_backward(plan, q, k, masks)
    if lse is not None:
        check_float32("lse", lse)
        want = plan.extra
        if lse.shape != want or not lse.is_contiguous() or lse.device != q.device:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"lse: shape {list(lse.shape)} on {lse.device}, must be contiguous {list(want)} on {q.device}",
            )
    elif opts.return_lse:
        like = plan.lse_like
        lse = torch.empty_like(like) if like is not None else torch.empty(plan.extra, dtype=_F32, device=q.device)
    lp = lse.data_ptr() if lse is not None else None
    mask = plan.mask if arrays is None else _mask_ref(plan, arrays)
    if index < 0:
        status = _plan_forward(plan.handle, _thread_context(), None, None, 0, qp, kp, vp, mask, op, lp)
    else:
        status = _on_device(index, _forward_cuda, plan, index, q.device, qp, kp, vp, mask, op, lp)
    if status:
        raise_for_status(status)
    return result, lse, plan


def _forward_cuda(plan, index, device, qp, kp, vp, mask, op, lp) -> int:
    workspace = _workspace(plan, device)  # back to the caching allocator after the call, stream-ordered
    wp = workspace.data_ptr() if workspace is not None else None
    return _plan_forward(plan.handle, None, _raw_stream(index), wp, plan.workspace_bytes, qp, kp, vp, mask, op, lp)


def plan_of_call(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: Options, masks: Optional[MaskArrays], backward: bool
) -> _plan.Plan:
    """The plan ``attention`` (or with ``backward``, the backward of the differentiated call)
    makes and runs for these tensors; nothing is computed."""
    index = check_inputs(q, k, v, None, differentiable=True)
    arrays = mask_key = None
    if masks is not None:
        arrays = mask_tensors(masks, q)
        mask_key = _mask_key(arrays)
    cap = _DEVICE_ALIGNMENT if index >= 0 else _HOST_ALIGNMENT  # (the outputs and gradients: fresh, aligned)
    alignment = _alignment_of(q.data_ptr() | k.data_ptr() | v.data_ptr(), cap)
    if backward:  # the gradients of a contiguous output: what EagerAttention and the op hand jattn
        out_view = _problem.contiguous_view(q.shape)
        grads = (out_view, out_view, _problem.contiguous_view(k.shape), _problem.contiguous_view(v.shape))
        key = (_BWD, index, opts, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out_view,
               out_view[1], mask_key, alignment)  # fmt: skip
        plan = _cached(key) or _new_plan(key, index, _BWD, opts, _view(q), _view(k), _view(v), out_view, grads,
                                         arrays, alignment)  # fmt: skip
    else:
        key = (_FWD, index, opts, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), None, mask_key,
               alignment)  # fmt: skip
        plan = _cached(key) or _new_plan(key, index, _FWD, opts, _view(q), _view(k), _view(v), None, None, arrays,
                                         alignment)  # fmt: skip
    return plan


# ---- the backward ----------------------------------------------------------------------------------
# (device type, device index, head_dim, backend, precision, layout, is_causal, causal_alignment,
# features) -> why jattn's backward refuses such a call there ("STATUS: message"), or None.
_BACKWARD_REFUSALS: Dict[tuple, Optional[str]] = {}

#: The mask parts and problem features a backward refusal is asked for (``backward_refusal``).
FEATURES = ("key_padding", "blocks", "segments", "key_bias", "gqa")


def features_of(q: torch.Tensor, k: torch.Tensor, masks: Optional[MaskArrays], layout: str) -> Tuple[str, ...]:
    """The features of a call beyond its options: the mask parts given, grouped-query heads."""
    found = []
    if masks is not None:
        padding_mask, kv_len, block_q, _, bias, cu_q, cu_k = masks
        if padding_mask is not None or kv_len is not None:
            found.append("key_padding")
        if block_q is not None:
            found.append("blocks")
        if cu_q is not None or cu_k is not None:
            found.append("segments")
        if bias is not None:
            found.append("key_bias")
    heads_dim = -3 if layout == "bhsd" else -2
    if q.dim() >= 3 and k.dim() == q.dim() and q.shape[heads_dim] != k.shape[heads_dim]:
        found.append("gqa")
    return tuple(found)


def backward_refusal(
    device: torch.device, head_dim: int, opts: Options, features: Tuple[str, ...] = ()
) -> Optional[str]:
    """Why jattn's backward cannot run attention of this ``head_dim`` with these options and
    features (``FEATURES``) on ``device`` (the status and message of ``jattn_plan_create`` for the
    backward of a representative problem: a cuda backend built for an sm the GPU is below, a
    head_dim over 256, a backend without a backward, a mask part a backend does not serve yet), or
    None.

    Asked once per (device, head_dim, backend, precision, layout, causal, features) and cached: the
    answer does not depend on the sequence lengths. Under ``torch.compile`` it is evaluated while
    Dynamo traces (``torch.compiler.assume_constant_result``): a constant of the graph, no graph
    break."""
    index = -1 if device.index is None else device.index
    return _backward_refusal(device.type, index, int(head_dim), opts.backend, opts.precision, opts.layout,
                             opts.is_causal, opts.causal_alignment, tuple(features))  # fmt: skip


def _representative_mask(opts: Options, features: Tuple[str, ...]) -> Optional[_clib.Mask]:
    nothing = _problem.NOTHING
    mask = _clib.Mask()
    mask.causal = _problem.causal_of(opts)
    if "key_padding" in features:
        mask.padding.kv_len = nothing
    if "blocks" in features:
        mask.block_q = mask.block_kv = nothing
        mask.num_blocks = 1
    if "segments" in features:
        mask.cu_seqlens_q = mask.cu_seqlens_kv = nothing
        mask.num_segments = 1
    if "key_bias" in features:
        mask.key_bias = nothing
    return mask


def _backward_refusal_uncached(device_type: str, index: int, head_dim: int, opts: Options,
                               features: Tuple[str, ...]) -> Optional[str]:  # fmt: skip
    seq, heads = 128, 2  # representative: the kernels' choice depends on the head_dim, the device, the features
    kv_heads = 1 if "gqa" in features else heads
    q = _problem.contiguous_view((1, heads, seq, head_dim) if opts.layout == "bhsd" else (1, seq, heads, head_dim))
    kv = _problem.contiguous_view(
        (1, kv_heads, seq, head_dim) if opts.layout == "bhsd" else (1, seq, kv_heads, head_dim)
    )
    problem = _problem.make_problem(opts._replace(enable_gqa=True), q, kv, kv, None)
    try:
        _on_device(index if device_type == "cuda" else -1, _plan.make_plan, _BWD, problem, None,
                   _representative_mask(opts, features), opts, device_type == "cuda", 0)  # fmt: skip
    except JattnError as e:
        return f"{e.status_name}: {e.message}"
    return None


def _backward_refusal_impl(device_type: str, index: int, head_dim: int, backend: str, precision: str, layout: str,
                           is_causal: bool, causal_alignment: str, features: Tuple[str, ...]) -> Optional[str]:  # fmt: skip
    key = (device_type, index, head_dim, backend, precision, layout, is_causal, causal_alignment, features)
    if key in _BACKWARD_REFUSALS:
        return _BACKWARD_REFUSALS[key]
    from ._options import validated

    opts = validated(layout=layout, backend=backend, precision=precision, is_causal=is_causal,
                     causal_alignment=causal_alignment)  # fmt: skip
    reason = _backward_refusal_uncached(device_type, index, head_dim, opts, features)
    _BACKWARD_REFUSALS[key] = reason
    return reason


_assume_constant = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
_backward_refusal = _assume_constant(_backward_refusal_impl) if _assume_constant else _backward_refusal_impl


def backward_refusals() -> Dict[tuple, Optional[str]]:
    """The refusals found so far (a copy), for messages."""
    return dict(_BACKWARD_REFUSALS)


def refuse_unservable_backward(q: torch.Tensor, k: torch.Tensor, opts: Options, masks: Optional[MaskArrays]) -> None:
    """Raises ``JattnNotImplementedError`` at the forward of a call whose backward jattn cannot
    run on q's device (rather than at ``loss.backward()``)."""
    _raise_refusal(q, backward_refusal(q.device, q.shape[-1], opts, features_of(q, k, masks, opts.layout)))


def _refuse_unservable_backward(plan: _plan.Plan, q: torch.Tensor, k: torch.Tensor, masks: Optional[MaskArrays]):
    """refuse_unservable_backward for an eager call, asked once per forward plan."""
    if plan.backward_refusal is _plan.UNASKED:
        plan.backward_refusal = backward_refusal(q.device, q.shape[-1], plan.opts,
                                                 features_of(q, k, masks, plan.opts.layout))  # fmt: skip
    _raise_refusal(q, plan.backward_refusal)


def _raise_refusal(q: torch.Tensor, refusal: Optional[str]) -> None:
    if refusal is not None:
        raise error_from_status(
            _clib.JATTN_ERROR_UNSUPPORTED,
            f"backward: q, k or v require grad, but jattn's backward cannot run this problem on {q.device} "
            f"({refusal}); call it under torch.no_grad() or detach q, k and v",
        )


def backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    dlse: Optional[torch.Tensor],
    opts: Options,
    masks: Optional[MaskArrays],
    forward_plan: Optional[_plan.Plan] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients ``(dq, dk, dv)`` of one jattn attention (``jattn_plan_backward``), given its
    inputs, the output and lse the forward produced, and the output's gradient ``dout`` (and the
    lse's, ``dlse``, or None). The gradients are new contiguous tensors of q's, k's and v's shapes
    and layout (with grouped-query heads, dk and dv sum over each group); any strides with a
    contiguous last dimension are read for the inputs.

    ``forward_plan``: the plan whose run gave ``out`` and ``lse`` (:class:`EagerAttention`; its
    tensors are known good, and autograd hands ``dout`` and ``dlse`` of their shapes, dtypes and
    devices): the backward plan is the forward plan's for the gradients' strides, without a
    second look at the rest."""
    if forward_plan is not None:
        return _backward_of(forward_plan, q, k, v, out, lse, dout, dlse, masks)
    index = check_inputs(q, k, v, None, differentiable=True)
    if out.dtype is not _F32 or lse.dtype is not _F32 or dout.dtype is not _F32:
        for name, t in (("out", out), ("lse", lse), ("dout", dout)):
            check_float32(name, t)
    if dout.shape != out.shape:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION, f"dout: shape {list(dout.shape)}, must be out's {list(out.shape)}"
        )
    dout = _rows(dout)  # autograd may hand a gradient of any strides (an expanded one too)
    lse = lse.contiguous()
    if dlse is not None:
        check_float32("dlse", dlse)
        dlse = dlse.contiguous()
    arrays = mask_key = None
    if masks is not None:
        arrays = mask_tensors(masks, q)
        mask_key = _mask_key(arrays)
    dq, dk, dv = _new_like(q), _new_like(k), _new_like(v)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
            dlse.data_ptr() if dlse is not None else None)  # fmt: skip
    gp = (dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    alignment = _alignment_of(ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[5] | gp[0] | gp[1] | gp[2],
                              _DEVICE_ALIGNMENT if index >= 0 else _HOST_ALIGNMENT)  # fmt: skip
    out_key, dout_stride = _view(out), dout.stride()
    key = (_BWD, index, opts, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out_key, dout_stride,
           mask_key, alignment)  # fmt: skip
    plan = _cached(key)
    if plan is None:
        grads = ((dout.shape, dout_stride), _view(dq), _view(dk), _view(dv))
        plan = _new_plan(key, index, _BWD, opts, _view(q), _view(k), _view(v), out_key, grads, arrays, alignment)
    want = plan.extra
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is not None and t.shape != want:
            raise invalid(_clib.JATTN_ERROR_INVALID_DIMENSION, f"{name}: shape {list(t.shape)}, must be {list(want)}")
    _run_backward(plan, index, q, ptrs, _mask_ref(plan, arrays), gp)
    return dq, dk, dv


def _backward_of(fwd: _plan.Plan, q, k, v, out, lse, dout, dlse, masks):
    """``backward`` of an eager call whose forward ran ``fwd``: its backward plan is kept on
    ``fwd`` by the gradients' strides and the pointers' alignment class."""
    if dout is None:  # only the lse is used
        dout = torch.zeros_like(out)
    elif dout.stride(-1) != 1 and dout.shape[-1] > 1:
        dout = dout.contiguous()  # autograd may hand a gradient of any strides (an expanded one too)
    if dlse is not None:
        dlse = dlse.contiguous()
    index = q.get_device()
    dq, dk, dv = _new_like(q), _new_like(k), _new_like(v)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
            dlse.data_ptr() if dlse is not None else None)  # fmt: skip
    gp = (dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    alignment = _alignment_of(ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[5] | gp[0] | gp[1] | gp[2],
                              _DEVICE_ALIGNMENT if index >= 0 else _HOST_ALIGNMENT)  # fmt: skip
    key = (dout.stride(), alignment)
    plan = fwd.backward_plans.get(key)
    if plan is None:
        layout = fwd.opts.layout
        grad = _clib.GradStrides(*(_problem.tensor_dims(name, t.shape, t.stride(), layout)[4]
                                   for name, t in (("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv))))  # fmt: skip
        plan = _on_device(index, _plan.make_plan, _BWD, fwd.problem, grad, fwd.mask, fwd.opts, index >= 0, alignment)
        plan.extra = fwd.extra
        plan = fwd.backward_plans.setdefault(key, plan)
    arrays = mask_tensors(masks, q) if masks is not None else None
    _run_backward(plan, index, q, ptrs, _mask_ref(plan, arrays), gp)
    return dq, dk, dv


def _run_backward(plan: _plan.Plan, index: int, q: torch.Tensor, ptrs: tuple, mask, gp: tuple) -> None:
    if index < 0:
        status = _plan_backward(plan.handle, _thread_context(), None, None, 0, *ptrs, mask, *gp)
    else:
        status = _on_device(index, _backward_cuda, plan, index, q.device, ptrs, mask, gp)
    if status:
        raise_for_status(status)


def _backward_cuda(plan, index, device, ptrs, mask, gp) -> int:
    workspace = _workspace(plan, device)
    wp = workspace.data_ptr() if workspace is not None else None
    return _plan_backward(plan.handle, None, _raw_stream(index), wp, plan.workspace_bytes, *ptrs, mask, *gp)


# ---- autograd for eager calls ------------------------------------------------------------------------
def _backward_once(ctx, dout, dlse):
    saved = ctx.saved_tensors  # q, k, v, out (and lse, when it is an output)
    lse = saved[4] if len(saved) == 5 else ctx.lse
    return backward(saved[0], saved[1], saved[2], saved[3], lse, dout, dlse, ctx.opts, ctx.masks,
                    forward_plan=ctx.plan)  # fmt: skip


_backward_once_differentiable = once_differentiable(_backward_once)


class EagerAttention(torch.autograd.Function):
    """jattn attention for eager calls that autograd differentiates: the forward and jattn's
    backward, with none of the custom op's dispatch (``_torch_op`` serves traced code: its
    ``register_autograd`` formula is the same backward). Returns the output; the lse it computes
    for the backward stays inside (:class:`EagerAttentionLse` hands it out, differentiable).

    Its gradients are not differentiable again: under ``create_graph=True`` they come from the
    ``once_differentiable`` form (a second derivative raises); the plain backward skips that
    wrapper's host cost."""

    @staticmethod
    def forward(ctx, q, k, v, opts: Options, masks: Optional[MaskArrays]):  # type: ignore[override]
        """``opts`` with ``return_lse=True`` (the backward needs the lse). Raises at the forward when
        jattn's backward cannot run the call."""
        _check_dtypes(q, k, v)
        out, lse, plan = _run_forward(q, k, v, opts, None, None, masks, _device_index(q, k, v), True)
        ctx.save_for_backward(q, k, v, out)
        ctx.lse, ctx.opts, ctx.masks, ctx.plan = lse, opts, masks, plan  # (lse is no output: no cycle)
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        if _grad_enabled():  # create_graph=True
            return (*_backward_once_differentiable(ctx, dout, None), None, None)
        return (*_backward_once(ctx, dout, None), None, None)


class EagerAttentionLse(torch.autograd.Function):
    """:class:`EagerAttention` returning ``(out, lse)``, both differentiable (the caller asked for
    the lse: ``return_lse=True``)."""

    @staticmethod
    def forward(ctx, q, k, v, opts: Options, masks: Optional[MaskArrays]):  # type: ignore[override]
        _check_dtypes(q, k, v)
        out, lse, plan = _run_forward(q, k, v, opts, None, None, masks, _device_index(q, k, v), True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts, ctx.masks, ctx.plan = opts, masks, plan
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):  # type: ignore[override]
        if _grad_enabled():
            return (*_backward_once_differentiable(ctx, dout, dlse), None, None)
        return (*_backward_once(ctx, dout, dlse), None, None)
