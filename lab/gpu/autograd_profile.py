"""Where the time of one forward + backward through autograd goes, jattn.attention against PyTorch's fp32
SDPA: torch.profiler over a few steps at one shape, the CPU and CUDA time of each op and kernel, and the
step's wall time with and without a synchronisation per step.

usage: python3 autograd_profile.py [B,H,S,D]      (default 1,24,1536,128)
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import jattn


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    bsz, heads, seq, dim = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,24,1536,128").split(","))
    dev = torch.device("cuda")
    q, k, v = (torch.randn(bsz, heads, seq, dim, device=dev).requires_grad_() for _ in range(3))
    dout = torch.randn(bsz, heads, seq, dim, device=dev)

    def step(f):
        for t in (q, k, v):
            t.grad = None
        f(q, k, v).backward(dout)

    for name, f in (("jattn", jattn.attention), ("sdpa", F.scaled_dot_product_attention)):
        for _ in range(5):
            step(f)
        torch.cuda.synchronize()
        n = 20
        t0 = time.perf_counter()
        for _ in range(n):
            step(f)
        torch.cuda.synchronize()
        pipelined = (time.perf_counter() - t0) / n * 1e3
        synced = []
        for _ in range(n):
            t0 = time.perf_counter()
            step(f)
            torch.cuda.synchronize()
            synced.append((time.perf_counter() - t0) * 1e3)
        synced.sort()
        cpu = []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(f)
            cpu.append((time.perf_counter() - t0) * 1e3)  # host time to enqueue one step
        cpu.sort()
        print(
            f"RESULT {name} ({bsz},{heads},{seq},{dim}) step ms: pipelined {pipelined:.3f}, synced median "
            f"{synced[n // 2]:.3f}, host enqueue median {cpu[n // 2]:.3f}",
            flush=True,
        )
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(f)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12), flush=True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)


if __name__ == "__main__":
    main()
