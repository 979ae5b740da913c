/* sm90_pipeline_ptx.cuh: the PTX of a warp-specialized Hopper pipeline (v6, the backward v4): mbarriers,
 * the bulk copy engine (cp.async.bulk, global -> shared, completing on an mbarrier), named CTA
 * barriers and register reallocation between warpgroups (setmaxnreg). sm_90a; internal to
 * src/cuda, internal linkage. Semantics: PTX ISA 8.x, sections "mbarrier", "cp.async.bulk",
 * "bar.sync / bar.arrive", "setmaxnreg". */
#ifndef JATTN_SM90_PIPELINE_PTX_CUH
#define JATTN_SM90_PIPELINE_PTX_CUH

#include <stdint.h>

namespace {

/* An mbarrier at shared address `bar` expecting `count` arrivals per phase. */
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Makes initialized mbarriers visible to the async proxy (the bulk copies complete on them). */
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrival that also announces `bytes` of bulk copies completing on this phase. */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

/* One arrival (release: this thread's earlier shared-memory reads are done before it counts). */
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Waits until the phase of parity `parity` of the barrier has completed (acquire). A fresh
 * barrier counts its phase "before 0" (parity 1) as completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

/* Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to
 * this CTA's shared memory; its completion counts `bytes` on the mbarrier `bar`. */
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* Named CTA barrier `id` (1..15) over `threads` threads (a multiple of 32): wait, or arrive only. */
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* The warpgroup's per-thread register limit, lowered (producer) or raised (consumers); every
 * warp of the warpgroup executes it. */
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

} /* namespace */

#endif /* JATTN_SM90_PIPELINE_PTX_CUH */
