"""pytest setup: one seed per run (printed in the header; JATTN_TEST_SEED=<n> replays it) and a
generator per test derived from it and the test's id, so one test replays alone too."""

from __future__ import annotations

import os
import random
import zlib

import numpy as np
import pytest

SEED = int(os.environ.get("JATTN_TEST_SEED") or random.SystemRandom().randrange(1, 2**31))


def pytest_report_header(config):
    return f"jattn: JATTN_TEST_SEED={SEED} (set it to replay this run's inputs)"


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A numpy generator of this run's seed and this test's id."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture
def seed(request) -> int:
    """An int seed of this run and this test (for torch.manual_seed)."""
    return (SEED * 1000003 + zlib.crc32(request.node.nodeid.encode())) % (2**63)
