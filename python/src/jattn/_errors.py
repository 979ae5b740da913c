"""The exceptions of the package: every jattn status becomes one, with its name and message.

``JattnError`` is the base of all of them and carries ``status`` (the ``jattn_status`` number),
``status_name`` (e.g. ``"JATTN_ERROR_SELF_OVERLAP"``) and ``message`` (the library's one line,
naming the offending field). Each concrete class also derives from the built-in exception a
Python caller expects:

- ``JattnValueError`` (a ``ValueError``): an invalid problem, shape, layout, stride, scale or
  dtype, and the Python layer's own checks of the same kind;
- ``JattnNotImplementedError`` (a ``NotImplementedError``, hence a ``RuntimeError``): the chosen
  backend cannot run this valid problem (``JATTN_ERROR_UNSUPPORTED``);
- ``JattnRuntimeError`` (a ``RuntimeError``): a backend that is unavailable or failed, CUDA
  errors, out of memory.
"""

from __future__ import annotations

from . import _clib


class JattnError(Exception):
    """Base of the package's exceptions: a jattn status with its name and message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        names = _clib.STATUS_NAMES
        self.status_name = names[status] if 0 <= status < len(names) else "JATTN_STATUS_UNKNOWN"
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class JattnValueError(JattnError, ValueError):
    """An invalid problem, shape, layout, stride, scale or dtype."""


class JattnNotImplementedError(JattnError, NotImplementedError):
    """The chosen backend cannot run this (valid) problem: ``JATTN_ERROR_UNSUPPORTED``."""


class JattnRuntimeError(JattnError, RuntimeError):
    """A backend that is unavailable or failed (CUDA errors, out of memory)."""


_VALUE_STATUSES = frozenset(
    {
        _clib.JATTN_ERROR_NULL_POINTER,
        _clib.JATTN_ERROR_INVALID_DIMENSION,
        _clib.JATTN_ERROR_OVERFLOW,
        _clib.JATTN_ERROR_INVALID_STRIDE,
        _clib.JATTN_ERROR_SELF_OVERLAP,
        _clib.JATTN_ERROR_ALIASING,
        _clib.JATTN_ERROR_INVALID_SCALE,
        _clib.JATTN_ERROR_INVALID_ARGUMENT,
    }
)


def error_from_status(status: int, message: str) -> JattnError:
    """The exception for a failing ``jattn_status`` and its message."""
    if status in _VALUE_STATUSES:
        return JattnValueError(status, message)
    if status == _clib.JATTN_ERROR_UNSUPPORTED:
        return JattnNotImplementedError(status, message)
    return JattnRuntimeError(status, message)


def raise_for_status(status: int) -> None:
    """Raises the exception of a failing status, with this thread's ``jattn_last_error()``."""
    if status != _clib.JATTN_OK:
        raise error_from_status(status, _clib.last_error())


def invalid(status: int, message: str) -> JattnValueError:
    """A ``JattnValueError`` for a check the Python layer makes itself, under the status the C
    library uses for the same kind of fault."""
    return JattnValueError(status, message)
