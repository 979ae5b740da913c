"""The calling thread's ``jattn_ctx``: grow-only host buffers reused by its calls."""

from __future__ import annotations

import threading
from ctypes import byref, c_void_p

from . import _clib
from ._errors import error_from_status


class HostContext:
    """A ``jattn_ctx`` owned by one thread: grow-only buffers reused by that thread's calls."""

    __slots__ = ("handle",)

    def __init__(self) -> None:
        handle = c_void_p()
        status = _clib.ctx_create(byref(handle))
        if status != _clib.JATTN_OK:
            raise error_from_status(status, _clib.last_error())
        self.handle = handle.value

    # The free function is bound at definition: at interpreter exit this module's globals may be
    # gone before the last thread's context is collected.
    def __del__(self, _ctx_free=_clib.ctx_free) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            _ctx_free(handle)


_thread_state = threading.local()


def thread_context() -> int:
    """The calling thread's ``jattn_ctx`` (created on first use, freed with the thread)."""
    ctx = getattr(_thread_state, "ctx", None)
    if ctx is None:
        ctx = _thread_state.ctx = HostContext()
    return ctx.handle
