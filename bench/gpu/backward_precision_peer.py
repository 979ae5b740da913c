"""Issue 30's table, re-measured: the backward's error against float64 autograd, jattn's and PyTorch's
fp32 SDPA's on the same draws, and where jattn's comes from.

Per shape and input (q, k ~ N(0, 1) * amp, v, dout ~ N(0, 1), float32; amp 4 and 8 are issue 30's
peaky rows), rel_l2 of dq / dk / dv against float64 autograd of the same float32 inputs for:
  jattn chain   jattn.attention then loss.backward() (jattn's forward's out and lse)
  jattn bwd     torch.ops.jattn.attention_backward handed the float64 forward's out and lse rounded
                to float32 once (the backward alone)
  torch         PyTorch's fp32 SDPA forward and backward on the same device
  floor         a float64 backward handed that rounded out and lse, its logits rounded to float32
                once (kit/metrics.h: the gate's float32 floor)
and the error of jattn's forward lse against float64 in float32 ulps of the exact lse: mean (a bias:
the tensor core truncates, so a forward lse from its S comes out low) and rms, beside the out's
rel_l2. The float64 references run on the CPU.

usage: python3 backward_precision_peer.py [--device cuda] [--heads 4] [--json FILE]
prints one table (markdown) per call; JATTN_CUDA_BWD_KERNEL / JATTN_CUDA_KERNEL choose the kernels.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch

import jattn

F64 = torch.float64


def scale_of(d: int) -> float:
    """The default scale as jattn and PyTorch apply it: 1/sqrt(D) rounded to float32 (an input of the
    float32 problem like q; at D = 128 the exact value would shift every logit by 1.7e-8 of itself,
    ~0.2 ulp of a peaky row's lse)."""
    return float(np.float32(1.0 / math.sqrt(d)))


def rel(a: torch.Tensor, r: torch.Tensor) -> float:
    a, r = a.detach().cpu().double(), r.detach().cpu().double()
    return (torch.linalg.norm(a - r) / torch.linalg.norm(r)).item()


def float64_backward(q, k, v, dout, out, lse):
    q, k, v, dout, out, lse = (t.double() for t in (q, k, v, dout, out, lse))
    c = scale_of(q.shape[-1])
    p = torch.exp(((q @ k.transpose(-1, -2)) * c).float().double() - lse[..., None])
    ds = p * (dout @ v.transpose(-1, -2) - (dout * out).sum(-1, keepdim=True))
    return c * ds @ k, c * ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dout


def autograd(fn, q, k, v, dout, device):
    leaves = [t.detach().clone().to(device).requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves)
    (out * dout.to(device)).sum().backward()
    return [t.grad.cpu() for t in leaves]


def case(shape, amp, device, seed):
    b, h, sq, skv, d = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g) * amp
    k = torch.randn(b, h, skv, d, generator=g) * amp
    v = torch.randn(b, h, skv, d, generator=g)
    dout = torch.randn(b, h, sq, d, generator=g)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    s = (leaves[0] @ leaves[1].transpose(-1, -2)) * scale_of(d)
    lse64 = torch.logsumexp(s, -1)
    out64 = torch.softmax(s, -1) @ leaves[2]
    ref = torch.autograd.grad((out64 * dout.double()).sum(), leaves)
    out32, lse32 = out64.detach().float(), lse64.detach().float()
    floor = float64_backward(q, k, v, dout, out32, lse32)
    row = {"shape": shape, "amp": amp}
    row["floor"] = [rel(a, r) for a, r in zip(floor, ref)]
    c = scale_of(d)
    ours = autograd(lambda x, y, z: jattn.attention(x, y, z, scale=c), q, k, v, dout, device)
    row["jattn chain"] = [rel(a, r) for a, r in zip(ours, ref)]
    alone = torch.ops.jattn.attention_backward(
        *(t.to(device) for t in (dout, q, k, v, out32, lse32)), None, "bhsd", c, "auto", "f32", 0, None, None
    )
    row["jattn bwd"] = [rel(a, r) for a, r in zip(alone, ref)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    row["torch"] = [
        rel(a, r) for a, r in zip(autograd(lambda x, y, z: sdpa(x, y, z, scale=c), q, k, v, dout, device), ref)
    ]
    o, lse = jattn.attention(q.to(device), k.to(device), v.to(device), scale=c, return_lse=True)
    ulp = torch.from_numpy(np.spacing(np.abs(lse64.detach().numpy()).astype(np.float32)).astype(np.float64))
    err = (lse.cpu().double() - lse64.detach()) / ulp
    row["lse ulp mean, rms"] = [err.mean().item(), err.pow(2).mean().sqrt().item()]
    row["out"] = rel(o, out64)
    row["torch out"] = rel(sdpa(q.to(device), k.to(device), v.to(device), scale=c), out64)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shapes = [(1, a.heads, 1536, 1536, 128), (1, a.heads, 700, 1300, 64)]
    rows = [case(s, amp, a.device, a.seed) for s in shapes for amp in (1.0, 4.0, 8.0)]
    print(
        "| (Sq, Skv, D), q k x | out jattn / torch | lse err (ulp mean, rms) | dq / dk / dv: floor | jattn chain | "
        "jattn bwd (lse once) | torch fp32 SDPA |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = lambda x: " / ".join(f"{e:.2e}" for e in x)  # noqa: E731
        print(
            f"| ({r['shape'][2]}, {r['shape'][3]}, {r['shape'][4]}), x{r['amp']:g} | {r['out']:.1e} / "
            f"{r['torch out']:.1e} | {r['lse ulp mean, rms'][0]:+.2f}, {r['lse ulp mean, rms'][1]:.2f} | "
            f"{f(r['floor'])} | {f(r['jattn chain'])} | {f(r['jattn bwd'])} | {f(r['torch'])} |"
        )
    if a.json:
        with open(a.json, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
