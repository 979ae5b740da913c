"""pytest plugin: the jattn.diffusers switch on for the whole session (JATTN_SWITCH=1)."""

import os

_cm = None


def pytest_configure(config):
    global _cm
    if os.environ.get("JATTN_SWITCH") == "1":
        import jattn.diffusers

        _cm = jattn.diffusers.enabled()
        _cm.__enter__()


def pytest_unconfigure(config):
    if _cm is not None:
        import jattn.diffusers

        print("\njattn.diffusers.counts():", jattn.diffusers.counts())
        _cm.__exit__(None, None, None)
