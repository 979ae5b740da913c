"""A small random-weight FLUX.2 transformer and what its tests need, for the CPU tests
(test_diffusers.py) and the GPU tests (test_cuda.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers.models.attention_dispatch import _AttentionBackendRegistry

import jattn


def flux2_inputs(seed, image_tokens, text_tokens, dtype=torch.float32, device="cpu") -> dict:
    """Random latents and text embeddings with FLUX.2's position ids (an image grid of
    image_tokens, text tokens after it), as keyword arguments of the transformer's forward."""
    g = torch.Generator().manual_seed(seed)
    side = int(round(image_tokens**0.5))
    img_ids = torch.zeros(image_tokens, 4)
    img_ids[:, 1] = torch.arange(image_tokens) // side
    img_ids[:, 2] = torch.arange(image_tokens) % side
    txt_ids = torch.zeros(text_tokens, 4)
    txt_ids[:, 3] = torch.arange(text_tokens)
    return {
        "hidden_states": torch.randn(1, image_tokens, 64, generator=g).to(device, dtype),
        "encoder_hidden_states": torch.randn(1, text_tokens, 256, generator=g).to(device, dtype),
        "timestep": torch.tensor([0.6], device=device, dtype=dtype),
        "guidance": torch.tensor([3.5], device=device, dtype=dtype),
        "img_ids": img_ids.to(device),
        "txt_ids": txt_ids.to(device),
        "return_dict": False,
    }


def small_flux2(seed, mlp_ratio=1.0):
    """FLUX.2's transformer with random weights: 24 heads of 128, one double and one single block."""
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(seed)
    return Flux2Transformer2DModel(num_layers=1, num_single_layers=1, num_attention_heads=24, attention_head_dim=128,
                                   in_channels=64, joint_attention_dim=256, timestep_guidance_channels=256,
                                   mlp_ratio=mlp_ratio).eval()  # fmt: skip


class Float32Attention:
    """Puts an attention function into the active registry entry of a float64 model: q, k, v
    rounded to float32, attended in float32 by jattn or by SDPA, the output back in float64."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self, query, key, value, **kwargs):
        q, k, v = (t.float() for t in (query, key, value))
        if self.how == "jattn":
            out = jattn.attention(q, k, v, layout="bshd")
        else:
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(
                1, 2
            )
        return out.double()

    def __enter__(self):
        self.name = _AttentionBackendRegistry._active_backend
        self.original = _AttentionBackendRegistry._backends[self.name]
        _AttentionBackendRegistry._backends[self.name] = self
        return self

    def __exit__(self, *exc):
        _AttentionBackendRegistry._backends[self.name] = self.original


def relative_l2(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def flux2_accuracy(model, inputs) -> dict:
    """Forwards of one float32 model on one input: through SDPA and through jattn (the switch,
    counted), then (the model converted to float64 in place) the float64 forward, and the float64
    forward with only its attention in float32, by jattn and by SDPA.

    Returns ``float32_jattn`` / ``float32_sdpa``: (output, float64 output) as numpy arrays for the
    gate; ``attention_only_jattn`` / ``attention_only_sdpa``: the rel_l2 of the float64 forward
    with float32 attention; ``jattn_calls``: the calls the switch routed to jattn."""
    jattn.diffusers.reset_counts()
    with torch.no_grad():
        sdpa = model(**inputs)[0]
        with jattn.diffusers.enabled():
            routed = model(**inputs)[0]
        calls = jattn.diffusers.counts().get("jattn", 0)
        model.double()
        inputs64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
        exact = model(**inputs64)[0]
        with Float32Attention("jattn"):
            with_jattn = model(**inputs64)[0]
        with Float32Attention("sdpa"):
            with_sdpa = model(**inputs64)[0]
    exact_np = exact.cpu().numpy()
    return {
        "float32_jattn": (routed.cpu().numpy(), exact_np),
        "float32_sdpa": (sdpa.cpu().numpy(), exact_np),
        "float32_rel_l2_jattn": relative_l2(routed, exact),
        "float32_rel_l2_sdpa": relative_l2(sdpa, exact),
        "attention_only_jattn": relative_l2(with_jattn, exact),
        "attention_only_sdpa": relative_l2(with_sdpa, exact),
        "jattn_calls": calls,
    }
