"""ctypes mirror of ``include/jattn.h``: the library, its structs, enums and calls.

This module is the only place that knows the C ABI. The structs below follow the header field
by field; ``python/tests/test_abi.py`` checks their sizes and offsets against the layout the C
compiler measured when the package was built (``_lib/abi_probe.txt``, the output of the
repository's ABI probe ``tests/abi/jattn_abi_probe.c``), and these status constants against the
header's ``JATTN_STATUS_LIST``.

Calls go through :class:`ctypes.CDLL`, which releases the GIL for the duration of each call.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, Structure, byref, c_char_p, c_float, c_int, c_int64, c_size_t, c_uint, c_void_p
from typing import Dict, NamedTuple, Tuple

LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")
LIB_PATH = os.path.join(LIB_DIR, "libjattn.so")
ABI_PROBE_PATH = os.path.join(LIB_DIR, "abi_probe.txt")

# ---- enums (jattn.h; the numbers are stable) -------------------------------------------------
JATTN_OK = 0
JATTN_ERROR_NULL_POINTER = 1
JATTN_ERROR_INVALID_DIMENSION = 2
JATTN_ERROR_OVERFLOW = 3
JATTN_ERROR_INVALID_STRIDE = 4
JATTN_ERROR_SELF_OVERLAP = 5
JATTN_ERROR_ALIASING = 6
JATTN_ERROR_INVALID_SCALE = 7
JATTN_ERROR_INVALID_ARGUMENT = 8
JATTN_ERROR_UNSUPPORTED = 9
JATTN_ERROR_BACKEND_UNAVAILABLE = 10
JATTN_ERROR_WORKSPACE_TOO_SMALL = 11
JATTN_ERROR_OUT_OF_MEMORY = 12
JATTN_ERROR_CUDA = 13
JATTN_ERROR_TRANSPORT = 14
JATTN_STATUS_COUNT = 15
# jattn_status_name of each code, from the constants above (one list: test_abi.py checks it against
# JATTN_STATUS_LIST through the ABI probe), held here so that raising needs no C call.
STATUS_NAMES = tuple(
    sorted(
        (name for name, value in globals().items() if name == "JATTN_OK" or name.startswith("JATTN_ERROR_")),
        key=lambda name: globals()[name],
    )
)

JATTN_DTYPE_F32 = 0

# The backends' numbers (JATTN_BACKEND_LIST), one line each: what the backends are (names, AUTO's
# order, GPU or not) is the library's answer, BACKENDS below.
JATTN_BACKEND_AUTO = 0
JATTN_BACKEND_REF = 1
JATTN_BACKEND_CPU = 2
JATTN_BACKEND_CUDA = 3
JATTN_BACKEND_VK = 4
JATTN_BACKEND_COUNT = 5

JATTN_PRECISION_F32 = 0
JATTN_PRECISION_TF32 = 1

JATTN_MEMORY_HOST = 0
JATTN_MEMORY_DEVICE = 1

JATTN_CAUSAL_NONE = 0
JATTN_CAUSAL_TOP_LEFT = 1
JATTN_CAUSAL_BOTTOM_RIGHT = 2

JATTN_PASS_FORWARD = 0
JATTN_PASS_BACKWARD = 1

PRECISION_IDS = {"f32": JATTN_PRECISION_F32, "tf32": JATTN_PRECISION_TF32}


# ---- structs ---------------------------------------------------------------------------------
class Strides(Structure):
    """``jattn_strides``: element strides of (batch, head, token); head_dim is contiguous."""

    _fields_ = [("batch", c_int64), ("head", c_int64), ("token", c_int64)]


class Problem(Structure):
    """``jattn_problem``: the dimensions, scale, element type, the four tensors' strides and the
    key/value heads (0: as many as the query heads)."""

    _fields_ = [
        ("batch", c_int64),
        ("heads", c_int64),
        ("seq_q", c_int64),
        ("seq_kv", c_int64),
        ("head_dim", c_int64),
        ("scale", c_float),
        ("dtype", c_int),
        ("q", Strides),
        ("k", Strides),
        ("v", Strides),
        ("out", Strides),
        ("kv_heads", c_int64),
    ]


class Exec(Structure):
    """``jattn_exec``: backend, precision, memory kind, threads, CUDA stream, workspace, and the
    data pointers' alignment a plan is made for (0: 16 bytes)."""

    _fields_ = [
        ("backend", c_int),
        ("precision", c_int),
        ("memory", c_int),
        ("threads", c_int),
        ("cuda_stream", c_void_p),
        ("workspace", c_void_p),
        ("workspace_bytes", c_size_t),
        ("alignment", c_size_t),
    ]


class Selection(Structure):
    """``jattn_selection``: what a backend would run for a problem (static strings)."""

    _fields_ = [
        ("backend", c_int),
        ("backend_name", c_char_p),
        ("kernel", c_char_p),
        ("isa", c_char_p),
        ("threads", c_int),
    ]


class BackendInfo(Structure):
    """``jattn_backend_info``: what a backend is (static strings)."""

    _fields_ = [
        ("backend", c_int),
        ("name", c_char_p),
        ("memory", c_int),
        ("is_gpu", c_int),
        ("has_backward", c_int),
        ("auto_rank", c_int),
    ]


class KeyPadding(Structure):
    """``jattn_key_padding``: per-batch key lengths and/or a boolean key mask (one byte a key)."""

    _fields_ = [
        ("kv_len", c_void_p),
        ("mask", c_void_p),
        ("mask_batch", c_int64),
        ("mask_keys", c_int64),
        ("mask_batch_stride", c_int64),
    ]


class Mask(Structure):
    """``jattn_mask``: key padding, causal, block-causal blocks, segments (packed sequences) and an
    additive key bias; pointers to int64 offsets and float32 bias where the tensors live."""

    _fields_ = [
        ("padding", KeyPadding),
        ("causal", c_int),
        ("block_q", c_void_p),
        ("block_kv", c_void_p),
        ("num_blocks", c_int64),
        ("cu_seqlens_q", c_void_p),
        ("cu_seqlens_kv", c_void_p),
        ("num_segments", c_int64),
        ("segments_batch_stride", c_int64),
        ("key_bias", c_void_p),
        ("key_bias_batch_stride", c_int64),
        ("key_bias_head_stride", c_int64),
    ]


class GradStrides(Structure):
    """``jattn_grad_strides``: element strides of dout, dq, dk and dv (head_dim contiguous)."""

    _fields_ = [("dout", Strides), ("dq", Strides), ("dk", Strides), ("dv", Strides)]


# ---- the library -----------------------------------------------------------------------------
def _load() -> ctypes.CDLL:
    if not os.path.exists(LIB_PATH):
        raise ImportError(f"jattn: the C library is missing from the package ({LIB_PATH}); reinstall jattn")
    return ctypes.CDLL(LIB_PATH)


lib = _load()


def _declare(name: str, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


version_number = _declare("jattn_version_number", c_uint, [])
_version_string = _declare("jattn_version_string", c_char_p, [])
_status_name = _declare("jattn_status_name", c_char_p, [c_int])
_last_error = _declare("jattn_last_error", c_char_p, [])
backend_name = _declare("jattn_backend_name", c_char_p, [c_int])
backend_info_count = _declare("jattn_backend_info_count", c_int, [])
backend_info_at = _declare("jattn_backend_info_at", c_int, [c_int, POINTER(BackendInfo)])
select = _declare("jattn_select", c_int, [POINTER(Problem), POINTER(Exec), POINTER(Selection)])
workspace_size = _declare("jattn_workspace_size", c_int, [POINTER(Problem), POINTER(Exec), POINTER(c_size_t)])
ctx_create = _declare("jattn_ctx_create", c_int, [POINTER(c_void_p)])
ctx_free = _declare("jattn_ctx_free", None, [c_void_p])

_P = POINTER(Problem)
# The one-call functions (each makes a plan for its pointers and runs it once). The package runs
# plans (below); these are bound for the ABI test, the benchmarks' bare-call baseline and C users'
# habits.
forward = _declare("jattn_forward", c_int, [c_void_p, _P, POINTER(Exec)] + [c_void_p] * 5)
forward_padded = _declare(
    "jattn_forward_padded",
    c_int,
    [c_void_p, _P, POINTER(Exec)] + [c_void_p] * 3 + [POINTER(KeyPadding)] + [c_void_p] * 2,
)
forward_masked = _declare(
    "jattn_forward_masked", c_int, [c_void_p, _P, POINTER(Exec)] + [c_void_p] * 3 + [POINTER(Mask)] + [c_void_p] * 2
)
backward_select = _declare("jattn_backward_select", c_int, [_P, POINTER(Exec), POINTER(Selection)])
backward_workspace_size = _declare(
    "jattn_backward_workspace_size", c_int, [_P, POINTER(GradStrides), POINTER(Exec), POINTER(c_size_t)]
)
backward = _declare(
    "jattn_backward",
    c_int,
    [c_void_p, _P, POINTER(GradStrides), POINTER(Exec)] + [c_void_p] * 7 + [POINTER(KeyPadding)] + [c_void_p] * 3,
)
backward_masked = _declare(
    "jattn_backward_masked",
    c_int,
    [c_void_p, _P, POINTER(GradStrides), POINTER(Exec)] + [c_void_p] * 7 + [POINTER(Mask)] + [c_void_p] * 3,
)

# Plans: made once per problem, mask structure and exec (jattn_plan_create), run per call.
plan_create = _declare(
    "jattn_plan_create",
    c_int,
    [POINTER(c_void_p), c_int, _P, POINTER(GradStrides), POINTER(Mask), POINTER(Exec)],
)
plan_free = _declare("jattn_plan_free", None, [c_void_p])
plan_selection = _declare("jattn_plan_selection", c_int, [c_void_p, POINTER(Selection)])
plan_workspace_size = _declare("jattn_plan_workspace_size", c_size_t, [c_void_p])
# (plan, ctx, cuda_stream, workspace, workspace_bytes, q, k, v, mask, out, lse)
plan_forward = _declare("jattn_plan_forward", c_int, [c_void_p] * 4 + [c_size_t] + [c_void_p] * 3 + [POINTER(Mask)]
                        + [c_void_p] * 2)  # fmt: skip
# (plan, ctx, cuda_stream, workspace, workspace_bytes, q, k, v, out, lse, dout, dlse, mask, dq, dk, dv)
plan_backward = _declare("jattn_plan_backward", c_int, [c_void_p] * 4 + [c_size_t] + [c_void_p] * 7 + [POINTER(Mask)]
                         + [c_void_p] * 3)  # fmt: skip


def version_string() -> str:
    """The version of the C library actually loaded, e.g. ``"0.4.0"``."""
    return _version_string().decode()


def status_name(status: int) -> str:
    """``jattn_status_name``: e.g. ``"JATTN_ERROR_ALIASING"``."""
    return _status_name(status).decode()


def last_error() -> str:
    """``jattn_last_error``: this thread's message for its last failing call."""
    return _last_error().decode(errors="replace")


# ---- the backends, as the library describes them ---------------------------------------------
class Backend(NamedTuple):
    """One backend of the loaded library (``jattn_backend_info_at``)."""

    name: str  #: its name, e.g. "cpu"
    id: int  #: its ``jattn_backend`` number
    on_device: bool  #: it computes from CUDA device memory (JATTN_MEMORY_DEVICE), else from host memory
    is_gpu: bool  #: it computes on a GPU
    has_backward: bool  #: jattn_backward can run on it
    auto_rank: int  #: its place in AUTO's order, 0 first


def _backends() -> Tuple[Backend, ...]:
    found = []
    for rank in range(backend_info_count()):
        info = BackendInfo()
        if backend_info_at(rank, byref(info)) != JATTN_OK:
            raise ImportError(f"jattn: jattn_backend_info_at({rank}) failed: {last_error()}")
        found.append(
            Backend(info.name.decode(), info.backend, info.memory == JATTN_MEMORY_DEVICE, bool(info.is_gpu),
                    bool(info.has_backward), info.auto_rank)
        )  # fmt: skip
    return tuple(found)


BACKENDS: Tuple[Backend, ...] = _backends()  # every backend, in AUTO's order
# The ``backend=`` choices: "auto", then every backend's name, by number.
BACKEND_IDS: Dict[str, int] = {
    "auto": JATTN_BACKEND_AUTO,
    **{b.name: b.id for b in sorted(BACKENDS, key=lambda b: b.id)},
}
