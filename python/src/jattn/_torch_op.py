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
  a contiguous last dimension) and, when given, ``lse``.
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
    out, lse = _torch_impl.attention(q, k, v, opts, None, None, key_padding_mask, kv_len)
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
