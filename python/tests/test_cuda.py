"""CUDA tensors (skipped without a usable GPU and jattn's cuda backend): parity, torch's current
stream of the tensors' own device, several GPUs, CUDA graph capture, torch.compile on CUDA, the
workspace from torch's caching allocator (no new cudaMalloc across calls of one size), and the
FLUX.2 transformer at 1024 image + 512 text tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
from jattn_testing import DISTRIBUTIONS, assert_gate, draw_qkv, fused_qkv, reference
from torch_modules import FusedQKVAttention


def _cuda_ready() -> str:
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    cuda = {b.name: b for b in jattn.backends()}["cuda"]
    return "" if cuda.available else f"jattn's cuda backend cannot run here: {cuda.detail}"


_WHY_NOT = _cuda_ready()
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=_WHY_NOT or "-")

DEV = "cuda"


def on_gpu(*arrays):
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(DEV) for a in arrays)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("shape", [(1, 24, 1536, 1536, 128), (2, 3, 33, 65, 64), (1, 2, 127, 129, 72),
                                   (1, 4, 100, 77, 16)], ids=lambda s: "x".join(map(str, s)))  # fmt: skip
def test_cuda_parity(rng, shape, layout, dist):
    b, h, sq, skv, d = shape
    q_shape, kv_shape = ((b, h, sq, d), (b, h, skv, d)) if layout == "bhsd" else ((b, sq, h, d), (b, skv, h, d))
    q, k, v, scale = draw_qkv(rng, q_shape, kv_shape, dist, d)
    ref, ref_lse = reference(q, k, v, layout, scale)
    out, lse = jattn.attention(*on_gpu(q, k, v), layout=layout, scale=scale, return_lse=True)
    assert out.device.type == "cuda" and out.shape == q.shape
    assert_gate(out.cpu().numpy(), ref, what=f"cuda {layout} {dist}")
    assert_gate(lse.cpu().numpy(), ref_lse, what="cuda lse")
    again = jattn.attention(*on_gpu(q, k, v), layout=layout, scale=scale)
    assert torch.equal(out, again)  # deterministic


def test_cuda_views_out_and_3d(rng):
    q, k, v, qkv = fused_qkv(rng, 2, 300, 4, 64)
    ref, _ = reference(q, k, v, "bshd")
    g = torch.from_numpy(qkv).to(DEV)
    tq, tk, tv = g.unbind(2)  # views into the fused projection, token stride 3*H*D
    buf = torch.full((2, 300, 4 * 64 + 16), float("nan"), device=DEV)
    out = buf[:, :, : 4 * 64].unflatten(2, (4, 64))
    res = jattn.attention(tq, tk, tv, layout="bshd", out=out)
    assert res is out
    assert_gate(out.cpu().numpy(), ref, what="cuda fused qkv into a strided out")
    assert torch.isnan(buf[:, :, 4 * 64 :]).all()
    q3, k3, v3, _ = draw_qkv(rng, (3, 50, 32), (3, 70, 32), "normal", 32)
    ref3, _ = reference(q3, k3, v3)
    assert_gate(jattn.attention(*on_gpu(q3, k3, v3)).cpu().numpy(), ref3, what="cuda 3-d")


def test_cuda_select_tf32_and_host_tensors(rng):
    q, k, v, _ = draw_qkv(rng, (1, 24, 1536, 128), (1, 24, 1536, 128), "normal", 128)
    gq, gk, gv = on_gpu(q, k, v)
    sel = jattn.select(gq, gk, gv)
    assert sel.backend == "cuda" and sel.kernel.startswith("cuda_"), sel
    ref, _ = reference(q, k, v)
    assert_gate(jattn.attention(gq, gk, gv, precision="tf32").cpu().numpy(), ref, "tf32", what="tf32")
    # CPU tensors stay on the host with backend="auto"; backend="cuda" takes them to the GPU and back
    assert jattn.select(*map(torch.from_numpy, (q, k, v))).backend == "cpu"
    host = jattn.attention(*map(torch.from_numpy, (q, k, v)), backend="cuda")
    assert host.device.type == "cpu"
    assert_gate(host.numpy(), ref, what="host tensors on the cuda backend")


def test_runs_on_the_current_stream_without_synchronizing(seed):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(1, 8, 512, 128, device=DEV) for _ in range(3))
    want = jattn.attention(q, k, v)
    late_q = torch.full_like(q, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(500_000_000)  # keeps the side stream busy for a while (~0.3 s)
        late_q.copy_(q)  # q arrives only after the sleep, on the side stream
        got = jattn.attention(late_q, k, v)  # must run after it, on the side stream
        still_busy = not side.query()  # the call returned before the stream reached it
    side.synchronize()
    assert still_busy, "jattn.attention waited for the stream (it must only enqueue)"
    assert torch.equal(got, want), "jattn did not run on torch's current stream"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_each_call_runs_on_its_tensors_device_and_stream(rng):
    q, k, v, _ = draw_qkv(rng, (1, 4, 200, 64), (1, 4, 300, 64), "normal", 64)
    ref, _ = reference(q, k, v)
    torch.cuda.set_device(0)
    for index in range(torch.cuda.device_count()):
        dev = torch.device("cuda", index)
        tq, tk, tv = (torch.from_numpy(x).to(dev) for x in (q, k, v))
        out = jattn.attention(tq, tk, tv)  # the current device is 0: the call switches and back
        assert out.device == dev and torch.cuda.current_device() == 0
        assert_gate(out.cpu().numpy(), ref, what=f"cuda:{index}")
        # a side stream made current on the tensors' device while device 0 stays current
        late_q = torch.full_like(tq, float("nan"))
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        default_of_dev = torch.cuda.current_stream(dev)
        torch.cuda.set_stream(side)  # also makes dev current
        torch.cuda._sleep(200_000_000)
        late_q.copy_(tq)
        torch.cuda.set_device(0)
        got = jattn.attention(late_q, tk, tv)
        assert torch.cuda.current_device() == 0
        side.synchronize()
        assert torch.equal(got, out), f"cuda:{index}: not on the current stream of the tensors' device"
        torch.cuda.set_stream(default_of_dev)
        torch.cuda.set_device(0)
    with pytest.raises(ValueError, match="one device"):
        jattn.attention(torch.from_numpy(q).to("cuda:1"), *(torch.from_numpy(x).to("cuda:0") for x in (k, v)))
    assert torch.cuda.current_device() == 0


def test_cuda_graph_capture_and_replay(rng):
    shapes = ((1, 24, 1536, 128), (1, 24, 1536, 128))
    q0, k0, v0, _ = draw_qkv(rng, *shapes, "normal", 128)
    q, k, v = on_gpu(q0, k0, v0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graph asks
        for _ in range(2):
            jattn.attention(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = jattn.attention(q, k, v)
    for _ in range(2):  # new inputs in the captured tensors, then replay
        q1, k1, v1, _ = draw_qkv(rng, *shapes, "peaky", 128)
        for dst, src in zip((q, k, v), on_gpu(q1, k1, v1)):
            dst.copy_(src)
        graph.replay()
        first = out.clone()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first), "two replays differ"
        assert torch.equal(out, jattn.attention(q, k, v)), "a replay differs from the eager call"
        ref, _ = reference(q1, k1, v1)
        assert_gate(out.cpu().numpy(), ref, what="replayed graph")


def test_torch_compile_on_cuda(seed):
    torch.manual_seed(seed)
    model = FusedQKVAttention(256, 4).to(DEV).eval()
    x = torch.randn(2, 300, 256, device=DEV)
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        got = torch.compile(model, fullgraph=True)(x)
        assert_gate(got.cpu().numpy(), eager.double().cpu().numpy(), what="compiled on cuda")

        def attend(q, k, v):
            return jattn.attention(q * 0.5, k, v) + 1.0

        q, k, v = (torch.randn(1, 8, 256, 64, device=DEV) for _ in range(3))
        torch._dynamo.reset()
        graphed = torch.compile(attend, fullgraph=True, mode="reduce-overhead")  # CUDA graphs
        for _ in range(3):
            res = graphed(q, k, v)
        assert torch.equal(res, attend(q, k, v))


def test_workspace_comes_from_the_caching_allocator(seed):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(1, 24, 1536, 128, device=DEV) for _ in range(3))
    sel = jattn.select(q, k, v)
    first = jattn.attention(q, k, v)
    for _ in range(2):  # the pattern of the measured loop: the previous output alive during a call
        out = jattn.attention(q, k, v)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    for _ in range(10):
        out = jattn.attention(q, k, v)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    assert after["segment.all.allocated"] == before["segment.all.allocated"], "new cudaMalloc segments"
    allocations = after["allocation.all.allocated"] - before["allocation.all.allocated"]
    per_call = 2 if sel.workspace_bytes else 1  # the output, and the plan's workspace
    assert allocations == per_call * 10, (allocations, sel)
    assert torch.equal(out, first)


def test_cuda_key_padding(rng):
    q, k, v, _ = draw_qkv(rng, (2, 3, 40, 64), (2, 3, 90, 64), "normal", 64)
    mask = rng.random((2, 90)) < 0.7
    ref, _ = reference(q, k, v, key_mask=mask)
    try:
        out = jattn.attention(*on_gpu(q, k, v), key_padding_mask=torch.from_numpy(mask).to(DEV))
    except jattn.JattnNotImplementedError as e:
        assert "key_padding" in e.message
        pytest.skip(f"the cuda backend has no key padding yet ({e.message})")
    assert_gate(out.cpu().numpy(), ref, what="cuda key padding")


def test_flux2_transformer_on_cuda_1024_image_512_text_tokens(seed):
    pytest.importorskip("diffusers")
    from flux2_testing import flux2_accuracy, flux2_inputs, small_flux2

    result = flux2_accuracy(small_flux2(seed).to(DEV), flux2_inputs(seed, 1024, 512, device=DEV))
    print("FLUX.2 CUDA, 1024+512 tokens:", {k: v for k, v in result.items() if not isinstance(v, tuple)})
    assert result["jattn_calls"] == 2
    assert_gate(*result["float32_jattn"], what="FLUX.2 forward through jattn on cuda")
    assert_gate(*result["float32_sdpa"], what="FLUX.2 forward through SDPA on cuda")
    assert result["attention_only_jattn"] <= result["attention_only_sdpa"], result
