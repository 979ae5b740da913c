"""PyTorch's fp32 SDPA backward with masks and grouped-query heads on the GPU, the peer of
bench/gpu/masks_backward_bench.c on the same cases (its CASE syntax).

TF32 off; fp32 inputs; out = SDPA(q, k, v, ...) with PyTorch's own meaning of each part: causal top-left as
is_causal=True, grouped-query heads as enable_gqa=True (k and v with Hkv heads), and the rest as an
attn_mask: causal bottom-right, block-causal blocks, segments and key lengths as a boolean mask, a key bias
(about 1 key in 8 -inf) as a float mask (the boolean parts folded into it as -inf); then out.backward(dout)
timed alone with CUDA events, median of reps. PyTorch picks its kernel (the memory-efficient one where it
takes the arguments, else the math path); a case it refuses prints FAIL with the reason.

usage: python3 torch_sdpa_masks_backward.py [--reps N] CASE...
prints: RESULT torch <case> <median ms>
"""

import sys

import torch
import torch.nn.functional as F


def parse(case):
    dims, parts = case.split(":")
    v = [int(x) for x in dims.split(",")]
    b, h, hkv, sq, d = v[:5]
    skv = v[5] if len(v) > 5 else sq
    spec = {"causal": None, "blocks": 0, "segments": 0, "bias": False, "kvlen": False}
    for tok in parts.split("+"):
        if tok == "none":
            continue
        if tok == "causal":
            spec["causal"] = "top-left"
        elif tok == "causal-br":
            spec["causal"] = "bottom-right"
        elif tok.startswith("blocks="):
            spec["blocks"] = int(tok[7:])
        elif tok.startswith("segments="):
            spec["segments"] = int(tok[9:])
        elif tok == "bias":
            spec["bias"] = True
        elif tok == "kvlen":
            spec["kvlen"] = True
        else:
            raise ValueError(f"unknown part {tok}")
    return b, h, hkv, sq, skv, d, spec


def equal_cuts(n, total):
    return [a * (total // n) + a * (total % n) // n for a in range(n + 1)]


def block_ids(cuts, length, dev):
    """The block (or segment) index of each position 0 .. length - 1."""
    pos = torch.arange(length, device=dev)
    return torch.bucketize(pos, torch.tensor(cuts[1:], device=dev), right=True)


def make_mask(b, h, sq, skv, spec, dev):
    """(attn_mask or None, is_causal) as SDPA takes them."""
    allowed = None  # boolean [B or 1, 1, Sq, Skv]

    def both(m):
        return m if allowed is None else allowed & m

    if spec["causal"] == "bottom-right" or (spec["causal"] and (spec["blocks"] or spec["segments"])):
        i = torch.arange(sq, device=dev)[:, None]
        j = torch.arange(skv, device=dev)[None, :]
        if spec["segments"]:  # causal inside each segment: positions counted from the segment's start
            qc, kc = equal_cuts(spec["segments"], sq), equal_cuts(spec["segments"], skv)
            sqi, skj = block_ids(qc, sq, dev), block_ids(kc, skv, dev)
            qs = torch.tensor(qc, device=dev)
            ks = torch.tensor(kc, device=dev)
            t, u = i - qs[sqi][:, None], j - ks[skj][None, :]
            lq = (qs[1:] - qs[:-1])[sqi][:, None]
            lk = (ks[1:] - ks[:-1])[sqi][:, None]
            shift = lk - lq if spec["causal"] == "bottom-right" else 0
            allowed = both((u <= t + shift)[None, None])
        else:
            shift = skv - sq if spec["causal"] == "bottom-right" else 0
            allowed = both((j <= i + shift)[None, None])
    if spec["blocks"]:
        qb = block_ids(equal_cuts(spec["blocks"], sq), sq, dev)
        kb = block_ids(equal_cuts(spec["blocks"], skv), skv, dev)
        allowed = both((kb[None, :] <= qb[:, None])[None, None])
    if spec["segments"]:
        qs = block_ids(equal_cuts(spec["segments"], sq), sq, dev)
        ks = block_ids(equal_cuts(spec["segments"], skv), skv, dev)
        allowed = both((qs[:, None] == ks[None, :])[None, None])
    if spec["kvlen"]:
        lens = torch.tensor([skv - x * skv // 8 for x in range(b)], device=dev)
        allowed = both((torch.arange(skv, device=dev)[None, :] < lens[:, None])[:, None, None, :])
    is_causal = spec["causal"] == "top-left" and allowed is None
    if not spec["bias"]:
        return allowed, is_causal
    g = torch.Generator(device=dev).manual_seed(11)
    bias = torch.randn(b, 1, 1, skv, device=dev, generator=g)
    j = torch.arange(b * skv, device=dev).reshape(b, 1, 1, skv)
    bias = bias.masked_fill((j * 2654435761) % 8 == 3, float("-inf"))
    if is_causal:  # SDPA takes is_causal or attn_mask, not both
        i = torch.arange(sq, device=dev)[:, None]
        jj = torch.arange(skv, device=dev)[None, :]
        allowed, is_causal = (jj <= i)[None, None], False
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return bias, False


def median_ms(fn, setup, reps):
    times = []
    for i in range(reps + 2):
        setup()
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True)
        z = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        z.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(z))
    times.sort()
    return times[len(times) // 2]


def time_case(case: str, reps: int, dev: torch.device) -> None:
    """Prints the median time of SDPA's backward at one case (its tensors are freed on return)."""
    b, h, hkv, sq, skv, d, spec = parse(case)
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.randn(b, h, sq, d, device=dev, generator=g, requires_grad=True)
    k, v = (torch.randn(b, hkv, skv, d, device=dev, generator=g, requires_grad=True) for _ in range(2))
    dout = torch.randn(b, h, sq, d, device=dev, generator=g)
    try:
        mask, is_causal = make_mask(b, h, sq, skv, spec, dev)
        state = {}

        def setup():
            for t in (q, k, v):
                t.grad = None
            state["out"] = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=hkv != h
            )

        ms = median_ms(lambda: state["out"].backward(dout), setup, reps)
        print(f"RESULT torch {case} {ms:.4f}", flush=True)
    except Exception as e:  # noqa: BLE001 (a case PyTorch refuses is reported, not fatal)
        print(f"FAIL torch {case}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args = sys.argv[1:]
    reps = 10
    if len(args) >= 2 and args[0] == "--reps":
        reps, args = int(args[1]), args[2:]
    dev = torch.device("cuda")
    for case in args:
        time_case(case, reps, dev)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
