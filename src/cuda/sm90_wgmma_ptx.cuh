/* sm90_wgmma_ptx.cuh: building blocks shared by the sm_90a attention kernels (v6, the backward
 * v4): the 128-byte-swizzled K-major shared-memory layout and its wgmma descriptors, wgmma and
 * fence wrappers (inline PTX). Internal to src/cuda; every symbol has internal linkage.
 *
 * Shared memory layout of a K-major operand tile of R rows (R % 8 == 0), the "128B swizzle"
 * canonical layout of the wgmma descriptor: each row's K extent is cut into blocks of 128 bytes
 * (64 fp16); block kb occupies R*128 bytes at kb*R*128; inside it row r occupies bytes
 * [r*128, r*128+128) and its 16-byte chunk c sits at chunk position c ^ (r % 8). Tile bases are
 * 1024-byte aligned (the swizzle XORs address bits 4-6 with bits 7-9). The descriptor of the k-th
 * k16 slice starts at kb*R*128 + (k%4)*32 bytes, stride byte offset (between 8-row groups) 1024;
 * the leading byte offset is unused for swizzled K-major operands whose K extent (32 bytes) fits
 * in one swizzle row. */
#ifndef JATTN_SM90_WGMMA_PTX_CUH
#define JATTN_SM90_WGMMA_PTX_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "attention_sm90.h"

namespace {

constexpr int kSwizzleBytes = 128;                   /* 128-byte swizzle: one swizzle row */
constexpr int kSwizzleAtomBytes = 8 * kSwizzleBytes; /* 8 rows: the SBO and the alignment */
constexpr float kLog2e = 1.4426950408889634f;

/* The current device, when it is compute capability 9.0 (the sm_90a kernels' only target):
 * cudaSuccess with *dev set; else the CUDA error of the query or cudaErrorNoKernelImageForDevice. */
inline cudaError_t sm90_current_device(int *dev) {
    int major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, *dev);
    if (err != cudaSuccess) return err;
    return major == 9 && minor == 0 ? cudaSuccess : cudaErrorNoKernelImageForDevice;
}

/* The layout for fp16 operands: 64 halves per swizzle row, one k16 slice = 32 bytes. Byte offset
 * of fp16 element (row, col) in a tile of `rows` rows. */
constexpr int kHalvesPerSwizzleRow = kSwizzleBytes / 2;
__device__ __forceinline__ uint32_t swizzled_offset_f16(int row, int col, int rows) {
    const int block = col / kHalvesPerSwizzleRow, in_row = col % kHalvesPerSwizzleRow;
    return static_cast<uint32_t>(block * rows * kSwizzleBytes + row * kSwizzleBytes +
                                 (((in_row / 8) ^ (row % 8)) * 16) + (in_row % 8) * 2);
}

/* Descriptor of k16 slice `slice` of a fp16 tile of `rows` rows (four slices per swizzle row):
 * the tile's descriptor plus the slice offset / 16, a constant once unrolled. */
__device__ __forceinline__ uint64_t f16_slice_desc(uint64_t tile_desc, int slice, int rows) {
    return tile_desc + (uint64_t)(((slice / 4) * rows * kSwizzleBytes + (slice % 4) * 32) >> 4);
}

/* ---- PTX wrappers -------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* wgmma shared-memory descriptor, 128-byte swizzle, K-major. */
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t saddr) {
    const uint64_t start = (saddr & 0x3FFFFu) >> 4;
    const uint64_t lbo = 1;                      /* unused for swizzled K-major */
    const uint64_t sbo = kSwizzleAtomBytes >> 4; /* next 8-row group */
    const uint64_t swizzle_128b = 1;
    return start | (lbo << 16) | (sbo << 32) | (swizzle_128b << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Waits until at most N committed wgmma groups of this warpgroup are still in flight. */
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Generic-proxy shared stores become visible to the async proxy (wgmma operand reads). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* 2^x by the SFU (ex2.approx.ftz: ~2 ulp, subnormal results flushed to 0; 2^-inf = 0). */
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The value of x, opaque to the optimizer: keeps the dozens of per-slice descriptors from
 * being hoisted out of the key loop into (scarce) registers; they are recomputed with one
 * add each where they are used. */
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
    asm volatile("" : "+r"(x));
    return x;
}

/* Pins a register's value at this point of the instruction stream: keeps the compiler from
 * moving reads of wgmma results above the wait, or writes of wgmma inputs below the issue. */
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

/* D[64 x 64] (+)= A[64 x 16] * B; A from registers (four f16x2: rows g and g+8 of the warp's 16,
 * columns 2c..2c+1 then 2c+8..2c+9), B from shared memory: TRANS_B = 0, B[64 x 16]^T K-major
 * (the form of the removed v4); TRANS_B = 1, B[16 x 64] MN-major (imm-trans-b = 1: v6's O = P V
 * with V stored key by key, head_dim 64, and the backward v4's dK and dV products). */
template <int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64n64k16_f16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                       int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
                 "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

} /* namespace */

#endif /* JATTN_SM90_WGMMA_PTX_CUH */
