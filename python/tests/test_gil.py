"""The GIL is released during the C call: a second Python thread runs while a long call is in
flight (torch CPU tensors and numpy arrays)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import jattn


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_another_thread_runs_during_a_long_call(rng, kind):
    q = rng.standard_normal((1, 8, 768, 64)).astype(np.float32)
    args = (q, q, q) if kind == "numpy" else (torch.from_numpy(q),) * 3
    span = {}

    def worker():
        span["start"] = time.perf_counter()
        jattn.attention(*args, backend="ref", threads=1)  # about 0.6 s here of the float64 scalar reference
        span["end"] = time.perf_counter()

    t = threading.Thread(target=worker)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())  # this thread runs only while it holds the GIL
    t.join()
    start, end = span["start"], span["end"]
    assert end - start > 0.05, "the call was too short to tell"
    # The middle half of the call: with the GIL held there, this thread could not tick at all
    # (it gets the GIL back at most once per switch interval, 5 ms, before the C call starts).
    lo, hi = start + 0.25 * (end - start), end - 0.25 * (end - start)
    during = sum(1 for x in ticks if lo <= x <= hi)
    assert during > 1000, f"{during} ticks in the middle {hi - lo:.3f} s of the call"
