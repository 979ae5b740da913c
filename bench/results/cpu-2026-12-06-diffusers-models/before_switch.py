"""The same models under the switch of 4086da1 (dispatcher only): which are served fully."""
import sys, warnings, importlib.util
sys.path.insert(0, ".")
import torch
import torch.nn.functional as F
spec = importlib.util.spec_from_file_location("jattn.diffusers", "old_diffusers.py")
import jattn
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
jattn.diffusers = old
jattn._clib.HAS_BACKWARD = True
import test_diffusers_models as t
import copy
t.jattn.diffusers = old
torch.set_num_threads(1)
direct = {"n": 0}
real = F.scaled_dot_product_attention
def counting(*a, **k):
    direct["n"] += 1
    return real(*a, **k)
served = 0; rows = []
names = sorted(t.all_classes())
for name in names:
    if name in t.UNBUILDABLE:
        rows.append((name, "not built")); continue
    direct["n"] = 0
    F.scaled_dot_product_attention = counting
    try:
        init, spec_ = t.MODELS[name]
        more_init, more_inputs = t.SMALLER.get(name, ({}, {}))
        init = {**init, **more_init}
        spec_ = {**spec_, **more_inputs, **t.MASKED.get(name, {})}
        torch.manual_seed(1)
        model = getattr(t.diffusers, name)(**init).float().eval()
        inputs = t.materialise(spec_, torch.Generator().manual_seed(1))
        old.reset_counts()
        direct["n"] = 0
        with warnings.catch_warnings(), old.enabled():
            warnings.simplefilter("ignore")
            t.forward_backward(model, inputs, None, name not in t.FORWARD_ONLY)
        r = {"counts": old.counts()}
        err = None
    except Exception as e:
        r, err = {"counts": {}}, f"{type(e).__name__}: {str(e)[:80]}"
    finally:
        F.scaled_dot_product_attention = real
    c = r["counts"]
    # the float64 reference's own SDPA calls are counted too: halve
    d = direct["n"] - sum(v for k, v in c.items() if k.startswith("fallback"))  # fallbacks run SDPA too
    fb = {k: v for k, v in c.items() if k.startswith("fallback")}
    ok = err is None and not fb and d == 0 and c.get("jattn", 0) > 0
    served += ok
    rows.append((name, f"{'served' if ok else 'NOT'} jattn={c.get('jattn', 0)} direct_sdpa={d} {fb} {err or ''}"))
for r in rows: print(*r)
print(f"before: {served} of {len(names)} served fully")
