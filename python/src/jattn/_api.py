"""The public calls: ``attention``, ``select`` and ``backends``.

``attention`` takes torch tensors (CPU or CUDA) or numpy arrays and hands them to the matching
front end (``_torch_impl``, ``_numpy_impl``). Under ``torch.compile`` (or any tracing that goes
through the dispatcher: tensor subclasses, fake tensors) a torch call goes through the custom
ops of ``_torch_op``; an eager call on plain tensors runs the implementation directly.
"""

from __future__ import annotations

from ctypes import byref
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Tuple, Union

from . import _clib, _exec, _options, _problem
from ._errors import error_from_status

try:
    import torch

    from . import _torch_impl, _torch_op
except ImportError:  # numpy only
    torch = None  # type: ignore[assignment]

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
    """What ``jattn.attention`` would run for a problem (``jattn_select``)."""

    backend: str  #: the backend chosen (a name ``jattn.backends()`` lists)
    kernel: str  #: the kernel that runs, e.g. "cpu_flash_f32_avx512_4x48"
    isa: str  #: its instruction set: "scalar", "avx512", "avx2", "neon", "generic", "sm_90a", ...
    threads: int  #: CPU threads it would use (1 for GPU backends)


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


def _needs_dispatcher(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True under torch.compile / export, for tensor subclasses (fake, functional, ...), meta
    tensors, and calls autograd will differentiate (the op carries the backward)."""
    plain = torch.Tensor
    return (
        type(q) is not plain or type(k) is not plain or type(v) is not plain or q.is_meta or torch.compiler.is_compiling()
        or _torch_impl.needs_grad(q, k, v)
    )  # fmt: skip


def _attention_through_ops(q, k, v, opts, out, key_padding_mask, kv_len):
    """A torch call through the custom ops (traced code, and calls autograd differentiates),
    whose schemas take the options' fields as plain arguments (``*opts``). When an input requires
    grad the op is asked for the lse (its backward needs it); the caller gets it only if asked."""
    _torch_impl.check_inputs(q, k, v, out, differentiable=True)
    if out is None:
        grad = _torch_impl.needs_grad(q, k, v)
        want_lse = opts.return_lse or grad
        if grad:
            # Refused here rather than at loss.backward(): the backward of this device (its sm,
            # the head_dim, the loaded library) is asked once and cached (a constant when traced).
            refusal = _torch_impl.backward_refusal(q.device, q.shape[-1], opts)
            if refusal is not None:
                raise error_from_status(
                    _clib.JATTN_ERROR_UNSUPPORTED,
                    f"backward: q, k or v require grad, but jattn's backward cannot run this problem on {q.device} "
                    f"({refusal}); call it under torch.no_grad() or detach q, k and v",
                )
        out, lse = torch.ops.jattn.attention(q, k, v, *opts._replace(return_lse=want_lse), key_padding_mask, kv_len)
        return (out, lse) if opts.return_lse else out
    lse = (
        torch.empty(_torch_op.lse_shape(q, opts.layout), dtype=torch.float32, device=q.device)
        if opts.return_lse
        else None
    )
    torch.ops.jattn.attention_out(q, k, v, out, lse, *opts, key_padding_mask, kv_len)
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
) -> Union[Array, Tuple[Array, Array]]:
    """Exact float32 multi-head attention (non-causal): ``softmax(scale * q k^T) v`` per head.

    Args:
        q, k, v: float32 torch tensors (all on one CPU or CUDA device) or numpy arrays.
            ``layout="bhsd"``: q ``[B, H, Sq, D]``, k and v ``[B, H, Skv, D]``;
            ``layout="bshd"``: ``[B, S, H, D]`` (as diffusers and FlashAttention hold them).
            3-d tensors drop ``B``. Any strides with the last dimension contiguous are read as
            they are, without copies (views into a fused QKV projection ``[B, S, 3, H, D]`` too).
            Nothing is cast: other dtypes raise ``ValueError``.
        layout: ``"bhsd"`` or ``"bshd"``.
        scale: the softmax scale; ``None`` means ``1/sqrt(D)``.
        backend: ``"auto"`` (in the library's order, the first backend that computes from device
            memory for CUDA tensors, the first that computes on the CPU for CPU tensors and numpy
            arrays), or a backend's name: ``jattn.backends()`` lists them with what each runs on
            (``"ref"`` is the float64 reference: slow).
        precision: ``"f32"`` (exact: rel_l2 <= 2e-6 against float64) or ``"tf32"`` (GPU, opt-in).
        threads: CPU threads for the host backends; 0 = all cores.
        out: optional output of q's shape, float32, on q's device, any strides with a contiguous
            last dimension; written in place and returned. Nothing is written on failure.
        return_lse: also return the log-sum-exp of each query row, float32 ``[B, H, Sq]``
            (``[H, Sq]`` for 3-d inputs).
        key_padding_mask: optional boolean (or uint8) key mask ``[B, Skv]``, ``[1, Skv]`` or
            ``[Skv]``, True = attend, on q's device; read without a copy when its last dimension
            is contiguous. A query row with no key attended gives 0 (lse ``-inf``).
        kv_len: optional int64 ``[B]`` key lengths: batch b attends keys ``j < kv_len[b]``.

    Returns:
        The output, with q's layout (a new contiguous tensor or array, or ``out``); with
        ``return_lse=True`` the pair ``(out, lse)``.

    CUDA tensors run on torch's current stream of their own device, with a workspace from
    torch's caching allocator: nothing is cudaMalloc'ed per call, and the call can be captured
    in a CUDA graph. CPU tensors and numpy arrays run on the host with the GIL released.

    Raises:
        ValueError (``jattn.JattnValueError``): invalid shapes, layout, strides, scale, dtype or
            devices. NotImplementedError (``jattn.JattnNotImplementedError``): the backend cannot
            run this problem. RuntimeError (``jattn.JattnRuntimeError``): the backend is
            unavailable or failed. Each carries ``status_name`` and the library's ``message``.
    """
    given = dict(
        layout=layout, scale=scale, backend=backend, precision=precision, threads=threads, return_lse=return_lse
    )
    if _is_torch(q):
        if _needs_dispatcher(q, k, v):  # traced: checked without the (guarded) cache
            opts = _options.validated(**given)
            return _attention_through_ops(q, k, v, opts, out, key_padding_mask, kv_len)
        opts = _options.options(**given)
        result, lse = _torch_impl.attention(q, k, v, opts, out, None, key_padding_mask, kv_len)
    elif _is_numpy(q):
        opts = _options.options(**given)
        result, lse = _numpy_impl.attention(q, k, v, opts, out, key_padding_mask, kv_len)
    else:
        raise TypeError(f"jattn: q is a {type(q).__name__}; jattn.attention takes torch tensors or numpy arrays")
    return (result, lse) if opts.return_lse else result


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
) -> Selection:
    """Which backend and kernel ``jattn.attention`` would run for these inputs and options
    (the same dispatch the call makes; nothing is computed). Raises as ``attention`` would when
    no backend can run the problem."""
    if _is_torch(q) or _is_numpy(q):
        opts = _options.options(layout=layout, scale=scale, backend=backend, precision=precision, threads=threads)
        sel = (_torch_impl if _is_torch(q) else _numpy_impl).select(q, k, v, opts)
    else:
        raise TypeError(f"jattn: q is a {type(q).__name__}; jattn.select takes torch tensors or numpy arrays")
    return Selection(sel.backend_name.decode(), sel.kernel.decode(), sel.isa.decode(), sel.threads)


def backends() -> List[BackendInfo]:
    """Every backend of the library, in the order its ``auto`` tries them, each with what it runs
    on, whether it can run here and the kernel it picks for a FLUX head (24 heads x 1536 tokens x
    128), or the library's reason."""
    problem = _clib.Problem(1, 24, 1536, 1536, 128, 0.0, _clib.JATTN_DTYPE_F32)
    problem.q = problem.k = problem.v = problem.out = _problem.contiguous_out_strides("bhsd", 24, 1536, 128)
    found = []
    for b in _clib.BACKENDS:
        exec_ = _exec.make_exec(_options.options(backend=b.name), b.on_device)
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
