"""jattn.diffusers' second router: calls made straight to torch.nn.functional.scaled_dot_product_attention
inside ``enabled()`` (the models whose processors skip diffusers' dispatcher) go to jattn when it can
serve them, to PyTorch's SDPA otherwise, counted either way, with one warning per kind of fallback;
SDPA is patched for the duration only; a dispatcher fallback that runs SDPA is counted once; every
SDPA form jattn serves (causal, grouped-query heads, the masks of the models, zero-size calls) is
within the gate of float64 SDPA with the same arguments, forward and backward."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import jattn
from jattn import _sdpa_masks
from jattn_testing import BWD_GATE_REL_L2, assert_gate, metrics

pytest.importorskip("diffusers")
from diffusers.models.attention_dispatch import dispatch_attention_fn  # noqa: E402

SDPA = F.scaled_dot_product_attention  # PyTorch's own, taken before any test patches it


@pytest.fixture(autouse=True)
def switch_off():
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()
    _sdpa_masks.clear_cache()
    yield
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()
    assert F.scaled_dot_product_attention is SDPA


def bhsd(seed, b=2, h=3, sq=20, skv=None, d=16, kv_heads=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    skv = sq if skv is None else skv
    kv_heads = h if kv_heads is None else kv_heads
    q = torch.randn(b, h, sq, d, generator=g)
    k, v = (torch.randn(b, kv_heads, skv, d, generator=g) for _ in range(2))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def test_sdpa_is_patched_for_the_duration_and_restored():
    with jattn.diffusers.enabled():
        assert F.scaled_dot_product_attention is not SDPA
        assert F.scaled_dot_product_attention.jattn_original is SDPA
        with jattn.diffusers.enabled(upcast=True):  # nested: the same router
            assert F.scaled_dot_product_attention.jattn_original is SDPA
        assert torch.nn.functional.scaled_dot_product_attention is F.scaled_dot_product_attention
    assert F.scaled_dot_product_attention is SDPA
    with pytest.raises(KeyError):
        with jattn.diffusers.enabled():
            raise KeyError("inside")
    assert F.scaled_dot_product_attention is SDPA


def test_direct_calls_go_through_jattn(seed):
    q, k, v = bhsd(seed, skv=33)
    with jattn.diffusers.enabled():
        out = F.scaled_dot_product_attention(q, k, v)
        scaled = torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 0.0, False, scale=0.3)
    assert jattn.diffusers.counts() == {"jattn:sdpa": 2}
    assert torch.equal(out, jattn.attention(q, k, v))  # the same call, the same bits
    assert torch.equal(scaled, jattn.attention(q, k, v, scale=0.3))
    assert_gate(out.numpy(), SDPA(q.double(), k.double(), v.double()).numpy(), what="direct SDPA call")


def test_sdpa_off_leaves_direct_calls_alone(seed):
    q, k, v = bhsd(seed)
    with jattn.diffusers.enabled(sdpa=False):
        assert torch.equal(F.scaled_dot_product_attention(q, k, v), SDPA(q, k, v))
        dispatch_attention_fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    assert jattn.diffusers.counts() == {"jattn": 1}


def test_a_dispatcher_fallback_is_counted_once(seed):
    """diffusers' native backend calls SDPA for a call the dispatcher's router gave back: that SDPA
    call goes straight to PyTorch, uncounted."""
    q, k, v = (t.transpose(1, 2) for t in bhsd(seed))
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        got = dispatch_attention_fn(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    assert torch.equal(got, dispatch_attention_fn(q, k, v, dropout_p=0.5))
    assert jattn.diffusers.counts() == {"fallback:dropout": 1}


def unstructured_mask(seed, b, sq, skv):
    g = torch.Generator().manual_seed(seed + 11)
    m = torch.rand(b, 1, sq, skv, generator=g) < 0.5
    m[..., 0] = True
    m[..., 0, 1:] = ~m[..., 1, 1:]
    return m


def test_calls_jattn_cannot_serve_go_to_pytorch_with_one_warning(seed):
    q, k, v = bhsd(seed)
    mask = unstructured_mask(seed, 2, 20, 20)
    for kwargs, reason in ((dict(dropout_p=0.5), "dropout"), (dict(attn_mask=mask), "attn_mask")):
        with jattn.diffusers.enabled():
            with pytest.warns(UserWarning, match="PyTorch's SDPA for calls made to it directly"):
                torch.manual_seed(0)
                got = F.scaled_dot_product_attention(q, k, v, **kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # the second call of the kind: no warning
                F.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.manual_seed(0)
        assert torch.equal(got, SDPA(q, k, v, **kwargs))
        assert jattn.diffusers.counts() == {f"fallback:{reason}": 2}
        jattn.diffusers.reset_counts()


def test_a_mask_that_requires_grad_goes_to_pytorch(seed):
    """SDPA differentiates a float mask (a learned bias); jattn's key bias is a constant."""
    q, k, v = bhsd(seed)
    bias = torch.zeros(2, 1, 1, 20, requires_grad=True)
    with jattn.diffusers.enabled(), pytest.warns(UserWarning, match="requires grad"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
    assert bias.grad is not None and jattn.diffusers.counts() == {"fallback:mask_grad": 1}


def test_what_pytorch_refuses_it_still_refuses(seed):
    q, k, v = bhsd(seed, h=4, kv_heads=3)
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # 3 k/v heads do not divide 4
        with pytest.raises(RuntimeError):
            q, k, v = bhsd(seed)
            F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(20, 20, dtype=torch.bool), is_causal=True)


def test_float64_and_bf16_direct_calls(seed):
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dtype in (torch.float64, torch.bfloat16):
            q, k, v = bhsd(seed, dtype=dtype)
            assert F.scaled_dot_product_attention(q, k, v).dtype == dtype
    assert jattn.diffusers.counts() == {"fallback:dtype": 2}
    q, k, v = bhsd(seed, dtype=torch.bfloat16)
    with jattn.diffusers.enabled(upcast=True):
        out = F.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.bfloat16 and jattn.diffusers.counts() == {"fallback:dtype": 2, "jattn:sdpa": 1}
    assert torch.equal(out, jattn.attention(q.float(), k.float(), v.float()).to(torch.bfloat16))


def k_mask(lengths, total):
    return torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]


def served_cases(seed):
    """(name, q, k, v, SDPA keyword arguments) for every form jattn serves."""
    b, h, s = 2, 4, 24
    q, k, v = bhsd(seed, b=b, h=h, sq=s)
    valid = k_mask([24, 15], s)
    cases = [
        ("bool key mask", q, k, v, dict(attn_mask=valid[:, None, None, :])),
        ("bool key mask expanded", q, k, v, dict(attn_mask=valid[:, None, None, :].expand(b, h, s, s))),
        (
            "float key mask -10000 per head (LTX)",
            q,
            k,
            v,
            dict(attn_mask=((1.0 - valid.float()) * -10000.0)[:, None, None, :].repeat(1, h, 1, 1)),
        ),
        (
            "float key mask -inf",
            q,
            k,
            v,
            dict(attn_mask=torch.zeros(b, 1, 1, s).masked_fill(~valid[:, None, None, :], float("-inf"))),
        ),
        ("pairwise (HunyuanVideo 1.5)", q, k, v, dict(attn_mask=(valid[:, :, None] & valid[:, None, :])[:, None])),
    ]
    pair = (valid[:, :, None] & valid[:, None, :]).clone()
    pair[:, :, 0] = True
    cases.append(("pairwise with key 0 (HunyuanVideo's refiner)", q, k, v, dict(attn_mask=pair[:, None])))
    ids = torch.tensor([[0] * 5 + [1] * 9 + [2] * 10, [0] * 12 + [1] * 12])
    cases.append(("segments (Ideogram 4)", q, k, v, dict(attn_mask=(ids[:, :, None] == ids[:, None, :])[:, None])))
    frames = torch.arange(s) // 6
    cases.append(("block-causal frames", q, k, v, dict(attn_mask=frames[None, :] <= frames[:, None])))
    finfo = torch.ones(s, s).tril()
    finfo[18:, :] = 1
    cases.append(("finfo.min block-causal (OmniGen)", q, k, v,
                  dict(attn_mask=((1 - finfo) * torch.finfo(torch.float32).min)[None, None])))  # fmt: skip
    cases.append(("is_causal", q, k, v, dict(is_causal=True)))
    qs, ks, vs = bhsd(seed + 1, b=b, h=h, sq=9, skv=s)
    cases.append(("is_causal Sq < Skv (top-left)", qs, ks, vs, dict(is_causal=True)))
    tri = torch.cat([torch.ones(9, s - 9, dtype=torch.bool), torch.ones(9, 9, dtype=torch.bool).tril()], 1)
    cases.append(("bottom-right causal and key mask (Qwen-Image 2.1)", qs, ks, vs,
                  dict(attn_mask=tri[None, None] & valid[:, None, None, :])))  # fmt: skip
    qg, kg, vg = bhsd(seed + 2, b=b, h=h, sq=s, kv_heads=2)
    cases.append(("enable_gqa causal (Cosmos 3)", qg, kg, vg, dict(is_causal=True, enable_gqa=True)))
    qm, km, vm = bhsd(seed + 3, b=b, h=h, sq=s, kv_heads=1)
    cases.append(("multi-query, key mask", qm, km, vm, dict(enable_gqa=True, attn_mask=valid[:, None, None, :])))
    return cases


CASE_NAMES = [c[0] for c in served_cases(0)]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_served_forms_are_within_the_gate_of_float64_sdpa(seed, case):
    _, q, k, v, kwargs = next(c for c in served_cases(seed) if c[0] == case)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    g = torch.Generator().manual_seed(seed + 5)
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert jattn.diffusers.counts() == {"jattn:sdpa": 1}, case
    dout = torch.randn(out.shape, generator=g)
    out.backward(dout)
    ref_in = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref_kwargs = {
        n: (a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a) for n, a in kwargs.items()
    }
    ref = SDPA(*ref_in, **ref_kwargs)
    ref.backward(dout.double())
    assert_gate(out.detach().numpy(), ref.detach().numpy(), what=case)
    for name, t, r in zip("qkv", (q, k, v), ref_in):
        m = metrics(t.grad.numpy(), r.grad.numpy())
        assert m["finite"] and m["rel_l2"] <= BWD_GATE_REL_L2, f"{case}: d{name} {m}"


@pytest.mark.parametrize("shape", [(2, 3, 5, 0), (2, 3, 0, 7), (0, 3, 5, 7)], ids=["skv0", "sq0", "batch0"])
def test_zero_size_calls_give_sdpa_answer(seed, shape):
    b, h, sq, skv = shape
    q, k, v = bhsd(seed, b=b, h=h, sq=sq, skv=skv)
    q.requires_grad_(True)
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = F.scaled_dot_product_attention(q, k, v)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(b, 1, 1, skv, dtype=torch.bool))
    want = SDPA(q, k, v)
    assert out.shape == want.shape and torch.equal(out, want) and torch.equal(masked, want)
    out.sum().backward()  # nothing raises; the gradient of nothing is zeros
    assert q.grad is None or not q.grad.any()
    assert sum(jattn.diffusers.counts().values()) == 2


def test_threads_share_the_switch(seed):
    """Process-wide: a thread's direct call is routed too, and a dispatcher fallback on one thread
    does not let another thread's SDPA calls through uncounted."""
    q, k, v = bhsd(seed)
    results = {}
    barrier = threading.Barrier(2)

    def direct():
        barrier.wait()
        results["direct"] = [F.scaled_dot_product_attention(q, k, v) for _ in range(20)]

    def fallback():
        barrier.wait()
        for _ in range(20):
            dispatch_attention_fn(*(t.transpose(1, 2) for t in (q, k, v)), dropout_p=0.5)

    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=direct), threading.Thread(target=fallback)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert jattn.diffusers.counts() == {"jattn:sdpa": 20, "fallback:dropout": 20}
    assert all(torch.equal(o, jattn.attention(q, k, v)) for o in results["direct"])


def test_a_module_calling_sdpa_compiles_fullgraph_through_the_switch(seed):
    q, k, v = bhsd(seed)
    targets = set()

    def recording_backend(gm, example_inputs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v).square().sum(-1)

    torch._dynamo.reset()
    with jattn.diffusers.enabled():
        eager = attend(q, k, v)
        compiled = torch.compile(attend, fullgraph=True, backend=recording_backend)
        jattn.diffusers.reset_counts()
        got = compiled(q, k, v)
    assert any("jattn.attention" in t for t in targets), sorted(targets)[:20]
    assert torch.equal(got, eager) and jattn.diffusers.counts() == {}
    torch._dynamo.reset()
