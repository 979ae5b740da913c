"""jattn: exact float32 multi-head attention for diffusion transformers, from Python.

Two lines for torch (CPU or CUDA tensors) or numpy arrays::

    import jattn
    out = jattn.attention(q, k, v, layout="bshd")   # q, k, v [B, S, H, D] float32

and two for every diffusers model that attends through diffusers' attention dispatcher::

    with jattn.diffusers.enabled():
        image = pipe(prompt).images[0]

``jattn.attention`` takes PyTorch's variants by keyword (``enable_gqa``, ``is_causal``, a key
mask, a key bias, block-causal blocks, packed sequences); ``jattn.attention_varlen`` is
FlashAttention's ``flash_attn_varlen_func``. Under ``torch.compile`` both go through the torch custom
ops ``torch.ops.jattn.*`` (with fake implementations, so ``torch.compile(model, fullgraph=True)``
sees through them); autograd differentiates them with jattn's own backward. The package binds the C
library libjattn (shipped inside it) through ctypes; ``__version__`` is the version of that
library.
"""

from . import _clib
from ._api import BackendInfo, Selection, attention, attention_varlen, backends, select
from ._errors import JattnError, JattnNotImplementedError, JattnRuntimeError, JattnValueError

__version__: str = _clib.version_string()

from . import diffusers  # noqa: E402  (the switch; imports diffusers only when enabled)

__all__ = [
    "__version__",
    "attention",
    "attention_varlen",
    "select",
    "backends",
    "Selection",
    "BackendInfo",
    "JattnError",
    "JattnValueError",
    "JattnNotImplementedError",
    "JattnRuntimeError",
    "diffusers",
]
