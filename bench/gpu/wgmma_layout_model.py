"""Host model of the index math of bench/gpu/attention_v3_0_sm90_smem.cu, checked against the
hardware's documented behaviour (PTX ISA, wgmma): run `python3 bench/gpu/wgmma_layout_model.py`
after any change to the kernel's staging, descriptors or fragment handling.

Model of the hardware: the 128-byte swizzle XORs byte-address bits [4,7) with bits [7,10);
a K-major descriptor with start address A and stride byte offset SBO reads element (row r,
column k) of an 8-column tf32 slice at A + (r//8)*SBO + (r%8)*128 + 4k, then swizzled.
Accumulator and A-register fragments as in the kernel's opening comment.

Checks: Q and K staged by stage_rows read back through the slice descriptors as Q and K;
S = sum over slices of A B^T equals Q K^T; the S accumulator turned into P's A fragments and
V^T staged by stage_vt (keys permuted inside groups of 8) give exactly P V; every shared
address is written once; the V^T scalar stores of a warp hit 32 distinct banks.
Needs numpy."""

import numpy as np

rng = np.random.default_rng(1)
SW = 128
ATOM = 1024
TPR = 32


def swz_off(row, col, rows):
    block = col // TPR
    inrow = col % TPR
    chunk = inrow // 4
    return block * rows * SW + row * SW + ((chunk ^ (row % 8)) * 16) + (inrow % 4) * 4


def slice_start(sl, rows):
    return (sl // 4) * rows * SW + (sl % 4) * 32


def hw_read(smem, start, r, k, base=0):
    addr = base + start + (r // 8) * ATOM + (r % 8) * 128 + 4 * k
    phys = addr ^ (((addr >> 7) & 7) << 4)
    return smem[(phys - base) // 4]


def stage_rows(X, rows, D, threads=128):
    smem = np.full(rows * D, np.nan)
    kVec = D // 4
    seen = set()
    for it in range(rows * kVec // threads):
        for tid in range(threads):
            idx = it * threads + tid
            row = idx // kVec
            c4 = idx % kVec
            off = swz_off(row, c4 * 4, rows)
            assert off % 16 == 0
            for e in range(4):
                assert off // 4 + e not in seen
                seen.add(off // 4 + e)
                smem[off // 4 + e] = X[row, c4 * 4 + e]
    assert not np.isnan(smem).any()
    return smem


def stage_vt(V, D, BN=64, threads=128):
    smem = np.full(D * BN, np.nan)
    kKeyGroups = BN // 16
    kUnits = kKeyGroups * (D // 8)
    kIters = kUnits // 4
    for it in range(kIters):
        banks = {}
        for tid in range(threads):
            warp = tid // 32
            lane = tid % 32
            unit = it * 4 + warp
            key = (unit % kKeyGroups) * 16 + lane % 16
            c4 = (unit // kKeyGroups) * 2 + lane // 16
            pos = (key & ~7) | ((key & 7) >> 1) | ((key & 1) << 2)
            for j in range(4):
                off = swz_off(c4 * 4 + j, pos, D)
                assert np.isnan(smem[off // 4])
                smem[off // 4] = V[key, c4 * 4 + j]
                banks.setdefault((warp, j), []).append((off // 4) % 32)
        for kk, b in banks.items():
            assert len(set(b)) == 32, (kk, sorted(b))
    assert not np.isnan(smem).any()
    return smem


for D in (64, 128):
    # S = Q K^T through the descriptors
    Q = rng.standard_normal((64, D))
    K = rng.standard_normal((64, D))
    V = rng.standard_normal((64, D))
    sq = stage_rows(Q, 64, D)
    sk = stage_rows(K, 64, D)
    S = np.zeros((64, 64))
    for ks in range(D // 8):
        A = np.array([[hw_read(sq, slice_start(ks, 64), m, k) for k in range(8)] for m in range(64)])
        B = np.array([[hw_read(sk, slice_start(ks, 64), n, k) for k in range(8)] for n in range(64)])
        assert np.array_equal(A, Q[:, 8 * ks : 8 * ks + 8])
        assert np.array_equal(B, K[:, 8 * ks : 8 * ks + 8])
        S += A @ B.T
    assert np.allclose(S, Q @ K.T)
    # accumulator fragment of S (m64n64): thread t, reg i
    P = rng.random((64, 64))
    regs = np.zeros((128, 32))
    for t in range(128):
        w = t // 32
        g = (t % 32) // 4
        c = t % 4
        for i in range(32):
            blk = i // 4
            r = 16 * w + g + 8 * ((i // 2) % 2)
            col = 8 * blk + 2 * c + (i % 2)
            regs[t, i] = P[r, col]
    # A fragments built as in the kernel, assembled to a 64 x 64 (k-position) matrix
    svt = stage_vt(V, D)
    O = np.zeros((64, D))
    for i in range(8):
        Af = np.full((64, 8), np.nan)
        for t in range(128):
            w = t // 32
            g = (t % 32) // 4
            c = t % 4
            a = [regs[t, 4 * i + 0], regs[t, 4 * i + 2], regs[t, 4 * i + 1], regs[t, 4 * i + 3]]
            Af[16 * w + g, c] = a[0]
            Af[16 * w + g + 8, c] = a[1]
            Af[16 * w + g, c + 4] = a[2]
            Af[16 * w + g + 8, c + 4] = a[3]
        assert not np.isnan(Af).any()
        B = np.array([[hw_read(svt, slice_start(i, D), n, k) for k in range(8)] for n in range(D)])
        O += Af @ B.T
    assert np.allclose(O, P @ V), np.abs(O - P @ V).max()
    # output mapping of the m64nD accumulator: o[4i+2r+e] -> row 16w+g+8r, col 8i+2c+e, alpha index (i/2)%2
    for _t in range(128):
        for i in range(D // 2):
            assert ((i // 2) % 2) == (i % 4) // 2
    print("D", D, "ok")


# ---- v3.1 (attention_v3_sm90_tf32x3.cu): S^T = K Q^T, O^T = V^T P^T ----
def st_q_column(d):
    return 16 * (d >> 4) + 8 * ((d >> 1) & 1) + 4 * (d & 1) + ((d >> 2) & 3)


for D in (64, 128):
    kMB = D // 64
    kOutVec = 2 * kMB
    kDPairs = D // 16
    Q = rng.standard_normal((64, D))
    K = rng.standard_normal((64, D))
    V = rng.standard_normal((64, D))
    assert sorted(st_q_column(d) for d in range(D)) == list(range(D))
    sq = np.full(64 * D, np.nan)
    for row in range(64):
        for d in range(D):
            off = swz_off(row, st_q_column(d), 64)
            assert np.isnan(sq[off // 4])
            sq[off // 4] = Q[row, d]
    # K A-fragments as the kernel builds them from float4 kx[s][r] = K[16w+g+8r][16s+4c..+3]
    ST = np.zeros((64, 64))
    for s in range(kDPairs):
        for u in range(2):
            ks = 2 * s + u
            A = np.full((64, 8), np.nan)
            for t in range(128):
                w = t // 32
                g = (t % 32) // 4
                c = t % 4
                kx = [K[16 * w + g + 8 * r, 16 * s + 4 * c : 16 * s + 4 * c + 4] for r in range(2)]
                a = [kx[0][0], kx[1][0], kx[0][1], kx[1][1]] if u == 0 else [kx[0][2], kx[1][2], kx[0][3], kx[1][3]]
                A[16 * w + g, c] = a[0]
                A[16 * w + g + 8, c] = a[1]
                A[16 * w + g, c + 4] = a[2]
                A[16 * w + g + 8, c + 4] = a[3]
            B = np.array([[hw_read(sq, slice_start(ks, 64), n, k) for k in range(8)] for n in range(64)])
            ST += A @ B.T
    assert np.allclose(ST, K @ Q.T), "S^T"
    # P^T stores from the S^T accumulator (reg 4i+2r+e = key 16w+g+8r, query 8i+2c+e)
    P = rng.random((64, 64))  # P[query, key]
    sp = np.full(64 * 64, np.nan)
    for t in range(128):
        w = t // 32
        g = (t % 32) // 4
        c = t % 4
        p_row0 = 2 * c
        p_col0 = 16 * w + g
        for i in range(8):
            for e in range(2):
                for r in range(2):
                    q = 8 * i + 2 * c + e
                    key = 16 * w + g + 8 * r
                    off = swz_off(p_row0 + 8 * i + e, p_col0 + 8 * r, 64)
                    assert np.isnan(sp[off // 4])
                    sp[off // 4] = P[q, key]
    assert not np.isnan(sp).any()
    # bank conflicts of the P^T stores: per warp and (i, e, r), 32 distinct banks
    for w in range(4):
        for i in range(8):
            for e in range(2):
                for r in range(2):
                    banks = {
                        (swz_off(2 * c + 8 * i + e, 16 * w + g + 8 * r, 64) // 4) % 32
                        for g in range(8)
                        for c in range(4)
                    }
                    assert len(banks) == 32, banks
    # O^T per M block with V A-fragments from float2 loads, then the epilogue mapping
    OUT = np.full((64, D), np.nan)
    for mb in range(kMB):
        OT = np.zeros((64, 64))  # rows = M rows of this block, cols = queries
        for ks in range(8):
            A = np.full((64, 8), np.nan)
            for t in range(128):
                w = t // 32
                g = (t % 32) // 4
                c = t % 4
                dbase = kOutVec * (8 * w + g) + 2 * mb
                vx = [V[8 * ks + c + 4 * u, dbase : dbase + 2] for u in range(2)]
                a = [vx[0][0], vx[0][1], vx[1][0], vx[1][1]]
                A[16 * w + g, c] = a[0]
                A[16 * w + g + 8, c] = a[1]
                A[16 * w + g, c + 4] = a[2]
                A[16 * w + g + 8, c + 4] = a[3]
            B = np.array([[hw_read(sp, slice_start(ks, 64), n, k) for k in range(8)] for n in range(64)])
            OT += A @ B.T
        # accumulator reg 4i+2h+e = (row 16w+g+8h, query 8i+2c+e); epilogue: d = kOutVec*(8w+g)+2mb+h
        for t in range(128):
            w = t // 32
            g = (t % 32) // 4
            c = t % 4
            for i in range(8):
                for h in range(2):
                    for e in range(2):
                        q = 8 * i + 2 * c + e
                        d = kOutVec * (8 * w + g) + 2 * mb + h
                        assert np.isnan(OUT[q, d])
                        OUT[q, d] = OT[16 * w + g + 8 * h, q]
    assert not np.isnan(OUT).any()
    assert np.allclose(OUT, P @ V), "O"
    print("v3.1 D", D, "ok")
