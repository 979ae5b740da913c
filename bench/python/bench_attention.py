#!/usr/bin/env python3
"""jattn.attention beside PyTorch's scaled_dot_product_attention, in one run, on the same tensors.

Five measurements, each a median of repeats, PyTorch measured in the same run:

1. attention: ``jattn.attention`` against ``torch.nn.functional.scaled_dot_product_attention``
   on the FLUX shapes (B=1, H=24, D=128, float32, head-major), with each one's error against a
   float64 evaluation of the same inputs. CPU: all cores for both (jattn threads=0,
   torch.set_num_threads(cores)); GPU: CUDA events.
2. upcast: bf16 q, k, v through SDPA in bf16 beside what ``jattn.diffusers.enabled(upcast=True)``
   does with them (cast to float32, jattn, cast back), and the casts' share of that.
3. overhead: the Python layer's time per call over a bare ctypes call of jattn_forward on the
   same problem (a tiny shape, so the call itself is short); on the GPU, the host time to
   enqueue a call.
4. FLUX.2: diffusers' Flux2Transformer2DModel forward (random weights, 24 heads of 128) with
   diffusers' SDPA and with jattn.diffusers.enabled(): float32, and bf16 with upcast=True
   beside bf16 SDPA; the float32 forwards' rel_l2 against the float64 forward where asked.
5. compile: the float32 FLUX.2 forward, SDPA against the switch, eager and torch.compile'd
   (fullgraph, static shapes; on CUDA also mode="reduce-overhead"), timed in one interleaved run,
   with each compiled forward's rel_l2 against its eager twin and its compile time. At the GPU
   defaults (2+8 blocks, 1024+512 and 4096+512 tokens) the compiles take minutes: bench/python/
   gpu_run.sh runs this section as its own step ("compile").

usage: bench_attention.py [--device cpu|cuda] [--seqs 1536,4608] [--flux-tokens 1024+512,4096+512]
                          [--flux-blocks 1,1] [--flux-f64] [--reps N] [--skip attention,upcast,overhead,flux,compile]
                          [--json FILE]
Prints a markdown report; the tables come last.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import jattn
from jattn import _clib, _context


def median_times(fns, reps: int, device: str):
    """Median seconds of each fn over reps rounds, after one warm-up of each; the fns alternate
    within a round, so that drift in the machine's speed (other work on it) hits all alike.
    CUDA events on the GPU, the host clock on the CPU."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    if device == "cuda":
        torch.cuda.synchronize()
    for _ in range(reps):
        for fn, samples in zip(fns, times):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t)
    return [statistics.median(samples) for samples in times]


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def attention_rows(device: str, seqs, reps: int):
    """jattn.attention and SDPA at (1, 24, S, 128) float32."""
    rows = []
    gen = torch.Generator(device=device).manual_seed(1)
    for s in seqs:
        q, k, v = (torch.randn(1, 24, s, 128, device=device, generator=gen) for _ in range(3))
        flops = 4.0 * 24 * s * s * 128
        with torch.no_grad():
            ref = torch.softmax((q.double() @ k.double().transpose(-1, -2)) / 128**0.5, dim=-1) @ v.double()
            t_j, t_t = median_times(
                [lambda: jattn.attention(q, k, v), lambda: F.scaled_dot_product_attention(q, k, v)], reps, device
            )
            e_j, e_t = rel_l2(jattn.attention(q, k, v), ref), rel_l2(F.scaled_dot_product_attention(q, k, v), ref)
        del ref
        rows.append({"what": "attention", "device": device, "shape": f"(1,24,{s},128)",
                     "kernel": jattn.select(q, k, v).kernel, "jattn_ms": t_j * 1e3, "torch_ms": t_t * 1e3,
                     "jattn_tflops": flops / t_j / 1e12, "torch_tflops": flops / t_t / 1e12, "speedup": t_t / t_j,
                     "jattn_rel_l2": e_j, "torch_rel_l2": e_t})  # fmt: skip
    return rows


def upcast_rows(device: str, seqs, reps: int):
    """bf16 q, k, v at (1, 24, S, 128): SDPA in bf16 beside what jattn.diffusers' upcast=True does
    (cast to float32, jattn, cast back), and the float32 jattn call alone (the casts' share)."""
    rows = []
    gen = torch.Generator(device=device).manual_seed(3)
    for s in seqs:
        q, k, v = (torch.randn(1, 24, s, 128, device=device, generator=gen).bfloat16() for _ in range(3))
        qf, kf, vf = q.float(), k.float(), v.float()
        with torch.no_grad():
            t_sdpa, t_upcast, t_f32 = median_times(
                [lambda: F.scaled_dot_product_attention(q, k, v),
                 lambda: jattn.attention(q.float(), k.float(), v.float()).to(torch.bfloat16),
                 lambda: jattn.attention(qf, kf, vf)], reps, device)  # fmt: skip
        rows.append({"what": "upcast", "device": device, "shape": f"(1,24,{s},128)", "sdpa_bf16_ms": t_sdpa * 1e3,
                     "jattn_upcast_ms": t_upcast * 1e3, "jattn_f32_ms": t_f32 * 1e3,
                     "casts_share": (t_upcast - t_f32) / t_upcast, "upcast_over_sdpa_bf16": t_upcast / t_sdpa})  # fmt: skip
    return rows


def overhead_rows(device: str, calls: int = 20000):
    """Per-call time of jattn.attention over a bare ctypes jattn_forward_padded, same problem."""
    shape = (1, 1, 8, 16)
    q, k, v = (torch.randn(shape, device=device) for _ in range(3))
    out = torch.empty(shape, device=device)
    on_device = device == "cuda"
    problem = _clib.Problem(1, 1, 8, 8, 16, 0.0, _clib.JATTN_DTYPE_F32)
    problem.q = problem.k = problem.v = problem.out = _clib.Strides(0, 0, 16)
    exec_ = _clib.Exec(_clib.JATTN_BACKEND_CUDA if on_device else _clib.JATTN_BACKEND_CPU, _clib.JATTN_PRECISION_F32,
                       _clib.JATTN_MEMORY_DEVICE if on_device else _clib.JATTN_MEMORY_HOST, 1)  # fmt: skip
    ctx = None
    if on_device:
        exec_.cuda_stream = torch.cuda.current_stream().cuda_stream
    else:
        ctx = _context.thread_context()
    args = (ctx, ctypes.byref(problem), ctypes.byref(exec_), q.data_ptr(), k.data_ptr(), v.data_ptr(), None,
            out.data_ptr(), None)  # fmt: skip
    forward = _clib.forward_padded

    def per_call(fn) -> float:
        """Host seconds per call, the best of many short batches (200 calls: about a millisecond,
        so that some batches run without being preempted on a shared machine). On the GPU a
        batch is short enough not to fill the launch queue, and the device is idle at its start,
        so the time is the host's: enqueueing, not the kernels."""
        batch = 200
        for _ in range(1000):
            fn()
        samples = []
        for _ in range(calls // batch):
            if on_device:
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(batch):
                fn()
            samples.append((time.perf_counter() - t) / batch)
        if on_device:
            torch.cuda.synchronize()
        return min(samples)

    with torch.no_grad():
        bare = per_call(lambda: forward(*args))
        full = per_call(lambda: jattn.attention(q, k, v, threads=1))
        full_out = per_call(lambda: jattn.attention(q, k, v, threads=1, out=out))
        rows = [{"what": "overhead", "device": device, "call": "bare ctypes jattn_forward_padded", "us": bare * 1e6},
                {"what": "overhead", "device": device, "call": "jattn.attention (allocates out)", "us": full * 1e6,
                 "over_bare_us": (full - bare) * 1e6},
                {"what": "overhead", "device": device, "call": "jattn.attention(out=)", "us": full_out * 1e6,
                 "over_bare_us": (full_out - bare) * 1e6}]  # fmt: skip
        if not on_device:
            qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
            numpy_call = per_call(lambda: jattn.attention(qn, kn, vn, threads=1))
            rows.append({"what": "overhead", "device": device, "call": "jattn.attention (numpy)", "us": numpy_call * 1e6,
                         "over_bare_us": (numpy_call - bare) * 1e6})  # fmt: skip
    return rows


def flux2_model(blocks, device: str):
    """FLUX.2's transformer with random weights: 24 heads of 128, the default MLP ratio (3), the
    given numbers of double and single blocks."""
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    with torch.device(device):  # random weights drawn where they will live
        model = Flux2Transformer2DModel(num_layers=blocks[0], num_single_layers=blocks[1], num_attention_heads=24,
                                        attention_head_dim=128, in_channels=64, joint_attention_dim=256,
                                        timestep_guidance_channels=256)  # fmt: skip
    return model.eval()


def flux2_inputs(image_tokens: int, text_tokens: int, device: str, dtype) -> dict:
    """Random latents and text embeddings with FLUX.2's position ids."""
    g = torch.Generator().manual_seed(2)
    side = int(round(image_tokens**0.5))
    img_ids = torch.zeros(image_tokens, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(image_tokens) // side, torch.arange(image_tokens) % side
    txt_ids = torch.zeros(text_tokens, 4)
    txt_ids[:, 3] = torch.arange(text_tokens)
    return {"hidden_states": torch.randn(1, image_tokens, 64, generator=g).to(device, dtype),
            "encoder_hidden_states": torch.randn(1, text_tokens, 256, generator=g).to(device, dtype),
            "timestep": torch.tensor([0.6], device=device, dtype=dtype),
            "guidance": torch.tensor([3.5], device=device, dtype=dtype),
            "img_ids": img_ids.to(device), "txt_ids": txt_ids.to(device), "return_dict": False}  # fmt: skip


def flux2_rows(device: str, token_pairs, blocks, reps: int, with_f64: bool):
    """FLUX.2 forwards, float32 and bf16, with diffusers' SDPA and through jattn."""
    rows = []
    model = flux2_model(blocks, device)
    for image, text in token_pairs:
        for dtype, upcast in ((torch.float32, False), (torch.bfloat16, True)):
            if dtype is torch.bfloat16 and device == "cpu":
                continue  # bf16 on this CPU is neither what a user runs nor what the issue measures
            model.to(dtype)
            inputs = flux2_inputs(image, text, device, dtype)

            def through_jattn():
                with jattn.diffusers.enabled(upcast=upcast):
                    return model(**inputs)[0]

            with torch.no_grad():
                sdpa_out = model(**inputs)[0]
                jattn.diffusers.reset_counts()
                jattn_out = through_jattn()
                routed = jattn.diffusers.counts().get("jattn", 0)
                t_sdpa, t_jattn = median_times([lambda: model(**inputs), through_jattn], reps, device)
            row = {"what": "flux2", "device": device, "tokens": f"{image}+{text}", "blocks": f"{blocks[0]}+{blocks[1]}",
                   "dtype": str(dtype).replace("torch.", "") + (" (jattn upcast=True)" if upcast else ""),
                   "sdpa_ms": t_sdpa * 1e3, "jattn_ms": t_jattn * 1e3, "speedup": t_sdpa / t_jattn,
                   "routed_calls_per_forward": routed}  # fmt: skip
            if with_f64 and dtype is torch.float32:
                model.double()
                with torch.no_grad():
                    exact = model(**flux2_inputs(image, text, device, torch.float64))[0]
                row["sdpa_rel_l2"], row["jattn_rel_l2"] = rel_l2(sdpa_out, exact), rel_l2(jattn_out, exact)
                del exact
            rows.append(row)
            del sdpa_out, jattn_out
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


def flux2_compiled_rows(device: str, token_pairs, blocks, reps: int):
    """The float32 FLUX.2 forward, SDPA against jattn.diffusers.enabled(), eager and compiled
    (torch.compile fullgraph, static shapes; on CUDA also mode="reduce-overhead", CUDA graphs),
    all timed in one interleaved run per token count. Each compiled forward is checked against
    its eager twin (rel_l2) before it is timed; the compile time (first call) is reported."""
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    rows = []
    model = flux2_model(blocks, device)
    modes = ["default"] + (["reduce-overhead"] if device == "cuda" else [])
    for image, text in token_pairs:
        inputs = flux2_inputs(image, text, device, torch.float32)
        variants = {}  # name -> (callable, through jattn)

        def run_eager(through_jattn):
            def fn():
                if through_jattn:
                    with jattn.diffusers.enabled():
                        return model(**inputs)[0]
                return model(**inputs)[0]

            return fn

        for attn in ("sdpa", "jattn"):
            variants[f"eager {attn}"] = run_eager(attn == "jattn")
        compile_s = {}
        with torch.no_grad():
            eager_out = {attn: variants[f"eager {attn}"]().clone() for attn in ("sdpa", "jattn")}
            errors = {}
            for mode in modes:
                for attn in ("sdpa", "jattn"):
                    compiled = torch.compile(model, fullgraph=True, dynamic=False, mode=mode)

                    def fn(compiled=compiled, through_jattn=(attn == "jattn")):
                        if through_jattn:
                            with jattn.diffusers.enabled():
                                return compiled(**inputs)[0]
                        return compiled(**inputs)[0]

                    name = f"compiled {attn}" + (" (reduce-overhead)" if mode == "reduce-overhead" else "")
                    t = time.perf_counter()
                    first = fn().clone()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    compile_s[name] = time.perf_counter() - t
                    for _ in range(2):  # CUDA graphs record on a later call
                        fn()
                    errors[name] = rel_l2(fn().clone(), eager_out[attn].double())
                    errors[name + " first call"] = rel_l2(first, eager_out[attn].double())
                    variants[name] = fn
            names = list(variants)
            times = median_times([variants[n] for n in names], reps, device)
        for name, t in zip(names, times):
            attn = "jattn" if "jattn" in name else "sdpa"
            peer = name.replace("jattn", "sdpa")
            rows.append({"what": "flux2_compiled", "device": device, "tokens": f"{image}+{text}",
                         "blocks": f"{blocks[0]}+{blocks[1]}", "variant": name, "attention": attn, "ms": t * 1e3,
                         "sdpa_ms_same_variant": times[names.index(peer)] * 1e3,
                         "speedup_vs_sdpa": times[names.index(peer)] / t,
                         "compile_s": compile_s.get(name), "rel_l2_vs_eager": errors.get(name)})  # fmt: skip
        del eager_out
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def markdown(rows) -> str:
    lines = []
    att = [r for r in rows if r["what"] == "attention"]
    if att:
        lines += ["| device | shape | jattn kernel | jattn ms | torch SDPA ms | jattn TFLOP/s | torch TFLOP/s | "
                  "jattn / SDPA | jattn rel_l2 | SDPA rel_l2 |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for r in att:
            lines.append(f"| {r['device']} | {r['shape']} | `{r['kernel']}` | {r['jattn_ms']:.2f} | {r['torch_ms']:.2f} | "
                         f"{r['jattn_tflops']:.3f} | {r['torch_tflops']:.3f} | {r['speedup']:.2f}x | "
                         f"{r['jattn_rel_l2']:.2e} | {r['torch_rel_l2']:.2e} |")  # fmt: skip
        lines.append("")
    up = [r for r in rows if r["what"] == "upcast"]
    if up:
        lines += ["| device | bf16 q, k, v | SDPA bf16 ms | jattn upcast ms (cast, f32 attention, cast back) | "
                  "jattn f32 alone ms | the casts' share | upcast / SDPA bf16 |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for r in up:
            lines.append(f"| {r['device']} | {r['shape']} | {r['sdpa_bf16_ms']:.2f} | {r['jattn_upcast_ms']:.2f} | "
                         f"{r['jattn_f32_ms']:.2f} | {100 * r['casts_share']:.1f}% | {r['upcast_over_sdpa_bf16']:.2f}x |")  # fmt: skip
        lines.append("")
    ovh = [r for r in rows if r["what"] == "overhead"]
    if ovh:
        lines += [
            "| device | call (1x1x8x16, 1 thread) | µs per call | Python layer over the bare call, µs |",
            "| --- | --- | ---: | ---: |",
        ]
        for r in ovh:
            over = f"{r['over_bare_us']:.1f}" if "over_bare_us" in r else "—"
            lines.append(f"| {r['device']} | {r['call']} | {r['us']:.1f} | {over} |")
        lines.append("")
    flux = [r for r in rows if r["what"] == "flux2"]
    if flux:
        lines += ["| device | FLUX.2 blocks (double+single) | tokens (image+text) | dtype | SDPA forward ms | "
                  "jattn forward ms | speedup | rel_l2 vs float64 (SDPA / jattn) |",
                  "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]  # fmt: skip
        for r in flux:
            acc = f"{r['sdpa_rel_l2']:.2e} / {r['jattn_rel_l2']:.2e}" if "jattn_rel_l2" in r else "—"
            lines.append(f"| {r['device']} | {r['blocks']} | {r['tokens']} | {r['dtype']} | {r['sdpa_ms']:.1f} | "
                         f"{r['jattn_ms']:.1f} | {r['speedup']:.3f}x | {acc} |")  # fmt: skip
        lines.append("")
    comp = [r for r in rows if r["what"] == "flux2_compiled"]
    if comp:
        lines += ["| device | FLUX.2 blocks | tokens (image+text) | float32 forward | ms | SDPA ms (same variant) | "
                  "SDPA / this | compile s (first call) | rel_l2 vs eager |",
                  "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for r in comp:
            compile_s = f"{r['compile_s']:.1f}" if r["compile_s"] is not None else "—"
            err = f"{r['rel_l2_vs_eager']:.1e}" if r["rel_l2_vs_eager"] is not None else "—"
            lines.append(f"| {r['device']} | {r['blocks']} | {r['tokens']} | {r['variant']} | {r['ms']:.2f} | "
                         f"{r['sdpa_ms_same_variant']:.2f} | {r['speedup_vs_sdpa']:.3f}x | {compile_s} | {err} |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--seqs", default=None, help="attention seq lengths (default: cpu 1536; cuda 1536,4608)")
    p.add_argument("--flux-tokens", default=None, help="image+text pairs (default: cpu 256+64,1024+512; cuda "
                   "1024+512,4096+512)")  # fmt: skip
    p.add_argument("--flux-blocks", default=None, help="double,single blocks (default: cpu 1,1; cuda 2,8)")
    p.add_argument("--flux-f64", action="store_true", help="also the float32 forwards' rel_l2 against float64")
    p.add_argument("--reps", type=int, default=None, help="repeats (default: cpu 5, cuda 20)")
    p.add_argument("--skip", default="", help="comma list of attention, upcast, overhead, flux, compile")
    p.add_argument("--json", default=None, help="also write one JSON object per row to this file")
    a = p.parse_args(argv)
    cpu = a.device == "cpu"
    seqs = [int(s) for s in (a.seqs or ("1536" if cpu else "1536,4608")).split(",")]
    pairs = [tuple(int(x) for x in t.split("+")) for t in (a.flux_tokens or ("256+64,1024+512" if cpu else
                                                                               "1024+512,4096+512")).split(",")]  # fmt: skip
    blocks = tuple(int(x) for x in (a.flux_blocks or ("1,1" if cpu else "2,8")).split(","))
    reps = a.reps or (5 if cpu else 20)
    skip = set(filter(None, a.skip.split(",")))
    if cpu:
        torch.set_num_threads(os.cpu_count() or 1)

    print(f"# jattn {jattn.__version__} (Python) beside PyTorch {torch.__version__}, {a.device}\n")
    print(f"- command: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`")
    print(f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
          + (f", {torch.cuda.get_device_name()}" if not cpu else ""))  # fmt: skip
    print(f"- Python {platform.python_version()}; load average before: {os.getloadavg()}")
    print(f"- jattn backends: {[(b.name, b.detail) for b in jattn.backends() if b.available]}\n")
    rows = []
    if "attention" not in skip:
        rows += attention_rows(a.device, seqs, reps)
    if "upcast" not in skip:
        rows += upcast_rows(a.device, seqs, reps)
    if "overhead" not in skip:
        rows += overhead_rows(a.device)
    if "flux" not in skip:
        rows += flux2_rows(a.device, pairs, blocks, max(3, reps // 4) if not cpu else 3, a.flux_f64)
    if "compile" not in skip:
        rows += flux2_compiled_rows(a.device, pairs, blocks, max(5, reps // 2) if not cpu else 3)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"- load average after: {os.getloadavg()}\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
