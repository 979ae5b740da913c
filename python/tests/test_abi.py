"""The ctypes mirrors against the C compiler's layout of jattn.h (measured at build time by
python/abi/abi_layout.c and shipped as jattn/_lib/abi_layout.json), and the library's own
answers for the names and numbers the package holds."""

from __future__ import annotations

import ctypes
import json

import pytest

import jattn
from jattn import _clib

with open(_clib.ABI_LAYOUT_PATH) as f:
    LAYOUT = json.load(f)

MIRRORS = {
    "jattn_strides": _clib.Strides,
    "jattn_problem": _clib.Problem,
    "jattn_exec": _clib.Exec,
    "jattn_selection": _clib.Selection,
    "jattn_key_padding": _clib.KeyPadding,
}


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_struct_layout_matches_the_c_compiler(c_name):
    mirror, want = MIRRORS[c_name], LAYOUT[c_name]
    assert ctypes.sizeof(mirror) == want["size"], c_name
    fields = [name for name, *_ in mirror._fields_]
    assert fields == list(want["fields"]), f"{c_name}: fields or their order differ from jattn.h"
    for name, offset in want["fields"].items():
        assert getattr(mirror, name).offset == offset, f"{c_name}.{name}"


def test_enums_are_int_sized():
    assert LAYOUT["enum_size"] == ctypes.sizeof(ctypes.c_int)


def test_constants_match_the_header():
    for name, value in LAYOUT["constants"].items():
        if name == "JATTN_VERSION_NUMBER":
            continue
        assert getattr(_clib, name) == value, name


def test_status_names_are_the_librarys():
    for code in range(_clib.JATTN_STATUS_COUNT):
        assert _clib.STATUS_NAMES[code] == _clib.status_name(code)
    assert _clib.status_name(_clib.JATTN_STATUS_COUNT) == "JATTN_STATUS_UNKNOWN"


def test_backend_names_are_the_librarys():
    for name, code in _clib.BACKEND_IDS.items():
        assert _clib.backend_name(code).decode() == name


def test_version_is_the_c_librarys():
    n = LAYOUT["constants"]["JATTN_VERSION_NUMBER"]
    assert _clib.version_number() == n  # the library loaded is the one whose header was measured
    assert jattn.__version__ == f"{n // 10000}.{n // 100 % 100}.{n % 100}" == _clib.version_string()


def test_installed_metadata_version_is_the_c_librarys():
    from importlib.metadata import version

    assert version("jattn") == jattn.__version__
