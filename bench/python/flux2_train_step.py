"""A training step (forward + backward) of a diffusers FLUX.2 transformer on CUDA, f32: PyTorch's
SDPA against ``jattn.diffusers.enabled()``, eager and ``torch.compile``; the step time and the
gradients' error against the float64 step of the same model and inputs (issue 22).

The model: 24 heads of 128, 2 double-stream + 2 single-stream blocks (random weights, every
parameter trainable), image + text tokens as given. One step = the loss (MSE of the output against
a fixed random target) and ``torch.autograd.grad`` of every parameter. Time: wall time around
whole steps (synchronized before and after), median of ``--reps`` after two warm-up steps (the compile's too). Error: rel_l2 of the
concatenation of all parameter gradients against the float64 step (the model cast to float64 on the
same GPU, diffusers' native attention in float64), and the largest rel_l2 of one parameter's
gradient. Each jattn row says how its attention calls went: ``jattn.diffusers.counts()`` (eager calls;
4 per step (2 double + 2 single blocks), times reps + 2 steps, the calls of jattn's backward
(compiled too), and any fallback warning.

usage: python3 bench/python/flux2_train_step.py [--tokens 1024+512 4096+512] [--reps 5] [--json F]
prints one row per (tokens, attention, mode) and a markdown table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

import torch

import jattn
from jattn import _torch_impl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
from flux2_testing import flux2_inputs  # the tests' FLUX.2 inputs (image grid, text ids)


def make_model(device: str, heads: int = 24) -> torch.nn.Module:
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    model = Flux2Transformer2DModel(num_layers=2, num_single_layers=2, num_attention_heads=heads, attention_head_dim=128,
                                    in_channels=64, joint_attention_dim=256, timestep_guidance_channels=256)  # fmt: skip
    return model.to(device).train()


def step_fn(model):
    params = [p for p in model.parameters() if p.requires_grad]

    def step(inputs, target):
        loss = torch.nn.functional.mse_loss(model(**inputs)[0], target)
        return loss, torch.autograd.grad(loss, params)

    return step


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(step, inputs, target, reps: int):
    times = []
    result = None
    for i in range(reps + 2):
        sync()
        t0 = time.perf_counter()
        result = step(inputs, target)
        sync()
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2], result


def rel_l2(got, ref) -> float:
    d = (got.double() - ref).norm().item()
    n = ref.norm().item()
    return d / n if n else d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", nargs="+", default=["1024+512", "4096+512"])
    ap.add_argument("--modes", nargs="+", default=["eager", "compile"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cuda", help="cuda (the measurement); cpu only to try the script")
    ap.add_argument("--heads", type=int, default=24, help="24 (the measurement); fewer only to try the script")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = args.device
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"torch {torch.__version__}, jattn {jattn.__version__}, {name}", flush=True)
    model = make_model(dev, args.heads)
    model64 = make_model(dev, args.heads).double()
    model64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    rows = []
    calls = {"n": 0}
    real_backward = _torch_impl.backward

    def counted(*a, **k):
        calls["n"] += 1
        return real_backward(*a, **k)

    _torch_impl.backward = counted
    for pair in args.tokens:
        img, txt = (int(x) for x in pair.split("+"))
        inputs = flux2_inputs(1, img, txt, device=dev)
        target = torch.randn(1, img, 64, generator=torch.Generator().manual_seed(2)).to(dev)
        inputs64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
        t0 = time.time()
        ref_loss, ref_grads = step_fn(model64)(inputs64, target.double())
        sync()
        print(f"float64 step at {pair}: {time.time() - t0:.1f} s", flush=True)
        ref_flat = torch.cat([g.reshape(-1) for g in ref_grads])
        for attention in ("sdpa", "jattn"):
            for mode in args.modes:
                torch._dynamo.reset()
                step = step_fn(model)
                if mode == "compile":
                    compiled = torch.compile(model)
                    params = [p for p in model.parameters() if p.requires_grad]

                    def step(inputs, target, compiled=compiled, params=params):
                        loss = torch.nn.functional.mse_loss(compiled(**inputs)[0], target)
                        return loss, torch.autograd.grad(loss, params)

                routed = ""
                with contextlib_for(attention), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    if attention == "jattn":
                        jattn.diffusers.reset_counts()
                        calls["n"] = 0
                    t0 = time.time()
                    ms, (loss, grads) = timed(step, inputs, target, args.reps)
                    wall = time.time() - t0
                    if attention == "jattn":
                        fallbacks = [str(w.message) for w in caught if "jattn.diffusers" in str(w.message)]
                        routed = (f"eager counts {jattn.diffusers.counts()}, jattn backward calls {calls['n']}, "
                                  f"fallback warnings {fallbacks}")  # fmt: skip
                flat = torch.cat([g.reshape(-1) for g in grads])
                worst = max(rel_l2(g, r) for g, r in zip(grads, ref_grads))
                row = {"tokens": pair, "attention": attention, "mode": mode, "step_ms": round(ms, 3),
                       "grad_rel_l2": rel_l2(flat, ref_flat), "worst_param_rel_l2": worst,
                       "loss_rel": abs(loss.item() - ref_loss.item()) / abs(ref_loss.item()),
                       "wall_s": round(wall, 1), "routed": routed}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print("\n| tokens | attention | mode | step ms | grads rel_l2 vs f64 | worst param rel_l2 | loss rel err |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['tokens']} | {r['attention']} | {r['mode']} | {r['step_ms']:.2f} | {r['grad_rel_l2']:.2e} | "
            f"{r['worst_param_rel_l2']:.2e} | {r['loss_rel']:.1e} |"
        )
    for pair in args.tokens:
        for mode in args.modes:
            s = [r for r in rows if r["tokens"] == pair and r["mode"] == mode]
            if len(s) == 2 and not math.isnan(s[1]["step_ms"]):
                print(f"{pair} {mode}: SDPA / jattn step time = {s[0]['step_ms'] / s[1]['step_ms']:.2f}x")


def contextlib_for(attention: str):
    import contextlib

    return jattn.diffusers.enabled() if attention == "jattn" else contextlib.nullcontext()


if __name__ == "__main__":
    main()
