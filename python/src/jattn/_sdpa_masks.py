"""What an SDPA ``attn_mask`` means in jattn's terms (``jattn.diffusers``' routers).

``torch.nn.functional.scaled_dot_product_attention`` takes one dense mask broadcastable to
``[B, H, Sq, Skv]``: boolean (True = attend) or float (added to the scaled scores; ``-inf`` leaves
a key out). jattn describes the same attention by parts (``jattn.attention``'s keywords): key
padding, an additive key bias, causal (top-left or bottom-right), block-causal, segments, and, here
only, a query mask whose rows attend nothing (their output is 0, as SDPA gives: the router
multiplies them by 0 after the call, which keeps the result and its gradients jattn's own).
:func:`recognise` finds those parts, or says there are none; what it finds reproduces the mask
exactly, element for element (every candidate is checked against the dense mask), never
approximately.

Recognised, with their costs:

* From the strides and shapes alone (no read of the mask, traceable by ``torch.compile``): a mask
  constant over the queries (extent 1 or stride 0 there, the way diffusers expands a ``[B, Skv]``
  mask) is a key mask: a boolean one becomes key padding (``[B or 1, Skv]``) when it is also
  constant over the heads, else a key bias of 0 / ``-inf`` per head; a float one becomes the key
  bias ``[B or 1, H or 1, Skv]`` itself (``-10000`` on padded keys stays ``-10000``, as SDPA adds it).
* From the mask's content, read once per distinct mask tensor (a bounded cache keyed on the
  tensor's identity and version, so a mask that every layer of a forward passes is read once per
  forward): a mask repeated over the queries or heads by copies (diffusers'
  ``prepare_attention_mask``: LTX-Video, LTX-2) is the key mask above; otherwise, per batch,
  ``M = q ⊗ k ∧ S`` with ``q`` the rows that attend any key (the others: zero rows), ``k`` the keys
  that any row attends (key padding) and ``S`` one of: every key; causal top-left or
  bottom-right; block-causal (each row attends a prefix of the keys whose end grows in steps:
  ``block_offsets``); segments (each run of rows attends its own contiguous range of keys, the
  ranges in order: ``cu_seqlens_q`` / ``cu_seqlens_k``, per batch when the batches differ). Failing
  those, the rows that attend exactly one key are set apart (their output is that key's value
  row: HunyuanVideo's token refiner and HunyuanImage force key 0 on for padded queries) and the
  others tried again. A float mask is read as its pattern of left-out keys (``-inf``, or the
  dtype's lowest value, as OmniGen and text encoders write it, when every row keeps a key) plus a
  key bias, which must then be the same for every row that attends the key. Per-head masks other
  than key masks are not recognised. Reading costs a few vectorised passes over the mask's bytes,
  O(B Sq Skv) (the attention itself is O(B H Sq Skv D)): a 2 x 4096 x 4096 segment mask in 0.1 to
  0.3 of one float32 SDPA call of 8 heads of 64 on the CPU. Under ``torch.compile`` and CUDA graph
  capture only the stride-based forms and cached plans are used.

Everything else (per-head structure, an arbitrary pattern, NaN or +inf entries, a float mask whose
bias differs between rows) is not recognised: the caller gives the call to PyTorch.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch

_CACHE_LIMIT = 16
_cache: OrderedDict[int, Tuple[Any, ...]] = OrderedDict()
_cache_lock = threading.Lock()


class MaskPlan(NamedTuple):
    """A mask in jattn's terms: ``kwargs`` for ``jattn.attention`` (``key_padding_mask``,
    ``key_bias``, ``is_causal`` and ``causal_alignment``, ``block_offsets``, ``cu_seqlens_q`` /
    ``cu_seqlens_k``), ``query_rows`` (bool ``[B or 1, Sq]``: rows to keep; the others give 0, or
    None) and ``single_key`` (None, or bool ``[B or 1, Sq]`` rows that attend one key and int64
    ``[B or 1, Sq]`` its index: their output is that key's value row, as SDPA's softmax of one
    logit gives)."""

    kwargs: Dict[str, Any]
    query_rows: Optional[torch.Tensor]
    features: Tuple[str, ...]  #: the parts used, for the routers' capability check and tests
    single_key: Optional[Tuple[torch.Tensor, torch.Tensor]] = None


_NONE = MaskPlan({}, None, ())


def as_4d(mask: torch.Tensor) -> Optional[torch.Tensor]:
    """A ``[b, h, sq, skv]`` view of an SDPA mask (its leading dimensions broadcast, as SDPA
    reads them), or None for masks of more than 4 dimensions."""
    if mask.dim() > 4:
        return None
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask


def _broadcast(mask: torch.Tensor, dim: int) -> bool:
    return mask.shape[dim] == 1 or mask.stride(dim) == 0


def recognise(
    mask: torch.Tensor, batch: int, heads: int, seq_q: int, seq_kv: int, dtype: torch.dtype
) -> Optional[MaskPlan]:
    """jattn's parts for an SDPA ``attn_mask`` of a call of these sizes (``dtype``: the queries'),
    or None when the mask is not recognised (or SDPA would refuse it)."""
    m = as_4d(mask)
    if m is None:
        return None
    if m.dtype is not torch.bool and m.dtype is not dtype:
        return None  # SDPA refuses a float mask of another dtype than the queries'
    if m.dtype is not torch.bool and not m.is_floating_point():
        return None
    b, h, sq, skv = m.shape
    if b not in (1, batch) or h not in (1, heads) or sq not in (1, seq_q) or skv != seq_kv:
        return None
    if seq_kv == 0 or seq_q == 0 or batch == 0:
        return _NONE  # nothing to attend: the mask changes nothing (zero-size answer)
    if _broadcast(m, 2):
        return _key_mask(m[:, :, 0, :])
    if torch.compiler.is_compiling():
        return None  # the content cannot be read while tracing
    cached = _cache_get(mask)
    if cached is not None:
        return cached[0]
    if m.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    plan = _read(m)
    _cache_put(mask, plan)
    return plan


def _key_mask(rows: torch.Tensor) -> Optional[MaskPlan]:
    """A mask constant over the queries, ``[b, h, skv]``."""
    if rows.dtype is torch.bool:
        if _broadcast(rows, 1):
            return MaskPlan({"key_padding_mask": rows[:, 0, :]}, None, ("key_padding",))
        bias = torch.zeros(rows.shape, dtype=torch.float32, device=rows.device).masked_fill_(~rows, float("-inf"))
        return MaskPlan({"key_bias": bias}, None, ("key_bias",))
    bias = rows.float() if rows.dtype is not torch.float32 else rows
    if bias.stride(-1) != 1:
        bias = bias.contiguous()
    return MaskPlan({"key_bias": bias}, None, ("key_bias",))


# ---- the content: read once per mask tensor --------------------------------------------------


def _cache_get(mask: torch.Tensor) -> Optional[Tuple[MaskPlan]]:
    key = id(mask)
    with _cache_lock:
        entry = _cache.get(key)
        if entry is None:
            return None
        ref, version, layout, plan = entry
        if ref() is not mask or version != mask._version or layout != _layout(mask):
            del _cache[key]
            return None
        _cache.move_to_end(key)
        return (plan,)


def _cache_put(mask: torch.Tensor, plan: Optional[MaskPlan]) -> None:
    try:
        ref = weakref.ref(mask)
    except TypeError:  # pragma: no cover - tensors support weak references
        return
    with _cache_lock:
        _cache[id(mask)] = (ref, mask._version, _layout(mask), plan)
        _cache.move_to_end(id(mask))
        while len(_cache) > _CACHE_LIMIT:
            _cache.popitem(last=False)


def _layout(mask: torch.Tensor) -> Tuple[Any, ...]:
    return (mask.data_ptr(), tuple(mask.shape), tuple(mask.stride()), mask.dtype, mask.device)


def clear_cache() -> None:
    """Forgets every mask read so far."""
    with _cache_lock:
        _cache.clear()


def _read(m: torch.Tensor) -> Optional[MaskPlan]:
    """The parts of a mask that is not constant over the queries (``[b, h, sq, skv]``)."""
    bias = None
    if m.dtype is torch.bool:
        allowed = m
    else:
        # -inf leaves a key out; so does the dtype's lowest value (finfo.min, the masks of OmniGen and of
        # transformers' text encoders): added to a logit it gives exp(...) == 0 exactly beside any key that is
        # attended. Not in a row where every key has it (SDPA then averages every key): those are refused.
        allowed = m > torch.finfo(m.dtype).min / 2
        lowest = ~allowed & (m != float("-inf"))
        if bool(lowest.any()) and bool((lowest.any(dim=-1) & ~allowed.any(dim=-1)).any()):
            return None
        # The bias of a key: the value every row that attends it adds (the same for every such row).
        col = torch.where(allowed, m, float("-inf")).amax(dim=2)  # [b, h, skv]; -inf: no row attends it
        if not torch.equal(torch.where(allowed, m, 0), torch.where(allowed, col[:, :, None, :], 0)):
            return None  # the bias differs between rows (or NaN / +inf entries)
        if bool((torch.where(torch.isfinite(col), col, 0) != 0).any()):
            bias = col.float().contiguous()
    if allowed.shape[1] > 1 and not _broadcast(allowed, 1):
        if not bool((allowed == allowed[:, :1]).all()):
            return None  # a genuinely per-head pattern
    rows = allowed[:, 0]
    single_key = None
    found = _structure(rows)
    if found is None:  # rows that attend one key apart (HunyuanVideo's token refiner, HunyuanImage: key 0)
        found, single_key = _with_single_key_rows(rows)
        if found is None:
            return None
    kwargs, features, query_rows = found
    if bias is not None:  # -inf on every key no row attends: the key padding is in the bias
        kwargs.pop("key_padding_mask", None)
        features = tuple(f for f in features if f != "key_padding") + ("key_bias",)
        kwargs["key_bias"] = bias
    if single_key is not None:
        if bias is not None:
            return None  # the one key's logit would carry a bias: its weight is still 1, but keep it simple
        features = features + ("single_key_rows",)
    return MaskPlan(kwargs, query_rows, features, single_key)


def _with_single_key_rows(rows: torch.Tensor):
    """``rows`` as ``q ⊗ k ∧ S`` once the rows that attend exactly one key are set apart: the
    structure of the others (their query rows) and the set-apart rows with their key, or (None, None)."""
    count = rows.view(torch.uint8).sum(dim=-1, dtype=torch.int16 if rows.shape[-1] < 2**15 else torch.int32)
    single = count == 1
    if not bool(single.any()):
        return None, None
    found = _structure(rows & ~single[:, :, None])
    if found is None:
        return None, None
    kwargs, features, query_rows = found
    if query_rows is None:  # pragma: no cover - the set-apart rows are empty in what _structure saw
        return None, None
    index = rows.view(torch.uint8).argmax(dim=-1)
    return (kwargs, features, query_rows), (single, index)


class _Rows:
    """What the structure tests need of a boolean ``[b, sq, skv]`` mask, read in a few vectorised
    passes over its bytes: per row its count of attended keys and one past the last (0 when
    empty), the first (read only for segments), per batch the keys any row attends (``k_ok``) and
    their running count. On the CPU, except k_ok."""

    def __init__(self, rows: torch.Tensor) -> None:
        b, sq, skv = rows.shape
        self._bytes = rows.view(torch.uint8)
        self.count = self._bytes.sum(dim=-1, dtype=torch.int16 if skv < 2**15 else torch.int32).cpu().long()
        self.q_ok = self.count > 0
        self.k_ok = self._bytes.amax(dim=1).bool()  # [b, skv], on the mask's device
        self.end = (skv - self._bytes.flip(-1).argmax(dim=-1).cpu()).masked_fill(~self.q_ok, 0)
        self._first: Optional[torch.Tensor] = None
        k = self.k_ok.cpu().to(torch.int64)
        self.k_running = torch.cat([torch.zeros(b, 1, dtype=torch.int64), k.cumsum(dim=-1)], dim=-1)  # [b, skv + 1]

    @property
    def first(self) -> torch.Tensor:
        """The first attended key of each row (0 when empty)."""
        if self._first is None:
            self._first = self._bytes.argmax(dim=-1).cpu().masked_fill(~self.q_ok, 0)
        return self._first

    def fits(self, lo: torch.Tensor, hi: torch.Tensor) -> bool:
        """Whether ``rows == q_ok ⊗ k_ok ∧ S`` for the window ``S`` of each row: keys ``lo <= j < hi``
        (int64 ``[sq]`` or ``[b, sq]``, 0 <= lo <= hi <= skv): every attended key is in the window,
        and the window's keys that some row attends are as many as the row attends."""
        b = self.count.shape[0]
        lo, hi = lo.expand(b, -1), hi.expand(b, -1)
        inside = self.end <= hi
        if bool((lo != 0).any()):
            inside &= self.first >= lo
        window = self.k_running.gather(1, hi) - self.k_running.gather(1, lo)
        return bool(((inside & (window == self.count)) | ~self.q_ok).all())


def _structure(rows: torch.Tensor) -> Optional[Tuple[Dict[str, Any], Tuple[str, ...], Optional[torch.Tensor]]]:
    """``rows`` (bool ``[b, sq, skv]``) as ``q ⊗ k ∧ S``: the keywords, the parts, the query rows."""
    b, sq, skv = rows.shape
    r = _Rows(rows)
    i = torch.arange(sq)
    zero = torch.zeros(sq, dtype=torch.int64)
    kwargs: Dict[str, Any] = {}
    features: Tuple[str, ...] = ()
    if r.fits(zero, torch.full((sq,), skv)):
        pass
    elif r.fits(zero, (i + 1).clamp(max=skv)):
        kwargs.update(is_causal=True, causal_alignment="top_left")
        features = ("causal",)
    elif sq != skv and r.fits(zero, (i + 1 + skv - sq).clamp(0, skv)):
        kwargs.update(is_causal=True, causal_alignment="bottom_right")
        features = ("causal",)
    else:
        found = _block_causal(r, rows.device) or _segments(r, rows.device)
        if found is None:
            return None
        kwargs, features = found
    if not bool(r.k_ok.all()):
        kwargs["key_padding_mask"] = r.k_ok
        features = features + ("key_padding",)
    query_rows = None
    if not bool(r.q_ok.all()):
        query_rows = r.q_ok.to(rows.device)
        features = features + ("query_rows",)
    return kwargs, features, query_rows


def _block_causal(r: _Rows, device) -> Optional[Tuple[Dict[str, Any], Tuple[str, ...]]]:
    """Every row attends a prefix of the keys that grows in steps: the same blocks for every batch."""
    b, sq = r.count.shape
    skv = r.k_running.shape[1] - 1
    end = r.end.amax(dim=0)  # [sq]; a key some batch pads away is padded in every batch that cuts there
    end = torch.cummax(end, dim=0).values  # empty rows take the block of the row before them
    starts = (torch.nonzero(end[1:] != end[:-1]).flatten() + 1).tolist()
    q_off = [0] + starts + [sq]
    # Block a (rows q_off[a] .. q_off[a + 1]) attends the keys j < kv_off[a + 1]; the last block every key.
    kv_off = [0] + [int(end[q_off[a]]) for a in range(len(q_off) - 2)] + [skv]
    block = torch.bucketize(torch.arange(sq), torch.tensor(q_off[1:-1], dtype=torch.int64), right=True)
    limit = torch.tensor(kv_off[1:], dtype=torch.int64)[block]
    if not r.fits(torch.zeros(sq, dtype=torch.int64), limit):
        return None
    q = torch.tensor(q_off, dtype=torch.int64, device=device)
    kv = torch.tensor(kv_off, dtype=torch.int64, device=device)
    return {"block_offsets": (q, kv)}, ("block_causal",)


def _segments(r: _Rows, device) -> Optional[Tuple[Dict[str, Any], Tuple[str, ...]]]:
    """Runs of rows each attending its own contiguous range of keys, the ranges in order (per
    batch; padded with empty segments to one count)."""
    b, sq = r.count.shape
    skv = r.k_running.shape[1] - 1
    per_batch = []
    for bi in range(b):
        ok = r.q_ok[bi]
        if not bool(ok.any()):
            per_batch.append(([0, sq], [0, skv]))
            continue
        # Empty rows join the run before them (the first ones: the first run).
        idx = torch.cummax(torch.where(ok, torch.arange(sq), -1), dim=0).values
        idx = torch.where(idx < 0, int(torch.nonzero(ok)[0]), idx)
        lo, hi = r.first[bi][idx], r.end[bi][idx]
        starts = (torch.nonzero((lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])).flatten() + 1).tolist()
        run_lo = [int(lo[0])] + [int(lo[s]) for s in starts]
        run_hi = [int(hi[0])] + [int(hi[s]) for s in starts]
        if any(run_lo[s + 1] < run_hi[s] for s in range(len(run_lo) - 1)):
            return None  # ranges overlap or go backwards
        per_batch.append(([0] + starts + [sq], [0] + run_lo[1:] + [skv]))
    n = max(len(q) for q, _ in per_batch)
    cq = torch.tensor([q + [q[-1]] * (n - len(q)) for q, _ in per_batch], dtype=torch.int64)
    ck = torch.tensor([k + [k[-1]] * (n - len(k)) for _, k in per_batch], dtype=torch.int64)
    seg = torch.stack([torch.bucketize(torch.arange(sq), cq[bi, 1:-1], right=True) for bi in range(b)])
    if not r.fits(ck.gather(1, seg), ck.gather(1, seg + 1)):
        return None
    if b == 1 or (bool((cq == cq[:1]).all()) and bool((ck == ck[:1]).all())):
        cq, ck = cq[0], ck[0]
    return {"cu_seqlens_q": cq.to(device), "cu_seqlens_k": ck.to(device)}, ("segments",)
