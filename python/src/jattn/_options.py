"""The keyword options of one ``jattn.attention`` / ``jattn.select`` call: their one description,
:class:`Options`, and their validation.

Each field of :class:`Options` is a keyword option: its annotation holds its type and the function
that checks it (``Annotated[type, check]``), its default is the keyword's default. Everything else
derives from the fields: :func:`validated` checks each with its own function, :func:`options`
memoises on them, and the torch custom ops (``_torch_op``) take them as schema arguments of those
types, in field order. A new keyword is one field here and its use where it matters (the public
signatures of ``jattn.attention`` / ``jattn.select``, and the code that acts on it). The tensors of
a call (q, k, v, ``out`` and the mask's arrays, ``_problem.MaskArrays``) are not options: they
travel beside them.
"""

from __future__ import annotations

import math
import typing
from typing import Annotated, Dict, NamedTuple, Optional

from . import _clib
from ._errors import invalid

LAYOUTS = ("bhsd", "bshd")
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
BACKENDS = tuple(_clib.BACKEND_IDS)  # "auto" and the library's backends
PRECISIONS = ("f32", "tf32")


def check_layout(layout: str) -> str:
    """Refuses a layout other than ``"bhsd"`` and ``"bshd"``."""
    if layout not in LAYOUTS:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"layout: {layout!r}, must be 'bhsd' or 'bshd'")
    return layout


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


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT, f"backend: {backend!r}, must be one of {', '.join(map(repr, BACKENDS))}"
        )
    return backend


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"precision: {precision!r}, must be 'f32' or 'tf32'")
    return precision


def check_threads(threads: object) -> int:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"threads: {threads!r}, must be an int >= 0 (0 = all cores)")
    return threads


def check_causal_alignment(alignment: str) -> str:
    """Refuses an alignment other than ``"top_left"`` and ``"bottom_right"``."""
    if alignment not in CAUSAL_ALIGNMENTS:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT,
            f"causal_alignment: {alignment!r}, must be 'top_left' (PyTorch's is_causal) or 'bottom_right' "
            "(FlashAttention's causal)",
        )
    return alignment


class Options(NamedTuple):
    """One call's options, the one description of the keywords (valid when made by :func:`options`
    or :func:`validated`; ``Options(...)`` alone checks nothing)."""

    layout: Annotated[str, check_layout] = "bhsd"  #: "bhsd" or "bshd"
    scale: Annotated[Optional[float], check_scale] = None  #: the softmax scale, None for 1/sqrt(head_dim)
    backend: Annotated[str, check_backend] = "auto"  #: "auto" or a backend's name (one of BACKENDS)
    precision: Annotated[str, check_precision] = "f32"  #: "f32" or "tf32"
    threads: Annotated[int, check_threads] = 0  #: CPU threads, 0 = all cores
    return_lse: Annotated[bool, bool] = False  #: whether the caller gets the lse
    enable_gqa: Annotated[bool, bool] = False  #: k and v may have fewer heads, dividing q's
    is_causal: Annotated[bool, bool] = False  #: causal attention
    causal_alignment: Annotated[str, check_causal_alignment] = "top_left"  #: "top_left" or "bottom_right"


_HINTS = typing.get_type_hints(Options, include_extras=True)
#: Each field's type (for the torch ops' schemas), in field order.
FIELD_TYPES: Dict[str, object] = {name: typing.get_args(_HINTS[name])[0] for name in Options._fields}
_CHECKS = tuple(_HINTS[name].__metadata__[0] for name in Options._fields)


def validated(*args: object, **kwargs: object) -> Options:
    """The options given (positionally in field order, or by keyword; the rest default), each
    checked by its field's function (no caching: this is the form traced code calls)."""
    given = Options(*args, **kwargs)  # type: ignore[arg-type]
    return Options(*(check(value) for check, value in zip(_CHECKS, given)))


_CACHE: Dict[tuple, Options] = {}
_CACHE_LIMIT = 256


def options(*args: object, **kwargs: object) -> Options:
    """:func:`validated`, memoised on the options given: a model makes the same call many times,
    and the checks cost more than a dict lookup (eager calls only; traced code calls
    :func:`validated`)."""
    given = Options(*args, **kwargs)  # type: ignore[arg-type]
    key = (*given, *map(type, given))  # 1 and 1.0 (and True) are equal keys of different options
    try:
        found = _CACHE.get(key)
    except TypeError:  # an unhashable option: checked (and refused or used) without the cache
        return validated(*given)
    if found is None:
        found = validated(*given)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = found
    return found


_WITH_LSE: Dict[Options, Options] = {}


def with_lse(opts: Options) -> Options:
    """``opts`` with ``return_lse=True`` (what a differentiated call runs: its backward needs the
    lse), memoised."""
    found = _WITH_LSE.get(opts)
    if found is None:
        found = opts._replace(return_lse=True)
        if len(_WITH_LSE) >= _CACHE_LIMIT:
            _WITH_LSE.clear()
        _WITH_LSE[opts] = found
    return found


#: Options by the raw keywords of an eager call (:func:`remember`): the keywords in field order, then
#: the types of ``threads`` and ``scale`` (1, 1.0 and True are equal keys of different options there;
#: for the other fields equal values mean the same option).
OPTIONS: Dict[tuple, Options] = {}


def remember(key: tuple) -> Options:
    """The options of an eager call's raw keywords ``key`` (see OPTIONS), validated and kept; an
    unhashable keyword is validated without being kept."""
    opts = validated(*key[: len(Options._fields)])
    try:
        if len(OPTIONS) >= _CACHE_LIMIT:
            OPTIONS.clear()
        OPTIONS[key] = opts
    except TypeError:
        pass
    return opts
