#!/usr/bin/env python3
"""A FLUX.2 transformer forward split over several processes by diffusers' context parallelism,
with jattn as every rank's attention; rank 0 compares it with the same forward on one process.

    torchrun --nproc-per-node 2 python/examples/context_parallel_flux2.py                 # Ulysses
    torchrun --nproc-per-node 2 python/examples/context_parallel_flux2.py --mode ring
    torchrun --nproc-per-node 4 python/examples/context_parallel_flux2.py --mode unified  # 2 x 2

Modes: ulysses, ring, ulysses_anything, ring_anything (uneven sizes), unified (ring x Ulysses).
GPUs: one per process, NCCL. Without a GPU: CPU tensors over gloo, with the two workarounds
diffusers 0.42 needs there (see ``cpu_workarounds``). The transformer has random weights (nothing
is downloaded): 24 heads of 128 as FLUX.2, ``--blocks`` double and single blocks.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import jattn

MODES = {
    "ulysses": dict(ulysses_degree=None),
    "ring": dict(ring_degree=None),
    "ulysses_anything": dict(ulysses_degree=None, ulysses_anything=True),
    "ring_anything": dict(ring_degree=None, ring_anything=True),
    "unified": dict(ring_degree=2, ulysses_degree=None),
}


def cpu_workarounds() -> str:
    """What a CPU-only machine needs (diffusers 0.42): ``enable_parallelism`` computes
    ``rank % torch.accelerator.device_count()``, which is 0 without an accelerator, so count at
    least one device; and the process group's backend string must name "cpu" ("cpu:gloo"): the
    ``*_anything`` modes otherwise place their size exchange on ``torch.accelerator``'s device,
    which a CUDA build of torch reports as cuda even on a machine without a GPU."""
    real = torch.accelerator.device_count
    torch.accelerator.device_count = lambda: max(1, real())
    return "cpu:gloo"


def config_for(mode: str, world: int):
    from diffusers import ContextParallelConfig

    kwargs = dict(MODES[mode])
    for key in ("ring_degree", "ulysses_degree"):
        if key in kwargs and kwargs[key] is None:
            kwargs[key] = world if mode != "unified" else world // 2
    return ContextParallelConfig(**kwargs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", default="ulysses", choices=sorted(MODES))
    p.add_argument("--image-tokens", type=int, default=1024, help="a square grid (1024: 512x512 pixels)")
    p.add_argument("--text-tokens", type=int, default=512)
    p.add_argument("--blocks", default="1,1", help="double,single blocks")
    a = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(cpu_workarounds())

    from diffusers import Flux2Transformer2DModel

    double, single = (int(x) for x in a.blocks.split(","))
    torch.manual_seed(0)  # the same weights and inputs on every rank
    with torch.device(device):
        model = Flux2Transformer2DModel(num_layers=double, num_single_layers=single, num_attention_heads=24,
                                        attention_head_dim=128, in_channels=64, joint_attention_dim=256,
                                        timestep_guidance_channels=256).eval()  # fmt: skip
    side = int(round(a.image_tokens**0.5))
    img_ids = torch.zeros(1, a.image_tokens, 4)
    img_ids[0, :, 1], img_ids[0, :, 2] = torch.arange(a.image_tokens) // side, torch.arange(a.image_tokens) % side
    txt_ids = torch.zeros(1, a.text_tokens, 4)
    txt_ids[0, :, 3] = torch.arange(a.text_tokens)
    inputs = {"hidden_states": torch.randn(1, a.image_tokens, 64), "encoder_hidden_states": torch.randn(1, a.text_tokens, 256),
              "timestep": torch.tensor([0.6]), "guidance": torch.tensor([3.5]), "img_ids": img_ids, "txt_ids": txt_ids}  # fmt: skip
    inputs = {k: v.to(device) for k, v in inputs.items()}

    with torch.no_grad(), jattn.diffusers.enabled():
        single_process = model(**inputs, return_dict=False)[0] if rank == 0 else None
        model.enable_parallelism(config=config_for(a.mode, world))
        jattn.diffusers.reset_counts()
        parallel = model(**inputs, return_dict=False)[0]
        counts = jattn.diffusers.counts()
    if rank == 0:
        err = float((parallel.double() - single_process.double()).norm() / single_process.double().norm())
        print(f"{a.mode} on {world} processes ({device.type}): rel_l2 against one process {err:.2e}; "
              f"attention calls on rank 0: {counts}")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
