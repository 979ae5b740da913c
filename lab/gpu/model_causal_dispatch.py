"""How much of a causal forward's time is the order its CTAs are dispatched in? (issue 35, branch fwdlpt)

Kernel v6 runs one CTA of 128 queries per multiprocessor; under causal at Sq = Skv query block qb walks
2 qb + 2 key tiles of 64 (the unmasked call: S / 64 each). The hardware hands blocks out in the grid's
linear order as multiprocessors free up: list scheduling. Main's masked grid is (query blocks last to
first, heads, batch): each head's blocks long to short, head after head, so the last heads' long blocks
start late. Branch fwdlpt's is (heads, query blocks last to first, batch): every head's block qb before any
head's block qb - 1, longest first across the grid. This models both, with x tiles' worth of fixed cost
per CTA (staging Q, the first tile's latency, the epilogue), against the unmasked call in the same model.

    python3 lab/gpu/model_causal_dispatch.py

Measured on the H100 (main, bench/results/h100-2026-12-06-perf/): 0.63x at (1,24,4608,128).
"""

import heapq


def makespan(works, sms: int = 132) -> float:
    """List scheduling: each block, in order, to the multiprocessor that frees up first."""
    free = [0.0] * sms
    heapq.heapify(free)
    for w in works:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def main() -> None:
    heads = 24
    print("| (1,24,S,128) causal / unmasked | fixed cost x (tiles) | per-head order (main) | qb-major (fwdlpt) |")
    print("| --- | ---: | ---: | ---: |")
    for s in (1536, 4608, 16384):
        blocks, tiles = s // 128, s // 64
        for x in (0, 4, 8, 16):
            unmasked = makespan([tiles + x] * (heads * blocks))
            per_head = [2 * qb + 2 + x for _ in range(heads) for qb in reversed(range(blocks))]
            qb_major = [2 * qb + 2 + x for qb in reversed(range(blocks)) for _ in range(heads)]
            print(f"| S = {s} | {x} | {makespan(per_head) / unmasked:.3f} | {makespan(qb_major) / unmasked:.3f} |")


if __name__ == "__main__":
    main()
