/* backward_v4_mix.cu: the backward v4's wgmma mix alone, the "measure first" step of
 * ../shared/research/backward_fa3_route.md (section 5, call 1 (a) and (b)): per m-block and consumer warpgroup the
 * kernel's 120 m64n64k16 units in its grouping (S^T 16 corrections + 2 hi*hi then 3 step pairs, each waited;
 * dP^T 24 in one chain; dK and dV 2 x 12 rs with MN-major B, each tile waited; dQ 24 ss with MN-major B), two
 * consumer warpgroups with the kernel's two 256-thread named barriers, operands resident in shared memory, no
 * elementwise work; one CTA of 384 threads per SM, as many CTAs as SMs.
 *   mode 0: the kernel's waits (the products' own dependency structure)
 *   mode 1: every product of an m-block issued back to back, one wait (the tensor and shared-memory ceiling)
 *   mode 3: mode 2's pushes into 5 regions shared by every CTA (a head's dQ accumulator in L2, as route C's)
 *   mode 4: 32 red.global.add.u64 per thread per m-block into the shared regions (order-free int64 fixed point)
 *   mode 2: mode 0 plus the dQ pushes: 16 red.global.add.v2.f32 per thread per m-block into the CTA's own 2.36 MB
 *           region (one head's dQ copy at S = 4608), the m-block's 32 KB rows in turn, as the kernel's private
 *           copies (311 MB in all: the pushes miss L2 as the kernel's do)
 * Prints per mode the fp16 tensor TFLOP/s (2 x 64 x 64 x 16 flop per unit) and the f32-equivalent backward rate
 * (a third of it: three fp16 products per f32 product).
 * Build (from the repository root): nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Iinclude
 *   -Isrc/cuda lab/gpu/backward_v4_mix.cu -o backward_v4_mix */
#include <stdint.h>
#include <stdio.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "sm90_pipeline_ptx.cuh"
#include "sm90_wgmma_f16_ptx.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kImg = 16384;                                /* one fp16 image, 64 rows x 128 */
constexpr int kBlocks = 72;                                /* m-blocks of a head at S = 4608 */
constexpr size_t kCopyFloats = (size_t)kBlocks * 64 * 128; /* one head's dQ copy */
constexpr int kSmem = 14 * kImg + 1024;                    /* K, V 2 x 2 images each, Q, dO 2 each, dS hi, lo */

__device__ __forceinline__ void ss_tb(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
                 "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(acc));
}

__device__ __forceinline__ uint64_t dmn(uint32_t s) {
    return (uint64_t)((s & 0x3FFFFu) >> 4) | ((uint64_t)(8192 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

template <int kMode>
__global__ void __launch_bounds__(384, 1) mix(int iters, float *sink, float *red_base) {
    extern __shared__ unsigned char raw[];
    const uint32_t r0 = smem_u32(raw);
    const uint32_t s0 = r0 + ((1024 - r0 % 1024) % 1024);
    unsigned char *sp = raw + (s0 - r0);
    for (int i = threadIdx.x; i < 14 * kImg / 2; i += blockDim.x) /* small fp16 values, not zeros */
        reinterpret_cast<__half *>(sp)[i] = __float2half(((i * 2654435761u) >> 20) * (1.f / 4096.f) - 0.5f);
    fence_proxy_async();
    __syncthreads();
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        setmaxnreg_dec<24>();
        return;
    }
    setmaxnreg_inc<240>();
    const int w = wg - 1, tid = threadIdx.x - 128 * wg;
    const uint32_t kh = s0 + w * 2 * kImg, kl = kh + kImg, vh = s0 + 4 * kImg + w * 2 * kImg, vl = vh + kImg;
    const uint32_t qh = s0 + 8 * kImg, ql = qh + kImg, gh = s0 + 10 * kImg, gl = gh + kImg, dsh = s0 + 12 * kImg;
    float *red = red_base + (size_t)blockIdx.x * kCopyFloats + (w * 128 + tid) * 32;
    float *shared = red_base + (size_t)(blockIdx.x % 5) * 2 * kCopyFloats + (w * 128 + tid) * 32;
    float x[32], y[32], t[32];
    for (int i = 0; i < 32; ++i) x[i] = y[i] = t[i] = 0.f;
    float sum = 0.f;
    for (int it = 0; it < iters; ++it) {
        const uint64_t akh = smem_desc_sw128(opaque(kh)), akl = smem_desc_sw128(opaque(kl));
        const uint64_t bqh = smem_desc_sw128(opaque(qh)), bql = smem_desc_sw128(opaque(ql));
        const uint64_t avh = smem_desc_sw128(opaque(vh)), avl = smem_desc_sw128(opaque(vl));
        const uint64_t bgh = smem_desc_sw128(opaque(gh)), bgl = smem_desc_sw128(opaque(gl));
        /* S^T: X chain, then three step pairs */
        wgmma_fence();
        for (int s = 0; s < 8; ++s) {
            wgmma_m64n64k16_f16_ss(x, f16_slice_desc(akh, s, 64), f16_slice_desc(bql, s, 64), s > 0);
            wgmma_m64n64k16_f16_ss(x, f16_slice_desc(akl, s, 64), f16_slice_desc(bqh, s, 64), 1);
        }
        for (int s = 0; s < 2; ++s)
            wgmma_m64n64k16_f16_ss(x, f16_slice_desc(akh, s, 64), f16_slice_desc(bqh, s, 64), 1);
        wgmma_commit();
        for (int s0_ = 2; s0_ < 8; s0_ += 2) {
            wgmma_fence();
            wgmma_m64n64k16_f16_ss(t, f16_slice_desc(akh, s0_, 64), f16_slice_desc(bqh, s0_, 64), 0);
            wgmma_m64n64k16_f16_ss(t, f16_slice_desc(akh, s0_ + 1, 64), f16_slice_desc(bqh, s0_ + 1, 64), 1);
            wgmma_commit();
            if (kMode != 1) {
                wgmma_wait<0>();
                fence_regs(t);
                fence_regs(x);
                for (int i = 0; i < 32; ++i) x[i] += t[i];
            }
        }
        /* dP^T: one chain */
        wgmma_fence();
        for (int s = 0; s < 8; ++s) {
            wgmma_m64n64k16_f16_ss(y, f16_slice_desc(avh, s, 64), f16_slice_desc(bgl, s, 64), s > 0);
            wgmma_m64n64k16_f16_ss(y, f16_slice_desc(avl, s, 64), f16_slice_desc(bgh, s, 64), 1);
        }
        for (int s = 0; s < 8; ++s)
            wgmma_m64n64k16_f16_ss(y, f16_slice_desc(avh, s, 64), f16_slice_desc(bgh, s, 64), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(x);
        fence_regs(y);
        uint32_t ah[4][4], al[4][4];
        for (int ks = 0; ks < 4; ++ks)
            for (int j = 0; j < 4; ++j) {
                const __half2 a = __floats2half2_rn(x[8 * ks + 2 * j] * 1e-3f, y[8 * ks + 2 * j + 1] * 1e-3f);
                ah[ks][j] = *reinterpret_cast<const uint32_t *>(&a);
                al[ks][j] = ah[ks][j] ^ 0x00010001u;
            }
        named_bar_sync(1, 256);
        /* dK, dV: two 64-column tiles of 12 rs each, each waited */
        for (int prod = 0; prod < 2; ++prod)
            for (int half = 0; half < 2; ++half) {
                const uint32_t bh = opaque(prod ? gh : qh) + half * 8192, bl = opaque(prod ? gl : ql) + half * 8192;
                wgmma_fence();
                for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_f16_rs<1>(t, al[ks], dmn(bh + ks * 2048), ks > 0);
                for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_f16_rs<1>(t, ah[ks], dmn(bl + ks * 2048), 1);
                for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_f16_rs<1>(t, ah[ks], dmn(bh + ks * 2048), 1);
                wgmma_commit();
                if (kMode != 1) {
                    wgmma_wait<0>();
                    fence_regs(t);
                    sum += t[half];
                }
            }
        named_bar_sync(2, 256);
        /* dQ: 24 ss, A = dS K-major, B = K MN-major */
        {
            const uint64_t ah_d = smem_desc_sw128(opaque(dsh)), al_d = smem_desc_sw128(opaque(dsh) + kImg);
            const uint32_t bk = opaque(s0) + w * 8192;
            wgmma_fence();
            for (int ks = 0; ks < 8; ++ks)
                ss_tb(t, f16_slice_desc(al_d, ks, 64), dmn(bk + (ks / 4) * 2 * kImg + (ks % 4) * 2048), ks > 0);
            for (int ks = 0; ks < 8; ++ks)
                ss_tb(t, f16_slice_desc(ah_d, ks, 64), dmn(bk + kImg + (ks / 4) * 2 * kImg + (ks % 4) * 2048), 1);
            for (int ks = 0; ks < 8; ++ks)
                ss_tb(t, f16_slice_desc(ah_d, ks, 64), dmn(bk + (ks / 4) * 2 * kImg + (ks % 4) * 2048), 1);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(t);
            fence_regs(ah);
            fence_regs(al);
            if (kMode == 2)
                for (int i = 0; i < 16; ++i)
                    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(red + (it % kBlocks) * 8192 + 2 * i),
                                 "f"(t[2 * i]), "f"(t[2 * i + 1])
                                 : "memory");
            if (kMode == 3) /* the same pushes into 5 regions shared by all CTAs (a head's dQ in L2, route C's) */
                for (int i = 0; i < 16; ++i)
                    asm volatile(
                        "red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(shared + (it % kBlocks) * 8192 + 2 * i),
                        "f"(t[2 * i]), "f"(t[2 * i + 1])
                        : "memory");
            if (kMode == 4) /* order-free int64 fixed point into the shared regions: 32 red.u64 per thread */
                for (int i = 0; i < 32; ++i) {
                    const long long v = __float2ll_rn(t[i] * 0x1p20f);
                    asm volatile("red.global.add.u64 [%0], %1;\n" ::"l"(reinterpret_cast<unsigned long long *>(shared) +
                                                                        (it % kBlocks) * 8192 + i),
                                 "l"(v)
                                 : "memory");
                }
            sum += t[0] + x[1] + y[2];
        }
    }
    if (sum == 12345.f) sink[threadIdx.x] = sum;
}

template <int kMode>
float run(int ctas, int iters, float *sink, float *red) {
    cudaFuncSetAttribute(mix<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    mix<kMode><<<ctas, 384, kSmem>>>(2, sink, red); /* warm-up */
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(a);
        mix<kMode><<<ctas, 384, kSmem>>>(iters, sink, red);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0.f;
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best) best = ms;
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        printf("mode %d: %s\n", kMode, cudaGetErrorString(err));
        return -1.f;
    }
    return best;
}

} /* namespace */

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int iters = 2000;
    float *sink = nullptr, *red = nullptr;
    cudaMalloc(&sink, 384 * sizeof(float));
    cudaMalloc(&red, (size_t)sms * kCopyFloats * sizeof(float));
    const double units = 2.0 * 120.0 * iters * sms; /* m64n64k16 per warpgroup per m-block: 120 */
    const double flop = units * 2.0 * 64 * 64 * 16;
    const char *names[5] = {
        "kernel's waits", "one wait per m-block (ceiling)", "kernel's waits + dQ red.v2 into per-CTA copies",
        "kernel's waits + dQ red.v2 into 5 shared regions", "kernel's waits + dQ red.u64 x 32 into 5 shared regions"};
    float ms[5];
    ms[0] = run<0>(sms, iters, sink, red);
    ms[1] = run<1>(sms, iters, sink, red);
    ms[2] = run<2>(sms, iters, sink, red);
    ms[3] = run<3>(sms, iters, sink, red);
    ms[4] = run<4>(sms, iters, sink, red);
    for (int m = 0; m < 5; ++m)
        if (ms[m] > 0)
            printf("MIX mode %d (%s): %.3f ms for %d m-blocks x %d CTAs: fp16 %.1f TFLOP/s, f32-equivalent %.1f; "
                   "per m-block %.2f us\n",
                   m, names[m], ms[m], iters, sms, flop / ms[m] / 1e9, flop / 3 / ms[m] / 1e9, ms[m] * 1e3 / iters);
    return 0;
}
