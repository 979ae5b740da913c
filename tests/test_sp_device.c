/* The sequence-parallel algorithms on one GPU with device memory: every rank's steps in one
 * process (tests/sp_threads_transport.h), P = 1..4 threads on the same GPU, each rank with its
 * own stream and its own device copies of its shard tensors, the cuda backend. So the device
 * side of the layer runs as on P GPUs: the ring's packs and its lse merge kernel, the Ulysses
 * re-layouts (pack, head-group tensors read by strides, unpack of out and lse), the
 * stream-ordered workspace; only the transfers are the test's (copies between the ranks'
 * buffers at barriers, not NCCL). Every case of tests/sp_cases.c: the assembled output and lse
 * against the float64 reference of the whole problem under the f32 gate, nothing written
 * outside the outputs; then a rank whose backend cannot run its part (the cpu backend on
 * device memory) fails every rank alike, writing nothing. Exits 77 without a GPU. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "jattn_internal.h" /* parallel/sp_ctx.h, sp_transport.h */
#include "sp_cases.h"
#include "sp_threads_transport.h"

static jt_tally tally;

static int device_copy(void *dst, const void *src, size_t bytes) {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
}

static int stream_sync(void *stream) { return cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess ? 0 : -1; }

typedef struct job {
    const spt_case *k;
    spt_rank *rank;
    spt_world *world;
    int cpu_rank; /* the rank that asks for the cpu backend, or -1 */
    jattn_status status[SPT_MAX_RANKS];
    char message[SPT_MAX_RANKS][256];
} job;

static int64_t shard_span(const spt_rank *r, const jattn_strides s, int64_t seq) {
    const jattn_problem *p = &r->sp.whole;
    return kit_tensor_span(p, s, seq);
}

/* One rank: its tensors to its device buffers (same layout), the call on its stream, its out
 * and lse (guards included) back to the host. */
static void rank_main(int rank, void *arg) {
    job *j = arg;
    spt_rank *r = &j->rank[rank];
    const int64_t sq = r->sp.seq_q_shards[rank];
    const int64_t skv = r->sp.seq_kv_shards ? r->sp.seq_kv_shards[rank] : r->sp.whole.seq_kv;
    const int64_t n[3] = {shard_span(r, r->sp.whole.q, sq), shard_span(r, r->sp.whole.k, skv),
                          shard_span(r, r->sp.whole.v, skv)};
    const float *host[3] = {r->q, r->k, r->v};
    float *dev[3] = {NULL, NULL, NULL}, *out = NULL, *lse = NULL;
    cudaStream_t stream = NULL;
    jattn_sp_ctx *ctx = NULL;
    jattn_status st = JATTN_ERROR_CUDA;
    int ok = cudaSetDevice(0) == cudaSuccess && cudaStreamCreate(&stream) == cudaSuccess;
    for (int t = 0; t < 3 && ok; t++)
        ok = cudaMalloc((void **)&dev[t], (size_t)n[t] * sizeof(float)) == cudaSuccess &&
             cudaMemcpy(dev[t], host[t], (size_t)n[t] * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
    ok = ok && cudaMalloc((void **)&out, (size_t)r->out_n * sizeof(float)) == cudaSuccess &&
         cudaMalloc((void **)&lse, (size_t)r->lse_n * sizeof(float)) == cudaSuccess &&
         cudaMemcpy(out, r->out_alloc, (size_t)r->out_n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(lse, r->lse_alloc, (size_t)r->lse_n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
    sp_collectives c;
    spt_world_collectives(j->world, rank, stream, &c);
    if (ok) st = jattn_sp_ctx_create(&ctx);
    jattn_exec e = {0};
    e.backend = rank == j->cpu_rank ? JATTN_BACKEND_CPU : JATTN_BACKEND_CUDA;
    e.memory = JATTN_MEMORY_DEVICE;
    e.cuda_stream = stream;
    /* A rank whose set-up failed still calls: its peers wait for its descriptor otherwise. */
    jattn_status call =
        sp_forward_collectives(&c, ctx, &r->sp, &e, dev[0], dev[1], dev[2], out + (r->out - r->out_alloc),
                               j->k->want_lse ? lse + (r->lse - r->lse_alloc) : NULL);
    j->status[rank] = st != JATTN_OK ? st : call;
    snprintf(j->message[rank], sizeof j->message[rank], "%s",
             st != JATTN_OK ? "device set-up failed" : jattn_last_error());
    if (ok &&
        (cudaStreamSynchronize(stream) != cudaSuccess ||
         cudaMemcpy(r->out_alloc, out, (size_t)r->out_n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(r->lse_alloc, lse, (size_t)r->lse_n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)) {
        j->status[rank] = JATTN_ERROR_CUDA;
        snprintf(j->message[rank], sizeof j->message[rank], "after the call: %s",
                 cudaGetErrorString(cudaGetLastError()));
    }
    jattn_sp_ctx_free(ctx);
    for (int t = 0; t < 3; t++) cudaFree(dev[t]);
    cudaFree(out);
    cudaFree(lse);
    if (stream) cudaStreamDestroy(stream);
}

static int run_job(job *j, int ranks) {
    const spt_mover mover = {JATTN_MEMORY_DEVICE, device_copy, stream_sync};
    j->world = spt_world_create(ranks, mover);
    if (!j->world) return -1;
    int rc = spt_run_ranks(ranks, rank_main, j);
    spt_world_free(j->world);
    return rc;
}

static void run_case(const spt_case *k, int ranks, uint64_t seed, int cpu_rank) {
    char label[256];
    spt_case_label(k, ranks, label, sizeof label);
    spt_whole w;
    spt_rank rank[SPT_MAX_RANKS];
    memset(rank, 0, sizeof rank);
    int ok = spt_whole_init(&w, k, ranks, seed, cpu_rank < 0) == 0;
    for (int r = 0; r < ranks && ok; r++) ok = spt_rank_init(&rank[r], &w, k, r) == 0;
    job j;
    memset(&j, 0, sizeof j);
    j.k = k;
    j.rank = rank;
    j.cpu_rank = cpu_rank;
    int pass = ok && run_job(&j, ranks) == 0;
    if (cpu_rank >= 0) { /* every rank fails alike and writes nothing */
        for (int r = 0; r < ranks && pass; r++)
            if (j.status[r] != JATTN_ERROR_UNSUPPORTED || strcmp(j.message[r], j.message[0]) != 0 ||
                !strstr(j.message[r], "exec.memory: the cpu backend reads host memory only") ||
                !spt_rank_all_poison(&rank[r])) {
                printf("FAIL %s, rank %d on the cpu backend: rank %d: %s: '%s'\n", label, cpu_rank, r,
                       jattn_status_name(j.status[r]), j.message[r]);
                pass = 0;
            }
    } else {
        pass = pass && spt_assemble(&w, rank, ranks, j.status, j.message, label);
        if (pass) pass = spt_check(&w, k->want_lse, label);
    }
    jt_tally_add(&tally, pass);
    for (int r = 0; r < ranks; r++) spt_rank_free(&rank[r]);
    spt_whole_free(&w);
}

int main(void) {
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no CUDA device (or the cuda backend is not built)\n");
        return JT_SKIP;
    }
    const uint64_t seed = jt_seed();
    spt_case cases[64];
    for (int ranks = 1; ranks <= 4; ranks++) {
        const int n = spt_cases(ranks, cases, 64);
        for (int i = 0; i < n; i++) run_case(&cases[i], ranks, seed + (uint64_t)(ranks * 1000 + i), -1);
        if (ranks > 1) run_case(&cases[0], ranks, seed, ranks - 1);
    }
    return jt_tally_finish(&tally, "test_sp_device");
}
