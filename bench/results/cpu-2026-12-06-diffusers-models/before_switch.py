"""The models of python/tests/test_diffusers_models.py under the switch of 4086da1 (diffusers'
dispatcher only): which are served fully, which call SDPA directly, which fall back.

Run from python/tests with old_diffusers.py (``git show 4086da1:python/src/jattn/diffusers.py``)
beside this script: ``python path/to/before_switch.py path/to/old_diffusers.py``. Each model: the
float32 forward and backward under the old switch, direct SDPA calls counted by a wrapper (the
old switch's fallbacks run SDPA through diffusers' native backend: those are subtracted).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

import torch
import torch.nn.functional as F

import jattn

sys.path.insert(0, ".")
import test_diffusers_models as t  # noqa: E402


def main(old_path: str) -> None:
    spec = importlib.util.spec_from_file_location("jattn.diffusers", old_path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    jattn._clib.HAS_BACKWARD = True  # the old switch asks; every libjattn here has a backward
    torch.set_num_threads(1)
    direct = {"n": 0}
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        direct["n"] += 1
        return real(*args, **kwargs)

    served, names = 0, sorted(t.all_classes())
    for name in names:
        if name in t.UNBUILDABLE:
            print(name, "not built")
            continue
        init, spec_ = t.MODELS[name]
        more_init, more_inputs = t.SMALLER.get(name, ({}, {}))
        inputs_spec = {**spec_, **more_inputs, **t.MASKED.get(name, {})}
        torch.manual_seed(1)
        model = getattr(t.diffusers, name)(**{**init, **more_init}).float().eval()
        inputs = t.materialise(inputs_spec, torch.Generator().manual_seed(1))
        inputs = {k: (v.make(model) if isinstance(v, t.FromModel) else v) for k, v in inputs.items()}
        old.reset_counts()
        direct["n"] = 0
        F.scaled_dot_product_attention = counting
        error = ""
        try:
            with warnings.catch_warnings(), old.enabled():
                warnings.simplefilter("ignore")
                t.forward_backward(model, inputs, None, name not in t.FORWARD_ONLY)
        except Exception as e:  # noqa: BLE001 - reported
            error = f"{type(e).__name__}: {str(e)[:80]}"
        finally:
            F.scaled_dot_product_attention = real
        counts = old.counts()
        fallbacks = {k: v for k, v in counts.items() if k.startswith("fallback")}
        calls = direct["n"] - sum(fallbacks.values())
        ok = not error and not fallbacks and calls == 0 and counts.get("jattn", 0) > 0
        served += ok
        print(
            name, "served" if ok else "NOT", f"jattn={counts.get('jattn', 0)} direct_sdpa={calls} {fallbacks} {error}"
        )
    print(f"before: {served} of {len(names)} served fully")


if __name__ == "__main__":
    main(sys.argv[1])
