"""One rank of test_context_parallel.py: tiny FLUX.1 and FLUX.2 transformers run under diffusers'
context parallelism (``enable_parallelism``) over gloo on the CPU, with jattn.diffusers on, each
mode's output against the same model without parallelism; rank 0 writes what it measured to a
JSON file that the test reads.

Two workarounds diffusers 0.42 needs on a CPU-only machine (README, Python section): its
``enable_parallelism`` computes ``rank % torch.accelerator.device_count()``, 0 without an
accelerator (the shim below makes it 1), and its ``*_anything`` modes pick the collective's device
from ``torch.accelerator`` unless the process group's backend string names "cpu" (hence
``"cpu:gloo"``, not ``"gloo"``: a CUDA build of torch reports cuda even without a GPU).
"""

from __future__ import annotations

import datetime
import json
import os
import traceback

import torch
import torch.distributed as dist


def mode_config(mode: str, world: int) -> dict:
    """ContextParallelConfig's arguments for a mode over all ``world`` processes."""
    return {
        "ulysses": dict(ulysses_degree=world),
        "ring": dict(ring_degree=world),
        "ulysses_anything": dict(ulysses_degree=world, ulysses_anything=True),
        "ring_anything": dict(ring_degree=world, ring_anything=True),
        "unified": dict(ring_degree=2, ulysses_degree=world // 2),
    }[mode]


HEADS, HEAD_DIM = 4, 16  # 4 heads: Ulysses over 2 and 4 ranks splits them evenly


def _device_count_shim() -> None:
    real = torch.accelerator.device_count
    torch.accelerator.device_count = lambda: max(1, real())


def tiny_model(kind: str, seed: int):
    from diffusers import Flux2Transformer2DModel, FluxTransformer2DModel

    torch.manual_seed(seed)
    if kind == "flux1":
        model = FluxTransformer2DModel(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=HEAD_DIM,
                                       num_attention_heads=HEADS, joint_attention_dim=32, pooled_projection_dim=32,
                                       axes_dims_rope=(4, 6, 6))  # fmt: skip
    else:
        model = Flux2Transformer2DModel(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=HEAD_DIM,
                                        num_attention_heads=HEADS, joint_attention_dim=32,
                                        timestep_guidance_channels=32, axes_dims_rope=(4, 4, 4, 4))  # fmt: skip
    return model.eval()


def tiny_inputs(kind: str, seed: int, image_tokens: int = 64, text_tokens: int = 8) -> dict:
    """Random latents and text states with position ids (an 8-wide image grid), batch 1."""
    g = torch.Generator().manual_seed(seed)
    axes = 3 if kind == "flux1" else 4
    img_ids = torch.zeros(image_tokens, axes)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(image_tokens) // 8, torch.arange(image_tokens) % 8
    txt_ids = torch.zeros(text_tokens, axes)
    if kind == "flux2":
        txt_ids[:, 3] = torch.arange(text_tokens)
    inputs = {"hidden_states": torch.randn(1, image_tokens, 16, generator=g),
              "encoder_hidden_states": torch.randn(1, text_tokens, 32, generator=g),
              "timestep": torch.tensor([0.6]), "img_ids": img_ids, "txt_ids": txt_ids, "return_dict": False}  # fmt: skip
    if kind == "flux1":
        inputs["pooled_projections"] = torch.randn(1, 32, generator=g)
    else:  # FLUX.2's context-parallel plan splits batched ids [B, S, 4]
        inputs["guidance"] = torch.tensor([3.5])
        inputs["img_ids"], inputs["txt_ids"] = img_ids[None], txt_ids[None]
    return inputs


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def run_case(kind: str, mode: str, world: int, seed: int) -> dict:
    """One model kind in one mode: the output through jattn with and without parallelism, and
    what the switch counted under parallelism."""
    from diffusers import ContextParallelConfig

    import jattn

    inputs = tiny_inputs(kind, seed)
    with torch.no_grad(), jattn.diffusers.enabled():
        plain = tiny_model(kind, seed)(**inputs)[0]
        model = tiny_model(kind, seed)
        model.enable_parallelism(config=ContextParallelConfig(**mode_config(mode, world)))
        jattn.diffusers.reset_counts()
        parallel = model(**inputs)[0]
        counts = jattn.diffusers.counts()
    return {"kind": kind, "mode": mode, "rel_l2": rel_l2(parallel, plain), "counts": counts}


def run_fallbacks(seed: int) -> dict:
    """Under Ulysses parallelism: a boolean key mask, and tensors that require grad, go to
    diffusers' own (native, Ulysses-capable) attention, each counted under its reason."""
    from diffusers import ContextParallelConfig
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    import jattn

    model = tiny_model("flux2", seed)
    model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=2))
    config = model.transformer_blocks[0].attn.processor._parallel_config
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 12, HEADS, HEAD_DIM, generator=g) for _ in range(3))
    mask = torch.ones(1, 12, dtype=torch.bool)
    result = {}
    with jattn.diffusers.enabled():
        jattn.diffusers.reset_counts()
        with torch.no_grad():
            dispatch_attention_fn(q, k, v, attn_mask=mask, parallel_config=config)
        q.requires_grad_(True)
        out = dispatch_attention_fn(q, k, v, parallel_config=config)
        out.sum().backward()
        result["counts"] = jattn.diffusers.counts()
        result["grad"] = q.grad is not None
    return result


def native_ring_refuses(seed: int) -> str:
    """The premise: diffusers' own native backend cannot run ring attention (no lse)."""
    from diffusers import ContextParallelConfig

    inputs = tiny_inputs("flux2", seed)
    model = tiny_model("flux2", seed)
    model.enable_parallelism(config=ContextParallelConfig(ring_degree=2))
    try:
        with torch.no_grad():
            model(**inputs)
    except ValueError as e:
        return str(e)
    return ""


def worker(rank: int, world: int, port: int, out_dir: str, modes: list, seed: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    _device_count_shim()
    # a short collective timeout: a rank that fails lets the others fail too instead of waiting forever
    dist.init_process_group("cpu:gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fmt: skip
    try:
        report = {"cases": [], "world": world}
        for kind in ("flux1", "flux2"):
            for mode in modes:
                report["cases"].append(run_case(kind, mode, world, seed))
        if world == 2:
            report["fallbacks"] = run_fallbacks(seed)
            report["native_ring_error"] = native_ring_refuses(seed)
    except Exception:
        report = {"error": traceback.format_exc()}
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
