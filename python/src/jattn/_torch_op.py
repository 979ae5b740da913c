"""The torch custom ops ``jattn::attention`` and ``jattn::attention_out``, with fake kernels.

``torch.compile`` (and ``torch.export``) see jattn through these ops: the fake (meta)
implementations give the outputs' shapes, dtypes and strides without running anything, so a
model calling ``jattn.attention`` compiles with ``fullgraph=True``. Eager calls of
``jattn.attention`` skip the dispatcher and run ``_torch_impl.attention`` directly (the ops'
real implementations call the same function), which keeps the Python layer's overhead small.

- ``jattn::attention(q, k, v, ...) -> (out, lse)``: functional; ``out`` is a new contiguous
  tensor of q's shape (and layout), ``lse`` a new float32 ``[B, H, Sq]`` (``[H, Sq]`` for 3-d
  inputs) when ``return_lse``, else an empty tensor.
- ``jattn::attention_out(q, k, v, out, lse, ...) -> ()``: writes into ``out`` (any strides with
  a contiguous last dimension) and, when given, ``lse``. Not differentiable (it writes in place).
- ``jattn::attention_backward(dout, q, k, v, out, lse, dlse, ...) -> (dq, dk, dv)``: jattn's
  backward (``jattn_backward``), the autograd formula of ``jattn::attention`` (registered with
  ``register_autograd``). Being an op with a fake kernel of its own, it lets AOTAutograd trace
  the backward, so ``torch.compile(fullgraph=True)`` compiles a training step, forward and
  backward. The formula needs the forward's lse: ``jattn.attention`` asks the op for it
  whenever an input requires grad and hands it to the caller only if asked; a direct caller of
  the op with ``return_lse=False`` gets an error from ``backward()``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _options, _torch_impl

_F32 = torch.float32


def lse_shape(q: torch.Tensor, layout: str) -> Tuple[int, ...]:
    """lse's shape, ``[B, H, Sq]`` (``[H, Sq]`` for 3-d q), from q's shape in its layout; works on
    fake tensors and symbolic sizes."""
    if layout == "bshd":
        return (*q.shape[:-3], q.shape[-2], q.shape[-3])
    return tuple(q.shape[:-1])


@torch.library.custom_op("jattn::attention", mutates_args=())
def attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    return_lse: bool,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """jattn attention as a functional torch op: returns ``(out, lse)`` (lse empty unless
    ``return_lse``)."""
    opts = _options.options(layout, scale, backend, precision, threads, return_lse)
    out, lse = _torch_impl.attention(q, k, v, opts, None, None, key_padding_mask, kv_len, differentiable=True)
    if lse is None:
        lse = torch.empty(0, dtype=_F32, device=q.device)
    return out, lse


@attention_op.register_fake
def _attention_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    return_lse: bool,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty(q.shape, dtype=_F32, device=q.device)
    shape = lse_shape(q, layout) if return_lse else (0,)
    return out, torch.empty(shape, dtype=_F32, device=q.device)


@torch.library.custom_op("jattn::attention_out", mutates_args=("out", "lse"))
def attention_out_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> None:
    """jattn attention written into ``out`` (and ``lse`` when given)."""
    opts = _options.options(layout, scale, backend, precision, threads)
    _torch_impl.attention(q, k, v, opts, out, lse, key_padding_mask, kv_len)


@attention_out_op.register_fake
def _attention_out_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> None:
    return None


@torch.library.custom_op("jattn::attention_backward", mutates_args=())
def attention_backward_op(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients ``(dq, dk, dv)`` of ``jattn::attention`` (new contiguous tensors of q's, k's
    and v's shapes), given the forward's output and lse and their gradients."""
    opts = _options.options(layout, scale, backend, precision, threads)
    return _torch_impl.backward(q, k, v, out, lse, dout, dlse, opts, key_padding_mask, kv_len)


@attention_backward_op.register_fake
def _attention_backward_fake(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dlse: Optional[torch.Tensor],
    layout: str,
    scale: Optional[float],
    backend: str,
    precision: str,
    threads: int,
    key_padding_mask: Optional[torch.Tensor],
    kv_len: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.empty(t.shape, dtype=_F32, device=t.device) for t in (q, k, v))  # type: ignore[return-value]


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, layout, scale, backend, precision, threads, return_lse, key_padding_mask, kv_len = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, key_padding_mask, kv_len)
    ctx.options = (layout, scale, backend, precision, threads)
    ctx.return_lse = return_lse


def _attention_backward(ctx, dout, dlse):
    q, k, v, out, lse, key_padding_mask, kv_len = ctx.saved_tensors
    if not ctx.return_lse:
        raise RuntimeError(
            "jattn: torch.ops.jattn.attention was called with return_lse=False, so its backward has no lse; "
            "call jattn.attention (which asks for the lse when an input requires grad) or pass return_lse=True"
        )
    dq, dk, dv = torch.ops.jattn.attention_backward(
        dout, q, k, v, out, lse, dlse, *ctx.options, key_padding_mask, kv_len
    )
    return dq, dk, dv, None, None, None, None, None, None, None, None


attention_op.register_autograd(_attention_backward, setup_context=_setup_context)
