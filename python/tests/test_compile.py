"""The custom op under torch.compile(fullgraph=True) on the CPU: no graph breaks, the op in the
graph, the eager result (bit for bit where the compiled graph runs the same jattn call)."""

from __future__ import annotations

import pytest
import torch

import jattn
from jattn._options import FIELD_TYPES, Options
from jattn._problem import MASK_NAMES, MaskArrays
from jattn_testing import assert_gate, reference
from torch_modules import FusedQKVAttention

torch._dynamo.config.cache_size_limit = 64


def graph_ops(fn, *args):
    """Compiles fn with fullgraph=True and a backend that records the FX graphs; returns the
    compiled function's result and the set of call targets in the graphs."""
    targets = set()

    def recording_backend(gm, example_inputs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    result = torch.compile(fn, fullgraph=True, backend=recording_backend)(*args)
    return result, targets


def test_attention_compiles_into_one_graph_with_the_op(seed):
    torch.manual_seed(seed)
    q, k, v = torch.randn(2, 3, 40, 32), torch.randn(2, 3, 56, 32), torch.randn(2, 3, 56, 32)

    def fn(q, k, v):
        out, lse = jattn.attention(q * 2.0, k, v, return_lse=True)
        return out + 1.0, lse

    (out, lse), targets = graph_ops(fn, q, k, v)
    assert any("jattn.attention" in t for t in targets), targets
    eager_out, eager_lse = jattn.attention(q * 2.0, k, v, return_lse=True)
    assert torch.equal(out, eager_out + 1.0) and torch.equal(lse, eager_lse)
    explained = torch._dynamo.explain(fn)(q, k, v)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_out_variant_compiles(seed):
    torch.manual_seed(seed)
    q, k, v = torch.randn(1, 20, 2, 16), torch.randn(1, 20, 2, 16), torch.randn(1, 20, 2, 16)

    def fn(q, k, v, out):
        res, lse = jattn.attention(q, k, v, layout="bshd", out=out, return_lse=True)
        return res * 1.0, lse

    out = torch.full((1, 20, 2, 16), float("nan"))
    (res, lse), targets = graph_ops(fn, q, k, v, out)
    assert any("jattn.attention_out" in t for t in targets), targets
    want, want_lse = jattn.attention(q, k, v, layout="bshd", return_lse=True)
    assert torch.equal(out, want) and torch.equal(res, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("dynamic", [False, True])
def test_model_compiles_with_inductor_fullgraph(seed, dynamic):
    torch.manual_seed(seed)
    model = FusedQKVAttention(96, 3).eval()
    x = torch.randn(2, 50, 96)
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
        got = compiled(x)
        got_other = compiled(torch.randn(1, 33, 96)) if dynamic else None
    # Inductor may fuse the projections differently: the gate against eager, not the bits
    assert_gate(got.numpy(), eager.double().numpy(), what="compiled model")
    if got_other is not None:
        assert got_other.shape == (1, 33, 96)


def test_op_is_callable_directly(seed):
    torch.manual_seed(seed)
    q = torch.randn(1, 2, 9, 8)
    out, lse = torch.ops.jattn.attention(q, q, q, *Options(return_lse=True), *MaskArrays())
    ref, ref_lse = reference(q.numpy(), q.numpy(), q.numpy())
    assert_gate(out.numpy(), ref, what="op")
    assert_gate(lse.numpy(), ref_lse, what="op lse")
    fake_out, fake_lse = torch.ops.jattn.attention(q.to("meta"), q.to("meta"), q.to("meta"), *Options(return_lse=True),
                                                   *MaskArrays())  # fmt: skip
    assert fake_out.shape == out.shape and fake_lse.shape == lse.shape and fake_out.device.type == "meta"
    meta = jattn.attention(q.to("meta"), q.to("meta"), q.to("meta"), layout="bshd", return_lse=True)
    assert meta[0].shape == q.shape and meta[1].shape == (1, 9, 2)


@pytest.mark.parametrize("op", ["attention", "attention_out", "attention_backward"])
def test_op_schemas_carry_every_option(op):
    """Each op's schema: its tensors, then every field of the options description with its type, then
    the mask's arrays (the schemas are made from _options.Options and _problem.MaskArrays)."""
    arguments = getattr(torch.ops.jattn, op).default._schema.arguments
    names = [a.name for a in arguments]
    first = names.index(Options._fields[0])
    assert names[first:] == [*Options._fields, *MASK_NAMES], names
    assert all("Tensor" not in str(a.type) for a in arguments[first : first + len(FIELD_TYPES)])
    assert all("Tensor" in str(a.type) for a in arguments[:first]), [str(a.type) for a in arguments]
    assert all("Tensor" in str(a.type) for a in arguments[first + len(FIELD_TYPES) :])


def test_opcheck(seed):
    """torch.library.opcheck: schema, fake implementation against the real one, dispatch."""
    torch.manual_seed(seed)
    q, k, v = torch.randn(2, 12, 3, 16), torch.randn(2, 20, 3, 16), torch.randn(2, 20, 3, 16)
    mask = torch.rand(2, 20) < 0.8
    torch.library.opcheck(
        torch.ops.jattn.attention.default, (q, k, v, *Options("bshd", 0.3, threads=1, return_lse=True), *MaskArrays())
    )
    torch.library.opcheck(
        torch.ops.jattn.attention.default, (q, k, v, *Options("bshd", backend="ref", threads=1), *MaskArrays(mask))
    )
    out, lse = torch.empty(2, 12, 3, 16), torch.empty(2, 3, 12)
    torch.library.opcheck(
        torch.ops.jattn.attention_out.default, (q, k, v, out, lse, *Options("bshd", threads=1), *MaskArrays())
    )
