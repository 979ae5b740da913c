"""PyTorch's attention variants through jattn.attention: grouped-query and multi-query heads,
causal (top-left and bottom-right), block-causal blocks, a key bias, packed sequences
(cu_seqlens) and their combinations with key padding; attention_varlen; zero-size calls. Each
against the float64 evaluation of what the keywords mean (mask_testing.reference; itself checked
against PyTorch's SDPA in float64) with the gates of docs/DESIGN.md section 2: the forward, the
gradients (against float64 autograd), torch.compile(fullgraph=True) forward and backward, opcheck
on the ops, numpy. CPU tensors run on whichever backend AUTO finds able (the reference today, the
cpu backend once it serves masks); the CUDA tests run on the GPU machine."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mask_testing import Case, allowed, draw, reference

import jattn
from jattn import _plan
from jattn._options import Options
from jattn._problem import MaskArrays
from jattn_testing import assert_gate, metrics

torch._dynamo.config.cache_size_limit = 64

CASES = {
    "gqa": Case(heads=4, kv_heads=2),
    "mqa": Case(heads=4, kv_heads=1),
    "causal_top_left": Case(causal="top_left"),
    "causal_top_left_more_queries": Case(seq_q=19, seq_kv=13, causal="top_left"),
    "causal_bottom_right": Case(causal="bottom_right"),
    "causal_bottom_right_more_queries": Case(seq_q=19, seq_kv=13, causal="bottom_right"),  # rows with no key
    "causal_self": Case(seq_q=17, seq_kv=17, causal="top_left"),
    "blocks_self": Case(seq_q=17, seq_kv=17, blocks=((0, 5, 6, 12, 17), None)),
    "blocks_pair": Case(blocks=((0, 4, 9, 13), (0, 7, 7, 19))),
    "blocks_causal_gqa": Case(seq_q=17, seq_kv=17, kv_heads=2, blocks=((0, 8, 17), None), causal="top_left"),
    "bias_keys": Case(bias_shape=(19,)),
    "bias_batch": Case(bias_shape=(2, 19)),
    "bias_batch_1": Case(bias_shape=(2, 1, 19)),
    "bias_batch_heads": Case(bias_shape=(2, 4, 19)),
    "bias_diffusers": Case(bias_shape=(2, 1, 1, 19)),
    "bias_heads_broadcast_batch": Case(bias_shape=(1, 4, 1, 19)),
    "segments": Case(segments=((0, 3, 3, 10, 13), (0, 5, 9, 15, 19))),
    "segments_per_batch": Case(segments=(((0, 6, 11), (0, 2, 13)), ((0, 10, 19), (0, 12, 14)))),
    "segments_causal": Case(segments=((0, 3, 3, 10, 13), (0, 5, 9, 15, 19)), causal="bottom_right"),
    "padding": Case(key_mask=True, kv_len=(15, 19)),
    "everything": Case(
        kv_heads=2,
        key_mask=True,
        kv_len=(17, 19),
        causal="bottom_right",
        bias_shape=(2, 4, 19),
        segments=((0, 6, 13), (0, 9, 19)),
        blocks=((0, 7, 13), (0, 10, 19)),
    ),  # fmt: skip
}
GRADIENT_CASES = ["gqa", "mqa", "causal_top_left", "causal_bottom_right_more_queries", "blocks_pair", "bias_diffusers",
                  "segments_per_batch", "segments_causal", "everything"]  # fmt: skip


def assert_grad_gate(got: torch.Tensor, ref: torch.Tensor, what: str) -> dict:
    """The backward gate: rel_l2 <= 5e-6, max_abs <= 2e-5 * max(1, max|ref|), cos >= 0.99999."""
    m = metrics(got.detach().double().cpu().numpy(), ref.detach().double().cpu().numpy())
    ok = m["finite"] and m["rel_l2"] <= 5e-6 and m["max_abs"] <= 2e-5 * max(1.0, m["max_ref"]) and m["cos"] >= 0.99999
    assert ok, f"{what}: outside the backward gate: {m}"
    return m


def check_forward(case: Case, q, k, v, kw, layout: str, what: str, **options):
    out, lse = jattn.attention(q, k, v, layout=layout, return_lse=True, **kw, **options)
    ref, ref_lse = reference(q, k, v, case, kw, layout, options.get("scale"))
    assert out.shape == q.shape and lse.shape == (case.batch, case.heads, case.seq_q)
    assert_gate(np.asarray(out.cpu() if isinstance(out, torch.Tensor) else out), ref.numpy(), what=what)
    lse = np.asarray(lse.cpu() if isinstance(lse, torch.Tensor) else lse)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse.numpy())), f"{what}: rows with no key"
    assert_gate(lse, ref_lse.numpy(), what=what + " lse")


@pytest.mark.parametrize("dist", ["uniform", "normal", "peaky"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_float64(rng, name, layout, dist):
    case = CASES[name]
    q, k, v, kw = draw(case, rng, layout, dist)
    check_forward(case, q, k, v, kw, layout, f"{name} {layout} {dist}")


_VK = {b.name: b for b in jattn.backends()}["vk"]


@pytest.mark.skipif(not _VK.available, reason=f"vk cannot run here: {_VK.detail}")
@pytest.mark.parametrize("name", sorted(CASES))
def test_vk_forward_matches_float64(rng, name):
    """backend="vk" (any Vulkan GPU, host tensors): the forward of every case, where it serves it."""
    case = CASES[name]
    q, k, v, kw = draw(case, rng, "bshd")
    try:
        check_forward(case, q, k, v, kw, "bshd", f"vk {name}", backend="vk")
    except jattn.JattnNotImplementedError as e:
        pytest.skip(f"vk refuses it here: {e.message}")


@pytest.mark.parametrize("name", ["gqa", "causal_bottom_right", "blocks_pair", "bias_batch_heads", "segments",
                                  "everything"])  # fmt: skip
def test_numpy_forward_matches_float64(rng, name):
    case = CASES[name]
    q, k, v, kw = draw(case, rng, "bshd")
    kw_np = {key: (tuple(t.numpy() for t in val) if isinstance(val, tuple) else
                   val.numpy() if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}  # fmt: skip
    check_forward(case, q.numpy(), k.numpy(), v.numpy(), kw_np, "bshd", f"numpy {name}", scale=0.3)
    out_t = jattn.attention(q, k, v, layout="bshd", scale=0.3, **kw)
    out_n = jattn.attention(q.numpy(), k.numpy(), v.numpy(), layout="bshd", scale=0.3, **kw_np)
    assert np.array_equal(out_t.numpy(), out_n), "torch and numpy differ"


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_float64_autograd(rng, name, layout):
    case = CASES[name]
    q, k, v, kw = draw(case, rng, layout, "normal")
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    refs = [t.double().requires_grad_(True) for t in (q, k, v)]
    out, lse = jattn.attention(*leaves, layout=layout, return_lse=True, **kw)
    ref_out, ref_lse = reference(*refs, case, kw, layout)
    dout = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    dlse = torch.randn(lse.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    finite = torch.isfinite(ref_lse)

    def loss(o, s):  # the lse of rows that attend a key enters the loss too (the backward's dlse)
        return (o.double() * dout).sum() + (torch.where(finite, s.double(), torch.zeros_like(dlse)) * dlse).sum()

    loss(out, lse).backward()
    loss(ref_out, ref_lse).backward()
    for name_, a, r in zip("qkv", leaves, refs):
        assert a.grad.shape == r.shape
        assert_grad_gate(a.grad, r.grad, f"{name} {layout} d{name_}")


def test_reference_is_pytorchs_sdpa_in_float64(rng):
    """mask_testing.reference agrees with SDPA in float64 where SDPA states the same thing."""
    from torch.nn.attention.bias import causal_lower_right

    def sdpa_check(case, kw, **sdpa):
        q, k, v, _ = draw(case, rng)
        ref, _ = reference(q, k, v, case, kw)
        got = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **sdpa)
        assert metrics(ref.numpy(), got.numpy())["rel_l2"] < 1e-12

    case = Case(causal="top_left")
    sdpa_check(case, {"is_causal": True}, is_causal=True)
    case = Case(causal="bottom_right")
    sdpa_check(case, {}, attn_mask=causal_lower_right(case.seq_q, case.seq_kv))
    case = Case(heads=4, kv_heads=1)
    sdpa_check(case, {}, enable_gqa=True)
    bias = torch.randn(2, 4, 19, dtype=torch.float64)
    sdpa_check(Case(bias_shape=(2, 4, 19)), {"key_bias": bias}, attn_mask=bias[:, :, None, :])
    kmask = torch.rand(2, 19) < 0.6
    kmask[:, 0] = True
    sdpa_check(Case(key_mask=True), {"key_padding_mask": kmask}, attn_mask=kmask[:, None, None, :])


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")
def test_causal_is_pytorchs_and_flashattentions(rng):
    """is_causal=True is SDPA's is_causal (top-left), causal_alignment='bottom_right' its
    causal_lower_right: the same float32 call, jattn against SDPA in float64."""
    from torch.nn.attention.bias import causal_lower_right

    for sq, skv in ((13, 19), (19, 13), (16, 16)):
        case = Case(seq_q=sq, seq_kv=skv)
        q, k, v, _ = draw(case, rng)
        d = [t.double() for t in (q, k, v)]
        got = jattn.attention(q, k, v, is_causal=True)
        want = F.scaled_dot_product_attention(*d, is_causal=True)
        assert_gate(got.numpy(), want.numpy(), what=f"top-left {sq}x{skv}")
        got = jattn.attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
        want = F.scaled_dot_product_attention(*d, attn_mask=causal_lower_right(sq, skv))
        want = torch.nan_to_num(want)  # SDPA's rows with no key; jattn's are 0 (checked by the reference)
        assert_gate(got.numpy(), want.numpy(), what=f"bottom-right {sq}x{skv}")


def test_gqa_is_pytorchs_enable_gqa(rng):
    case = Case(heads=6, kv_heads=2)
    q, k, v, _ = draw(case, rng)
    got = jattn.attention(q, k, v, enable_gqa=True)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
    assert_gate(got.numpy(), want.numpy(), what="gqa")
    with pytest.raises(ValueError, match="enable_gqa=True"):
        jattn.attention(q, k, v)
    k4 = torch.randn(2, 4, 19, 16)
    with pytest.raises(ValueError, match="must divide"):
        jattn.attention(q, k4, k4, enable_gqa=True)
    with pytest.raises(ValueError, match="v: heads 1 does not match k's 2"):
        jattn.attention(q, k, v[:, :1], enable_gqa=True)


# ---- zero-size calls: PyTorch's answers ---------------------------------------------------------------
ZERO_SHAPES = [
    ((0, 2, 4, 8), (0, 2, 5, 8)),
    ((1, 0, 4, 8), (1, 0, 5, 8)),
    ((1, 2, 0, 8), (1, 2, 5, 8)),
    ((1, 2, 4, 8), (1, 2, 0, 8)),
    ((2, 4, 4, 8), (2, 2, 0, 8)),  # grouped-query, no key
    ((0, 4, 0, 8), (0, 1, 0, 8)),
]


def sdpa_math(q, k, v, causal, gqa):
    """SDPA's math for a zero-size call (softmax(q k^T / sqrt(D)) v, k/v heads repeated for their groups as
    ``enable_gqa`` does): PyTorch 2.11's SDPA raises SIGFPE on some (batch 0 with seq 0), later versions
    answer as this does."""
    if gqa:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shapes", ZERO_SHAPES, ids=lambda s: "x".join(map(str, s[0])) + "_" + "x".join(map(str, s[1])))
def test_zero_size_calls_answer_as_sdpa(shapes, causal):
    qs, ks = shapes
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(qs, generator=g), torch.randn(ks, generator=g), torch.randn(ks, generator=g)
    gqa = qs[1] != ks[1]
    want = sdpa_math(q, k, v, causal, gqa)
    got, lse = jattn.attention(q, k, v, is_causal=causal, enable_gqa=gqa, return_lse=True)
    assert got.shape == want.shape and torch.equal(got, want)
    assert lse.shape == qs[:3] and (lse.numel() == 0 or bool(torch.isneginf(lse).all()))
    npq = jattn.attention(q.numpy(), k.numpy(), v.numpy(), is_causal=causal, enable_gqa=gqa)
    assert np.array_equal(npq, want.numpy())
    # the gradients: SDPA's (zeros of each input's shape)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    refs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    jattn.attention(*leaves, is_causal=causal, enable_gqa=gqa).sum().backward()
    sdpa_math(*refs, causal, gqa).sum().backward()
    for a, r in zip(leaves, refs):
        assert a.grad.shape == r.grad.shape and torch.equal(a.grad, r.grad)
    # compiled: the fake kernels give the same shapes
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: jattn.attention(q, k, v, is_causal=causal, enable_gqa=gqa) * 2.0,
                             fullgraph=True, backend="aot_eager")  # fmt: skip
    assert torch.equal(compiled(q, k, v), want * 2.0)


def test_zero_size_with_masks(rng):
    g = torch.Generator().manual_seed(6)
    q, k, v = torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 0, 8), torch.randn(2, 3, 0, 8)
    out = jattn.attention(q, k, v, key_padding_mask=torch.ones(2, 0, dtype=torch.bool), kv_len=torch.zeros(2, dtype=torch.int64),
                          key_bias=torch.zeros(2, 0))  # fmt: skip
    assert torch.equal(out, torch.zeros_like(q))
    q0 = torch.randn(0, 3, 4, 8)
    out = jattn.attention(q0, q0, q0, kv_len=torch.zeros(0, dtype=torch.int64), key_bias=torch.zeros(0, 3, 4))
    assert out.shape == q0.shape


# ---- attention_varlen: FlashAttention's flash_attn_varlen_func ---------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen_is_flash_attn_varlen_func(rng, causal):
    lens_q, lens_k = [5, 1, 9, 0, 7], [8, 3, 9, 2, 4]
    heads, kv_heads, d = 4, 2, 16
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int64)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int64)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    g = torch.Generator().manual_seed(7)
    q = torch.randn(tq, heads, d, generator=g, requires_grad=True)
    k = torch.randn(tk, kv_heads, d, generator=g, requires_grad=True)
    v = torch.randn(tk, kv_heads, d, generator=g, requires_grad=True)
    out, lse = jattn.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True)
    assert out.shape == q.shape and lse.shape == (heads, tq)
    dout = torch.randn(out.shape, generator=g)
    (out * dout).sum().backward()
    # the float64 reference, one sequence at a time (FlashAttention's causal: bottom-right per sequence)
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    outs, lses = [], []
    for s in range(len(lens_q)):
        q0, q1, k0, k1 = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        case = Case(batch=1, heads=heads, kv_heads=kv_heads, seq_q=q1 - q0, seq_kv=k1 - k0, head_dim=d,
                    causal="bottom_right" if causal else None)  # fmt: skip
        o, s_lse = reference(qd[None, q0:q1], kd[None, k0:k1], vd[None, k0:k1], case, {}, "bshd")
        outs.append(o[0])
        lses.append(s_lse[0])
    ref_out, ref_lse = torch.cat(outs), torch.cat(lses, dim=1)
    assert_gate(out.detach().numpy(), ref_out.detach().numpy(), what="varlen out")
    assert np.array_equal(np.isneginf(lse.detach().numpy()), np.isneginf(ref_lse.detach().numpy()))
    assert_gate(lse.detach().numpy(), ref_lse.detach().numpy(), what="varlen lse")
    (ref_out * dout.double()).sum().backward()
    for name, a, r in zip("qkv", (q, k, v), (qd, kd, vd)):
        assert_grad_gate(a.grad, r.grad, f"varlen d{name}")


def test_attention_varlen_compiles_forward_and_backward():
    cu = torch.tensor([0, 5, 6, 14], dtype=torch.int64)
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(14, h, 16, generator=g) for h in (4, 2, 2))

    def step(q, k, v):
        return jattn.attention_varlen(q, k, v, cu, cu, 8, 8, causal=True).square().sum()

    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    eager_grads = torch.autograd.grad(step(*leaves), leaves)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    grads = torch.autograd.grad(compiled(*leaves), leaves)
    for a, b in zip(grads, eager_grads):
        assert torch.equal(a, b)


# ---- torch.compile, opcheck ----------------------------------------------------------------------------
def test_compiled_forward_and_backward_are_one_graph(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng, "bshd")
    targets = set()

    def recording(gm, example_inputs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        boxed = lambda g, _: make_boxed_func(g.forward)
        return aot_autograd(fw_compiler=boxed, bw_compiler=boxed)(gm, example_inputs)

    def step(q, k, v):
        out, lse = jattn.attention(q, k, v, layout="bshd", return_lse=True, **kw)
        return (out * 1.5).sum() + torch.where(torch.isfinite(lse), lse, 0.0).sum()

    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    eager = step(*leaves)
    eager_grads = torch.autograd.grad(eager, leaves)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=recording)
    leaves2 = [t.clone().requires_grad_(True) for t in (q, k, v)]
    loss = compiled(*leaves2)
    grads = torch.autograd.grad(loss, leaves2)
    assert any("jattn.attention" in t for t in targets), targets
    assert torch.equal(loss, eager)
    for a, b in zip(grads, eager_grads):
        assert torch.equal(a, b)
    explained = torch._dynamo.explain(step)(*leaves)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_inductor_compiles_a_masked_model(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng, "bshd")

    def fn(q, k, v):
        return jattn.attention(q * 0.5, k, v, layout="bshd", **kw) + 1.0

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, fullgraph=True)(q, k, v)
        assert torch.equal(got, fn(q, k, v))


def test_opcheck_with_masks(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng, "bhsd")
    (bq, bkv) = kw["block_offsets"]
    masks = MaskArrays(kw["key_padding_mask"], kw["kv_len"], bq, bkv, kw["key_bias"], kw["cu_seqlens_q"],
                       kw["cu_seqlens_k"])  # fmt: skip
    opts = Options(threads=1, return_lse=True, enable_gqa=True, is_causal=True, causal_alignment="bottom_right")
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    torch.library.opcheck(torch.ops.jattn.attention.default, (qg, kg, vg, *opts, *masks))
    with torch.no_grad():
        out, lse = torch.ops.jattn.attention(q, k, v, *opts, *masks)
    dout = torch.randn(out.shape)
    torch.library.opcheck(torch.ops.jattn.attention_backward.default, (dout, q, k, v, out, lse, None, *opts, *masks))
    out2, lse2 = torch.empty_like(out), torch.empty_like(lse)
    torch.library.opcheck(torch.ops.jattn.attention_out.default, (q, k, v, out2, lse2, *opts, *masks))


# ---- the plan: one per kind of call, what select names ---------------------------------------------------
def test_one_plan_per_kind_of_call_and_select_names_it(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng)
    _plan.clear()
    jattn.attention(q, k, v, **kw)
    before = len(_plan._PLANS)
    assert before == 1
    for _ in range(3):
        q2, k2, v2, kw2 = draw(case, rng)  # new data, new mask arrays of the same structure
        jattn.attention(q2, k2, v2, **kw2)
    assert len(_plan._PLANS) == before, "a plan per call"
    sel = jattn.select(q, k, v, **kw)  # the plan the calls made and ran
    assert len(_plan._PLANS) == before and sel.backend in ("cpu", "ref") and sel.kernel
    assert [p.selection().kernel.decode() for p in _plan._PLANS.values()] == [sel.kernel]
    bwd = jattn.select(q, k, v, backward=True, **kw)
    assert bwd.backend == sel.backend and "backward" in bwd.kernel or "bwd" in bwd.kernel
    # another structure (no bias): another plan; the plain call runs the cpu backend
    count = len(_plan._PLANS)
    kw2 = {key: val for key, val in kw.items() if key != "key_bias"}
    jattn.attention(q, k, v, **kw2)
    assert len(_plan._PLANS) == count + 1
    assert jattn.select(q, q, q).backend == "cpu"  # (grouped-query heads are a mask part for the cpu backend)


def test_threads_run_one_plan_at_once(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng)
    want = jattn.attention(q, k, v, threads=1, **kw)
    plain_want = jattn.attention(q, k, v, threads=1, enable_gqa=True)
    errors = []

    def worker():
        try:
            for _ in range(20):
                assert torch.equal(jattn.attention(q, k, v, threads=1, **kw), want)
                assert torch.equal(jattn.attention(q, k, v, threads=1, enable_gqa=True), plain_want)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ---- what is refused, and how ------------------------------------------------------------------------------
def test_refusals_name_the_argument(rng):
    case = Case(seq_q=13, seq_kv=19)
    q, k, v, _ = draw(case, rng)
    offsets = torch.tensor([0, 5, 13])
    with pytest.raises(ValueError, match="block_offsets: one tensor"):
        jattn.attention(q, k, v, block_offsets=offsets)
    with pytest.raises(ValueError, match="block_offsets"):
        jattn.attention(q, k, v, block_offsets=(offsets, torch.tensor([0, 19])))
    with pytest.raises(ValueError, match="block_offsets"):
        jattn.attention(q, k, v, block_offsets=(offsets.int(), torch.tensor([0, 7, 19])))
    with pytest.raises(ValueError, match="block_q"):  # the library checks the values on the host
        jattn.attention(q, k, v, block_offsets=(torch.tensor([0, 14, 13]), torch.tensor([0, 7, 19])))
    with pytest.raises(ValueError, match="cu_seqlens_k: None"):
        jattn.attention(q, k, v, cu_seqlens_q=torch.tensor([0, 13]))
    with pytest.raises(ValueError, match="cu_seqlens_k: shape"):
        jattn.attention(q, k, v, cu_seqlens_q=torch.tensor([0, 13]), cu_seqlens_k=torch.tensor([0, 9, 19]))
    with pytest.raises(ValueError, match="cu_seqlens_kv"):
        jattn.attention(q, k, v, cu_seqlens_q=torch.tensor([0, 13]), cu_seqlens_k=torch.tensor([0, 20]))
    with pytest.raises(ValueError, match="key_bias: dimension 2"):
        jattn.attention(q, k, v, key_bias=torch.zeros(2, 1, 13, 19))  # a per-query bias
    with pytest.raises(ValueError, match="key_bias: last dimension"):
        jattn.attention(q, k, v, key_bias=torch.zeros(18))
    with pytest.raises(ValueError, match="key_bias: dtype"):
        jattn.attention(q, k, v, key_bias=torch.zeros(19, dtype=torch.float64))
    with pytest.raises(ValueError, match="causal_alignment"):
        jattn.attention(q, k, v, is_causal=True, causal_alignment="lower_right")
    bias = torch.zeros(19, requires_grad=True)
    with pytest.raises(RuntimeError, match="key_bias requires grad"):
        jattn.attention(q, k, v, key_bias=bias)
    with torch.no_grad():
        jattn.attention(q, k, v, key_bias=bias)  # no gradient wanted: served
    jattn.attention(q, k, v, key_bias=bias.detach())


def test_allowed_is_what_the_case_says():
    """The reference's mask on a hand-checked case (bottom-right causal inside segments)."""
    case = Case(batch=1, seq_q=4, seq_kv=6, causal="bottom_right", segments=((0, 2, 4), (0, 4, 6)))
    kw = {"cu_seqlens_q": torch.tensor([0, 2, 4]), "cu_seqlens_k": torch.tensor([0, 4, 6]), "is_causal": True}
    want = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(allowed(case, kw)[0, 0], want)


# ---- CUDA (the GPU machine) ---------------------------------------------------------------------------------
def _cuda_serves_masks() -> str:
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    cuda = {b.name: b for b in jattn.backends()}["cuda"]
    if not cuda.available:
        return f"jattn's cuda backend cannot run here: {cuda.detail}"
    return ""


_CUDA_WHY_NOT = _cuda_serves_masks()
needs_cuda = pytest.mark.skipif(bool(_CUDA_WHY_NOT), reason=_CUDA_WHY_NOT or "-")


def _on_cuda(kw):
    return {key: (tuple(t.cuda() for t in val) if isinstance(val, tuple) else
                  val.cuda() if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}  # fmt: skip


def _cuda_or_skip(fn):
    """fn(), or a skip naming the library's refusal while the cuda backend does not serve a part."""
    try:
        return fn()
    except jattn.JattnNotImplementedError as e:
        pytest.skip(f"the cuda backend refuses it here: {e.message}")


@needs_cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_forward_and_gradients_match_float64(rng, name):
    case = CASES[name]
    q, k, v, kw = draw(case, rng, "bshd")
    kwc = _on_cuda(kw)
    leaves = [t.cuda().requires_grad_(True) for t in (q, k, v)]
    out, lse = _cuda_or_skip(lambda: jattn.attention(*leaves, layout="bshd", return_lse=True, **kwc))
    refs = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref_out, ref_lse = reference(*refs, case, kw, "bshd")
    assert_gate(out.detach().cpu().numpy(), ref_out.detach().numpy(), what=f"cuda {name}")
    assert_gate(lse.detach().cpu().numpy(), ref_lse.detach().numpy(), what=f"cuda {name} lse")
    dout = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _cuda_or_skip(lambda: (out.double() * dout.cuda()).sum().backward())
    (ref_out * dout).sum().backward()
    for n, a, r in zip("qkv", leaves, refs):
        assert_grad_gate(a.grad, r.grad, f"cuda {name} d{n}")


@needs_cuda
def test_cuda_masked_call_in_a_cuda_graph(rng):
    case = CASES["everything"]
    q, k, v, kw = draw(case, rng, "bshd")
    q, k, v = (t.cuda() for t in (q, k, v))
    kwc = _on_cuda(kw)
    _cuda_or_skip(lambda: jattn.attention(q, k, v, layout="bshd", **kwc))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            jattn.attention(q, k, v, layout="bshd", **kwc)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = jattn.attention(q, k, v, layout="bshd", **kwc)
    q.copy_(torch.randn_like(q))
    kwc["key_bias"].copy_(torch.randn_like(kwc["key_bias"]))  # new mask values in the captured arrays
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, jattn.attention(q, k, v, layout="bshd", **kwc))
