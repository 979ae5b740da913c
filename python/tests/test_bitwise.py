"""numpy, torch, a bare ctypes call of jattn_forward and the `jattn` command: the same bits.

The package adds no numerics of its own, so every route to the same backend on the same
inputs must give bit-identical outputs (and lse). The command is found through JATTN_CLI (set
by `make test-python`) or the build folder beside the repository's python/."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import jattn
from jattn import _clib
from jattn_testing import draw_qkv


def bare_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, backend: int, threads: int):
    """jattn_forward on contiguous head-major [B, H, S, D] arrays, through ctypes only."""
    b, h, sq, d = q.shape
    skv = k.shape[2]

    def head_major(seq):
        return _clib.Strides(h * seq * d, seq * d, d)

    problem = _clib.Problem(b, h, sq, skv, d, 0.0, _clib.JATTN_DTYPE_F32, head_major(sq), head_major(skv),
                            head_major(skv), head_major(sq))  # fmt: skip
    exec_ = _clib.Exec(backend, _clib.JATTN_PRECISION_F32, _clib.JATTN_MEMORY_HOST, threads)
    out = np.empty_like(q)
    lse = np.empty((b, h, sq), dtype=np.float32)
    status = _clib.forward(None, ctypes.byref(problem), ctypes.byref(exec_), q.ctypes.data, k.ctypes.data,
                           v.ctypes.data, out.ctypes.data, lse.ctypes.data)  # fmt: skip
    assert status == _clib.JATTN_OK, _clib.last_error()
    return out, lse


def bits_equal(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("backend", ["cpu", "ref"])
def test_torch_numpy_and_bare_ctypes_agree_bit_for_bit(rng, backend):
    q, k, v, _ = draw_qkv(rng, (2, 3, 45, 64), (2, 3, 70, 64), "peaky", 64)
    bare, bare_lse = bare_forward(q, k, v, _clib.BACKEND_IDS[backend], 1)
    n, n_lse = jattn.attention(q, k, v, backend=backend, threads=1, return_lse=True)
    t, t_lse = jattn.attention(*map(torch.from_numpy, (q, k, v)), backend=backend, threads=1, return_lse=True)
    assert bits_equal(n, bare) and bits_equal(n_lse, bare_lse)
    assert bits_equal(t.numpy(), bare) and bits_equal(t_lse.numpy(), bare_lse)
    # the same data in the other layout and in a token-major out: the same bits
    qs, ks, vs = (np.ascontiguousarray(np.swapaxes(x, 1, 2)) for x in (q, k, v))
    s = jattn.attention(*map(torch.from_numpy, (qs, ks, vs)), layout="bshd", backend=backend, threads=1)
    assert bits_equal(np.swapaxes(s.numpy(), 1, 2), bare)


def _cli() -> Path:
    env = os.environ.get("JATTN_CLI")
    if env:
        path = Path(env)
        assert path.is_file(), f"JATTN_CLI={env} is not a file"
        return path
    path = Path(__file__).resolve().parents[2] / "build" / "tools" / "jattn"
    if not path.is_file():
        pytest.skip("the jattn command is not built (make build), and JATTN_CLI is not set")
    return path


def test_the_jattn_command_agrees_bit_for_bit(rng, tmp_path):
    cli = _cli()
    q, k, v, _ = draw_qkv(rng, (1, 4, 96, 128), (1, 4, 80, 128), "normal", 128)
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", x)
    cmd = [str(cli), "run", "--backend", "cpu", "--threads", "1", "--reps", "1", "--no-check",
           "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--v", str(tmp_path / "v.npy"),
           "--out", str(tmp_path / "out.npy"), "--lse", str(tmp_path / "lse.npy")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    cli_out = np.load(tmp_path / "out.npy")  # token-major [B, Sq, H*D]
    cli_lse = np.load(tmp_path / "lse.npy")
    out, lse = jattn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), backend="cpu",
                               threads=1, return_lse=True)  # fmt: skip
    assert bits_equal(out.transpose(1, 2).reshape(1, 96, 4 * 128).numpy(), cli_out)
    assert bits_equal(lse.numpy(), cli_lse)
