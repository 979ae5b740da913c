"""The backward v4's causal schedule and dQ coverage, and its stream-K cut of the unmasked work, emulated on
the CPU (branches v4causal and v4streamk, issues 35 and 36).

What it asks: with causal (either alignment, every key attended), does the persistent grid of
backward_v4_sm90_fa3_f16x2.cu (W consecutive items a CTA, a head's 128-key blocks in the pair order
item_block<true>, each item's m-blocks from causal_first_mblock on) (1) walk every (query, key) pair
the mask attends, (2) push each m-block of a CTA's copy of a head's dQ first with a store and then
with adds (the coverage words cov / run), and (3) let bwd_v4_dq_reduce sum, for every row, exactly
the copies that hold it, never one that does not (causal_min_block)? And what does the makespan of
the CTAs come to against the unmasked call's (the balance of the pair order)?

The functions below are the kernel's, line for line in Python. Run:

    python3 lab/gpu/emulate_backward_v4_causal.py [DRAWS]

It prints one line per failing draw and a summary; the makespan table of the FLUX shapes last.
"""

import random
import sys

CTA_KEYS, M = 128, 64


def item_block(pos: int, n_blocks: int) -> int:
    return n_blocks - 1 - pos // 2 if pos & 1 else pos // 2


def causal_first_mblock(n: int, off: int, tq: int) -> int:
    i0 = max(CTA_KEYS * n - off, 0)
    return min(i0 // M, tq - 1)


def causal_min_block(pa: int, pb: int, n_blocks: int) -> int:
    best = n_blocks
    pe = pa + (pa & 1)
    if pe < pb:
        best = pe // 2
    po = pb - 1 if (pb - 1) & 1 else pb - 2
    if po >= pa and po >= 1:
        best = min(best, n_blocks - 1 - po // 2)
    return best


def v4_grid(bh: int, seq_kv: int, sms: int = 132):
    n_blocks = (seq_kv + CTA_KEYS - 1) // CTA_KEYS
    items = bh * n_blocks
    g = max(min(sms, 132, items), 1)
    per_cta = (items + g - 1) // g
    return items, per_cta, (items + per_cta - 1) // per_cta, n_blocks


def check(bh: int, sq: int, skv: int, bottom_right: bool, sms: int) -> list:
    """The failures of one draw (empty when it holds)."""
    off = skv - sq if bottom_right else 0
    tq = (sq + M - 1) // M
    items, per_cta, ctas, n_blocks = v4_grid(bh, skv, sms)
    errors = []
    copies = {}  # (slot, m) -> set of items pushed
    for g in range(ctas):
        run = None
        for item in range(g * per_cta, min((g + 1) * per_cta, items)):
            head, pos = divmod(item, n_blocks)
            n = item_block(pos, n_blocks)
            m0 = causal_first_mblock(n, off, tq)
            # (1) every query attending a key of the block lies in m-blocks m0 .. tq - 1
            for j in range(CTA_KEYS * n, min(CTA_KEYS * n + CTA_KEYS, skv)):
                first_query = max(j - off, 0)
                if first_query < sq and first_query < m0 * M:
                    errors.append(f"key {j} attended from query {first_query}, item starts at m-block {m0}")
                    break
            first_of_head = item == g * per_cta or pos == 0
            cov = tq if first_of_head else run
            run = min(cov, m0)
            slot = g + head
            for m in range(m0, tq):
                cell = copies.setdefault((slot, m), set())
                if m < cov:  # store
                    if cell:
                        errors.append(f"slot {slot} m-block {m}: a store over earlier pushes")
                    cell.clear()
                elif not cell:
                    errors.append(f"slot {slot} m-block {m}: an add into a copy never stored")
                cell.add(item)
    # (3) the reduction: each row sums the copies holding its m-block, and those hold every item whose keys it attends
    for head in range(bh):
        g_lo = head * n_blocks // per_cta
        g_hi = (head * n_blocks + n_blocks - 1) // per_cta
        for row in range(0, sq, 7):
            m = row // M
            summed = set()
            for g in range(g_lo, g_hi + 1):
                head0, first = head * n_blocks, g * per_cta
                pa = max(first, head0) - head0
                end = min(first + per_cta, items, head0 + n_blocks)
                nmin = causal_min_block(pa, end - head0, n_blocks)
                if row < causal_first_mblock(nmin, off, tq) * M:
                    if (g + head, m) in copies:
                        errors.append(f"head {head} row {row}: skips copy {g}, which holds its m-block")
                    continue
                if (g + head, m) not in copies:
                    errors.append(f"head {head} row {row}: reads copy {g}, which never held its m-block")
                    continue
                summed |= copies[(g + head, m)]
            attended = {head * n_blocks + p for p in range(n_blocks) if CTA_KEYS * item_block(p, n_blocks) <= row + off}
            if not attended <= summed:
                errors.append(f"head {head} row {row}: misses items {sorted(attended - summed)[:4]}")
    return errors


def unit_start(g: int, units: int, ctas: int) -> int:
    return g * units // ctas


def unit_cta(u: int, units: int, ctas: int) -> int:
    return min(((u + 1) * ctas - 1) // units, ctas - 1)


def check_stream(bh: int, sq: int, skv: int, sms: int) -> list:
    """Stream-K (unmasked): every unit run once; each item's dK, dV whole in one CTA or in parts whose slots
    bwd_v4_dkv_parts sums (each part once, none twice); each copy's m-blocks stored before they are added;
    the reduction sums, for every row, exactly the copies holding its m-block."""
    tq = (sq + M - 1) // M
    items, _, _, n_blocks = v4_grid(bh, skv, sms)
    units = items * tq
    ctas = max(min(sms, 132, units), 1)
    errors = []
    seen = [0] * units
    slots = {}  # slot -> item
    whole_items = set()
    copies = {}
    for g in range(ctas):
        u0, u1 = unit_start(g, units, ctas), unit_start(g + 1, units, ctas)
        for item in range(u0 // tq, (u1 + tq - 1) // tq if u1 > u0 else u0 // tq):
            iu = item * tq
            head, n = divmod(item, n_blocks)
            base = head * n_blocks * tq
            cov = max(u0 - base, 0)
            for m in range(max(u0 - iu, 0), min(u1 - iu, tq)):
                seen[iu + m] += 1
                cell = copies.setdefault((g + head, m), set())
                store = n * tq + m < cov + tq
                if store and cell:
                    errors.append(f"slot {g + head} m-block {m}: a store over earlier pushes")
                if not store and not cell:
                    errors.append(f"slot {g + head} m-block {m}: an add into a copy never stored")
                cell.add(item)
            if iu >= u0 and iu + tq <= u1:
                whole_items.add(item)
            else:
                slot = 2 * g + (1 if iu > u0 else 0)
                if slot in slots:
                    errors.append(f"slot {slot} written by items {slots[slot]} and {item}")
                slots[slot] = item
    if any(c != 1 for c in seen):
        errors.append("a unit run other than once")
    # the parts' sums: one block per boundary cutting an item, at the first boundary inside it
    summed = {}
    for bnd in range(1, ctas):
        ub = unit_start(bnd, units, ctas)
        if ub % tq == 0:
            continue
        item = ub // tq
        iu = item * tq
        if unit_start(bnd - 1, units, ctas) > iu:
            continue
        gs = range(unit_cta(iu, units, ctas), unit_cta(iu + tq - 1, units, ctas) + 1)
        used = [2 * g + (1 if iu > unit_start(g, units, ctas) else 0) for g in gs]
        if any(slots.get(sl) != item for sl in used):
            errors.append(f"item {item}: reads a slot it did not write")
        summed[item] = summed.get(item, 0) + 1
    cut = {it for it in slots.values()}
    if set(summed) != cut or any(v != 1 for v in summed.values()):
        errors.append("a cut item summed other than once")
    if whole_items & cut or len(whole_items | cut) != items:
        errors.append("an item neither whole nor cut, or both")
    for head in range(bh):
        base = head * n_blocks * tq
        g_lo, g_hi = unit_cta(base, units, ctas), unit_cta(base + n_blocks * tq - 1, units, ctas)
        for m in range(tq):
            got = set()
            for g in range(g_lo, g_hi + 1):
                s0 = max(unit_start(g, units, ctas), base) - base
                e0 = min(unit_start(g + 1, units, ctas), base + n_blocks * tq) - base
                t = s0 - m
                k = 0 if t <= 0 else (t + tq - 1) // tq
                holds = (g + head, m) in copies
                if k * tq + m >= e0:
                    if holds:
                        errors.append(f"head {head} m-block {m}: skips copy {g}, which holds it")
                    continue
                if not holds:
                    errors.append(f"head {head} m-block {m}: reads copy {g}, which never held it")
                    continue
                got |= copies[(g + head, m)]
            if got != set(range(head * n_blocks, head * n_blocks + n_blocks)):
                errors.append(f"head {head} m-block {m}: sums items {sorted(got)[:4]}...")
    return errors


def makespan(bh: int, s: int, sms: int = 132):
    """The largest CTA's m-blocks, causal top-left at Sq = Skv = s, against the unmasked call's."""
    tq = (s + M - 1) // M
    items, per_cta, ctas, n_blocks = v4_grid(bh, s, sms)
    work = [tq - causal_first_mblock(item_block(i % n_blocks, n_blocks), 0, tq) for i in range(items)]
    worst = max(sum(work[c * per_cta : (c + 1) * per_cta]) for c in range(ctas))
    return worst, per_cta * tq


def main() -> int:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(20261206)
    failed = 0
    for _ in range(draws):
        bottom_right = rng.random() < 0.5
        skv = rng.choice([2, 3, 64, 127, 128, 129, 200, 256, 300, 511, 777, 1024])
        sq = rng.choice([1, 2, 63, 64, 65, 128, 200, 333, 512, 700, 1100])
        if not bottom_right and sq < skv:
            sq, skv = skv, sq  # top-left needs seq_q >= seq_kv (every key attended)
            if sq < skv:
                continue
        bh = rng.choice([1, 2, 3, 5, 24])
        sms = rng.choice([132, 114, 7, 3])
        errs = check(bh, sq, skv, bottom_right, sms)
        if errs:
            failed += 1
            print(
                f"FAIL bh {bh} sq {sq} skv {skv} {'bottom-right' if bottom_right else 'top-left'} sms {sms}: "
                f"{errs[0]} (+{len(errs) - 1})"
            )
    print(f"emulate_backward_v4_causal: {draws} draws, {failed} failed")
    failed_s = 0
    for _ in range(draws):
        bh = rng.choice([1, 2, 3, 5, 24])
        sq = rng.choice([1, 63, 64, 65, 200, 512, 1100])
        skv = rng.choice([2, 127, 128, 129, 300, 1024])
        sms = rng.choice([132, 114, 7, 3, 1])
        errs = check_stream(bh, sq, skv, sms)
        if errs:
            failed_s += 1
            print(f"FAIL stream-K bh {bh} sq {sq} skv {skv} sms {sms}: {errs[0]} (+{len(errs) - 1})")
    print(f"stream-K (unmasked): {draws} draws, {failed_s} failed")
    failed += failed_s
    print("| (1,24,S,128) causal | largest CTA (m-blocks) | unmasked | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for s in (1536, 4608, 16384):
        worst, unmasked = makespan(24, s)
        print(f"| S = {s} | {worst} | {unmasked} | {worst / unmasked:.3f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
