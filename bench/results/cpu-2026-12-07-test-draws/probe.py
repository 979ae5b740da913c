import sys

import torch

sys.path.insert(0, "/work/main/python/tests")
import test_diffusers_models as t

import jattn._api as api

torch.set_num_threads(1)
name, seed = sys.argv[1], int(sys.argv[2])
calls = []
orig = api.attention


def rec(q, k, v, **kw):
    calls.append((q.detach().clone(), k.detach().clone(), v.detach().clone(), dict(kw)))
    return orig(q, k, v, **kw)


api.attention = rec
r = t.run_model(name, seed)
api.attention = orig
print("grad", r["grad"]["rel_l2"], "calls", len(calls))


def m(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


for q, k, v, kw in calls:
    lay = kw.get("layout")
    print(
        q.shape,
        k.shape,
        {a: (b if not torch.is_tensor(b) else tuple(b.shape)) for a, b in kw.items()},
    )
    if kw.keys() - {"layout", "backend", "return_lse", "scale"}:
        print("  (masked; skipped)")
        continue
    tr = (lambda x: x.transpose(1, 2)) if lay == "bshd" else (lambda x: x)
    qs, ks, vs = tr(q), tr(k), tr(v)
    sc = kw.get("scale")
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(qs.shape, generator=gen, dtype=torch.float64)

    def run(fn, dt):
        a, b, c = (x.to(dt).clone().requires_grad_() for x in (qs, ks, vs))
        o = fn(a, b, c)
        (o.double() * do).sum().backward()
        return o.detach(), a.grad, b.grad, c.grad

    sd = lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c, scale=sc)
    ja = lambda a, b, c: tr(orig(tr(a), tr(b), tr(c), layout=lay, scale=sc))
    ref = run(sd, torch.float64)
    s32 = run(sd, torch.float32)
    j32 = run(ja, torch.float32)
    # logit magnitudes
    s = (qs.double() @ ks.double().transpose(-1, -2)) * (sc if sc else qs.shape[-1] ** -0.5)
    pm = torch.softmax(s, -1).amax(-1)
    print(f"  max|logit| {s.abs().max().item():.1f}  max p {pm.max().item():.4f}  mean max p {pm.mean().item():.3f}")
    for i, nm in enumerate(["out", "dq", "dk", "dv"]):
        print(f"  {nm} sdpa {m(s32[i], ref[i]):.2e} jattn {m(j32[i], ref[i]):.2e}")
