/* key_padding.cuh: how a kernel reads the key padding the pre-pass resolved (key_padding.cu,
 * cuda_internal.h): the keys batch b attends, and the k/v row of the j-th of them. Every kernel
 * runs a batch over its attended keys as if they were the whole sequence, so blocks past
 * kv_len and masked keys are never loaded. Internal to src/cuda; internal linkage. */
#ifndef JATTN_KEY_PADDING_CUH
#define JATTN_KEY_PADDING_CUH

#include <stdint.h>

#include <cuda_runtime.h>

namespace {

/* Keys batch b attends: kv_count[b], or every key when there is no padding. */
__device__ __forceinline__ int attended_keys(const int *kv_count, int b, int seq_kv) {
    return kv_count ? __ldg(kv_count + b) : seq_kv;
}

/* The row list of batch b (NULL: the identity). */
__device__ __forceinline__ const int *attended_rows(const int *kv_index, int b, int seq_kv) {
    return kv_index ? kv_index + (int64_t)b * seq_kv : nullptr;
}

/* The k/v row of attended key j. */
__device__ __forceinline__ int64_t key_row(const int *rows, int j) {
    return rows ? (int64_t)__ldg(rows + j) : (int64_t)j;
}

} /* namespace */

#endif /* JATTN_KEY_PADDING_CUH */
