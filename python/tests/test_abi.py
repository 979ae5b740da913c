"""The ctypes mirrors against the C compiler's view of jattn.h (the repository's ABI probe,
tests/abi/jattn_abi_probe.c, run at build time and shipped as jattn/_lib/abi_probe.txt; the Rust
crate's ABI test reads the same probe), the header itself scanned for anything the package misses,
and the library's own answers for the names and numbers the package holds."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

import jattn
from jattn import _clib, _errors

# "kind name value" lines: sizeof / alignof / offsetof T.f / status / value
with open(_clib.ABI_PROBE_PATH) as f:
    PROBE = [tuple(line.split()) for line in f if line.strip()]

MIRRORS = {
    "jattn_strides": _clib.Strides,
    "jattn_problem": _clib.Problem,
    "jattn_exec": _clib.Exec,
    "jattn_selection": _clib.Selection,
    "jattn_backend_info": _clib.BackendInfo,
    "jattn_key_padding": _clib.KeyPadding,
    "jattn_mask": _clib.Mask,
    "jattn_grad_strides": _clib.GradStrides,
}
ENUMS = ("jattn_status", "jattn_dtype", "jattn_backend", "jattn_precision", "jattn_memory", "jattn_causal",
         "jattn_pass")  # fmt: skip

# What the header declares and the package deliberately leaves out, with the reason.
NOT_MIRRORED = {
    "JATTN_DTYPE_BF16": "reserved element type, not implemented",
    "JATTN_DTYPE_F16": "reserved element type, not implemented",
    "JATTN_VERSION_MAJOR": "the version is read from the library (jattn.__version__)",
    "JATTN_VERSION_MINOR": "the version is read from the library (jattn.__version__)",
    "JATTN_VERSION_PATCH": "the version is read from the library (jattn.__version__)",
    "JATTN_VERSION_NUMBER": "the version is read from the library (jattn.__version__)",
    "jattn_set_last_error": "for C layers built on the API; the package raises its own exceptions",
    "jattn_strides_head_major": "the package computes strides from the tensors it is given",
    "jattn_strides_token_major": "the package computes strides from the tensors it is given",
    "jattn_problem_flux": "the package builds problems from the tensors it is given",
    "jattn_grad_strides_like": "the package computes the gradients' strides from the tensors it is given",
}

REPO_HEADER = Path(__file__).resolve().parents[2] / "include" / "jattn.h"


def probe(kind: str) -> dict:
    return {name: int(value) for k, name, value in PROBE if k == kind}


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_struct_layout_matches_the_c_compiler(c_name):
    mirror = MIRRORS[c_name]
    assert ctypes.sizeof(mirror) == probe("sizeof")[c_name], c_name
    assert ctypes.alignment(mirror) == probe("alignof")[c_name], c_name
    want = {name.split(".", 1)[1]: off for name, off in probe("offsetof").items() if name.startswith(c_name + ".")}
    fields = [name for name, *_ in mirror._fields_]
    assert fields == list(want), f"{c_name}: fields or their order differ from jattn.h"
    for name, offset in want.items():
        assert getattr(mirror, name).offset == offset, f"{c_name}.{name}"


def test_every_struct_of_the_probe_is_mirrored():
    structs = {name for name in probe("sizeof") if name not in ENUMS}
    assert structs == set(MIRRORS)


def test_enums_are_int_sized():
    for name in ENUMS:
        assert probe("sizeof")[name] == ctypes.sizeof(ctypes.c_int), name


def test_status_codes_are_the_headers():
    statuses = probe("status")  # JATTN_STATUS_LIST, in the header's order
    assert _clib.STATUS_NAMES == tuple(statuses), "the package's status constants differ from JATTN_STATUS_LIST"
    for name, value in statuses.items():
        assert getattr(_clib, name) == value, name
        if value != _clib.JATTN_OK:
            err = _errors.error_from_status(value, "m")
            assert isinstance(err, _errors.JattnError) and err.status_name == name
    assert _clib.JATTN_STATUS_COUNT == len(statuses)


def test_constants_match_the_header():
    for name, value in probe("value").items():
        if name in NOT_MIRRORED:
            continue
        assert getattr(_clib, name, None) == value, name


def _header_names() -> set:
    """Every struct, enum, enumerator, status code, numeric JATTN_ macro and JATTN_API function of
    jattn.h."""
    text = REPO_HEADER.read_text()  # (the sequence-parallel API, in jattn_parallel.h, is not bound)
    names = set(re.findall(r"^typedef (?:struct|enum) (jattn_\w+) \{", text, re.MULTILINE))
    names |= set(re.findall(r"^\s*(JATTN_\w+) = ", text, re.MULTILINE))
    names |= set(re.findall(r"^\s*X\((JATTN_\w+),", text, re.MULTILINE))
    names |= {m for m in re.findall(r"^#define (JATTN_\w+) (?:\d+|\()", text, re.MULTILINE) if not m.endswith("_")}
    names |= set(re.findall(r"JATTN_API [^;(]*?\b(jattn_\w+)\(", text))
    return names


@pytest.mark.skipif(not REPO_HEADER.is_file(), reason="not run from the repository: jattn.h not at hand")
def test_the_header_declares_nothing_the_package_misses():
    bound = {fn.__name__ for fn in vars(_clib).values() if isinstance(fn, ctypes._CFuncPtr)}
    probed = {name.split(".")[0] for kind, name, _ in PROBE}
    missing = []
    for name in sorted(_header_names()):
        if name in NOT_MIRRORED:
            continue
        if name.startswith("jattn_") and name not in ENUMS and name not in MIRRORS:
            if name not in bound:
                missing.append(f"{name}()")
        elif name not in probed:
            missing.append(f"{name} (not in the ABI probe)")
        elif name.startswith("JATTN_") and not hasattr(_clib, name):
            missing.append(name)
    assert not missing, f"in jattn.h but not in the package (or in NOT_MIRRORED with a reason): {missing}"


def test_status_names_are_the_librarys():
    for code in range(_clib.JATTN_STATUS_COUNT):
        assert _clib.STATUS_NAMES[code] == _clib.status_name(code)
    assert _clib.status_name(_clib.JATTN_STATUS_COUNT) == "JATTN_STATUS_UNKNOWN"


def test_backend_names_are_the_librarys():
    for name, code in _clib.BACKEND_IDS.items():
        assert _clib.backend_name(code).decode() == name


def test_backends_are_the_librarys():
    """BACKENDS is jattn_backend_info_at's list: every backend value but AUTO once (the header's
    numbers, through the probe), in AUTO's order; out-of-range ranks refused."""
    values = {name: v for name, v in probe("value").items() if name.startswith("JATTN_BACKEND_")}
    numbered = {v for name, v in values.items() if name not in ("JATTN_BACKEND_AUTO", "JATTN_BACKEND_COUNT")}
    assert sorted(b.id for b in _clib.BACKENDS) == sorted(numbered)
    assert [b.auto_rank for b in _clib.BACKENDS] == list(range(len(_clib.BACKENDS)))
    assert _clib.backend_info_count() == values["JATTN_BACKEND_COUNT"] - 1
    info = _clib.BackendInfo()
    for rank in (-1, len(_clib.BACKENDS)):
        assert _clib.backend_info_at(rank, ctypes.byref(info)) == _clib.JATTN_ERROR_INVALID_ARGUMENT
    assert list(_clib.BACKEND_IDS) == ["auto"] + [b.name for b in sorted(_clib.BACKENDS, key=lambda b: b.id)]


def test_version_is_the_c_librarys():
    n = probe("value")["JATTN_VERSION_NUMBER"]
    assert _clib.version_number() == n  # the library loaded is the one whose header was measured
    assert jattn.__version__ == f"{n // 10000}.{n // 100 % 100}.{n % 100}" == _clib.version_string()


def test_installed_metadata_version_is_the_c_librarys():
    from importlib.metadata import version

    assert version("jattn") == jattn.__version__
