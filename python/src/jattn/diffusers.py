"""diffusers' attention through jattn: ``enabled()``, ``enable()``, ``disable()``.

Every diffusers model whose attention goes through diffusers' dispatcher
(``diffusers.models.attention_dispatch.dispatch_attention_fn``: FLUX.1, FLUX.2, SD3, Wan, ...)
then attends with jattn::

    import jattn
    with jattn.diffusers.enabled():          # or jattn.diffusers.enable() ... disable()
        image = pipe(prompt).images[0]

Float32 models run on jattn as they are. For bf16/fp16 models, ``upcast=True`` casts q, k and
v to float32, attends exactly and casts the output back (README: its measured cost); without
it they stay on diffusers' path. Calls jattn cannot serve go to diffusers' own path with the
same arguments, with one warning per kind of call: a float (additive) mask or a genuinely
per-query mask, dropout, causal attention, grouped-query attention (fewer k/v heads), dtypes
other than float32 (without ``upcast``), masks and gradients under context parallelism, and
tensors that require grad when the loaded libjattn has no backward, or on a GPU whose cuda
backend refuses the backward of the problem (``jattn_backward_select``: an sm below the
kernels', a head_dim over 256; asked once per device and head_dim, and cached). Tensors that require grad
are otherwise served: ``jattn.attention`` is differentiable (jattn's own backward), through the
``upcast`` casts too, so fine-tuning (LoRA, full) runs its attention, forward and backward, on
jattn. ``return_lse=True`` is served (lse float32 ``[B, S, H]``).
Boolean key masks (``[B, Skv]``, ``[B, 1, 1, Skv]``, and
``[B, 1, Sq, Skv]`` / ``[B, H, Sq, Skv]`` when they are a key mask broadcast over the query (and
head) dimensions, stride 0 there) become jattn's key padding; on a backend that does not
implement key padding yet, such calls also take diffusers' path (one warning).

What is patched. diffusers' registry (``_AttentionBackendRegistry``) keeps backend names in a
closed ``Enum`` (``AttentionBackendName``), which ``set_attention_backend`` and the
``attention_backend`` context manager check against, so a new backend cannot be registered
cleanly. Instead ``enable()`` replaces exactly one entry, ``_AttentionBackendRegistry._backends[
<the active backend>]`` (the active backend is ``native``, PyTorch SDPA, unless
``DIFFUSERS_ATTN_BACKEND`` or ``set_attention_backend`` chose another), with a router that calls
jattn, or the function that was there for calls jattn cannot serve. Nothing else changes: the
backend's name, its argument list and its checks stay diffusers'. ``disable()`` (and leaving
``enabled()``) puts the original function back. Models whose processors were given another
backend explicitly (``model.set_attention_backend("flash")``) keep it. The switch is
process-wide.

Context parallelism. Under ``model.enable_parallelism(config=ContextParallelConfig(...))``
(diffusers 0.36 and later) every mode diffusers has (Ulysses, ring, the unified 2-D mesh, and
the ``*_anything`` variants for uneven sizes) runs jattn as each rank's attention: the router
calls diffusers' ``_templated_context_parallel_attention`` with jattn as its forward op (the
output and the float32 lse; the ring merge stays in float32 for bf16/fp16 models with
``upcast=True``). diffusers does the communication over its device mesh (NCCL, gloo). Such
calls count as ``"jattn:context_parallel"``. Since jattn keeps the active backend's name
(``native``), which diffusers lists as context-parallel capable, ``enable_parallelism``
accepts it; jattn also gives that slot the ring modes, which diffusers' own native backend
refuses (it has no lse).

``counts()`` says how many eager calls took each path since the last ``reset_counts()``
(calls inside ``torch.compile``'d code are not counted, so that counting never recompiles).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, Optional

_lock = threading.Lock()
_installed: Optional[_Installed] = None
_options: Dict[str, Any] = {"upcast": False, "backend": "auto"}
_counts: Dict[str, int] = {}
_warned: set = set()

_FALLBACK_REASONS = {
    "attn_mask": "an attention mask that is not a boolean key mask (float / additive, or per-query)",
    "dropout": "dropout",
    "causal": "causal attention",
    "gqa": "grouped-query attention (k/v with fewer heads than q)",
    "context_parallel": "context parallelism, on a diffusers without context-parallel templates (before 0.36)",
    "context_parallel_mask": "an attention mask under context parallelism",
    "context_parallel_autograd": "tensors that require grad under context parallelism (jattn's backward is not "
    "wired into diffusers' context-parallel templates yet)",
    "backward": "tensors that require grad on a device whose jattn backend refuses the backward of the problem "
    "(a GPU below the cuda kernels' sm, a head_dim over 256, ...)",
    "dtype": "a dtype other than float32 (pass upcast=True to run bf16/fp16 through jattn in float32)",
    "shape": "tensors that are not [B, S, H, D] with one head_dim and a contiguous last dimension",
    "device": "tensors on a device other than CPU or CUDA",
    "arguments": "arguments jattn does not take",
    "unsupported": "problems the jattn backend cannot run (jattn.select says why)",
}

_KNOWN_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False,
                   "return_lse": False, "_parallel_config": None}  # fmt: skip


class _Installed:
    """The registry entry enable() replaced, and the router put there."""

    __slots__ = ("name", "original", "router")

    def __init__(self, name: Any, original: Callable, router: Callable) -> None:
        self.name, self.original, self.router = name, original, router


def _registry():
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    return _AttentionBackendRegistry


def _note(path: str) -> None:
    """Counts one eager call that took ``path`` (``"jattn"``, ``"jattn:context_parallel"`` or
    ``"fallback:<reason>"``); a fallback's warning is given the first time its reason is seen.

    Inside code that ``torch.compile`` traces, nothing is counted and the dicts are neither read
    nor written: Dynamo would guard on the counter's value and recompile the graph on every
    call (issue 19). A compiled graph routes its attention calls the same way on every run, so
    its routing is seen once, when it is traced: a fallback's warning is given then (through
    Dynamo's ``comptime`` hook, which runs at trace time without a graph break), and the graph
    itself holds ``torch.ops.jattn.attention`` for each call jattn serves.
    """
    if _is_compiling():
        if path.startswith("fallback:"):
            _warn_while_tracing(path)
        return
    _counts[path] = _counts.get(path, 0) + 1
    if path.startswith("fallback:"):
        _warn_once(path[len("fallback:") :], stacklevel=5)


def _is_compiling() -> bool:
    import torch

    return torch.compiler.is_compiling()


def _warn_once(reason: str, stacklevel: int) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(
            f"jattn.diffusers: attention calls with {_FALLBACK_REASONS[reason]} go to diffusers' own attention "
            f"(this warning is given once){_reason_detail(reason)}",
            stacklevel=stacklevel,
        )


def _reason_detail(reason: str) -> str:
    """The library's own words for a refusal, where the reason has them."""
    if reason != "backward":
        return ""
    from . import _torch_impl

    refusals = sorted({why for why in _torch_impl.backward_refusals().values() if why is not None})
    return "; jattn_backward_select: " + "; ".join(refusals) if refusals else ""


def _warn_while_tracing(path: str) -> None:
    """Gives a fallback's warning while Dynamo traces the call (never in the graph)."""
    try:
        from torch._dynamo.comptime import comptime
    except ImportError:  # pragma: no cover - a torch without the hook: the traced fallback stays silent
        return
    comptime(_warn_from_trace)


def _warn_from_trace(ctx) -> None:
    path = ctx.get_local("path", stacklevel=0).as_python_constant()
    _warn_once(path[len("fallback:") :], stacklevel=2)


def _fall_back(reason: str, original: Callable, kwargs: Dict[str, Any]):
    _note("fallback:" + reason)
    return original(**kwargs)


def _key_mask(mask, batch: int, heads: int, seq_q: int, seq_kv: int, device):
    """The ``[B or 1, Skv]`` boolean key mask a diffusers mask is a broadcast of, else None."""
    import torch

    if mask.dtype is not torch.bool or mask.device != device or mask.dim() < 1 or mask.dim() > 4:
        return None
    if mask.shape[-1] != seq_kv:
        return None
    if mask.dim() == 1:
        return mask
    if mask.shape[0] not in (1, batch):
        return None
    middle = {2: (), 3: (seq_q,), 4: (heads, seq_q)}[mask.dim()]
    for dim, extent in enumerate(middle, start=1):
        if mask.shape[dim] not in (1, extent) or (mask.shape[dim] > 1 and mask.stride(dim) != 0):
            return None  # a genuinely per-query (or per-head) mask
    while mask.dim() > 2:
        mask = mask.select(1, 0)
    return mask


def _unservable(kwargs: Dict[str, Any]) -> Optional[str]:
    """Why jattn cannot serve a call (a key of _FALLBACK_REASONS), or None."""
    import torch

    for name, value in kwargs.items():
        if name in ("query", "key", "value", "attn_mask"):
            continue
        if name not in _KNOWN_DEFAULTS:
            if value is not None:
                return "arguments"
        elif value != _KNOWN_DEFAULTS[name] and name not in ("scale", "enable_gqa", "return_lse", "_parallel_config"):
            return {"dropout_p": "dropout", "is_causal": "causal"}[name]  # GQA: by the shapes below
    q, k, v = kwargs["query"], kwargs["key"], kwargs["value"]
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "shape"
    if k.shape[2] != q.shape[2] or v.shape[2] != q.shape[2]:
        return "gqa"
    if k.shape[3] != q.shape[3] or v.shape[3] != q.shape[3] or q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        return "shape"
    if q.device.type not in ("cpu", "cuda") or k.device != q.device or v.device != q.device:
        return "device"
    parallel = kwargs.get("_parallel_config") is not None
    if parallel and _context_parallel_template() is None:
        return "context_parallel"
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if parallel:
            return "context_parallel_autograd"
        if _backward_refusal(q) is not None:
            return "backward"  # the device's backend refuses the backward (a GPU's sm, the head_dim, ...)
    if parallel and kwargs.get("attn_mask") is not None:
        return "context_parallel_mask"  # ring passes each rank's mask unsliced: not a key mask of the shard
    if q.dtype != k.dtype or q.dtype != v.dtype:
        return "dtype"
    if q.dtype is not torch.float32 and not (_options["upcast"] and q.dtype in (torch.bfloat16, torch.float16)):
        return "dtype"
    return None


def _backward_refusal(q) -> Optional[str]:
    """Why jattn's backward would refuse attention of q's head_dim on q's device (asked once per
    device, head_dim and options, then cached; a trace-time constant under torch.compile), or None."""
    from . import _torch_impl
    from ._options import options, validated

    backend = _options["backend"]
    opts = validated(layout="bshd", backend=backend) if _is_compiling() else options(layout="bshd", backend=backend)
    return _torch_impl.backward_refusal(q.device, q.shape[-1], opts)


def _context_parallel_template() -> Optional[Callable]:
    """diffusers' ``_templated_context_parallel_attention`` (0.36 and later), else None."""
    from diffusers.models import attention_dispatch

    return getattr(attention_dispatch, "_templated_context_parallel_attention", None)


def _context_parallel_forward_op(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                 return_lse, _save_ctx=True, _parallel_config=None):  # fmt: skip
    """jattn as the attention of one rank inside diffusers' context-parallel templates.

    The templates call it on ``[B, S, H, D]`` tensors: Ulysses once over the whole sequence with
    ``H / P`` heads, ring once per step over one K/V shard with ``return_lse=True``, and merge the
    steps' partial outputs by their log-sum-exps. With ``return_lse`` it returns ``(out, lse)``:
    ``out`` in float32 whatever the model's dtype (so that the ring merge stays in float32 for
    bf16/fp16 models with ``upcast=True``; the template casts to q's dtype once, at the end) and
    ``lse`` float32 ``[B, S, H]``, the templates' layout. Without it, the output in q's dtype, so
    that Ulysses' all-to-all moves the model's bytes. The router has already refused what jattn
    cannot serve here (masks, dropout, causal, GQA, gradients), so those arguments are defaults.
    """
    from . import _api

    dtype = query.dtype
    if dtype is not _torch().float32:
        query, key, value = query.float(), key.float(), value.float()
    if return_lse:
        out, lse = _api.attention(query, key, value, layout="bshd", scale=scale, backend=_options["backend"],
                                  return_lse=True)  # fmt: skip
        return out, lse.transpose(1, 2)
    out = _api.attention(query, key, value, layout="bshd", scale=scale, backend=_options["backend"])
    return out if out.dtype is dtype else out.to(dtype)


def _context_parallel_backward_op(ctx, grad_out, *args, **kwargs):
    """Never reached: the router sends calls whose tensors require grad to diffusers' own path."""
    raise NotImplementedError("jattn.diffusers: jattn computes the forward only under context parallelism")


def _torch():
    import torch

    return torch


def _make_router(original: Callable) -> Callable:
    import torch

    from . import _api
    from ._errors import JattnNotImplementedError

    @functools.wraps(original)
    def jattn_router(**kwargs):
        reason = _unservable(kwargs)
        if reason is not None:
            return _fall_back(reason, original, kwargs)
        q, k, v = kwargs["query"], kwargs["key"], kwargs["value"]
        return_lse = bool(kwargs.get("return_lse", False))
        parallel_config = kwargs.get("_parallel_config")
        if parallel_config is not None:
            template = _context_parallel_template()
            out = template(q, k, v, None, 0.0, False, kwargs.get("scale"), False, return_lse,
                           forward_op=_context_parallel_forward_op, backward_op=_context_parallel_backward_op,
                           _parallel_config=parallel_config)  # fmt: skip
            _note("jattn:context_parallel")
            if return_lse:
                return out[0].to(q.dtype), out[1]
            return out.to(q.dtype)
        mask = kwargs.get("attn_mask")
        key_mask = None
        if mask is not None:
            b, sq, h, _ = q.shape
            key_mask = _key_mask(mask, b, h, sq, k.shape[1], q.device)
            if key_mask is None:
                return _fall_back("attn_mask", original, kwargs)
        backend, scale = _options["backend"], kwargs.get("scale")
        dtype = q.dtype
        if dtype is not torch.float32:  # bf16 / fp16 with upcast=True
            q, k, v = q.float(), k.float(), v.float()
        try:
            out = _api.attention(q, k, v, layout="bshd", scale=scale, backend=backend, key_padding_mask=key_mask,
                                 return_lse=return_lse)  # fmt: skip
        except JattnNotImplementedError:  # refused before anything ran
            return _fall_back("unsupported", original, kwargs)
        _note("jattn")
        if return_lse:  # lse [B, H, Sq] float32 -> diffusers' [B, Sq, H]
            out, lse = out
            return (out if out.dtype is dtype else out.to(dtype)), lse.transpose(1, 2)
        return out if out.dtype is dtype else out.to(dtype)

    jattn_router.jattn_original = original  # type: ignore[attr-defined]
    return jattn_router


def enable(*, upcast: bool = False, backend: str = "auto") -> None:
    """Routes diffusers' attention through jattn (process-wide) until :func:`disable`.

    Args:
        upcast: also serve bf16/fp16 models, by casting q, k, v to float32 and the output back.
        backend: the jattn backend ("auto": cuda for CUDA tensors, cpu for CPU tensors).
    """
    global _installed
    from ._options import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"jattn.diffusers: backend {backend!r}, must be one of {BACKENDS}")
    with _lock:
        _options["upcast"], _options["backend"] = bool(upcast), backend
        if _installed is not None:
            return
        registry = _registry()
        name = registry._active_backend
        original = registry._backends[name]
        router = _make_router(original)
        registry._backends[name] = router
        _installed = _Installed(name, original, router)


def disable() -> None:
    """Puts diffusers' own attention function back (a no-op when not enabled)."""
    global _installed
    with _lock:
        if _installed is None:
            return
        registry = _registry()
        if registry._backends.get(_installed.name) is _installed.router:
            registry._backends[_installed.name] = _installed.original
        _installed = None
        _options["upcast"], _options["backend"] = False, "auto"


def is_enabled() -> bool:
    """Whether diffusers' attention goes through jattn now."""
    return _installed is not None


@contextlib.contextmanager
def enabled(*, upcast: bool = False, backend: str = "auto") -> Iterator[None]:
    """:func:`enable` for the duration of a ``with`` block; on exit the previous state (off, or
    on with its options) comes back."""
    was_enabled, previous = _installed is not None, dict(_options)
    enable(upcast=upcast, backend=backend)
    try:
        yield
    finally:
        if was_enabled:
            _options.update(previous)
        else:
            disable()


def counts() -> Dict[str, int]:
    """Eager calls per path since the last :func:`reset_counts`: ``"jattn"``,
    ``"jattn:context_parallel"`` (jattn inside diffusers' context-parallel templates), and
    ``"fallback:<why>"`` for each kind of call that went to diffusers' own attention.

    Calls inside code compiled by ``torch.compile`` are not counted: counting there would make
    Dynamo guard on the counter and recompile on every call. A compiled graph's routing is fixed
    when it is traced (the graph holds ``torch.ops.jattn.attention`` for each call jattn serves,
    and a fallback's warning is given at trace time); run the model once eagerly to count it."""
    return dict(_counts)


def reset_counts() -> None:
    """Zeroes :func:`counts` (and lets each fallback warning be given once more)."""
    _counts.clear()
    _warned.clear()
