"""The torch custom ops ``jattn::attention``, ``jattn::attention_out`` and
``jattn::attention_backward``, with fake kernels.

``torch.compile`` (and ``torch.export``) see jattn through these ops: the fake (meta)
implementations give the outputs' shapes, dtypes and strides without running anything, so a
model calling ``jattn.attention`` compiles with ``fullgraph=True``. Eager calls of
``jattn.attention`` skip the dispatcher: they run ``_torch_impl.attention`` directly, or
``_torch_impl.EagerAttention`` (an autograd.Function with the same backward) when autograd
differentiates them; the ops' real implementations call the same functions. The custom op's
Python dispatch and autograd wrapper cost a step more host time than the computation of a small
call, so eager code never pays them.

Every op's schema is its tensors, then every field of ``_options.Options`` with its type (field
order), then the mask's arrays (``_problem.MaskArrays``: ``key_padding_mask``, ``kv_len``,
``block_q``, ``block_kv``, ``key_bias``, ``cu_seqlens_q``, ``cu_seqlens_k``): the schemas are made
from those descriptions (:func:`_op`), so a new keyword reaches all three ops with no edit here.
Call them as ``torch.ops.jattn.attention(q, k, v, *opts, *masks)``.

- ``jattn::attention(q, k, v, *options, *masks) -> (out, lse)``: functional;
  ``out`` is a new contiguous tensor of q's shape (and layout), ``lse`` a new float32 ``[B, H, Sq]``
  (``[H, Sq]`` for 3-d inputs) when ``return_lse``, else an empty tensor.
- ``jattn::attention_out(q, k, v, out, lse, *options, ...) -> ()``: writes into ``out`` (any
  strides with a contiguous last dimension) and, when given, ``lse``. Not differentiable (it
  writes in place).
- ``jattn::attention_backward(dout, q, k, v, out, lse, dlse, *options, ...) -> (dq, dk, dv)``:
  jattn's backward (``jattn_backward``), the autograd formula of ``jattn::attention`` (registered
  with ``register_autograd``). Being an op with a fake kernel of its own, it lets AOTAutograd trace
  the backward, so ``torch.compile(fullgraph=True)`` compiles a training step, forward and
  backward. The formula needs the forward's lse: ``jattn.attention`` asks the op for it whenever
  an input requires grad and hands it to the caller only if asked; a direct caller of the op with
  ``return_lse=False`` gets an error from ``backward()``.
"""

from __future__ import annotations

import inspect
from typing import Callable, Optional, Sequence, Tuple

import torch

from . import _options, _torch_impl
from ._options import Options
from ._problem import MASK_NAMES, MaskArrays

_F32 = torch.float32
_Tensor = torch.Tensor
_OptTensor = Optional[torch.Tensor]
_MASKS = tuple((name, _OptTensor) for name in MASK_NAMES)  # after the options, in every schema
_N_OPTIONS = len(Options._fields)


def lse_shape(q: torch.Tensor, layout: str) -> Tuple[int, ...]:
    """lse's shape, ``[B, H, Sq]`` (``[H, Sq]`` for 3-d q), from q's shape in its layout; works on
    fake tensors and symbolic sizes."""
    if layout == "bshd":
        return (*q.shape[:-3], q.shape[-2], q.shape[-3])
    return tuple(q.shape[:-1])


def masks_of(arrays: Sequence[Optional[torch.Tensor]]) -> Optional[MaskArrays]:
    """The mask's tensors of a schema's arguments, or None when there are none."""
    for t in arrays:
        if t is not None:
            return MaskArrays(*arrays)
    return None


def _split(args: Sequence[object], n_tensors: int) -> Tuple[tuple, Options, Optional[MaskArrays]]:
    """A schema's flat arguments as (its tensors, the options, the mask's tensors or None)."""
    end = n_tensors + _N_OPTIONS
    return tuple(args[:n_tensors]), Options(*args[n_tensors:end]), masks_of(args[end:])


def _flat(fn: Callable, tensors: Sequence[Tuple[str, object]], returns: object, make_options: Callable) -> Callable:
    """``fn(*tensors, opts, masks)`` as a function of the schema's flat arguments, with the
    signature torch infers the schema from."""
    signature = inspect.Signature(
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)
            for name, kind in (*tensors, *_options.FIELD_TYPES.items(), *_MASKS)
        ],
        return_annotation=returns,
    )

    def flat(*args, **kwargs):
        if kwargs:
            args = signature.bind(*args, **kwargs).args
        given, opts, masks = _split(args, len(tensors))
        return fn(*given, make_options(*opts), masks)

    flat.__signature__ = signature  # type: ignore[attr-defined]
    flat.__name__, flat.__qualname__, flat.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return flat


def _op(name: str, tensors: Sequence[Tuple[str, object]], returns: object, fake: Callable, mutates_args=()):
    """Registers the custom op ``name`` (real implementation: the decorated function, with
    validated options; fake implementation: ``fake``, with the options as given)."""

    def register(impl: Callable):
        op = torch.library.custom_op(name, _flat(impl, tensors, returns, _options.options), mutates_args=mutates_args)
        op.register_fake(_flat(fake, tensors, returns, Options))
        return op

    return register


def _attention_fake(q, k, v, opts: Options, masks):
    out = torch.empty(q.shape, dtype=_F32, device=q.device)
    shape = lse_shape(q, opts.layout) if opts.return_lse else (0,)
    return out, torch.empty(shape, dtype=_F32, device=q.device)


@_op("jattn::attention", (("q", _Tensor), ("k", _Tensor), ("v", _Tensor)), Tuple[_Tensor, _Tensor], _attention_fake)
def attention_op(q, k, v, opts: Options, masks):
    """jattn attention as a functional torch op: returns ``(out, lse)`` (lse empty unless
    ``return_lse``)."""
    out, lse = _torch_impl.attention(q, k, v, opts, None, None, masks, differentiable=True)
    if lse is None:
        lse = torch.empty(0, dtype=_F32, device=q.device)
    return out, lse


def _attention_out_fake(q, k, v, out, lse, opts: Options, masks) -> None:
    return None


@_op("jattn::attention_out", (("q", _Tensor), ("k", _Tensor), ("v", _Tensor), ("out", _Tensor), ("lse", _OptTensor)),
     None, _attention_out_fake, mutates_args=("out", "lse"))  # fmt: skip
def attention_out_op(q, k, v, out, lse, opts: Options, masks) -> None:
    """jattn attention written into ``out`` (and ``lse`` when given)."""
    _torch_impl.attention(q, k, v, opts, out, lse, masks)


def _attention_backward_fake(dout, q, k, v, out, lse, dlse, opts: Options, masks):
    return tuple(torch.empty(t.shape, dtype=_F32, device=t.device) for t in (q, k, v))


_BACKWARD_TENSORS = (("dout", _Tensor), ("q", _Tensor), ("k", _Tensor), ("v", _Tensor), ("out", _Tensor),
                     ("lse", _Tensor), ("dlse", _OptTensor))  # fmt: skip


@_op("jattn::attention_backward", _BACKWARD_TENSORS, Tuple[_Tensor, _Tensor, _Tensor], _attention_backward_fake)
def attention_backward_op(dout, q, k, v, out, lse, dlse, opts: Options, masks):
    """The gradients ``(dq, dk, dv)`` of ``jattn::attention`` (new contiguous tensors of q's, k's
    and v's shapes), given the forward's output and lse and their gradients."""
    return _torch_impl.backward(q, k, v, out, lse, dout, dlse, opts, masks)


def _setup_context(ctx, inputs, output) -> None:
    end = 3 + _N_OPTIONS
    out, lse = output
    ctx.save_for_backward(*inputs[:3], out, lse, *inputs[end:])
    ctx.options = Options(*inputs[3:end])


def _attention_backward(ctx, dout, dlse):
    q, k, v, out, lse, *masks = ctx.saved_tensors
    if not ctx.options.return_lse:
        raise RuntimeError(
            "jattn: torch.ops.jattn.attention was called with return_lse=False, so its backward has no lse; "
            "call jattn.attention (which asks for the lse when an input requires grad) or pass return_lse=True"
        )
    dq, dk, dv = torch.ops.jattn.attention_backward(dout, q, k, v, out, lse, dlse, *ctx.options, *masks)
    return dq, dk, dv, *(None,) * (_N_OPTIONS + len(_MASKS))


attention_op.register_autograd(_attention_backward, setup_context=_setup_context)
