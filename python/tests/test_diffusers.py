"""jattn.diffusers: the switch patches and restores exactly one registry entry, routes
dispatch_attention_fn through jattn (counted), maps boolean key masks to key padding and causal and
grouped-query calls to jattn's keywords, sends every call it cannot serve to diffusers' own path
with one warning per kind, and a small random-weight FLUX.2 transformer forward through jattn is as
close to float64 as SDPA's. (test_diffusers_sdpa: direct SDPA calls; test_diffusers_masks: the
masks; test_diffusers_models: every model class.)"""

from __future__ import annotations

import warnings

import pytest
import torch

import jattn
from jattn_testing import assert_gate, reference

pytest.importorskip("diffusers")
from diffusers.models.attention_dispatch import _AttentionBackendRegistry, dispatch_attention_fn  # noqa: E402

from flux2_testing import flux2_accuracy, flux2_inputs, small_flux2  # noqa: E402


@pytest.fixture(autouse=True)
def switch_off():
    """Every test starts and ends with the switch off and the counts at zero."""
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()
    yield
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()


def bshd(seed, b=2, s=48, h=3, d=32, skv=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    skv = s if skv is None else skv
    return (torch.randn(b, s, h, d, generator=g).to(dtype), torch.randn(b, skv, h, d, generator=g).to(dtype),
            torch.randn(b, skv, h, d, generator=g).to(dtype))  # fmt: skip


def active_entry():
    return _AttentionBackendRegistry._backends[_AttentionBackendRegistry._active_backend]


def test_enable_disable_patch_one_entry_and_restore_it():
    before = dict(_AttentionBackendRegistry._backends)
    active = _AttentionBackendRegistry._active_backend
    jattn.diffusers.enable()
    assert jattn.diffusers.is_enabled()
    changed = [name for name, fn in _AttentionBackendRegistry._backends.items() if before.get(name) is not fn]
    assert changed == [active] and _AttentionBackendRegistry._active_backend == active
    assert active_entry().jattn_original is before[active]
    jattn.diffusers.enable(upcast=True)  # enabling again changes options only
    assert active_entry().jattn_original is before[active]
    jattn.diffusers.disable()
    assert _AttentionBackendRegistry._backends == before and not jattn.diffusers.is_enabled()


def test_enabled_context_restores_the_previous_state(seed):
    q, k, v = bshd(seed)
    original = active_entry()
    with jattn.diffusers.enabled():
        with jattn.diffusers.enabled(upcast=True):
            assert jattn.diffusers._options["upcast"]
        assert jattn.diffusers.is_enabled() and not jattn.diffusers._options["upcast"]
        dispatch_attention_fn(q, k, v)
    assert active_entry() is original and not jattn.diffusers.is_enabled()
    with pytest.raises(KeyError):
        with jattn.diffusers.enabled():
            raise KeyError("inside")
    assert active_entry() is original


def test_dispatch_goes_through_jattn(seed):
    q, k, v = bshd(seed, skv=61)
    sdpa = dispatch_attention_fn(q, k, v)
    with jattn.diffusers.enabled():
        out = dispatch_attention_fn(q, k, v)
        scaled = dispatch_attention_fn(q, k, v, scale=0.2)
    assert jattn.diffusers.counts() == {"jattn": 2}
    assert torch.equal(out, jattn.attention(q, k, v, layout="bshd"))  # the same call, the same bits
    assert torch.equal(scaled, jattn.attention(q, k, v, layout="bshd", scale=0.2))
    ref, _ = reference(q.numpy(), k.numpy(), v.numpy(), "bshd")
    assert_gate(out.numpy(), ref, what="routed")
    assert_gate(sdpa.numpy(), ref, what="diffusers' sdpa")


def unstructured_mask(q, k):
    """A boolean mask of no structure jattn describes (rows 0 and 1 attend complementary keys)."""
    g = torch.Generator().manual_seed(3)
    m = torch.rand(q.shape[0], 1, q.shape[1], k.shape[1], generator=g) < 0.5
    m[..., 0] = True
    m[..., 0, 1:] = ~m[..., 1, 1:]
    return m


FALLBACKS = {
    "attn_mask": lambda q, k, v: dict(attn_mask=unstructured_mask(q, k)),
    "dropout": lambda q, k, v: dict(dropout_p=0.5),
}


@pytest.mark.parametrize("kind", sorted(FALLBACKS))
def test_calls_jattn_cannot_serve_fall_back_with_one_warning(seed, kind):
    q, k, v = bshd(seed)
    kwargs = FALLBACKS[kind](q, k, v)
    with jattn.diffusers.enabled():
        with pytest.warns(UserWarning, match="diffusers' own attention"):
            torch.manual_seed(0)
            got = dispatch_attention_fn(q, k, v, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the second call of the kind: no warning
            dispatch_attention_fn(q, k, v, **kwargs)
    torch.manual_seed(0)
    want = dispatch_attention_fn(q, k, v, **kwargs)
    assert torch.equal(got, want)  # the original function, the same arguments
    assert jattn.diffusers.counts() == {f"fallback:{kind}": 2}


def test_grouped_query_and_causal_attention_are_served(seed):
    """enable_gqa (k/v heads dividing the query heads) and is_causal map onto jattn's keywords."""
    q, _, _ = bshd(seed, h=4)
    _, k, v = bshd(seed + 1, h=2)
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = dispatch_attention_fn(q, k, v, enable_gqa=True)
        causal = dispatch_attention_fn(q, k, v, enable_gqa=True, is_causal=True)
    assert torch.equal(got, jattn.attention(q, k, v, layout="bshd", enable_gqa=True))
    assert torch.equal(causal, jattn.attention(q, k, v, layout="bshd", enable_gqa=True, is_causal=True))
    assert jattn.diffusers.counts() == {"jattn": 2}
    ref = dispatch_attention_fn(q.double(), k.double(), v.double(), enable_gqa=True, is_causal=True)
    assert_gate(causal.numpy(), ref.numpy(), what="causal grouped-query call")


def test_tensors_that_require_grad(seed):
    """Served by jattn (its backward)."""
    q, k, v = bshd(seed)
    q.requires_grad_(True)
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dispatch_attention_fn(q, k, v)
    out.sum().backward()
    assert q.grad is not None and jattn.diffusers.counts() == {"jattn": 1}


def test_float64_and_bf16_fall_back_without_upcast(seed):
    with jattn.diffusers.enabled():
        for dtype in (torch.float64, torch.bfloat16):
            q, k, v = bshd(seed, dtype=dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = dispatch_attention_fn(q, k, v)
            assert got.dtype == dtype
    assert jattn.diffusers.counts() == {"fallback:dtype": 2}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_upcast_runs_half_precision_through_jattn_in_float32(seed, dtype):
    q, k, v = bshd(seed, dtype=dtype)
    with jattn.diffusers.enabled(upcast=True):
        out = dispatch_attention_fn(q, k, v)
    assert out.dtype == dtype and jattn.diffusers.counts() == {"jattn": 1}
    assert torch.equal(out, jattn.attention(q.float(), k.float(), v.float(), layout="bshd").to(dtype))


def key_mask_forms(mask: torch.Tensor, h: int, sq: int):
    """A [B, Skv] boolean key mask in the forms diffusers passes it."""
    b, skv = mask.shape
    return {
        "[B,Skv]": mask,
        "[B,1,1,Skv]": mask[:, None, None, :],
        "[B,1,Sq,Skv] broadcast": mask[:, None, None, :].expand(b, 1, sq, skv),
        "[B,H,Sq,Skv] broadcast": mask[:, None, None, :].expand(b, h, sq, skv),
    }


def test_boolean_key_masks_become_key_padding(seed):
    q, k, v = bshd(seed, b=3, s=20, skv=33)
    g = torch.Generator().manual_seed(seed + 7)
    mask = torch.rand(3, 33, generator=g) < 0.6
    mask[:, 0] = True
    ref, _ = reference(q.numpy(), k.numpy(), v.numpy(), "bshd", key_mask=mask.numpy())
    with jattn.diffusers.enabled(backend="ref"):  # the ref backend implements key padding
        for form, m in key_mask_forms(mask, 3, 20).items():
            out = dispatch_attention_fn(q, k, v, attn_mask=m)
            assert_gate(out.numpy(), ref, what=form)
    assert jattn.diffusers.counts() == {"jattn": 4}
    sdpa = dispatch_attention_fn(q, k, v, attn_mask=mask[:, None, None, :])
    assert_gate(sdpa.numpy(), ref, what="diffusers' sdpa with the same mask")


def test_per_query_boolean_masks_fall_back(seed):
    q, k, v = bshd(seed, b=2, s=20, skv=33)
    g = torch.Generator().manual_seed(seed + 7)
    per_query = torch.rand(2, 1, 20, 33, generator=g) < 0.6  # really differs per query
    per_query[..., 0] = True
    per_query[..., 0, 1:] = ~per_query[..., 1, 1:]  # no structure jattn describes
    with jattn.diffusers.enabled(backend="ref"), pytest.warns(UserWarning, match="do not describe"):
        got = dispatch_attention_fn(q, k, v, attn_mask=per_query)
    assert torch.equal(got, dispatch_attention_fn(q, k, v, attn_mask=per_query))
    assert jattn.diffusers.counts() == {"fallback:attn_mask": 1}


def test_key_masks_on_the_cpu_backend(seed):
    """Boolean key masks go through jattn's key padding (every backend serves it)."""
    q, k, v = bshd(seed, b=2, s=20, skv=33)
    mask = torch.ones(2, 33, dtype=torch.bool)
    mask[1, 20:] = False
    ref, _ = reference(q.numpy(), k.numpy(), v.numpy(), "bshd", key_mask=mask.numpy())
    with jattn.diffusers.enabled(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = dispatch_attention_fn(q, k, v, attn_mask=mask)
        dispatch_attention_fn(q, k, v, attn_mask=mask)
    assert_gate(out.numpy(), ref, what="masked call on cpu")
    assert jattn.diffusers.counts() == {"jattn": 2} and not caught


def test_a_diffusers_model_compiles_fullgraph_through_the_switch(seed):
    """torch.compile(fullgraph=True) traces the router: one graph with jattn's op in it, the
    eager result; counts() counts the eager calls only (none inside the compiled code)."""
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(num_layers=1, num_single_layers=1, num_attention_heads=2, attention_head_dim=64,
                                    in_channels=64, joint_attention_dim=256, timestep_guidance_channels=32,
                                    axes_dims_rope=(16, 16, 16, 16)).eval()  # fmt: skip
    inputs = flux2_inputs(seed, 64, 16)
    targets = set()

    def recording_backend(gm, example_inputs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad(), jattn.diffusers.enabled():
        eager = model(**inputs)[0]
        compiled = torch.compile(model, fullgraph=True, backend=recording_backend)
        jattn.diffusers.reset_counts()
        first = compiled(**inputs)[0]
        second = compiled(**inputs)[0]
    assert any("jattn.attention" in t for t in targets), sorted(targets)[:20]
    assert torch.equal(first, eager) and torch.equal(second, eager)
    assert jattn.diffusers.counts() == {}


# ---- a small random-weight FLUX.2 transformer ----------------------------------------------


def test_flux2_transformer_through_jattn_is_as_close_to_float64_as_sdpa(seed):
    result = flux2_accuracy(small_flux2(seed), flux2_inputs(seed, 256, 64))
    print("FLUX.2 CPU, 256+64 tokens:", {k: v for k, v in result.items() if not isinstance(v, tuple)})
    assert result["jattn_calls"] == 2  # the double and the single block went through jattn
    # Both float32 forwards within the f32 gate of the float64 one; their distance to it (about
    # 3e-7) is mostly the float32 rounding of the linear layers, common to both.
    assert_gate(*result["float32_jattn"], what="FLUX.2 forward through jattn")
    assert_gate(*result["float32_sdpa"], what="FLUX.2 forward through SDPA")
    # The same float64 model with only its attention in float32: jattn's forward at least as
    # close to the float64 forward as SDPA's.
    assert result["attention_only_jattn"] <= result["attention_only_sdpa"], result
