/* bwd_v4_split: the pre-pass of the backward v4 (backward_v4_sm90_fa3_f16x2.cu; written for the backward v2,
 * removed: src/cuda/JOURNAL.md). Writes the tile records of backward_v4_records.cuh: q * scale, dout, k and v of every
 * head split into scaled fp16 hi + lo images (one power of two per 64-row tile), the row log-sum-exp into the q records
 * and Dl = dO.O - dlse (float64 sum in a fixed order, kept as float hi + lo) into the dout records.
 *
 * Reads  q, out, dout [B, H, Sq, D] and k, v [B, Hkv, Skv, D] through element strides (head_dim
 *        contiguous, float4 aligned), D in {64, 128}; lse [B, H, Sq] contiguous; dlse likewise or NULL.
 *        Grouped-query heads: the k and v records are of the Hkv key/value heads (once per group).
 *        Key padding (kv_count, kv_index of key_padding.cu): record row j of batch b is k and v row
 *        kv_index[b Skv + j] (row j without a mask) for j < kv_count[b], and 0 past it: the attended keys
 *        first, as the kernel sees them; rows no query attends are never read (they may hold anything).
 *        Causal: non-finite values of k and v are recorded as 0, so that a pair the diagonal masks (P = dS = 0)
 *        multiplies no Inf or NaN into the dQ of a row that does not attend the key (a non-finite input still
 *        reaches the rows attending it, through the out and lse their forward gave them; as the backward v3).
 *        The window table (backward_v4_windows.cuh: segments, blocks, key padding with causal, top-left causal
 *        with seq_q < seq_kv), win [B][Tq 64][2] int, or NULL: a record row no query row attends is recorded as 0
 *        (v4w_key_reached: whatever a packed buffer holds past its last segment sets no tile's power of two),
 *        non-finite k and v as 0 (as causal), and words 64, 65 of a q record's row data hold the largest lo and
 *        the smallest hi of its rows' windows below seq_q (int bits: the tile's 64 keys from key k on are in every
 *        row's window when lo <= k and hi >= k + 64; the kernel then tests no element).
 *        A key bias (always with the window table): a record row whose bias is -inf for every query head of its
 *        group is recorded as 0 as well (bias_reached; the backward v3's v3_key_reached).
 * Writes the records (workspace, bwd_record_layout), every byte of every record.
 * One CTA of 256 threads per (tile, tensor, head): grid (max(Tq, Tk), 4, B*H), the k and v CTAs of
 * z >= B*Hkv idle; a thread owns 16-byte
 * chunks (8 values of head_dim of one row) of the tile. Memory-bound, like v6's pre-pass.
 *
 * bwd_v4_windows and bwd_v4_units: the window table's pre-pass (backward_v4_windows.cuh), before bwd_v4_split.
 * bwd_v4_windows reads the mask's offsets (KwMask: segments, blocks, causal) and the key padding (kv_count,
 * kv_index) and writes win, one thread per row (B Tq 64 threads), and zeroes the counter word; bwd_v4_units reads
 * win and writes range [B][N][2] (block n's first and last m-block, one thread per (b, n)), then the CTA that
 * finishes last (the counter) scans the counts into pre [B N + 1].
 * bwd_v4_bias (a key bias): the bias per query head in the records' key order, [B H][N 128] floats, before
 * bwd_v4_split on the stream. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "backward_v4_records.cuh"
#include "backward_v4_windows.cuh"
#include "cuda_internal.h"
#include "f16x2_split.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kSplitThreads = 256;

struct BwdSplitParams {
    const float *q, *k, *v, *o, *dout, *lse, *dlse;
    const int *kv_count, *kv_index; /* key padding (NULL: every key attended; kv_index NULL: no mask) */
    int finite_kv;  /* causal: non-finite k, v values recorded as 0 (a masked pair then multiplies no Inf or NaN) */
    const int *win; /* the window table [B][rows_pad][2] (NULL: none) */
    int rows_pad;   /* Tq 64 */
    /* a key bias (with the window table; NULL: none): the caller's, row (b, h) at b bias_b + h bias_h */
    const float *key_bias;
    int64_t bias_b, bias_h;
    int64_t q_b, q_h, q_t, k_b, k_h, k_t, v_b, v_h, v_t, o_b, o_h, o_t, do_b, do_h, do_t;
    int heads, kv_heads, seq_q, seq_kv, tq, tk;
    float scale;
    unsigned char *rec[4]; /* q, dout, k, v records */
};

/* Whether a query head of key/value head hk of batch b attends key row j by its bias (not -inf; true without a
 * bias): a key no head of the group attends is recorded as 0, as the keys no window reaches (the backward v3's
 * v3_key_reached), so that whatever it holds sets no tile's power of two. */
__device__ __forceinline__ bool bias_reached(const BwdSplitParams &p, int b, int hk, int64_t j) {
    if (!p.key_bias) return true;
    const int group = p.heads / p.kv_heads;
#pragma unroll 1
    for (int h = hk * group; h < (hk + 1) * group; ++h)
        if (__ldg(p.key_bias + b * p.bias_b + h * p.bias_h + j) != -INFINITY) return true;
    return false;
}

template <int D>
__global__ void __launch_bounds__(kSplitThreads) bwd_v4_split(const BwdSplitParams p) {
    using R = BwdRecord<D>;
    constexpr int kChunksPerRow = D / 8;
    constexpr int kRowsPerPass = kSplitThreads / kChunksPerRow;
    constexpr int kPasses = kBwdTile / kRowsPerPass;
    constexpr int kWarps = kSplitThreads / 32;
    __shared__ float red[kWarps];

    const int which = blockIdx.y; /* 0 q, 1 dout, 2 k, 3 v */
    const int tiles = which < 2 ? p.tq : p.tk;
    const int tile = blockIdx.x;
    if (tile >= tiles) return;
    const int64_t bh = blockIdx.z; /* q, dout: a query head; k, v: a key/value head (b Hkv + hk) */
    const int nh = which < 2 ? p.heads : p.kv_heads;
    if (bh >= (int64_t)gridDim.z / p.heads * nh) return;
    const int b = (int)(bh / nh), h = (int)(bh % nh);
    const int n = which < 2 ? p.seq_q : (p.kv_count ? __ldg(p.kv_count + b) : p.seq_kv);
    const int *rows = which >= 2 && p.kv_index ? p.kv_index + (int64_t)b * p.seq_kv : nullptr; /* record row -> row */
    const float *src;
    int64_t stride;
    switch (which) {
    case 0: src = p.q + b * p.q_b + h * p.q_h, stride = p.q_t; break;
    case 1: src = p.dout + b * p.do_b + h * p.do_h, stride = p.do_t; break;
    case 2: src = p.k + b * p.k_b + h * p.k_h, stride = p.k_t; break;
    default: src = p.v + b * p.v_b + h * p.v_h, stride = p.v_t; break;
    }
    const float mul = which == 0 ? p.scale : 1.f;
    unsigned char *rec = p.rec[which] + (bh * tiles + tile) * (int64_t)R::kBytes;
    float *extras = reinterpret_cast<float *>(rec + R::kImages);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int cc = tid % kChunksPerRow, row0 = tid / kChunksPerRow;
    const int r0 = tile * kBwdTile;
    /* the window table: the k and v rows some query attends (the others recorded as 0); the q rows' summary */
    __shared__ unsigned char reached[kBwdTile];
    __shared__ int win_sum[2][2];
    const int *win_b = p.win ? p.win + (int64_t)b * p.rows_pad * 2 : nullptr;
    if (win_b && which >= 2) {
        if (tid < kBwdTile)
            reached[tid] = r0 + tid < n && v4w_key_reached(win_b, p.seq_q, r0 + tid) &&
                           bias_reached(p, b, h, rows ? __ldg(rows + r0 + tid) : r0 + tid);
        __syncthreads();
    } else if (win_b && which == 0 && tid < kBwdTile) {
        int lo = INT32_MIN, hi = INT32_MAX;
        if (r0 + tid < n) {
            const int2 w = __ldg(reinterpret_cast<const int2 *>(win_b) + r0 + tid);
            lo = w.x, hi = w.y;
        }
        lo = __reduce_max_sync(0xffffffffu, lo);
        hi = __reduce_min_sync(0xffffffffu, hi);
        if (lane == 0) win_sum[warp][0] = lo, win_sum[warp][1] = hi;
    }
    float x[kPasses][8];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
        const int row = r0 + row0 + j * kRowsPerPass;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), c = a;
        if (row < n && (!win_b || which < 2 || reached[row0 + j * kRowsPerPass])) {
            const int at = rows ? __ldg(rows + row) : row;
            const float4 *ptr = reinterpret_cast<const float4 *>(src + (int64_t)at * stride + 8 * cc);
            a = __ldg(ptr);
            c = __ldg(ptr + 1);
        }
        x[j][0] = a.x * mul, x[j][1] = a.y * mul, x[j][2] = a.z * mul, x[j][3] = a.w * mul;
        x[j][4] = c.x * mul, x[j][5] = c.y * mul, x[j][6] = c.z * mul, x[j][7] = c.w * mul;
        if (which >= 2 && p.finite_kv) {
#pragma unroll
            for (int e = 0; e < 8; ++e) x[j][e] = isfinite(x[j][e]) ? x[j][e] : 0.f;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, finite_abs(x[j][e]));
        if (which == 1) { /* Dl of the row: dO.O in float64, lanes of the row summed in a fixed order */
            double acc = 0.0;
            if (row < n) {
                const float4 *op =
                    reinterpret_cast<const float4 *>(p.o + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t + 8 * cc);
                const float4 oa = __ldg(op), ob = __ldg(op + 1);
                const float ov[8] = {oa.x, oa.y, oa.z, oa.w, ob.x, ob.y, ob.z, ob.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) acc += (double)x[j][e] * (double)ov[e];
            }
#pragma unroll
            for (int m = 1; m < kChunksPerRow; m *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
            if (cc == 0) {
                const int rr = row0 + j * kRowsPerPass;
                if (row < n && p.dlse) acc -= (double)__ldg(p.dlse + bh * p.seq_q + row);
                const float hi = (float)acc;
                extras[kBwdRowData / 4 + 2 * rr] = hi;
                extras[kBwdRowData / 4 + 2 * rr + 1] = (float)(acc - (double)hi);
            }
        }
    }
#pragma unroll
    for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    amax = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, red[w]);
    const int e = f16x2_exponent(amax, kBwdTarget);
    const float up = exp2_int(e);
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
        const int r = row0 + j * kRowsPerPass;
        uint4 hi, lo;
        f16x2_split2(x[j][0] * up, x[j][1] * up, hi.x, lo.x);
        f16x2_split2(x[j][2] * up, x[j][3] * up, hi.y, lo.y);
        f16x2_split2(x[j][4] * up, x[j][5] * up, hi.z, lo.z);
        f16x2_split2(x[j][6] * up, x[j][7] * up, hi.w, lo.w);
        const uint32_t off = swizzled_offset_f16(r, 8 * cc, kBwdTile);
        *reinterpret_cast<uint4 *>(rec + off) = hi;
        *reinterpret_cast<uint4 *>(rec + R::kImage + off) = lo;
    }
    if (tid < 4) extras[tid] = tid == 0 ? exp2_int(-e) : 0.f;
    if (which == 0 && tid < 2 * kBwdTile) {
        float l = INFINITY; /* rows past seq_q, and words 64..127 below */
        if (tid < kBwdTile && r0 + tid < n) {
            l = __ldg(p.lse + bh * p.seq_q + r0 + tid);
            if (l == -INFINITY) l = INFINITY; /* a row with no key: P = 0 */
        }
        float word = 0.f; /* words 64, 65 with a window table: its rows' largest lo, smallest hi */
        if (win_b && tid == kBwdTile) word = __int_as_float(max(win_sum[0][0], win_sum[1][0]));
        if (win_b && tid == kBwdTile + 1) word = __int_as_float(min(win_sum[0][1], win_sum[1][1]));
        extras[kBwdRowData / 4 + tid] = tid < kBwdTile ? l : word;
    } else if (which >= 2 && tid < 2 * kBwdTile) {
        extras[kBwdRowData / 4 + tid] = 0.f;
    }
}

/* bwd_v4_bias: the staged key bias, [B H][N 128] floats in record order: entry c of query head bh = (b, h) is the
 * bias of attended key c (kv_index's row, or c) below the batch's count, 0 past it (those keys get P = 0 from the
 * window test). Grid (2 N, B H), 64 threads: a tile of 64 keys each (the kernel reads every key of its last
 * block). */
__global__ void __launch_bounds__(kBwdTile)
    bwd_v4_bias(const float *key_bias, int64_t bias_b, int64_t bias_h, const int *kv_count, const int *kv_index,
                int heads, int seq_kv, float *bias_ws) {
    const int64_t bh = blockIdx.y;
    const int b = (int)(bh / heads), h = (int)(bh % heads);
    const int n = kv_count ? __ldg(kv_count + b) : seq_kv;
    const int c = (int)blockIdx.x * kBwdTile + (int)threadIdx.x;
    float x = 0.f;
    if (c < n) {
        const int row = kv_index ? __ldg(kv_index + (int64_t)b * seq_kv + c) : c;
        x = __ldg(key_bias + b * bias_b + h * bias_h + row);
    }
    bias_ws[bh * gridDim.x * kBwdTile + c] = x;
}

constexpr int kTableThreads = 256;

/* The window table's rows: (lo, hi) of row i of batch b in attended keys (v4w_row_window), one thread per row of
 * the records ([B][rows_pad]); thread 0 zeroes the counter of bwd_v4_units, which runs next on the stream. */
__global__ void __launch_bounds__(kTableThreads)
    bwd_v4_windows(const KwMask m, const int *kv_count, const int *kv_index, int seq_kv, int rows_pad, int batch,
                   int sentinel, int *win, unsigned *counter) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx == 0) *counter = 0u;
    if (idx >= (int64_t)batch * rows_pad) return;
    const int b = (int)(idx / rows_pad), i = (int)(idx - (int64_t)b * rows_pad);
    const int n = kv_count ? __ldg(kv_count + b) : seq_kv;
    const int *rows = kv_index ? kv_index + (int64_t)b * seq_kv : nullptr;
    int lo, hi;
    v4w_row_window(m, b, i, rows, n, sentinel, &lo, &hi);
    *reinterpret_cast<int2 *>(win + 2 * idx) = make_int2(lo, hi);
}

/* Block n of batch b's m-blocks [first, last] from the rows (v4w_block_range), one thread per (b, n) into range
 * [B][N][2]; the CTA that finishes last (each counts itself in *counter after its writes are fenced) scans the
 * counts last - first + 1 in (b, n) order into pre [B N + 1] (exclusive; pre[B N] the total), 256 at a time. */
__global__ void __launch_bounds__(kTableThreads)
    bwd_v4_units(const int *win, int seq_q, int rows_pad, int tq, int batch, int n_blocks, int *range, int *pre,
                 unsigned *counter) {
    constexpr int kWarps = kTableThreads / 32;
    __shared__ int warp_sum[kWarps];
    __shared__ int is_last;
    const int64_t total = (int64_t)batch * n_blocks;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < total) {
        const int b = (int)(idx / n_blocks), n = (int)(idx - (int64_t)b * n_blocks);
        int f, l;
        v4w_block_range(win + (int64_t)b * rows_pad * 2, seq_q, tq, n, &f, &l);
        *reinterpret_cast<int2 *>(range + 2 * idx) = make_int2(f, l);
    }
    __threadfence(); /* this thread's range entry before the CTA's count */
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence(); /* every CTA's entries counted: read them from L2 (ld.cg) */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int carry = 0;
    for (int64_t x0 = 0; x0 < total; x0 += kTableThreads) {
        const int64_t x = x0 + threadIdx.x;
        int c = 0;
        if (x < total) {
            const int2 r = __ldcg(reinterpret_cast<const int2 *>(range) + x);
            c = r.y - r.x + 1;
        }
        int v = c; /* the warp's inclusive sums */
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const int y = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += y;
        }
        if (lane == 31) warp_sum[warp] = v;
        __syncthreads();
        int before = carry, chunk = 0;
        for (int w = 0; w < kWarps; ++w) {
            const int s = warp_sum[w];
            before += w < warp ? s : 0;
            chunk += s;
        }
        if (x < total) pre[x] = before + v - c;
        carry += chunk;
        __syncthreads(); /* warp_sum is rewritten by the next chunk */
    }
    if (threadIdx.x == 0) pre[total] = carry;
}

} /* namespace */

/* Enqueues the window table's pre-pass (bwd_v4_windows, bwd_v4_units) into `tables` (v4w_layout's region, int
 * aligned): the calls with a window that causal's closed form does not give (backward_v4_sm90_fa3_f16x2.cu). */
extern "C" cudaError_t bwd_v4_windows_launch(const jattn_cuda_args *a, void *tables, cudaStream_t stream) {
    const V4wLayout L = v4w_layout(a->batch, a->seq_q, a->seq_kv);
    int *t = static_cast<int *>(tables);
    const int tq = (int)((a->seq_q + kV4wMRows - 1) / kV4wMRows),
              n_blocks = (int)((a->seq_kv + kV4wBlockKeys - 1) / kV4wBlockKeys);
    const int64_t rows = a->batch * (int64_t)tq * kV4wMRows, blocks = a->batch * (int64_t)n_blocks;
    bwd_v4_windows<<<(unsigned)((rows + kTableThreads - 1) / kTableThreads), kTableThreads, 0, stream>>>(
        kw_mask_of(*a), a->kv_count, a->kv_index, (int)a->seq_kv, tq * kV4wMRows, (int)a->batch,
        kV4wBlockKeys * n_blocks, t + L.win, reinterpret_cast<unsigned *>(t + L.counter));
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    bwd_v4_units<<<(unsigned)((blocks + kTableThreads - 1) / kTableThreads), kTableThreads, 0, stream>>>(
        t + L.win, (int)a->seq_q, tq * kV4wMRows, tq, (int)a->batch, n_blocks, t + L.range, t + L.pre,
        reinterpret_cast<unsigned *>(t + L.counter));
    return cudaGetLastError();
}

/* Enqueues the pre-pass (backward_v4_sm90_fa3_f16x2.cu checks the call: D 64 or 128, float4-aligned
 * pointers and strides, B*H <= 65535); win: the window table's rows (bwd_v4_windows_launch before it), or NULL;
 * bias_ws: the staged key bias [B H][N 128] (with win; a call with a key bias runs the window table). */
extern "C" cudaError_t bwd_v4_split_launch(const jattn_cuda_args *a, void *records, const int *win, float *bias_ws,
                                           cudaStream_t stream) {
    const jattn_cuda_args *f = a; /* the forward's fields */
    const int64_t bh = f->batch * f->heads, kv_heads = f->kv_heads ? f->kv_heads : f->heads;
    const BwdRecordLayout L = bwd_record_layout(bh, f->batch * kv_heads, f->seq_q, f->seq_kv, f->head_dim);
    unsigned char *ws = static_cast<unsigned char *>(records);
    BwdSplitParams p;
    p.q = f->q, p.k = f->k, p.v = f->v, p.o = f->out, p.dout = a->dout, p.lse = f->lse, p.dlse = a->dlse;
    p.kv_count = f->kv_count, p.kv_index = f->kv_index;
    p.finite_kv = f->causal != JATTN_CAUSAL_NONE || win != nullptr;
    p.win = win;
    p.key_bias = win ? f->key_bias : nullptr; /* a key bias runs with the window table */
    p.bias_b = f->bias_batch_stride, p.bias_h = f->bias_head_stride;

    p.rows_pad = (int)((f->seq_q + kBwdTile - 1) / kBwdTile) * kBwdTile;
    p.q_b = f->q_strides.batch, p.q_h = f->q_strides.head, p.q_t = f->q_strides.token;
    p.k_b = f->k_strides.batch, p.k_h = f->k_strides.head, p.k_t = f->k_strides.token;
    p.v_b = f->v_strides.batch, p.v_h = f->v_strides.head, p.v_t = f->v_strides.token;
    p.o_b = f->out_strides.batch, p.o_h = f->out_strides.head, p.o_t = f->out_strides.token;
    p.do_b = a->dout_strides.batch, p.do_h = a->dout_strides.head, p.do_t = a->dout_strides.token;
    p.heads = (int)f->heads;
    p.kv_heads = (int)kv_heads;
    p.seq_q = (int)f->seq_q;
    p.seq_kv = (int)f->seq_kv;
    p.tq = (int)((f->seq_q + kBwdTile - 1) / kBwdTile);
    p.tk = (int)((f->seq_kv + kBwdTile - 1) / kBwdTile);
    p.scale = f->scale;
    p.rec[0] = ws + L.q, p.rec[1] = ws + L.dout, p.rec[2] = ws + L.k, p.rec[3] = ws + L.v;
    if (p.key_bias) {
        const int n_blocks = (int)((f->seq_kv + 2 * kBwdTile - 1) / (2 * kBwdTile));
        bwd_v4_bias<<<dim3(2u * (unsigned)n_blocks, (unsigned)bh), kBwdTile, 0, stream>>>(
            p.key_bias, p.bias_b, p.bias_h, f->kv_count, f->kv_index, p.heads, p.seq_kv, bias_ws);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    const dim3 grid((unsigned)(p.tq > p.tk ? p.tq : p.tk), 4u, (unsigned)bh);
    if (f->head_dim == 128)
        bwd_v4_split<128><<<grid, kSplitThreads, 0, stream>>>(p);
    else
        bwd_v4_split<64><<<grid, kSplitThreads, 0, stream>>>(p);
    return cudaGetLastError();
}
