"""The keyword options of one ``jattn.attention`` / ``jattn.select`` call, validated once.

``jattn.attention`` turns its keywords into one :class:`Options` (checked here, each error
naming the keyword) and hands that object down: the torch and numpy front ends, the problem and
exec builders take it instead of a row of positional parameters, so a new keyword is one field
here and one use where it matters. The tensors of a call (q, k, v, ``out``, the key mask,
``kv_len``) are not options: they travel beside it.

The torch custom ops keep plain arguments in their schema (torch.library takes tensors, numbers
and strings only) and build an ``Options`` in their implementations.
"""

from __future__ import annotations

import math
from typing import Dict, NamedTuple, Optional

from . import _clib
from ._errors import invalid

LAYOUTS = ("bhsd", "bshd")
BACKENDS = tuple(_clib.BACKEND_IDS)  # "auto" and the library's backends
PRECISIONS = ("f32", "tf32")


class Options(NamedTuple):
    """One call's options, valid by construction (make them with :func:`options`)."""

    layout: str  #: "bhsd" or "bshd"
    scale: Optional[float]  #: the softmax scale, None for 1/sqrt(head_dim)
    backend: str  #: "auto" or a backend's name (one of BACKENDS)
    precision: str  #: "f32" or "tf32"
    threads: int  #: CPU threads, 0 = all cores
    return_lse: bool  #: whether the caller gets the lse


def check_layout(layout: str) -> None:
    """Refuses a layout other than ``"bhsd"`` and ``"bshd"``."""
    if layout not in LAYOUTS:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"layout: {layout!r}, must be 'bhsd' or 'bshd'")


def check_scale(scale: object) -> Optional[float]:
    """The scale as a float (None stays None); refuses zero, negative and non-finite scales."""
    if scale is None:
        return None
    value = float(scale)  # type: ignore[arg-type]
    if value == 0.0 or not math.isfinite(value) or value < 0.0:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_SCALE,
            f"scale: {scale!r}, must be positive and finite (None means 1/sqrt(head_dim))",
        )
    return value


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT, f"backend: {backend!r}, must be one of {', '.join(map(repr, BACKENDS))}"
        )


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"precision: {precision!r}, must be 'f32' or 'tf32'")


def check_threads(threads: object) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"threads: {threads!r}, must be an int >= 0 (0 = all cores)")


def validated(
    layout: str = "bhsd",
    scale: Optional[float] = None,
    backend: str = "auto",
    precision: str = "f32",
    threads: int = 0,
    return_lse: bool = False,
) -> Options:
    """Checks every option and returns them as one :class:`Options` (no caching: this is the
    form traced code calls)."""
    check_layout(layout)
    scale_value = check_scale(scale)
    check_backend(backend)
    check_precision(precision)
    check_threads(threads)
    return Options(layout, scale_value, backend, precision, threads, bool(return_lse))


_CACHE: Dict[tuple, Options] = {}
_CACHE_LIMIT = 256


def options(
    layout: str = "bhsd",
    scale: Optional[float] = None,
    backend: str = "auto",
    precision: str = "f32",
    threads: int = 0,
    return_lse: bool = False,
) -> Options:
    """:func:`validated`, memoised on the keywords: a model makes the same call many times, and
    the checks cost more than a dict lookup (eager calls only; traced code calls
    :func:`validated`)."""
    key = (layout, scale, backend, precision, threads, return_lse, type(scale), type(threads))
    try:
        found = _CACHE.get(key)
    except TypeError:  # an unhashable option: checked (and refused or used) without the cache
        return validated(layout, scale, backend, precision, threads, return_lse)
    if found is None:
        found = validated(layout, scale, backend, precision, threads, return_lse)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = found
    return found
