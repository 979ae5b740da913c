"""Plans: the C library's decision for a call (``jattn_plan_create``), made once, run per call.

A plan holds what the library decided for one kind of call: the problem and the mask's structure
validated, the backend, the kernel and the workspace size chosen. The front ends (``_torch_impl``,
``_numpy_impl``) make one per (pass, device, options, the tensors' shapes and strides, the mask's
structure, the pointers' alignment class), keep it in a bounded cache, and run it per call with
``jattn_plan_forward`` / ``jattn_plan_backward``: no second selection, no workspace query per
call, and what :func:`Plan.selection` names (``jattn.select``) is the kernel that runs. Plans are
immutable: any number of threads may run one at once (each with its own context, stream and
workspace); a plan is freed when the cache has let go of it and no run holds it.

``backend="auto"`` means, in the library's AUTO order, the first backend that can plan the call
among those that compute where the data lives: for CUDA tensors the backends that compute from
device memory, for CPU tensors and numpy arrays the backends that compute on the CPU (the C
library's own AUTO would also try the GPU backends for host memory, copying the tensors to a GPU
and back; the package keeps host data on the host). So a masked CPU call that the cpu backend does
not serve yet runs on the reference, as the C library's AUTO would run it.
"""

from __future__ import annotations

import threading
from ctypes import byref, c_void_p
from typing import Dict, Optional, Tuple

from . import _clib
from ._clib import Exec, GradStrides, Mask, Problem, Selection
from ._errors import error_from_status
from ._options import Options

_MEMORY = {True: _clib.JATTN_MEMORY_DEVICE, False: _clib.JATTN_MEMORY_HOST}

# The backends "auto" tries, in AUTO's order: for device memory (True) and for host memory (False).
_AUTO: Dict[bool, Tuple[int, ...]] = {
    True: tuple(b.id for b in _clib.BACKENDS if b.on_device),
    False: tuple(b.id for b in _clib.BACKENDS if not b.is_gpu),
}
# Statuses after which "auto" asks the next backend (any other: the call itself is invalid).
_NEXT = frozenset({_clib.JATTN_ERROR_UNSUPPORTED, _clib.JATTN_ERROR_BACKEND_UNAVAILABLE})


def backend_ids(backend: str, on_device: bool) -> Tuple[int, ...]:
    """The ``jattn_backend`` numbers a (valid) backend option tries, in order."""
    bid = _clib.BACKEND_IDS[backend]
    return _AUTO[on_device] if bid == _clib.JATTN_BACKEND_AUTO else (bid,)


def make_exec(opts: Options, backend_id: int, on_device: bool, alignment: int = 0) -> Exec:
    """The ``jattn_exec`` of validated options for one backend, host or (``on_device``) CUDA
    device memory, for data pointers of ``alignment`` bytes (0: 16)."""
    return Exec(backend_id, _clib.PRECISION_IDS[opts.precision], _MEMORY[on_device], opts.threads, None, None, 0,
                alignment)  # fmt: skip


def alignment_of(bits: int, cap: int) -> int:
    """The alignment class of data pointers whose bitwise OR is ``bits``: the largest power of two
    dividing every one, at most ``cap``. A plan made for an alignment serves pointers of any larger
    one, so the cap is what a fresh allocation gives where the data lives (``HOST_ALIGNMENT``,
    ``DEVICE_ALIGNMENT``): every call on fresh tensors is of one class, one plan."""
    if bits == 0:
        return cap
    low = bits & -bits
    return cap if low > cap else low


HOST_ALIGNMENT = 64  #: torch's CPU allocator aligns to 64 bytes (numpy's to 16: its calls have classes 16..64)
DEVICE_ALIGNMENT = 256  #: torch's CUDA caching allocator to 512 bytes; the library asks no more than 256


UNASKED = object()


class Plan:
    """A ``jattn_plan`` with what a run needs beside it. Immutable once made."""

    __slots__ = ("handle", "pass_", "workspace_bytes", "problem", "mask", "opts", "extra", "lse_like",
                 "backward_refusal", "backward_plans")  # fmt: skip

    def __init__(self, handle: int, pass_: int, problem: Problem, mask: Optional[Mask], opts: Options) -> None:
        self.handle = handle  #: the jattn_plan pointer
        self.pass_ = pass_  #: JATTN_PASS_FORWARD or _BACKWARD
        self.workspace_bytes: int = _clib.plan_workspace_size(handle)  #: a run's workspace (0: none)
        self.problem = problem  #: the jattn_problem it was made for
        self.mask = mask  #: the mask structure it was made for (None: no mask), filled per run
        self.opts = opts  #: the validated options
        self.extra: object = None  #: what the front end keeps with it (shapes of its outputs)
        #: a host forward plan of the torch front end: a float32 tensor of the lse's shape, whose
        #: ``empty_like`` makes a call's lse (~0.7 us less than ``torch.empty`` with shape and dtype)
        self.lse_like: object = None
        #: a forward plan differentiated eagerly: why jattn's backward refuses its calls (None: it
        #: does not), asked on its first differentiated call; UNASKED before
        self.backward_refusal: object = UNASKED
        #: a forward plan differentiated eagerly: the backward plans of its calls, by the kind of
        #: gradient autograd hands (its strides) and the pointers' alignment class
        self.backward_plans: Dict[tuple, Plan] = {}

    def selection(self) -> Selection:
        """``jattn_plan_selection``: the backend and kernel its runs launch."""
        sel = Selection()
        _clib.plan_selection(self.handle, byref(sel))
        return sel

    # The free function is bound at definition: at interpreter exit this module's globals may be
    # gone before the last plan is collected.
    def __del__(self, _plan_free=_clib.plan_free) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            _plan_free(handle)


def make_plan(
    pass_: int,
    problem: Problem,
    grad: Optional[GradStrides],
    mask: Optional[Mask],
    opts: Options,
    on_device: bool,
    alignment: int,
) -> Plan:
    """``jattn_plan_create`` for the backend of ``opts`` (for ``"auto"``, the first of its
    candidates that can plan it); raises the library's status as an exception otherwise. CUDA: the
    caller makes the tensors' device current."""
    first: Optional[Tuple[int, str]] = None
    candidates = backend_ids(opts.backend, on_device)
    handle = c_void_p()
    for bid in candidates:
        exec_ = make_exec(opts, bid, on_device, alignment)
        status = _clib.plan_create(
            byref(handle), pass_, byref(problem), byref(grad) if grad is not None else None,
            byref(mask) if mask is not None else None, byref(exec_),
        )  # fmt: skip
        if status == _clib.JATTN_OK:
            return Plan(handle.value, pass_, problem, mask, opts)
        message = _clib.last_error()
        if status not in _NEXT:
            raise error_from_status(status, message)
        if first is None:
            first = (status, message)
    assert first is not None
    status, message = first
    if len(candidates) > 1:
        message = f"no backend can run this problem: {message}"
    raise error_from_status(status, message)


# ---- the cache ---------------------------------------------------------------------------------
_PLANS: Dict[tuple, Plan] = {}
_LOCK = threading.Lock()
CACHE_LIMIT = 1024  #: plans kept; the oldest goes first


def cached(key: tuple) -> Optional[Plan]:
    """The plan made for ``key``, or None."""
    return _PLANS.get(key)


def remember(key: tuple, plan: Plan) -> Plan:
    """Keeps ``plan`` for ``key`` (or returns the one another thread kept first)."""
    with _LOCK:
        kept = _PLANS.setdefault(key, plan)
        while len(_PLANS) > CACHE_LIMIT:
            del _PLANS[next(iter(_PLANS))]
    return kept


def clear() -> None:
    """Forgets every plan (each is freed once no run holds it)."""
    with _LOCK:
        _PLANS.clear()
