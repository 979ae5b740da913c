/* key_padding: the pre-pass of a padded call (jattn_key_padding), on the device so that the
 * call stays asynchronous and capturable: per batch, the keys it attends.
 *
 * Reads  kv_len [B] int64 (or NULL; clamped to [0, Skv]: a device length cannot be validated
 *        on the host) and mask, row b at mask + b * mask_stride, Skv bytes (or NULL).
 * Writes kv_count [B] int32 (the attended keys of batch b) and, with a mask, kv_index [B][Skv]
 *        int32: the attended rows of batch b, ascending, in its first kv_count[b] entries, then
 *        the rows it does not attend, ascending (a permutation of the rows: the backward v4 writes
 *        dK, dV = 0 through the entries past kv_count[b]; the other kernels read none of them).
 *
 * One CTA of 1024 threads per batch walks the keys in chunks of 1024: each warp counts its
 * attended keys (then, from kv_count[b] on, its unattended ones) by ballot, the warps' counts are
 * scanned in shared memory, and each key takes its slot (the running count + the keys before it).
 * Without a mask the count alone is written. It moves B * Skv bytes in and at most 4x out. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_internal.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

__global__ void __launch_bounds__(kThreads)
    key_padding_index_kernel(const int64_t *kv_len, const uint8_t *mask, int64_t mask_stride, int seq_kv, int *count,
                             int *index) {
    __shared__ int warp_count[kWarps];
    const int b = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int64_t len = kv_len ? kv_len[b] : seq_kv;
    const int end = len < 0 ? 0 : (len > seq_kv ? seq_kv : (int)len);
    if (!mask) {
        if (tid == 0) count[b] = end;
        return;
    }
    const uint8_t *row = mask + (int64_t)b * mask_stride;
    int *slots = index + (int64_t)b * seq_kv;
    int base = 0; /* keys of the pass placed before this chunk: attended ones, then (from the count) the others */
    for (int pass = 0; pass < 2; ++pass) {
        for (int j0 = 0; j0 < (pass ? seq_kv : end); j0 += kThreads) {
            const int j = j0 + tid;
            const bool attended = j < end && row[j] != 0;
            const bool on = j < (pass ? seq_kv : end) && attended != (pass == 1);
            const unsigned votes = __ballot_sync(0xffffffffu, on);
            if (lane == 0) warp_count[warp] = __popc(votes);
            __syncthreads();
            int before = base, total = base;
            for (int w = 0; w < kWarps; ++w) {
                const int n = warp_count[w];
                before += w < warp ? n : 0;
                total += n;
            }
            if (on) slots[before + __popc(votes & ((1u << lane) - 1u))] = j;
            base = total;
            __syncthreads(); /* warp_count is rewritten by the next chunk */
        }
        if (pass == 0 && tid == 0) count[b] = base;
    }
}

} /* namespace */

extern "C" size_t jattn_cuda_padding_bytes(int64_t batch, int64_t seq_kv) {
    return align_up((size_t)batch * sizeof(int)) + align_up((size_t)batch * (size_t)seq_kv * sizeof(int));
}

extern "C" int jattn_cuda_launch_padding(const int64_t *kv_len, const uint8_t *mask, int64_t mask_stride, int batch,
                                         int seq_kv, void *out, const int **count, const int **index, void *stream) {
    int *c = static_cast<int *>(out);
    int *idx = reinterpret_cast<int *>(static_cast<unsigned char *>(out) + align_up((size_t)batch * sizeof(int)));
    *count = c;
    *index = mask ? idx : nullptr;
    key_padding_index_kernel<<<(unsigned)batch, kThreads, 0, (cudaStream_t)stream>>>(kv_len, mask, mask_stride, seq_kv,
                                                                                     c, idx);
    return (int)cudaGetLastError();
}
