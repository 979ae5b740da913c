"""From a call's validated options (``_options.Options``) to a ``jattn_exec``.

``backend="auto"`` means, in the library's AUTO order: for CUDA tensors the first backend that
computes from device memory, for CPU tensors and numpy arrays the first that computes on the CPU
(the C library's own AUTO would also try the GPU backends for host memory, copying the tensors to
a GPU and back; the Python package keeps host data on the host).
"""

from __future__ import annotations

from typing import Dict

from . import _clib
from ._clib import Exec
from ._options import Options

_AUTO = {
    True: next(b.id for b in _clib.BACKENDS if b.on_device),
    False: next(b.id for b in _clib.BACKENDS if not b.is_gpu),
}


def backend_id(backend: str, on_device: bool) -> int:
    """The ``jattn_backend`` for a (valid) backend name and where the data lives."""
    bid = _clib.BACKEND_IDS[backend]
    return _AUTO[on_device] if bid == _clib.JATTN_BACKEND_AUTO else bid


_HOST_EXECS: Dict[tuple, Exec] = {}


def host_exec(opts: Options) -> Exec:
    """:func:`make_exec` for host memory, memoised (shared: read it, never write it)."""
    key = (opts.backend, opts.precision, opts.threads)
    exec_ = _HOST_EXECS.get(key)
    if exec_ is None:
        exec_ = make_exec(opts, False)
        if len(_HOST_EXECS) >= 256:
            _HOST_EXECS.clear()
        _HOST_EXECS[key] = exec_
    return exec_


def make_exec(opts: Options, on_device: bool) -> Exec:
    """The ``jattn_exec`` of validated options, for host memory or (``on_device``) CUDA device
    memory; the stream and workspace are filled in by the caller."""
    return Exec(
        backend_id(opts.backend, on_device),
        _clib.PRECISION_IDS[opts.precision],
        _clib.JATTN_MEMORY_DEVICE if on_device else _clib.JATTN_MEMORY_HOST,
        opts.threads,
    )
