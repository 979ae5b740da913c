"""From the keyword options of ``jattn.attention`` to a ``jattn_exec``.

``backend="auto"`` means: the cuda backend for CUDA tensors, the cpu backend for CPU tensors
and numpy arrays (the C library's own AUTO would also try cuda for host memory, copying the
tensors to a GPU and back; the Python package keeps host data on the host).
"""

from __future__ import annotations

from typing import Dict

from . import _clib
from ._clib import Exec
from ._errors import invalid

BACKENDS = ("auto", "ref", "cpu", "cuda", "vk")
PRECISIONS = ("f32", "tf32")


def backend_id(backend: str, on_device: bool) -> int:
    """The ``jattn_backend`` for a backend name and where the data lives."""
    bid = _clib.BACKEND_IDS.get(backend)
    if bid is None:
        raise invalid(
            _clib.JATTN_ERROR_INVALID_ARGUMENT, f"backend: {backend!r}, must be one of {', '.join(map(repr, BACKENDS))}"
        )
    if bid == _clib.JATTN_BACKEND_AUTO:
        return _clib.JATTN_BACKEND_CUDA if on_device else _clib.JATTN_BACKEND_CPU
    return bid


def precision_id(precision: str) -> int:
    """The ``jattn_precision`` of ``"f32"`` or ``"tf32"``."""
    pid = _clib.PRECISION_IDS.get(precision)
    if pid is None:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"precision: {precision!r}, must be 'f32' or 'tf32'")
    return pid


_HOST_EXECS: Dict[tuple, Exec] = {}


def host_exec(backend: str, precision: str, threads: int) -> Exec:
    """:func:`make_exec` for host memory, memoised (shared: read it, never write it)."""
    key = (backend, precision, threads)
    exec_ = _HOST_EXECS.get(key)
    if exec_ is None:
        exec_ = make_exec(backend, precision, threads, False)
        if len(_HOST_EXECS) >= 256:
            _HOST_EXECS.clear()
        _HOST_EXECS[key] = exec_
    return exec_


def make_exec(backend: str, precision: str, threads: int, on_device: bool) -> Exec:
    """The ``jattn_exec`` of the options, for host memory or (``on_device``) CUDA device memory;
    the stream and workspace are filled in by the caller."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise invalid(_clib.JATTN_ERROR_INVALID_ARGUMENT, f"threads: {threads!r}, must be an int >= 0 (0 = all cores)")
    return Exec(
        backend_id(backend, on_device),
        precision_id(precision),
        _clib.JATTN_MEMORY_DEVICE if on_device else _clib.JATTN_MEMORY_HOST,
        threads,
    )
