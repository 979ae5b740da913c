"""The backward v4's persistent grid by stream-K, unmasked and causal, emulated on the CPU (issues 35 and 36).

What it asks: with the units of every head's 128-key blocks cut U / G a CTA (backward_v4_sm90_fa3_f16x2.cu:
causal, block n's units are its m-blocks from first_mblock(n), the first whose queries attend its keys), does
the grid (1) run every unit once, and walk every (query, key) pair the mask attends; (2) write each item's
dK, dV whole in one CTA or in parts that bwd_v4_dkv_parts sums from the slots they were written to, each once;
(3) push each m-block of a CTA's copy of a head's dQ first with a store, then with adds (the `run` word); and
(4) let bwd_v4_dq_reduce sum, for every row, exactly the copies that hold its m-block? And how long is the
longest CTA against the unmasked call's? The functions below are the kernel's, in Python; head_units is also
checked against a plain sum.

    python3 lab/gpu/emulate_backward_v4_causal.py [DRAWS]

It prints one line per failing draw and a summary, then the makespan table of the FLUX shapes.
"""

import random
import sys

CTA_KEYS, M = 128, 64


def causal_first_mblock(n: int, off: int, tq: int) -> int:
    return min(max(CTA_KEYS * n - off, 0) // M, tq - 1)


def first_mblock(causal: bool, n: int, off: int, tq: int) -> int:
    return causal_first_mblock(n, off, tq) if causal else 0


def head_units(causal: bool, n: int, off: int, tq: int) -> int:
    """The kernel's closed form of sum_{k < n} (tq - first_mblock(k))."""
    if not causal:
        return n * tq
    k0 = 0 if off <= 0 else (off + CTA_KEYS - 1) // CTA_KEYS
    f = (-off) // M
    k1 = -((-(tq - 1 - f)) // 2)
    lin_end = max(k1, k0)
    a, b = min(k0, n), min(lin_end, n)
    total = (b - a) * f + (b * (b - 1) - a * (a - 1)) if b > a else 0
    if n > lin_end:
        total += (n - lin_end) * (tq - 1)
    return n * tq - total


def unit_start(g: int, units: int, ctas: int) -> int:
    return g * units // ctas


def unit_cta(u: int, units: int, ctas: int) -> int:
    return min(((u + 1) * ctas - 1) // units, ctas - 1)


def check(bh: int, sq: int, skv: int, causal: bool, bottom_right: bool, sms: int) -> list:
    """The failures of one draw (empty when it holds)."""
    off = skv - sq if (causal and bottom_right) else 0
    tq = (sq + M - 1) // M
    nb = (skv + CTA_KEYS - 1) // CTA_KEYS
    errors = []
    for n in range(nb + 1):
        if head_units(causal, n, off, tq) != sum(tq - first_mblock(causal, k, off, tq) for k in range(n)):
            errors.append(f"head_units({n}) is not the plain sum")
            break
    per_head = head_units(causal, nb, off, tq)
    units = bh * per_head
    ctas = max(min(sms, 132, units), 1)

    def unit_of(item: int, m: int) -> int:
        h, n = divmod(item, nb)
        return h * per_head + head_units(causal, n, off, tq) + m - first_mblock(causal, n, off, tq)

    # (1) every attended pair's m-block lies in its block's units
    if causal:
        for j in range(skv):
            q0 = max(j - off, 0)
            if q0 < sq and q0 // M < first_mblock(causal, j // CTA_KEYS, off, tq):
                errors.append(f"key {j} attended from query {q0}, before its block's first m-block")
                break
    seen = [0] * units
    slots, whole, copies = {}, set(), {}
    for g in range(ctas):
        u0, u1 = unit_start(g, units, ctas), unit_start(g + 1, units, ctas)
        run = {}
        item = None
        for u in range(u0, u1):
            h, r = divmod(u, per_head)
            n = max(k for k in range(nb) if head_units(causal, k, off, tq) <= r)
            it = h * nb + n
            m = first_mblock(causal, n, off, tq) + r - head_units(causal, n, off, tq)
            if unit_of(it, m) != u:
                errors.append(f"unit {u} maps to ({it}, {m}) and back to {unit_of(it, m)}")
            seen[u] += 1
            if it != item:  # a new item: its m-blocks here begin at m; the store rule's word `run`
                item = it
                cov = tq if (u == u0 or n == 0 or h not in run) else run[h]
                run[h] = min(cov, m)
                iu = unit_of(it, first_mblock(causal, n, off, tq))
                length = tq - first_mblock(causal, n, off, tq)
                if iu >= u0 and iu + length <= u1:
                    whole.add(it)
                else:
                    slot = 2 * g + (1 if iu > u0 else 0)
                    if slot in slots and slots[slot] != it:
                        errors.append(f"slot {slot} written by items {slots[slot]} and {it}")
                    slots[slot] = it
            cell = copies.setdefault((g + h, m), set())
            store = m < cov
            if store and cell:
                errors.append(f"copy {g + h} m-block {m}: a store over earlier pushes")
            if not store and not cell:
                errors.append(f"copy {g + h} m-block {m}: an add into a copy never stored")
            cell.add(it)
    if any(c != 1 for c in seen):
        errors.append("a unit run other than once")
    # (2) the parts' sums: one block per boundary that cuts an item, at the first boundary inside it
    summed = {}
    for bnd in range(1, ctas):
        ub = unit_start(bnd, units, ctas)
        h, r = divmod(ub, per_head)
        n = max(k for k in range(nb) if head_units(causal, k, off, tq) <= r)
        it = h * nb + n
        iu = h * per_head + head_units(causal, n, off, tq)
        if ub == iu or unit_start(bnd - 1, units, ctas) > iu:
            continue
        length = tq - first_mblock(causal, n, off, tq)
        for g in range(unit_cta(iu, units, ctas), unit_cta(iu + length - 1, units, ctas) + 1):
            sl = 2 * g + (1 if iu > unit_start(g, units, ctas) else 0)
            if slots.get(sl) != it:
                errors.append(f"item {it}: reads slot {sl}, which it did not write")
        summed[it] = summed.get(it, 0) + 1
    cut = set(slots.values())
    if set(summed) != cut or any(v != 1 for v in summed.values()):
        errors.append("a cut item summed other than once")
    if whole & cut or len(whole | cut) != bh * nb:
        errors.append("an item neither whole nor cut, or both")
    # (4) the reduction
    for h in range(bh):
        base = h * per_head
        nm_of = {}
        for m in range(tq):
            nm_of[m] = max([k for k in range(nb) if first_mblock(causal, k, off, tq) <= m], default=-1)
        for m in range(tq):
            nm = nm_of[m]
            got = set()
            for g in range(unit_cta(base, units, ctas), unit_cta(base + per_head - 1, units, ctas) + 1):
                s = max(unit_start(g, units, ctas), base) - base
                e = min(unit_start(g + 1, units, ctas), base + per_head) - base
                cand = [
                    k
                    for k in range(nm + 1)
                    if head_units(causal, k, off, tq) + m - first_mblock(causal, k, off, tq) >= s
                ]
                a = cand[0] if cand else nm + 1
                holds = (g + h, m) in copies
                takes = a <= nm and head_units(causal, a, off, tq) + m - first_mblock(causal, a, off, tq) < e
                if takes != holds:
                    errors.append(f"head {h} m-block {m}: copy {g} {'read' if takes else 'skipped'}, holds: {holds}")
                    continue
                if takes:
                    got |= copies[(g + h, m)]
            want = {h * nb + k for k in range(nm + 1)}
            if got != want:
                errors.append(f"head {h} m-block {m}: sums items {sorted(got)[:4]}, not {sorted(want)[:4]}")
    return errors


def makespan(bh: int, s: int, causal: bool, sms: int = 132) -> float:
    """The longest CTA's units (causal at Sq = Skv = s, top-left) against the unmasked call's."""
    tq, nb = (s + M - 1) // M, (s + CTA_KEYS - 1) // CTA_KEYS
    units = bh * head_units(causal, nb, 0, tq)
    ctas = min(sms, units)
    return max(unit_start(g + 1, units, ctas) - unit_start(g, units, ctas) for g in range(ctas))


def main() -> int:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(20261206)
    failed = 0
    for _ in range(draws):
        causal = rng.random() < 0.7
        bottom_right = rng.random() < 0.5
        skv = rng.choice([2, 3, 64, 127, 128, 129, 200, 300, 511, 777])
        sq = rng.choice([1, 2, 63, 64, 65, 128, 200, 333, 512, 700])
        if causal and not bottom_right and sq < skv:
            sq, skv = skv, sq  # top-left needs seq_q >= seq_kv (every key attended)
        bh = rng.choice([1, 2, 3, 5])
        sms = rng.choice([132, 114, 7, 3, 1])
        errs = check(bh, sq, skv, causal, bottom_right, sms)
        if errs:
            failed += 1
            kind = ("bottom-right" if bottom_right else "top-left") if causal else "unmasked"
            print(f"FAIL bh {bh} sq {sq} skv {skv} {kind} sms {sms}: {errs[0]} (+{len(errs) - 1})")
    print(f"emulate_backward_v4_causal: {draws} draws, {failed} failed")
    print("| (1,24,S,128) | largest CTA (units), causal | unmasked, stream-K | W whole items (main) | causal / main |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s in (1536, 4608, 16384):
        tq, nb = s // M, s // CTA_KEYS
        items = 24 * nb
        w = -(-items // min(132, items))
        main_unmasked = w * tq
        c, u = makespan(24, s, True), makespan(24, s, False)
        print(f"| S = {s} | {c} | {u} | {main_unmasked} | {c / main_unmasked:.3f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
