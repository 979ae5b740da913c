"""A denoising loop compiled with torch.compile(fullgraph=True) under jattn.diffusers.enabled():
one compile per shape however many steps run (the switch's counters are not guarded by
Dynamo), every attention call through jattn (the op in each graph, counted on every run), the
eager output, and calls that fall back do not break the graph either."""

from __future__ import annotations

import warnings

import pytest
import torch

import jattn

pytest.importorskip("diffusers")
from flux2_testing import flux2_inputs  # noqa: E402

STEPS = 28  # a FLUX denoising loop's usual number of steps


@pytest.fixture(autouse=True)
def switch_off():
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()
    yield
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()


def tiny_flux2(seed, dtype=torch.float32):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(num_layers=1, num_single_layers=1, num_attention_heads=2, attention_head_dim=64,
                                    in_channels=64, joint_attention_dim=256, timestep_guidance_channels=32,
                                    axes_dims_rope=(16, 16, 16, 16))  # fmt: skip
    return model.to(dtype).eval()


class RecordingBackend:
    """A torch.compile backend that runs the traced graph as it is and records, per compile,
    how many jattn ops and how many other attention ops the graph holds."""

    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        self.graphs.append({
            "jattn": sum("jattn.attention" in t for t in targets),
            "sdpa": sum("scaled_dot_product_attention" in t for t in targets),
        })  # fmt: skip
        return gm.forward


def test_denoising_loop_compiles_once_per_shape_and_counts_every_call(seed):
    model = tiny_flux2(seed)
    shapes = [(64, 16), (144, 24)]  # (image tokens, text tokens): 8x8 and 12x12 latents
    inputs = [flux2_inputs(seed + i, img, txt) for i, (img, txt) in enumerate(shapes)]
    backend = RecordingBackend()
    torch._dynamo.reset()
    with torch.no_grad(), jattn.diffusers.enabled(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning may be given
        eager = [model(**x)[0] for x in inputs]
        jattn.diffusers.reset_counts()
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        for shape_index, x in enumerate(inputs):
            for step in range(STEPS):
                out = compiled(**x)[0]
                assert torch.equal(out, eager[shape_index]), (shape_index, step)
            # one compile for the first shape; the second shape compiles once more (Dynamo's
            # automatic dynamic shapes), then every step reuses it
            assert len(backend.graphs) == shape_index + 1, backend.graphs
    # every attention call of each graph is jattn's op (the double and the single block)
    assert all(g == {"jattn": 2, "sdpa": 0} for g in backend.graphs), backend.graphs
    # counts() counts eager calls only: nothing was counted inside the compiled code
    assert jattn.diffusers.counts() == {}
    with torch.no_grad(), jattn.diffusers.enabled():
        model(**inputs[0])
    assert jattn.diffusers.counts() == {"jattn": 2}


def test_a_fallback_does_not_break_a_fullgraph_compile(seed):
    """A bf16 model without upcast: every call falls back (diffusers' SDPA in the graph), the
    warning is given once, while tracing (never from the graph), and only eager calls count."""
    model = tiny_flux2(seed, torch.bfloat16)
    x = flux2_inputs(seed, 64, 16, dtype=torch.bfloat16)
    backend = RecordingBackend()
    torch._dynamo.reset()
    with torch.no_grad(), jattn.diffusers.enabled():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model, fullgraph=True, backend=backend)
            outs = [compiled(**x)[0] for _ in range(4)]
        eager = model(**x)[0]
    assert len(backend.graphs) == 1 and backend.graphs[0] == {"jattn": 0, "sdpa": 2}, backend.graphs
    assert all(torch.equal(o, eager) for o in outs)
    fallback_warnings = [w for w in caught if "jattn.diffusers" in str(w.message)]
    assert len(fallback_warnings) == 1 and "dtype" in str(fallback_warnings[0].message), caught
    assert jattn.diffusers.counts() == {"fallback:dtype": 2}  # the eager forward's two calls


def test_inductor_loop_matches_eager_within_the_gate(seed):
    """The same loop through Inductor (the default backend): no recompile over the steps and
    the eager result within the f32 gate (Inductor fuses the projections its own way)."""
    from jattn_testing import assert_gate

    model = tiny_flux2(seed)
    x = flux2_inputs(seed, 64, 16)
    torch._dynamo.reset()
    with torch.no_grad(), jattn.diffusers.enabled(), torch._dynamo.config.patch(error_on_recompile=True):
        eager = model(**x)[0]
        compiled = torch.compile(model, fullgraph=True)
        jattn.diffusers.reset_counts()
        outs = [compiled(**x)[0] for _ in range(8)]
    for out in outs:
        assert_gate(out.numpy(), eager.double().numpy(), what="inductor loop")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_denoising_loop_compiles_once_per_shape(seed):
    """The loop on CUDA through Inductor with CUDA graphs (mode="reduce-overhead"): 28 steps at one
    shape, then 28 at a second, one compile per shape, no fallback while tracing, each step the
    eager output within the f32 gate, and the replays counted by no one (counts() is eager only)."""
    from jattn_testing import assert_gate

    model = tiny_flux2(seed).cuda()
    shapes = [(64, 16), (144, 24)]
    inputs = [flux2_inputs(seed + i, img, txt, device="cuda") for i, (img, txt) in enumerate(shapes)]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch.no_grad(), jattn.diffusers.enabled(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a fallback warns while tracing: none may (Inductor's own advice may)
        eager = [model(**x)[0].double().cpu().numpy() for x in inputs]
        assert jattn.diffusers.counts() == {"jattn": 4}
        jattn.diffusers.reset_counts()
        compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
        for shape_index, x in enumerate(inputs):
            for step in range(STEPS):
                out = compiled(**x)[0].clone()  # a CUDA graph's output is overwritten by the next replay
                if step in (0, 1, STEPS - 1):
                    assert_gate(out.cpu().numpy(), eager[shape_index], what=f"shape {shape_index} step {step}")
            assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == shape_index + 1, dict(
                torch._dynamo.utils.counters["stats"]
            )
    assert jattn.diffusers.counts() == {}
    assert not [w for w in caught if "jattn" in str(w.message)], [str(w.message) for w in caught]
