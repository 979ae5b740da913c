import statistics
import time

import torch

from jattn import _options
from jattn import _torch_impl as ti

torch.set_num_threads(1)
q, k, v, g = (torch.randn(1, 2, 16, 32) for _ in range(4))
opts = _options.with_lse(_options.validated("bhsd", None, "auto", "f32", 1, False, False, False, "top_left"))
out, lse, plan = ti._run_forward(q, k, v, opts, None, None, None, -1, True)
qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))


def t(fn, n=500, r=21):
    for _ in range(n):
        fn()
    s = []
    for _ in range(r):
        a = time.perf_counter()
        for _ in range(n):
            fn()
        s.append((time.perf_counter() - a) / n * 1e6)
    return statistics.median(s)


class E3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
        ctx.save_for_backward(q, k, v, out)
        ctx.lse = lse
        return out

    @staticmethod
    def backward(ctx, d):
        q, k, v, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class E5(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, o, m):
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
        ctx.save_for_backward(q, k, v, out)
        ctx.lse, ctx.opts, ctx.masks, ctx.plan = lse, o, m, plan
        return out

    @staticmethod
    def backward(ctx, d):
        q, k, v, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None, None


class R5(torch.autograd.Function):  # real forward, empty backward
    @staticmethod
    def forward(ctx, q, k, v, o, m):
        out, lse, p = ti._run_forward(q, k, v, o, None, None, m, -1, True)
        ctx.save_for_backward(q, k, v, out)
        ctx.lse, ctx.opts, ctx.masks, ctx.plan = lse, o, m, p
        return out

    @staticmethod
    def backward(ctx, d):
        q, k, v, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None, None


class RR(R5):  # real both
    @staticmethod
    def backward(ctx, d):
        s = ctx.saved_tensors
        return (
            *ti._backward_of(ctx.plan, s[0], s[1], s[2], s[3], ctx.lse, d, None, None),
            None,
            None,
        )


def mk(F, n):
    if n == 3:

        def f():
            qg.grad = kg.grad = vg.grad = None
            F.apply(qg, kg, vg).backward(g)
    else:

        def f():
            qg.grad = kg.grad = vg.grad = None
            F.apply(qg, kg, vg, opts, None).backward(g)

    return f


def sdpa():
    qg.grad = kg.grad = vg.grad = None
    torch.nn.functional.scaled_dot_product_attention(qg, kg, vg).backward(g)


fs = [
    ("E3", mk(E3, 3)),
    ("E5", mk(E5, 5)),
    ("R5 real fwd", mk(R5, 5)),
    ("RR real both", mk(RR, 5)),
    ("Eager", mk(ti.EagerAttention, 5)),
    ("sdpa", sdpa),
]
for _rep in range(2):
    print(" ".join(f"{n} {t(f):.1f}" for n, f in fs))
