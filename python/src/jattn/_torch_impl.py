"""The torch front end: CPU and CUDA tensors to one jattn call.

CUDA tensors run on torch's current stream of the tensors' own device (made the current device
for the call when it is not), with device memory (``JATTN_MEMORY_DEVICE``) and a workspace from
torch's caching allocator, so that nothing is allocated with cudaMalloc per call and the call can
be captured in a CUDA graph. CPU tensors run on the host backends with the calling thread's
``jattn_ctx``; the GIL is released during the C call (ctypes.CDLL).

This module is the implementation behind both the eager fast path of ``jattn.attention`` and
the ``jattn::attention`` custom op (``_torch_op.py``).
"""

from __future__ import annotations

from ctypes import byref, c_size_t
from typing import Dict, Optional, Tuple

import torch

from . import _clib, _context, _exec, _problem
from ._errors import invalid, raise_for_status
from ._options import Options

_F32 = torch.float32
_MASK_DTYPES = (torch.bool, torch.uint8)
_DEVICE_TYPES = ("cpu", "cuda", "meta")  # meta: shapes only, through the fake implementations

try:  # the raw cudaStream_t of the current stream, without building a torch.cuda.Stream
    _raw_stream = torch._C._cuda_getCurrentRawStream  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - torch built without CUDA

    def _raw_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream


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


def check_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: Optional[torch.Tensor], differentiable: bool = False
) -> torch.device:
    """dtype, device and autograd checks shared by the eager path, the traced wrapper and the
    ops; returns the tensors' device. ``differentiable``: the call goes through the
    ``jattn::attention`` op, whose autograd formula is jattn's backward (when the library has one)."""
    if q.dtype is not _F32 or k.dtype is not _F32 or v.dtype is not _F32:
        for name, t in (("q", q), ("k", k), ("v", v)):
            check_float32(name, t)
    device = q.device
    if k.device != device or v.device != device:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"q, k, v: on {q.device}, {k.device} and {v.device}; all three must be on one device",
        )
    if device.type not in _DEVICE_TYPES:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"q: on {device}; jattn runs on CPU and CUDA tensors")
    if needs_grad(q, k, v) and not (differentiable and out is None):
        raise RuntimeError(
            "jattn: jattn.attention(out=...) writes in place and cannot be differentiated; drop out= for a "
            "call whose q, k or v require grad, or call it under torch.no_grad()"
        )
    if out is not None:
        check_float32("out", out)
        if out.device != device:
            raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"out: on {out.device}, must be on q's device {device}")
    return device


def _mask_view(mask: torch.Tensor, device: torch.device) -> Tuple[torch.Tensor, Tuple]:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"jattn: key_padding_mask is a {type(mask).__name__}, must be a torch tensor like q")
    if mask.dtype not in _MASK_DTYPES:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"key_padding_mask: dtype {mask.dtype}, must be torch.bool or torch.uint8 (True / nonzero = attend)",
        )
    if mask.device != device:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT, f"key_padding_mask: on {mask.device}, must be on q's device {device}"
        )
    if mask.dim() >= 1 and mask.shape[-1] > 1 and mask.stride(-1) != 1:
        mask = mask.contiguous()  # rows of bytes; only this case is copied
    return mask, (mask.shape, mask.stride(), mask.data_ptr())


def _kv_len_view(kv_len: torch.Tensor, device: torch.device) -> Tuple[torch.Tensor, Tuple]:
    if not isinstance(kv_len, torch.Tensor):
        raise TypeError(f"jattn: kv_len is a {type(kv_len).__name__}, must be a torch tensor like q")
    if kv_len.dtype != torch.int64:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"kv_len: dtype {kv_len.dtype}, must be torch.int64")
    if kv_len.device != device:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"kv_len: on {kv_len.device}, must be on q's device {device}")
    kv_len = kv_len.contiguous()
    return kv_len, (kv_len.shape, kv_len.data_ptr())


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    opts: Options,
    out: Optional[torch.Tensor],
    lse: Optional[torch.Tensor],
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
    differentiable: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One jattn call on torch tensors with validated options; returns ``(out, lse or None)``.

    ``out`` and ``lse`` may be given (written in place) or are allocated; ``lse`` is computed
    when given or when ``opts.return_lse``. Nothing is written to a given tensor on failure.
    ``differentiable``: called by the ``jattn::attention`` op, below its autograd formula.
    """
    device = check_inputs(q, k, v, out, differentiable)
    problem = _problem.cached_problem(
        opts,
        (q.shape, q.stride()),
        (k.shape, k.stride()),
        (v.shape, v.stride()),
        None if out is None else (out.shape, out.stride()),
    )
    if lse is not None:
        check_float32("lse", lse)
        want = _problem.lse_shape(q.dim(), problem)
        if tuple(lse.shape) != want or not lse.is_contiguous() or lse.device != device:
            raise invalid(
                _clib.JATTN_ERROR_INVALID_DIMENSION,
                f"lse: shape {list(lse.shape)} on {lse.device}, must be contiguous {list(want)} on {device}",
            )
    padding = None
    keep = None  # tensors the C call reads besides q, k, v (kept alive through the call)
    if key_padding_mask is not None or kv_len is not None:
        mask_t, mask_info = _mask_view(key_padding_mask, device) if key_padding_mask is not None else (None, None)
        len_t, len_info = _kv_len_view(kv_len, device) if kv_len is not None else (None, None)
        padding = _problem.key_padding(problem, mask_info, len_info)
        keep = (mask_t, len_t)
    on_device = device.type == "cuda"
    result = torch.empty_like(q, memory_format=torch.contiguous_format) if out is None else out
    if lse is None and opts.return_lse:
        lse = torch.empty(_problem.lse_shape(q.dim(), problem), dtype=_F32, device=device)
    lse_ptr = lse.data_ptr() if lse is not None else None
    padding_ref = byref(padding) if padding is not None else None

    if on_device:
        exec_ = _exec.make_exec(opts, True)
        index = device.index
        previous = torch.cuda.current_device()
        if previous != index:
            torch.cuda.set_device(index)
        try:
            exec_.cuda_stream = _raw_stream(index)
            nbytes = c_size_t()
            raise_for_status(_clib.workspace_size(byref(problem), byref(exec_), byref(nbytes)))
            workspace = None
            if nbytes.value:
                workspace = torch.empty(nbytes.value, dtype=torch.uint8, device=device)
                exec_.workspace = workspace.data_ptr()
                exec_.workspace_bytes = nbytes.value
            status = _clib.forward_padded(
                None, byref(problem), byref(exec_), q.data_ptr(), k.data_ptr(), v.data_ptr(), padding_ref,
                result.data_ptr(), lse_ptr,
            )  # fmt: skip
            del workspace  # back to the caching allocator, ordered after the call on this stream
        finally:
            if previous != index:
                torch.cuda.set_device(previous)
    else:
        exec_ = _exec.host_exec(opts)
        status = _clib.forward_padded(
            _context.thread_context(), byref(problem), byref(exec_), q.data_ptr(), k.data_ptr(), v.data_ptr(),
            padding_ref, result.data_ptr(), lse_ptr,
        )  # fmt: skip
    del keep
    raise_for_status(status)
    return result, lse


def select(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: Options) -> _clib.Selection:
    """``jattn_select`` for the call ``attention`` would make on these tensors."""
    device = check_inputs(q, k, v, None)
    problem = _problem.make_problem(opts, (q.shape, q.stride()), (k.shape, k.stride()), (v.shape, v.stride()), None)
    exec_ = _exec.make_exec(opts, device.type == "cuda")
    selection = _clib.Selection()
    if device.type == "cuda":
        index = device.index
        previous = torch.cuda.current_device()
        if previous != index:
            torch.cuda.set_device(index)
        try:
            status = _clib.select(byref(problem), byref(exec_), byref(selection))
        finally:
            if previous != index:
                torch.cuda.set_device(previous)
    else:
        status = _clib.select(byref(problem), byref(exec_), byref(selection))
    raise_for_status(status)
    return selection


# (device type, device index, head_dim, backend, precision, layout) -> why jattn_backward_select
# refuses such a problem on that device ("STATUS: message"), or None when it accepts it.
_BACKWARD_REFUSALS: Dict[Tuple[str, int, int, str, str, str], Optional[str]] = {}


def backward_refusal(device: torch.device, head_dim: int, opts: Options) -> Optional[str]:
    """Why jattn's backward cannot run attention of this ``head_dim`` on ``device`` with these
    options (the status and message of ``jattn_backward_select``, e.g. a cuda backend built for
    an sm the GPU is below, a head_dim over 256, a backend without a backward, a libjattn without
    None.

    Asked once per (device, head_dim, backend, precision, layout) and cached: the answer does
    not depend on the sequence lengths. Under ``torch.compile`` it is evaluated while Dynamo
    traces (``torch.compiler.assume_constant_result``): a constant of the graph, no graph break."""
    index = -1 if device.index is None else device.index
    return _backward_refusal(device.type, index, int(head_dim), opts.backend, opts.precision, opts.layout)


def _backward_refusal_uncached(device_type: str, index: int, head_dim: int, opts: Options) -> Optional[str]:
    seq = 128  # a representative length: the kernels' choice depends on the head_dim and the device
    shape = (1, 1, seq, head_dim) if opts.layout == "bhsd" else (1, seq, 1, head_dim)
    strides = (seq * head_dim, seq * head_dim, head_dim, 1) if opts.layout == "bhsd" else (seq * head_dim, head_dim,
                                                                                          head_dim, 1)  # fmt: skip
    problem = _problem.make_problem(opts, (shape, strides), (shape, strides), (shape, strides), None)
    on_device = device_type == "cuda"
    exec_ = _exec.make_exec(opts, on_device)
    selection = _clib.Selection()
    previous = torch.cuda.current_device() if on_device else index
    switch = on_device and previous != index and index >= 0
    if switch:
        torch.cuda.set_device(index)
    try:
        status = _clib.backward_select(byref(problem), byref(exec_), byref(selection))
        message = _clib.last_error() if status != _clib.JATTN_OK else ""
    finally:
        if switch:
            torch.cuda.set_device(previous)
    if status == _clib.JATTN_OK:
        return None
    return f"{_clib.status_name(status)}: {message}"


def _backward_refusal_impl(device_type: str, index: int, head_dim: int, backend: str, precision: str,
                           layout: str) -> Optional[str]:  # fmt: skip
    key = (device_type, index, head_dim, backend, precision, layout)
    if key in _BACKWARD_REFUSALS:
        return _BACKWARD_REFUSALS[key]
    from ._options import validated

    reason = _backward_refusal_uncached(
        device_type, index, head_dim, validated(layout=layout, backend=backend, precision=precision)
    )
    _BACKWARD_REFUSALS[key] = reason
    return reason


_assume_constant = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
_backward_refusal = _assume_constant(_backward_refusal_impl) if _assume_constant else _backward_refusal_impl


def backward_refusals() -> Dict[Tuple[str, int, int, str, str, str], Optional[str]]:
    """The refusals found so far (a copy), for messages."""
    return dict(_BACKWARD_REFUSALS)


def _grad_strides(name: str, t: torch.Tensor, layout: str) -> _clib.Strides:
    return _problem.tensor_dims(name, t.shape, t.stride(), layout)[4]


def backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    dlse: Optional[torch.Tensor],
    opts: Options,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients ``(dq, dk, dv)`` of one jattn attention (``jattn_backward``), given its
    inputs, the output and lse the forward produced, and the output's gradient ``dout`` (and
    the lse's, ``dlse``, or None). The gradients are new contiguous tensors of q's, k's and v's
    shapes and layout; any strides with a contiguous last dimension are read for the inputs."""
    device = check_inputs(q, k, v, None, differentiable=True)
    for name, t in (("out", out), ("lse", lse), ("dout", dout)):
        check_float32(name, t)
    if dout.shape != out.shape:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_DIMENSION, f"dout: shape {list(dout.shape)}, must be out's {list(out.shape)}"
        )
    if dout.dim() and dout.shape[-1] > 1 and dout.stride(-1) != 1:
        dout = dout.contiguous()  # autograd may hand a gradient of any strides (an expanded one too)
    problem = _problem.cached_problem(
        opts, (q.shape, q.stride()), (k.shape, k.stride()), (v.shape, v.stride()), (out.shape, out.stride())
    )
    want = _problem.lse_shape(q.dim(), problem)
    lse = lse.contiguous()
    if dlse is not None:
        check_float32("dlse", dlse)
        dlse = dlse.contiguous()
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is not None and tuple(t.shape) != want:
            raise invalid(_clib.JATTN_ERROR_INVALID_DIMENSION, f"{name}: shape {list(t.shape)}, must be {list(want)}")
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    layout = opts.layout
    grad = _clib.GradStrides(
        _grad_strides("dout", dout, layout), _grad_strides("dq", dq, layout), _grad_strides("dk", dk, layout),
        _grad_strides("dv", dv, layout),
    )  # fmt: skip
    padding = None
    keep = None
    if key_padding_mask is not None or kv_len is not None:
        mask_t, mask_info = _mask_view(key_padding_mask, device) if key_padding_mask is not None else (None, None)
        len_t, len_info = _kv_len_view(kv_len, device) if kv_len is not None else (None, None)
        padding = _problem.key_padding(problem, mask_info, len_info)
        keep = (mask_t, len_t)
    padding_ref = byref(padding) if padding is not None else None
    pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
                dlse.data_ptr() if dlse is not None else None)  # fmt: skip
    if device.type == "cuda":
        exec_ = _exec.make_exec(opts, True)
        index = device.index
        previous = torch.cuda.current_device()
        if previous != index:
            torch.cuda.set_device(index)
        try:
            exec_.cuda_stream = _raw_stream(index)
            nbytes = c_size_t()
            raise_for_status(_clib.backward_workspace_size(byref(problem), byref(grad), byref(exec_), byref(nbytes)))
            workspace = None
            if nbytes.value:
                workspace = torch.empty(nbytes.value, dtype=torch.uint8, device=device)
                exec_.workspace = workspace.data_ptr()
                exec_.workspace_bytes = nbytes.value
            status = _clib.backward(None, byref(problem), byref(grad), byref(exec_), *pointers, padding_ref,
                                    dq.data_ptr(), dk.data_ptr(), dv.data_ptr())  # fmt: skip
            del workspace
        finally:
            if previous != index:
                torch.cuda.set_device(previous)
    else:
        exec_ = _exec.host_exec(opts)
        status = _clib.backward(_context.thread_context(), byref(problem), byref(grad), byref(exec_), *pointers,
                                padding_ref, dq.data_ptr(), dk.data_ptr(), dv.data_ptr())  # fmt: skip
    del keep
    raise_for_status(status)
    return dq, dk, dv
