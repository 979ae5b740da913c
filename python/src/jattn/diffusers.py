"""diffusers' attention through jattn: ``enabled()``, ``enable()``, ``disable()``.

Every diffusers model then attends with jattn, whether its attention goes through diffusers'
dispatcher (``diffusers.models.attention_dispatch.dispatch_attention_fn``: FLUX.1, FLUX.2, Wan,
Qwen-Image, ...) or calls ``torch.nn.functional.scaled_dot_product_attention`` itself (SD3,
Lumina-Image 2.0, CogView4, HiDream, PixArt, Sana, Mochi, CogVideoX, LTX-Video, ...)::

    import jattn
    with jattn.diffusers.enabled():          # or jattn.diffusers.enable() ... disable()
        image = pipe(prompt).images[0]

Float32 models run on jattn as they are. For bf16/fp16 models, ``upcast=True`` casts q, k and
v to float32, attends exactly and casts the output back (README: its measured cost); without
it they stay on diffusers' path. Calls jattn cannot serve go to diffusers' own path (or PyTorch's
SDPA, for calls made to it directly) with the same arguments, with one warning per kind of call:
an attention mask jattn's parts do not describe (below), dropout, dtypes other than float32
(without ``upcast``), masks, causal, grouped-query heads and gradients under context parallelism,
tensor subclasses, and tensors that require grad on a GPU whose cuda backend refuses the backward
of the problem (``jattn_backward_select``: an sm below the kernels', a head_dim over 256; asked once
per device and head_dim, and cached). Tensors that require grad are otherwise served: ``jattn.attention`` is differentiable (jattn's own backward),
through the ``upcast`` casts too, so fine-tuning (LoRA, full) runs its attention, forward and
backward, on jattn. ``return_lse=True`` is served (lse float32 ``[B, S, H]``).

What is served. SDPA's arguments map onto ``jattn.attention``'s keywords: ``is_causal``
(PyTorch's top-left alignment), ``enable_gqa`` (k/v heads dividing the query heads), ``scale``,
and the ``attn_mask``, boolean or float, in jattn's parts (``jattn._sdpa_masks`` says how each is
recognised and what it costs): key padding (a boolean key mask broadcast over the queries, by
strides or by copies), a key bias (a float mask constant over the queries, per batch and
optionally per head: LTX's ``-10000`` on padded keys), causal top-left / bottom-right,
block-causal and segment (block-diagonal) masks with key padding, a pairwise mask ``q ⊗ k`` of
a query mask and a key mask (HunyuanVideo 1.5: the rows of padded queries attend nothing and are
0, as SDPA gives; with key 0 forced on, HunyuanVideo's token refiner and HunyuanImage, those rows
take value row 0), and float masks with ``-inf`` or the dtype's lowest value on left-out keys.
Zero-size calls (batch, seq_q or seq_kv 0) give SDPA's answer. ``dropout_p > 0`` and anything
else fall back; what PyTorch refuses (a mask with ``is_causal``, k/v heads that do not divide the
query heads) PyTorch still refuses.

What is patched. (1) diffusers' registry (``_AttentionBackendRegistry``) keeps backend names in a
closed ``Enum`` (``AttentionBackendName``), which ``set_attention_backend`` and the
``attention_backend`` context manager check against, so a new backend cannot be registered
cleanly. Instead ``enable()`` replaces exactly one entry, ``_AttentionBackendRegistry._backends[
<the active backend>]`` (the active backend is ``native``, PyTorch SDPA, unless
``DIFFUSERS_ATTN_BACKEND`` or ``set_attention_backend`` chose another), with a router that calls
jattn, or the function that was there for calls jattn cannot serve. Nothing else changes: the
backend's name, its argument list and its checks stay diffusers'. Models whose processors were
given another backend explicitly (``model.set_attention_backend("flash")``) keep it. (2) Like
SageAttention's drop-in, ``enable()`` also replaces ``torch.nn.functional.scaled_dot_product_attention``
(which ``F.scaled_dot_product_attention`` in a model's module looks up at each call) with a router
that calls jattn or the function that was there (``enable(sdpa=False)`` leaves SDPA alone). A
call that diffusers' own path makes while it serves a fallback of the dispatcher (its ``native``
backend calls SDPA) goes straight to PyTorch, uncounted: each call is counted once. SDPA calls made
inside a backward pass (gradient checkpointing's recomputation, the backward op of diffusers'
context-parallel templates) are routed and counted like any other.
``disable()`` (and leaving ``enabled()``) puts both originals back. The switch is process-wide
(every thread, every library calling SDPA: text encoders too); ``enabled()`` nests.

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

``counts()`` says how many eager calls took each path since the last ``reset_counts()``:
``"jattn"`` (through diffusers' dispatcher), ``"jattn:sdpa"`` (direct SDPA calls),
``"jattn:context_parallel"`` and ``"fallback:<why>"`` (calls inside ``torch.compile``'d code are
not counted, so that counting never recompiles).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, NamedTuple, Optional, Union

_lock = threading.Lock()
_installed: Optional[_Installed] = None
_options: Dict[str, Any] = {"upcast": False, "backend": "auto", "sdpa": True}
_counts: Dict[str, int] = {}
_warned: set = set()
_passing = threading.local()  # .depth > 0: this thread runs diffusers' own path for a dispatcher fallback

_FALLBACK_REASONS = {
    "attn_mask": "an attention mask that jattn's parts do not describe (per-head structure, an arbitrary pattern, "
    "a float mask whose bias differs between queries, NaN / +inf entries)",
    "mask_grad": "a float attention mask that requires grad (jattn's key bias is a constant of the call)",
    "dropout": "dropout",
    "gqa": "k/v heads that do not divide the query heads, or fewer without enable_gqa (PyTorch's own answer)",
    "context_parallel": "context parallelism, on a diffusers without context-parallel templates (before 0.36)",
    "context_parallel_mask": "an attention mask, causal or grouped-query heads under context parallelism",
    "context_parallel_autograd": "tensors that require grad under context parallelism (jattn's backward is not "
    "wired into diffusers' context-parallel templates yet)",
    "backward": "tensors that require grad on a device whose jattn backend refuses the backward of the problem "
    "(a GPU below the cuda kernels' sm, a head_dim over 256, ...)",
    "dtype": "a dtype other than float32 (pass upcast=True to run bf16/fp16 through jattn in float32)",
    "shape": "tensors that are not 4-d with one head_dim and a contiguous last dimension, or whose batch, heads "
    "or lengths do not match",
    "device": "tensors on a device other than CPU or CUDA",
    "subclass": "tensor subclasses (DTensor, fake tensors, ...) outside torch.compile",
    "arguments": "arguments jattn does not take",
    "unsupported": "problems the jattn backend cannot run (jattn.select says why)",
}

_KNOWN_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False,
                   "return_lse": False, "_parallel_config": None}  # fmt: skip


class _Installed:
    """What enable() replaced (the registry entry, SDPA), and the routers put there."""

    __slots__ = ("name", "original", "router", "sdpa_original", "sdpa_router")

    def __init__(self, name: Any, original: Callable, router: Callable, sdpa_original: Callable,
                 sdpa_router: Callable) -> None:  # fmt: skip
        self.name, self.original, self.router = name, original, router
        self.sdpa_original, self.sdpa_router = sdpa_original, sdpa_router


class _Call(NamedTuple):
    """A call jattn serves: ``jattn.attention``'s keywords beyond q, k, v and the layout, the
    query rows to keep (bool ``[B or 1, Sq]``; the others are set to 0, or None) and the rows that
    attend one key (``_sdpa_masks.MaskPlan.single_key``, or None)."""

    kwargs: Dict[str, Any]
    query_rows: Any
    single_key: Any = None


def _registry():
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    return _AttentionBackendRegistry


def _note(path: str, stacklevel: int = 5) -> None:
    """Counts one eager call that took ``path`` (``"jattn"``, ``"jattn:sdpa"``,
    ``"jattn:context_parallel"`` or ``"fallback:<reason>"``); a fallback's warning is given the
    first time its reason is seen.

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
    with _lock:
        _counts[path] = _counts.get(path, 0) + 1
    if path.startswith("fallback:"):
        _warn_once(path[len("fallback:") :], stacklevel=stacklevel)


def _is_compiling() -> bool:
    import torch

    return torch.compiler.is_compiling()


def _warn_once(reason: str, stacklevel: int) -> None:
    with _lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(
        f"jattn.diffusers: attention calls with {_FALLBACK_REASONS[reason]} go to diffusers' own attention "
        f"(PyTorch's SDPA for calls made to it directly; this warning is given once){_reason_detail(reason)}",
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


@contextlib.contextmanager
def _passing_through() -> Iterator[None]:
    """Marks this thread as running diffusers' own path for a fallback: SDPA calls made meanwhile
    go straight to PyTorch, uncounted (the dispatcher counted the call)."""
    _passing.depth = getattr(_passing, "depth", 0) + 1
    try:
        yield
    finally:
        _passing.depth -= 1


def _fall_back(reason: str, original: Callable, kwargs: Dict[str, Any]):
    """A dispatcher call to diffusers' own path."""
    _note("fallback:" + reason)
    if _is_compiling():
        return original(**kwargs)
    with _passing_through():
        return original(**kwargs)


def _plan(q, k, v, layout: str, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> Union[str, _Call]:
    """What jattn runs for one attention call (SDPA's arguments; ``layout``: ``"bhsd"`` for SDPA's
    ``[B, H, S, D]``, ``"bshd"`` for diffusers' dispatcher), or why it cannot (a key of
    ``_FALLBACK_REASONS``)."""
    import torch

    from . import _sdpa_masks

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "shape"
    if q.device.type not in ("cpu", "cuda") or k.device != q.device or v.device != q.device:
        return "device"
    if q.dtype != k.dtype or q.dtype != v.dtype:
        return "dtype"
    if q.dtype is not torch.float32 and not (_options["upcast"] and q.dtype in (torch.bfloat16, torch.float16)):
        return "dtype"
    if dropout_p:
        return "dropout"
    h_dim, s_dim = (1, 2) if layout == "bhsd" else (2, 1)
    batch, heads, seq_q, head_dim = q.shape[0], q.shape[h_dim], q.shape[s_dim], q.shape[3]
    kv_heads, seq_kv = k.shape[h_dim], k.shape[s_dim]
    if k.shape[0] != batch or v.shape[0] != batch or v.shape[h_dim] != kv_heads or v.shape[s_dim] != seq_kv:
        return "shape"
    if k.shape[3] != head_dim or v.shape[3] != head_dim:
        return "shape"
    if q.numel() and k.numel() and (q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1):
        return "shape"
    kwargs: Dict[str, Any] = {"scale": scale}
    if kv_heads != heads:
        if not enable_gqa or kv_heads == 0 or heads % kv_heads:
            return "gqa"  # PyTorch refuses it (or broadcasts what jattn does not): its own answer
        kwargs["enable_gqa"] = True
    if is_causal:
        if attn_mask is not None:
            return "arguments"  # SDPA refuses both: its own error
        kwargs.update(is_causal=True, causal_alignment="top_left")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if _backward_refusal(q) is not None:
            return "backward"  # the device's backend refuses the backward (a GPU's sm, the head_dim, ...)
    query_rows = single_key = None
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.device != q.device:
            return "attn_mask"
        if attn_mask.requires_grad and torch.is_grad_enabled():
            return "mask_grad"  # SDPA differentiates a float mask; jattn's key bias is a constant
        found = _sdpa_masks.recognise(attn_mask, batch, heads, seq_q, seq_kv, q.dtype)
        if found is None:
            return "attn_mask"
        kwargs.update(found.kwargs)
        query_rows, single_key = found.query_rows, found.single_key
    return _Call(kwargs, query_rows, single_key)


def _run(q, k, v, layout: str, call: _Call, return_lse: bool):
    """jattn's attention of a planned call: the output in q's dtype (and the lse, float32
    ``[B, H, Sq]``), or the reason it was refused before anything ran (a str)."""
    import torch

    from . import _api
    from ._errors import JattnNotImplementedError, JattnValueError

    backend, kwargs = _options["backend"], call.kwargs
    if return_lse and call.single_key is not None:
        return "attn_mask"
    dtype = q.dtype
    if dtype is not torch.float32:  # bf16 / fp16 with upcast=True
        q, k, v = q.float(), k.float(), v.float()
    try:
        out = _api.attention(q, k, v, layout=layout, backend=backend, return_lse=return_lse, **kwargs)
    except (JattnNotImplementedError, JattnValueError):  # refused before anything ran: PyTorch's own answer
        return "unsupported"
    lse = None
    if return_lse:
        out, lse = out
    if call.query_rows is not None:  # rows that attend nothing in SDPA's mask: 0 (lse -inf)
        rows = call.query_rows
        out = out * (rows[:, None, :, None] if layout == "bhsd" else rows[:, :, None, None]).to(out.dtype)
        if lse is not None:
            lse = lse.masked_fill(~rows[:, None, :], float("-inf"))
    if call.single_key is not None:  # rows that attend one key: its value row
        out = _single_key_rows(out, v, layout, *call.single_key)
    if out.dtype is not dtype:
        out = out.to(dtype)
    return (out, lse) if return_lse else out


def _single_key_rows(out, v, layout: str, rows, index):
    """``out`` with each row in ``rows`` (bool ``[B or 1, Sq]``) replaced by the value row of its one
    key (``index``), differentiably (the gradient goes to that value row, as SDPA's does)."""
    import torch

    if layout == "bshd":
        out, v = out.transpose(1, 2), v.transpose(1, 2)
    b, h, sq, d = out.shape
    index = index.expand(b, sq)[:, None, :, None].expand(b, v.shape[1], sq, d)
    chosen = v.gather(2, index)
    if v.shape[1] != h:
        chosen = chosen.repeat_interleave(h // v.shape[1], dim=1)
    out = torch.where(rows.expand(b, sq)[:, None, :, None], chosen.to(out.dtype), out)
    return out.transpose(1, 2) if layout == "bshd" else out


def _make_sdpa_router(original: Callable) -> Callable:
    """The router that takes ``torch.nn.functional.scaled_dot_product_attention``'s place."""
    import torch

    plain = torch.Tensor

    @functools.wraps(original)
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                     scale=None, enable_gqa=False):  # fmt: skip
        args = (query, key, value, attn_mask, dropout_p, is_causal)
        if not _options["sdpa"]:
            return original(*args, scale=scale, enable_gqa=enable_gqa)
        if not _is_compiling():
            if getattr(_passing, "depth", 0):  # diffusers' own path serving a dispatcher fallback
                return original(*args, scale=scale, enable_gqa=enable_gqa)
            if type(query) is not plain or type(key) is not plain or type(value) is not plain:
                _note("fallback:subclass", stacklevel=4)
                return original(*args, scale=scale, enable_gqa=enable_gqa)
        plan = _plan(query, key, value, "bhsd", attn_mask, dropout_p, is_causal, scale, enable_gqa)
        if not isinstance(plan, str):
            out = _run(query, key, value, "bhsd", plan, False)
            if not isinstance(out, str):
                _note("jattn:sdpa")
                return out
            plan = out
        _note("fallback:" + plan, stacklevel=4)
        return original(*args, scale=scale, enable_gqa=enable_gqa)

    scaled_dot_product_attention.jattn_original = original  # type: ignore[attr-defined]
    return scaled_dot_product_attention


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


def _context_parallel_unservable(q, k, v, kwargs: Dict[str, Any]) -> Optional[str]:
    """Why jattn cannot be each rank's attention of a context-parallel call, or None: plain
    attention only (no mask, causal or grouped-query heads), without gradients."""
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "shape"
    if _context_parallel_template() is None:
        return "context_parallel"
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return "context_parallel_autograd"
    if kwargs.get("attn_mask") is not None or kwargs.get("is_causal") or k.shape[2] != q.shape[2]:
        return "context_parallel_mask"  # ring passes each rank's mask unsliced: not a key mask of the shard
    plan = _plan(q, k, v, "bshd", None, kwargs.get("dropout_p", 0.0), False, kwargs.get("scale"), False)
    return plan if isinstance(plan, str) else None


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
    """The router that takes the active backend's place in diffusers' registry."""
    import torch

    @functools.wraps(original)
    def jattn_router(**kwargs):
        for name, value in kwargs.items():
            if name not in _KNOWN_DEFAULTS and name not in ("query", "key", "value") and value is not None:
                return _fall_back("arguments", original, kwargs)
        q, k, v = kwargs["query"], kwargs["key"], kwargs["value"]
        return_lse = bool(kwargs.get("return_lse", False))
        parallel_config = kwargs.get("_parallel_config")
        if parallel_config is not None:
            reason = _context_parallel_unservable(q, k, v, kwargs)
            if reason is not None:
                return _fall_back(reason, original, kwargs)
            template = _context_parallel_template()
            out = template(q, k, v, None, 0.0, False, kwargs.get("scale"), False, return_lse,
                           forward_op=_context_parallel_forward_op, backward_op=_context_parallel_backward_op,
                           _parallel_config=parallel_config)  # fmt: skip
            _note("jattn:context_parallel")
            if return_lse:
                return out[0].to(q.dtype), out[1]
            return out.to(q.dtype)
        mask = kwargs.get("attn_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and q.dim() == 4 and k.dim() == 4:
            if mask.shape[0] == q.shape[0] and mask.shape[1] == k.shape[1]:
                mask = mask[:, None, None, :]  # [B, Skv]: a key mask, as diffusers' native backend reads it
        plan = _plan(q, k, v, "bshd", mask, kwargs.get("dropout_p", 0.0), kwargs.get("is_causal", False),
                     kwargs.get("scale"), kwargs.get("enable_gqa", False))  # fmt: skip
        if isinstance(plan, str):
            return _fall_back(plan, original, kwargs)
        out = _run(q, k, v, "bshd", plan, return_lse)
        if isinstance(out, str):
            return _fall_back(out, original, kwargs)
        _note("jattn")
        if return_lse:  # lse [B, H, Sq] float32 -> diffusers' [B, Sq, H]
            out, lse = out
            return out, lse.transpose(1, 2)
        return out

    jattn_router.jattn_original = original  # type: ignore[attr-defined]
    return jattn_router


def enable(*, upcast: bool = False, backend: str = "auto", sdpa: bool = True) -> None:
    """Routes diffusers' attention through jattn (process-wide) until :func:`disable`.

    Args:
        upcast: also serve bf16/fp16 models, by casting q, k, v to float32 and the output back.
        backend: the jattn backend ("auto": cuda for CUDA tensors, cpu for CPU tensors).
        sdpa: also route calls made straight to ``torch.nn.functional.scaled_dot_product_attention``
            (the models whose processors do not use diffusers' dispatcher).
    """
    global _installed
    import torch

    from ._options import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"jattn.diffusers: backend {backend!r}, must be one of {BACKENDS}")
    with _lock:
        _options["upcast"], _options["backend"], _options["sdpa"] = bool(upcast), backend, bool(sdpa)
        if _installed is not None:
            return
        registry = _registry()
        name = registry._active_backend
        original = registry._backends[name]
        router = _make_router(original)
        sdpa_original = torch.nn.functional.scaled_dot_product_attention
        sdpa_router = _make_sdpa_router(sdpa_original)
        registry._backends[name] = router
        torch.nn.functional.scaled_dot_product_attention = sdpa_router
        _installed = _Installed(name, original, router, sdpa_original, sdpa_router)


def disable() -> None:
    """Puts diffusers' own attention function and PyTorch's SDPA back (a no-op when not enabled)."""
    global _installed
    import torch

    with _lock:
        if _installed is None:
            return
        registry = _registry()
        if registry._backends.get(_installed.name) is _installed.router:
            registry._backends[_installed.name] = _installed.original
        if torch.nn.functional.scaled_dot_product_attention is _installed.sdpa_router:
            torch.nn.functional.scaled_dot_product_attention = _installed.sdpa_original
        _installed = None
        _options["upcast"], _options["backend"], _options["sdpa"] = False, "auto", True


def is_enabled() -> bool:
    """Whether diffusers' attention goes through jattn now."""
    return _installed is not None


@contextlib.contextmanager
def enabled(*, upcast: bool = False, backend: str = "auto", sdpa: bool = True) -> Iterator[None]:
    """:func:`enable` for the duration of a ``with`` block; on exit the previous state (off, or
    on with its options) comes back."""
    was_enabled, previous = _installed is not None, dict(_options)
    enable(upcast=upcast, backend=backend, sdpa=sdpa)
    try:
        yield
    finally:
        if was_enabled:
            _options.update(previous)
        else:
            disable()


def counts() -> Dict[str, int]:
    """Eager calls per path since the last :func:`reset_counts`: ``"jattn"`` (diffusers'
    dispatcher), ``"jattn:sdpa"`` (calls made straight to SDPA), ``"jattn:context_parallel"``
    (jattn inside diffusers' context-parallel templates), and ``"fallback:<why>"`` for each kind of
    call that went to diffusers' own attention or PyTorch's SDPA.

    Calls inside code compiled by ``torch.compile`` are not counted: counting there would make
    Dynamo guard on the counter and recompile on every call. A compiled graph's routing is fixed
    when it is traced (the graph holds ``torch.ops.jattn.attention`` for each call jattn serves,
    and a fallback's warning is given at trace time); run the model once eagerly to count it."""
    with _lock:
        return dict(_counts)


def reset_counts() -> None:
    """Zeroes :func:`counts` (and lets each fallback warning be given once more)."""
    with _lock:
        _counts.clear()
        _warned.clear()
