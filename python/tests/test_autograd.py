"""jattn.attention under autograd: torch.ops.jattn.attention's backward is jattn's own
(jattn::attention_backward, register_autograd), within the backward gate of float64 autograd on
the same float32 inputs; opcheck; a compiled training step (forward and backward in one graph);
gradients through the upcast casts; and a LoRA-style fine-tuning step of a small diffusers
FLUX.2 transformer, eager and compiled, against the same step in float64, every attention call
(forward and backward) through jattn. On CUDA (skipped without a usable GPU and jattn's cuda
backend): the gradients against float64 autograd, and the FLUX.2 step. A backward the device's
backend refuses (jattn_backward_select) raises at the forward, and jattn.diffusers falls back."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import jattn
from jattn import _options, _plan, _torch_impl
from jattn._options import Options
from jattn._problem import MaskArrays
from jattn_testing import metrics


def _cuda_backward_ready() -> str:
    """Empty when jattn's cuda backward can run here, else why not (the reason of the skip)."""
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    cuda = {b.name: b for b in jattn.backends()}["cuda"]
    if not cuda.available:
        return f"jattn's cuda backend cannot run here: {cuda.detail}"
    opts = _options.validated("bhsd", None, "auto", "f32", 0)
    why = _torch_impl.backward_refusal(torch.device("cuda", torch.cuda.current_device()), 128, opts)
    return "" if why is None else f"jattn's cuda backward refuses head_dim 128 here: {why}"


_CUDA_WHY_NOT = _cuda_backward_ready()
needs_cuda_backward = pytest.mark.skipif(bool(_CUDA_WHY_NOT), reason=_CUDA_WHY_NOT or "-")


def assert_grad_gate(got: torch.Tensor, ref: torch.Tensor, what: str) -> dict:
    """The backward gate (issue 21): rel_l2 <= 5e-6, max_abs <= 2e-5 * max(1, max|ref|), cos >= 0.99999."""
    m = metrics(got.detach().double().numpy(), ref.detach().double().numpy())
    ok = m["finite"] and m["rel_l2"] <= 5e-6 and m["max_abs"] <= 2e-5 * max(1.0, m["max_ref"]) and m["cos"] >= 0.99999
    assert ok, f"{what}: outside the backward gate: {m}"
    return m


def math_attention(q, k, v, layout="bhsd", scale=None, key_mask=None):
    """The formula, in the inputs' dtype (float64 for the reference): (out in the layout, lse [B, H, Sq])."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if key_mask is not None:
        s = s.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ v
    return (out.transpose(1, 2) if layout == "bshd" else out), lse


class CountBackward:
    """Counts jattn's backward calls (the op's implementation calls _torch_impl.backward)."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        real = _torch_impl.backward

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(_torch_impl, "backward", counted)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("shape", [(2, 3, 40, 56, 32), (1, 2, 7, 129, 64)])
def test_gradients_within_the_gate_of_float64_autograd(seed, layout, shape):
    b, h, sq, skv, d = shape
    g = torch.Generator().manual_seed(seed)

    def make(s):
        x = torch.randn(b, h, s, d, generator=g)
        return x.transpose(1, 2).contiguous() if layout == "bshd" else x

    q, k, v = make(sq), make(skv), make(skv)
    dout = make(sq)
    dlse = torch.randn(b, h, sq, generator=g)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    (jattn.attention(*leaves, layout=layout) * dout).sum().backward()
    got = [t.grad for t in leaves]
    both = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = jattn.attention(*both, layout=layout, return_lse=True)
    ((out * dout).sum() + (lse * dlse).sum()).backward()  # the lse's own gradient (dlse) too

    ref_leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref_out, ref_lse = math_attention(*ref_leaves, layout=layout)
    ref = torch.autograd.grad((ref_out * dout.double()).sum(), ref_leaves, retain_graph=True)
    ref_both = torch.autograd.grad((ref_out * dout.double()).sum() + (ref_lse * dlse.double()).sum(), ref_leaves)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref):
        assert_grad_gate(a, r, f"{name} {layout} {shape}")
    for name, a, r in zip(("dq", "dk", "dv"), (t.grad for t in both), ref_both):
        assert_grad_gate(a, r, f"{name} with dlse, {layout} {shape}")


def test_key_padding_gradients(seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, n, 32, generator=g) for n in (20, 33, 33))
    mask = torch.rand(2, 33, generator=g) < 0.6
    mask[:, 0] = True
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    dout = torch.randn(2, 2, 20, 32, generator=g)
    (jattn.attention(*leaves, key_padding_mask=mask) * dout).sum().backward()
    ref_leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = torch.autograd.grad((math_attention(*ref_leaves, key_mask=mask)[0] * dout.double()).sum(), ref_leaves)
    for name, a, r in zip(("dq", "dk", "dv"), (t.grad for t in leaves), ref):
        assert_grad_gate(a, r, f"{name} with key padding")
    masked = ~mask[:, None, :, None].expand_as(k)
    assert (leaves[1].grad[masked] == 0).all() and (leaves[2].grad[masked] == 0).all()


def test_lse_is_produced_for_the_backward_and_handed_out_only_if_asked(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, 9, 16, generator=g, requires_grad=True)
    out = jattn.attention(q, q, q)
    assert isinstance(out, torch.Tensor)  # not a pair
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_the_lse_alone_gets_its_gradient(seed):
    """Eager calls run EagerAttentionLse when the lse is asked for: a loss of the lse alone (no
    gradient for out) goes through jattn's backward with dout = 0."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 11, 16, generator=g, requires_grad=True) for _ in range(3))
    out, lse = jattn.attention(q, k, v, return_lse=True)
    (lse * 0.5).sum().backward()
    ref = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    (math_attention(*ref)[1] * 0.5).sum().backward()
    for name, a, r in zip("qkv", (q, k, v), ref):
        if name == "v":  # the lse does not depend on v
            assert a.grad is None or not a.grad.any()
            continue
        assert_grad_gate(a.grad, r.grad, f"d{name} of the lse")


def test_second_derivatives_are_refused_not_wrong(seed):
    """jattn's gradients are not differentiable again: create_graph=True gives the gradients, and
    differentiating them raises (once_differentiable) instead of returning zeros."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, 9, 16, generator=g, requires_grad=True)
    (dq,) = torch.autograd.grad(jattn.attention(q, q, q).square().sum(), q, create_graph=True)
    q64 = q.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(math_attention(q64, q64, q64)[0].square().sum(), q64)
    assert_grad_gate(dq.detach(), ref, "dq under create_graph=True")
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dq.sum().backward()


def test_opcheck(seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, n, 3, 16, generator=g, requires_grad=True) for n in (12, 20, 20))
    torch.library.opcheck(
        torch.ops.jattn.attention.default, (q, k, v, *Options("bshd", 0.3, threads=1, return_lse=True), *MaskArrays())
    )
    with torch.no_grad():
        out, lse = torch.ops.jattn.attention(q, k, v, *Options("bshd", threads=1, return_lse=True), *MaskArrays())
    dout = torch.randn(out.shape, generator=g)
    torch.library.opcheck(torch.ops.jattn.attention_backward.default,
                          (dout, q.detach(), k.detach(), v.detach(), out, lse, None, *Options("bshd", threads=1),
                           *MaskArrays()))  # fmt: skip


def test_compiled_training_step_is_one_graph_with_the_backward_op(seed, monkeypatch):
    counter = CountBackward(monkeypatch)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 24, 32, generator=g)
    proj = torch.nn.Linear(32, 3 * 32)

    def step(x):
        q, k, v = proj(x).view(2, 24, 3, 2, 16).unbind(2)
        return jattn.attention(q, k, v, layout="bshd").square().mean()

    torch._dynamo.reset()
    eager_loss = step(x)
    eager_grads = torch.autograd.grad(eager_loss, list(proj.parameters()))
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss = compiled(x)
    grads = torch.autograd.grad(loss, list(proj.parameters()))
    assert counter.calls == 2  # the eager step and the compiled one: jattn's backward both times
    assert torch.equal(loss, eager_loss)
    for a, b in zip(grads, eager_grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gradients_through_the_upcast_casts(seed, dtype):
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 16, 2, 32, generator=g).to(dtype).requires_grad_(True) for _ in range(3))
    jattn.diffusers.reset_counts()
    with jattn.diffusers.enabled(upcast=True), warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dispatch_attention_fn(q, k, v)
    out.float().sum().backward()
    assert out.dtype is dtype and jattn.diffusers.counts() == {"jattn": 1}
    f32 = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    jattn.attention(*f32, layout="bshd").sum().backward()
    for a, r in zip((q, k, v), f32):
        assert a.grad.dtype is dtype and torch.equal(a.grad, r.grad.to(dtype))
    jattn.diffusers.reset_counts()


@needs_cuda_backward
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(
    "shape",
    [(2, 3, 40, 56, 32), (1, 2, 77, 129, 64), (1, 2, 130, 200, 128), (1, 2, 33, 70, 80), (1, 2, 70, 90, 72),
     (1, 2, 65, 50, 96), (1, 1, 40, 70, 256)],
)  # fmt: skip
def test_cuda_gradients_within_the_gate_of_float64_autograd(seed, layout, shape):
    b, h, sq, skv, d = shape
    g = torch.Generator().manual_seed(seed)

    def make(s, scale=1.0):
        x = torch.randn(b, h, s, d, generator=g) * scale
        return x.transpose(1, 2).contiguous() if layout == "bshd" else x

    q, k, v = make(sq, 2.0), make(skv, 2.0), make(skv)  # scaled: a peakier softmax than randn's
    dout = make(sq)
    dlse = torch.randn(b, h, sq, generator=g)
    leaves = [t.cuda().requires_grad_(True) for t in (q, k, v)]
    out, lse = jattn.attention(*leaves, layout=layout, return_lse=True)
    ((out * dout.cuda()).sum() + (lse * dlse.cuda()).sum()).backward()
    ref_leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref_out, ref_lse = math_attention(*ref_leaves, layout=layout)
    ref = torch.autograd.grad((ref_out * dout.double()).sum() + (ref_lse * dlse.double()).sum(), ref_leaves)
    for name, a, r in zip(("dq", "dk", "dv"), (t.grad.cpu() for t in leaves), ref):
        assert_grad_gate(a, r, f"cuda {name} {layout} {shape}")


@needs_cuda_backward
def test_cuda_key_padding_gradients(seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, n, 64, generator=g) for n in (50, 90, 90))
    mask = torch.rand(2, 90, generator=g) < 0.6
    mask[:, 0] = True
    dout = torch.randn(2, 2, 50, 64, generator=g)
    leaves = [t.cuda().requires_grad_(True) for t in (q, k, v)]
    (jattn.attention(*leaves, key_padding_mask=mask.cuda()) * dout.cuda()).sum().backward()
    ref_leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = torch.autograd.grad((math_attention(*ref_leaves, key_mask=mask)[0] * dout.double()).sum(), ref_leaves)
    for name, a, r in zip(("dq", "dk", "dv"), (t.grad.cpu() for t in leaves), ref):
        assert_grad_gate(a, r, f"cuda {name} with key padding")


@needs_cuda_backward
def test_cuda_head_dim_the_backward_refuses_raises_at_the_forward(seed):
    device = torch.device("cuda", torch.cuda.current_device())
    opts = _options.validated("bhsd", None, "auto", "f32", 0)
    if _torch_impl.backward_refusal(device, 320, opts) is None:
        pytest.skip("jattn's cuda backward runs head_dim 320 here")
    q = torch.randn(1, 2, 16, 320, device=device, requires_grad=True)
    with pytest.raises(jattn.JattnNotImplementedError, match="backward"):
        jattn.attention(q, q, q)
    with torch.no_grad():
        assert jattn.attention(q, q, q).shape == q.shape  # the forward alone still runs (or raises its own)


@pytest.fixture
def refused_backward(monkeypatch):
    """Makes the cached backward answer for CPU float32 head_dim 32 (no mask) a refusal, as a GPU
    below the cuda kernels' sm gives (the cache is what every call consults)."""
    reason = "JATTN_ERROR_UNSUPPORTED: a refusal injected by the test"
    _plan.clear()  # (eager calls ask once per plan: a device whose backward refuses has made none yet)
    cache = dict(_torch_impl._BACKWARD_REFUSALS)
    for layout in ("bhsd", "bshd"):
        cache[("cpu", -1, 32, "auto", "f32", layout, False, "top_left", ())] = reason
    monkeypatch.setattr(_torch_impl, "_BACKWARD_REFUSALS", cache)
    return reason


def test_a_refused_backward_raises_at_the_forward_not_at_backward(seed, refused_backward):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, 9, 32, generator=g, requires_grad=True)
    with pytest.raises(jattn.JattnNotImplementedError, match="injected by the test"):
        jattn.attention(q, q, q)
    with torch.no_grad():
        jattn.attention(q, q, q)  # no gradient wanted: served
    q64 = torch.randn(1, 2, 9, 64, generator=g, requires_grad=True)
    jattn.attention(q64, q64, q64).sum().backward()  # another head_dim: its own (accepting) answer


def test_diffusers_falls_back_when_the_backward_is_refused(seed, refused_backward):
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 16, 2, 32, generator=g).requires_grad_(True) for _ in range(3))
    jattn.diffusers.reset_counts()
    with jattn.diffusers.enabled(), pytest.warns(UserWarning, match="injected by the test"):
        out = dispatch_attention_fn(q, k, v)
    out.sum().backward()
    assert jattn.diffusers.counts() == {"fallback:backward": 1}
    with jattn.diffusers.enabled(), torch.no_grad():
        dispatch_attention_fn(q, k, v)
    assert jattn.diffusers.counts() == {"fallback:backward": 1, "jattn": 1}  # inference still on jattn
    jattn.diffusers.reset_counts()


def test_diffusers_fallback_for_a_refused_backward_compiles_in_one_graph(seed, refused_backward):
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 16, 2, 32, generator=g).requires_grad_(True) for _ in range(3))
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: dispatch_attention_fn(q, k, v).square().sum(), fullgraph=True,
                             backend="aot_eager")  # fmt: skip
    jattn.diffusers.reset_counts()
    with jattn.diffusers.enabled(), pytest.warns(UserWarning, match="injected by the test"):
        loss = compiled(q, k, v)
    loss.backward()
    ref = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in ref)).square().sum().backward()
    for a, r in zip((q, k, v), ref):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-5, atol=1e-6)
    jattn.diffusers.reset_counts()


# ---- a LoRA-style fine-tuning step of a small FLUX.2 transformer -----------------------------


class LoRALinear(torch.nn.Module):
    """base(x) + up(down(x)), the base frozen, a rank-r update trainable."""

    def __init__(self, base: torch.nn.Linear, rank: int, generator: torch.Generator) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.down = torch.nn.Parameter(torch.randn(rank, base.in_features, generator=generator) * 0.05)
        self.up = torch.nn.Parameter(torch.randn(base.out_features, rank, generator=generator) * 0.05)

    def forward(self, x):
        return self.base(x) + (x @ self.down.t().to(x.dtype)) @ self.up.t().to(x.dtype)


def lora_flux2(seed):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(num_layers=1, num_single_layers=1, num_attention_heads=2, attention_head_dim=64,
                                    in_channels=64, joint_attention_dim=256, timestep_guidance_channels=32,
                                    axes_dims_rope=(16, 16, 16, 16)).requires_grad_(False)  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    attn = model.transformer_blocks[0].attn
    for name in ("to_q", "to_k", "to_v"):
        setattr(attn, name, LoRALinear(getattr(attn, name), 4, g))
    return model


def lora_grads(model, inputs, target):
    loss = torch.nn.functional.mse_loss(model(**inputs)[0], target)
    params = [p for p in model.parameters() if p.requires_grad]
    return loss, torch.autograd.grad(loss, params)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda_backward)])
@pytest.mark.parametrize("compiled", [False, True])
def test_lora_step_of_a_flux2_transformer_through_jattn(seed, monkeypatch, compiled, device):
    from flux2_testing import flux2_inputs

    counter = CountBackward(monkeypatch)
    model = lora_flux2(seed).to(device)
    inputs = flux2_inputs(seed, 64, 16, device=device)
    target = torch.randn(1, 64, 64, generator=torch.Generator().manual_seed(seed + 2)).to(device)
    runner = model
    if compiled:
        torch._dynamo.reset()
        runner = torch.compile(model, fullgraph=True, backend="aot_eager")
    jattn.diffusers.reset_counts()
    with jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        loss, grads = lora_grads(runner, inputs, target)
    if not compiled:
        assert jattn.diffusers.counts() == {"jattn": 2}  # the double and the single block
    assert counter.calls == 2  # and both backwards through jattn
    sdpa_loss, sdpa_grads = lora_grads(model, inputs, target)  # float32 with diffusers' SDPA, for scale
    model.double()
    inputs64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
    ref_loss, ref_grads = lora_grads(model, inputs64, target.double())
    assert len(grads) == 6
    for i, (a, r, s) in enumerate(zip(grads, ref_grads, sdpa_grads)):
        a, r, s = a.cpu(), r.cpu(), s.cpu()
        m = assert_grad_gate(a, r, f"LoRA gradient {i} ({'compiled' if compiled else 'eager'}, {device})")
        ms = metrics(s.double().numpy(), r.numpy())
        print(f"LoRA grad {i}: jattn rel_l2 {m['rel_l2']:.2e}, SDPA f32 rel_l2 {ms['rel_l2']:.2e}")
    assert abs(float(loss.detach()) - float(ref_loss.detach())) <= 1e-5 * abs(float(ref_loss.detach())) + 1e-7
    assert np.isfinite(float(sdpa_loss.detach()))
