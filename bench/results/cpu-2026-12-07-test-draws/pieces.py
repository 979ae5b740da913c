import statistics
import time

import torch

import jattn
from jattn import _options
from jattn import _torch_impl as ti

torch.set_num_threads(1)
q, k, v, g = (torch.randn(1, 2, 16, 32) for _ in range(4))
opts = _options.with_lse(_options.validated("bhsd", None, "auto", "f32", 1, False, False, False, "top_left"))
out, lse, plan = ti._run_forward(q, k, v, opts, None, None, None, -1, True)


def t(fn, n=2000, r=21):
    for _ in range(n):
        fn()
    s = []
    for _ in range(r):
        a = time.perf_counter()
        for _ in range(n):
            fn()
        s.append((time.perf_counter() - a) / n * 1e6)
    return statistics.median(s)


print(f"run_forward       {t(lambda: ti._run_forward(q, k, v, opts, None, None, None, -1, True)):.2f}")
print(f"check_dtypes      {t(lambda: ti._check_dtypes(q, k, v)):.2f}")
print(f"device_index      {t(lambda: ti._device_index(q, k, v)):.2f}")
print(f"backward_of       {t(lambda: ti._backward_of(plan, q, k, v, out, lse, g, None, None)):.2f}")
print(f"2 empty_like      {t(lambda: (torch.empty_like(q), torch.empty(q.shape[:-1]))):.2f}")
print(f"3 empty_like      {t(lambda: (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))):.2f}")
print(f"thread_context    {t(lambda: ti._thread_context()):.2f}")
print(f"grad_enabled      {t(lambda: ti._grad_enabled()):.2f}")
bp = next(iter(plan.backward_plans.values()))
dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
ptrs = (
    q.data_ptr(),
    k.data_ptr(),
    v.data_ptr(),
    out.data_ptr(),
    lse.data_ptr(),
    g.data_ptr(),
    None,
)
gp = (dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
ctx = ti._thread_context()
print(f"bare plan_backward {t(lambda: ti._plan_backward(bp.handle, ctx, None, None, 0, *ptrs, None, *gp)):.2f}")
print(
    "bare plan_forward  {:.2f}".format(
        t(
            lambda: ti._plan_forward(
                plan.handle,
                ctx,
                None,
                None,
                0,
                ptrs[0],
                ptrs[1],
                ptrs[2],
                None,
                gp[0],
                ptrs[4],
            )
        )
    )
)
import sys  # noqa: E402

sys.path.insert(0, "/work/main/bench/python")
from host_cost import EmptyAttention  # noqa: E402

qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))


def s_empty():
    qg.grad = kg.grad = vg.grad = None
    EmptyAttention.apply(qg, kg, vg).backward(g)


def s_apply():
    qg.grad = kg.grad = vg.grad = None
    ti.EagerAttention.apply(qg, kg, vg, opts, None).backward(g)


def s_api():
    qg.grad = kg.grad = vg.grad = None
    jattn.attention(qg, kg, vg, threads=1).backward(g)


def s_sdpa():
    qg.grad = kg.grad = vg.grad = None
    torch.nn.functional.scaled_dot_product_attention(qg, kg, vg).backward(g)


def f_apply():
    ti.EagerAttention.apply(qg, kg, vg, opts, None)


def f_api():
    jattn.attention(qg, kg, vg, threads=1)


def f_empty():
    EmptyAttention.apply(qg, kg, vg)


for n, f in (
    ("step empty", s_empty),
    ("step apply", s_apply),
    ("step api", s_api),
    ("step sdpa", s_sdpa),
    ("fwd empty", f_empty),
    ("fwd apply", f_apply),
    ("fwd api", f_api),
):
    print("%-12s %.2f" % (n, t(f, 500)))
acc = {"b": 0.0, "n": 0, "f": 0.0}
orig_b = ti._backward_once


def timed_b(ctx, dout, dlse):
    a = time.perf_counter()
    r = orig_b(ctx, dout, dlse)
    acc["b"] += time.perf_counter() - a
    acc["n"] += 1
    return r


ti._backward_once = timed_b
orig_rf = ti._run_forward


def timed_f(*a):
    t0 = time.perf_counter()
    r = orig_rf(*a)
    acc["f"] += time.perf_counter() - t0
    return r


ti._run_forward = timed_f
for _ in range(5000):
    s_apply()
print(
    "inside backward_once {:.2f} us, inside run_forward {:.2f} us per step".format(
        acc["b"] / acc["n"] * 1e6, acc["f"] / acc["n"] * 1e6
    )
)
acc2 = {"pb": 0.0, "pf": 0.0, "al": 0.0}
opb, opf = ti._plan_backward, ti._plan_forward


def tpb(*a):
    t0 = time.perf_counter()
    r = opb(*a)
    acc2["pb"] += time.perf_counter() - t0
    return r


def tpf(*a):
    t0 = time.perf_counter()
    r = opf(*a)
    acc2["pf"] += time.perf_counter() - t0
    return r


ti._plan_backward, ti._plan_forward = tpb, tpf
acc["n"] = 0
for _ in range(5000):
    s_apply()
print("C+ctypes backward {:.2f}, forward {:.2f} us per step".format(acc2["pb"] / 5000 * 1e6, acc2["pf"] / 5000 * 1e6))
ti._plan_backward, ti._plan_forward = opb, opf
for _ in range(2000):
    ti._plan_backward(bp.handle, ctx, None, None, 0, *ptrs, None, *gp)
a = time.perf_counter()
for _ in range(5000):
    ti._plan_backward(bp.handle, ctx, None, None, 0, *ptrs, None, *gp)
print("standalone backward %.2f" % ((time.perf_counter() - a) / 5000 * 1e6))
