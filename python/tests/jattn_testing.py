"""What the tests share: input distributions, the float64 reference and the accuracy gate.

The gate is the tolerance model of docs/DESIGN.md section 2, against a float64 evaluation of the
same float32 inputs; its numbers mirror the C library's single copy, the JATTN_GATE_* constants of
kit/metrics.h (change them there and here together).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

DISTRIBUTIONS = ("uniform", "normal", "peaky", "large")


def draw_qkv(
    rng: np.random.Generator, q_shape, kv_shape, dist: str, head_dim: int
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[float]]:
    """Fresh float32 q, k, v of a distribution and the scale to use (None = 1/sqrt(D)):
    uniform [-1, 1]; standard normal; peaky (logits of standard deviation 8: sharp attention);
    large (|x| up to 1e3, with the scale that keeps the logits' deviation near 8)."""
    if dist == "uniform":
        draw = lambda shape: rng.uniform(-1, 1, shape)  # noqa: E731
        qk, scale = draw, None
    elif dist == "normal":
        draw = qk = lambda shape: rng.standard_normal(shape)  # noqa: E731
        scale = None
    elif dist == "peaky":
        draw = lambda shape: rng.standard_normal(shape)  # noqa: E731
        qk = lambda shape: math.sqrt(8.0) * rng.standard_normal(shape)  # noqa: E731
        scale = None
    elif dist == "large":
        draw = qk = lambda shape: rng.uniform(-1e3, 1e3, shape)  # noqa: E731
        scale = 8.0 / (math.sqrt(head_dim) * 1e6 / 3.0)
    else:
        raise ValueError(dist)
    f = np.float32
    return qk(q_shape).astype(f), qk(kv_shape).astype(f), draw(kv_shape).astype(f), scale


def to_bhsd(x: np.ndarray, layout: str) -> np.ndarray:
    """A [B, H, S, D] (or [H, S, D]) view of an array of the layout."""
    return x if layout == "bhsd" else np.swapaxes(x, -2, -3)


def reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    layout: str = "bhsd",
    scale: Optional[float] = None,
    key_mask: Optional[np.ndarray] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """float64 attention of float32 inputs of the layout: ``(out in the layout, lse [.., H, Sq])``.
    ``key_mask`` ([B or 1, Skv] or [Skv], True = attend): rows with no key give 0 and lse -inf."""
    qd, kd, vd = (to_bhsd(np.asarray(x, dtype=np.float64), layout) for x in (q, k, v))
    d = qd.shape[-1]
    s = (qd @ np.swapaxes(kd, -1, -2)) * (1.0 / math.sqrt(d) if scale is None else float(scale))
    if key_mask is not None:
        m = np.asarray(key_mask, dtype=bool)
        m = m.reshape(m.shape[:-1] + (1, 1, m.shape[-1])) if m.ndim == 2 else m  # [B,1,1,Skv]
        if qd.ndim == 3 and m.ndim == 4:
            m = m[0]
        s = np.where(m, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    empty = ~np.isfinite(mx)
    mx = np.where(empty, 0.0, mx)
    e = np.exp(s - mx)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(empty, 0.0, (e / np.where(total > 0, total, 1.0)) @ vd)
        lse = np.where(empty[..., 0], -np.inf, (mx + np.log(total))[..., 0])
    return (out if layout == "bhsd" else np.swapaxes(out, -2, -3)), lse


def metrics(out, ref) -> dict:
    """rel_l2, max_abs, cos of an output against its float64 reference, and whether every element
    is finite where the reference is."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    finite = bool(np.all(np.isfinite(o) == np.isfinite(r)))
    o, r = np.where(np.isfinite(r), o, 0.0), np.where(np.isfinite(r), r, 0.0)
    diff = o - r
    ref2, out2 = float(np.sum(r * r)), float(np.sum(o * o))
    rel = math.sqrt(float(np.sum(diff * diff)) / ref2) if ref2 > 0 else math.sqrt(float(np.sum(diff * diff)))
    cos = float(np.sum(o * r)) / math.sqrt(ref2 * out2) if ref2 > 0 and out2 > 0 else (1.0 if rel == 0 else 0.0)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    return {"rel_l2": rel, "max_abs": max_abs, "cos": cos, "max_ref": float(np.max(np.abs(r))) if r.size else 0.0,
            "finite": finite}  # fmt: skip


# kit/metrics.h: JATTN_GATE_F32_REL_L2, _F32_MAX_ABS, _F32_COS, _TF32_REL_L2
GATE_F32_REL_L2 = 2e-6
GATE_F32_MAX_ABS = 1e-5
GATE_F32_COS = 0.99999
GATE_TF32_REL_L2 = 1e-3


def assert_gate(out, ref, precision: str = "f32", what: str = "") -> dict:
    """Asserts the gate of docs/DESIGN.md section 2; returns the metrics."""
    m = metrics(out, ref)
    if precision == "tf32":
        ok = m["finite"] and m["rel_l2"] <= GATE_TF32_REL_L2
    else:
        ok = (
            m["finite"]
            and m["rel_l2"] <= GATE_F32_REL_L2
            and m["max_abs"] <= GATE_F32_MAX_ABS * max(1.0, m["max_ref"])
            and m["cos"] >= GATE_F32_COS
        )
    assert ok, f"{what}: outside the {precision} gate: {m}"
    return m


def fused_qkv(rng: np.random.Generator, batch: int, seq: int, heads: int, head_dim: int):
    """q, k, v as views into one fused projection [B, S, 3, H, D] (bshd views with token
    stride 3*H*D), and the projection."""
    qkv = rng.standard_normal((batch, seq, 3, heads, head_dim)).astype(np.float32)
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], qkv


# kit/metrics.h: JATTN_BWD_GATE_REL_L2, _MAX_ABS, _COS, JATTN_BWD_FLOOR_TIMES
BWD_GATE_REL_L2 = 5e-6
BWD_GATE_MAX_ABS = 2e-5
BWD_GATE_COS = 0.99999
BWD_FLOOR_TIMES = 3


def float64_backward_floor(q, k, v, dout, scale: float, out, lse, round_logits: bool = True):
    """One evaluation of kit/metrics.h's float32 floor of the backward: dq, dk, dv in float64 (torch
    tensors) from the float64 forward's out and lse rounded to float32 once (out, lse: float32
    tensors as given) and the logits scale q.k rounded to float32 once (round_logits) or exact. The
    floor's metrics are the larger of the two evaluations' (larger_metrics)."""
    import torch

    q, k, v, dout, out, lse = (t.double() for t in (q, k, v, dout, out, lse))
    s = (q @ k.transpose(-1, -2)) * scale
    if round_logits:
        s = s.float().double()
    p = torch.exp(s - lse[..., None])
    ds = p * (dout @ v.transpose(-1, -2) - (dout * out).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dout


def larger_metrics(a: dict, b: dict) -> dict:
    """Each metric of the larger error of two (rel_l2, max_abs: the larger; cos: the smaller)."""
    return {
        **a,
        "rel_l2": max(a["rel_l2"], b["rel_l2"]),
        "max_abs": max(a["max_abs"], b["max_abs"]),
        "cos": min(a["cos"], b["cos"]),
    }


def passes_backward_floor(m: dict, floor: dict) -> bool:
    """kit/metrics.c's jattn_metrics_pass_backward_floor: every metric of a gradient within the
    backward's gate or within BWD_FLOOR_TIMES of the float32 floor's (1 - cos and max_abs within its
    square), every element finite where the reference is. The floor: float64_backward_floor."""
    if not m["finite"]:
        return False
    k = BWD_FLOOR_TIMES
    abs_tol = BWD_GATE_MAX_ABS * max(1.0, m["max_ref"])
    if m["max_ref"] == 0:
        return m["max_abs"] <= abs_tol or m["max_abs"] <= k * k * floor["max_abs"]
    rel_ok = m["rel_l2"] <= BWD_GATE_REL_L2 or m["rel_l2"] <= k * floor["rel_l2"]
    cos_ok = m["cos"] >= BWD_GATE_COS or 1 - m["cos"] <= k * k * (1 - floor["cos"]) + 1e-12
    return rel_ok and cos_ok and (m["max_abs"] <= abs_tol or m["max_abs"] <= k * k * floor["max_abs"])
