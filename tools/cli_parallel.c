/* `jattn run --parallel ulysses|ring|auto`: the run command's synthetic job spread over the
 * ranks of mpirun with jattn_sp_forward (libjattn_parallel).
 *
 * Every rank draws the whole q, k, v from the seed (the inputs `jattn run` draws for the same
 * size and seed) and passes its shard: host memory over MPI (views into the whole tensors, no
 * copy; out a token-major shard [B, S_r, H*D]), or with --backend cuda device memory over
 * NCCL (its shards uploaded to its GPU). Calls are timed on the host clock between barriers,
 * the slowest rank's time each call. With --check rank 0 gathers every out shard and checks the
 * assembled output against the float64 reference of the whole problem (every n-th query row
 * beyond the default job's size, as `jattn run`). Rank 0 prints the report (or --json, one
 * object); errors are one line from rank 0, and every rank exits with the same code. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_parallel_device.h"

/* As `jattn run`: the reference work of a full check, and about 2 s of timed calls. */
#define PAR_CHECK_BUDGET_FLOPS KIT_CHECK_BUDGET_FLOPS
#define PAR_AUTO_SECONDS 2.0
#define PAR_AUTO_REPS_MIN 3
#define PAR_AUTO_REPS_MAX 25

enum { ERRLEN = 512 };

typedef struct par_job {
    int rank, size, local_rank, local_size;
    MPI_Comm mpi;
    jattn_problem whole; /* the whole problem: q, k, v head-major, out token-major */
    int64_t q_shards[CLI_MAX_SHARDS > 1 ? CLI_MAX_SHARDS : 1], kv_shards[CLI_MAX_SHARDS > 1 ? CLI_MAX_SHARDS : 1];
    int64_t *q_shards_heap, *kv_shards_heap; /* when there are more ranks than CLI_MAX_SHARDS */
    const int64_t *qs, *kvs;                 /* kvs NULL: k, v replicated */
    int gpu;
    cli_sp_gpu *dev;
    jattn_sp_problem sp;
    jattn_exec exec;
    jattn_sp_comm comm;
    jattn_sp_selection sel;
    jattn_sp_ctx *ctx;
    float *q, *k, *v, *out;    /* host: whole inputs, this rank's out shard */
    void *dq, *dk, *dv, *dout; /* device shards */
    void *workspace;
    size_t workspace_bytes;
} par_job;

/* ---- agreement on failures ---- */

/* Every rank's rc: the lowest failing rank's message is printed once, by rank 0.
 * @return the largest rc on every rank. */
static int agree(const par_job *j, int rc, const char *message) {
    int worst = 0, first = 0, mine = rc ? j->rank : j->size;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, j->mpi);
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, j->mpi);
    if (!worst) return 0;
    char text[ERRLEN];
    snprintf(text, sizeof text, "%s", message ? message : "");
    MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first, j->mpi);
    if (j->rank == 0) {
        text[sizeof text - 1] = '\0';
        if (first == 0 || strncmp(text, "rank ", 5) == 0)
            cli_error(worst, "%s", text);
        else
            cli_error(worst, "rank %d: %s", first, text);
    }
    return worst;
}

/* ---- the job ---- */

static int64_t *shard_array(par_job *j, int64_t *fixed, int64_t **heap) {
    if (j->size <= CLI_MAX_SHARDS) return fixed;
    *heap = calloc((size_t)j->size, sizeof **heap);
    return *heap;
}

/* The problem and the shards from the options. @return 0, or an exit code with err set. */
static int plan_job(par_job *j, const cli_options *o, char *err) {
    const int64_t seq = o->seq_q ? o->seq_q : CLI_DEFAULT_SEQ;
    j->whole = jattn_problem_flux(o->batch ? o->batch : CLI_DEFAULT_BATCH, o->heads ? o->heads : CLI_DEFAULT_HEADS, seq,
                                  o->seq_kv ? o->seq_kv : seq, o->dim ? o->dim : CLI_DEFAULT_DIM);
    j->whole.scale = o->scale;
    jattn_selection probe;
    jattn_exec structural = {0};
    structural.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_select(&j->whole, &structural, &probe);
    if (st != JATTN_OK) {
        snprintf(err, ERRLEN, "invalid problem: %s (%s)", jattn_last_error(), jattn_status_name(st));
        return cli_exit_for_status(st);
    }
    int64_t *qs = shard_array(j, j->q_shards, &j->q_shards_heap),
            *kvs = shard_array(j, j->kv_shards, &j->kv_shards_heap);
    if (!qs || !kvs) {
        snprintf(err, ERRLEN, "out of memory");
        return CLI_EXIT_FAILURE;
    }
    if (o->n_shards) {
        if (o->n_shards != j->size) {
            snprintf(err, ERRLEN, "--shards: %d lengths for %d ranks", o->n_shards, j->size);
            return CLI_EXIT_USAGE;
        }
        int64_t sum = 0;
        for (int r = 0; r < j->size; r++) sum += o->shards[r] < INT64_MAX - sum ? o->shards[r] : INT64_MAX - sum;
        if (sum != j->whole.seq_q) {
            snprintf(err, ERRLEN, "--shards: the lengths sum to %lld, the sequence has %lld tokens", (long long)sum,
                     (long long)j->whole.seq_q);
            return CLI_EXIT_USAGE;
        }
        memcpy(qs, o->shards, (size_t)j->size * sizeof *qs);
    } else if (jattn_sp_even_shards(j->whole.seq_q, j->size, qs) != JATTN_OK) {
        snprintf(err, ERRLEN, "--seq: %lld tokens cannot be shared by %d ranks", (long long)j->whole.seq_q, j->size);
        return CLI_EXIT_USAGE;
    }
    j->qs = qs;
    if (o->replicate_kv) {
        j->kvs = NULL;
    } else if (j->whole.seq_kv == j->whole.seq_q) {
        memcpy(kvs, qs, (size_t)j->size * sizeof *kvs);
        j->kvs = kvs;
    } else if (jattn_sp_even_shards(j->whole.seq_kv, j->size, kvs) == JATTN_OK) {
        j->kvs = kvs;
    } else {
        snprintf(err, ERRLEN, "--seq-kv: %lld tokens cannot be shared by %d ranks (--replicate-kv keeps them whole)",
                 (long long)j->whole.seq_kv, j->size);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

static int64_t offset_of(const int64_t *shards, int r) {
    int64_t off = 0;
    for (int i = 0; i < r; i++) off += shards[i];
    return off;
}

/* The transport and the execution settings. */
static int open_transport(par_job *j, const cli_options *o, char *err) {
    j->gpu = cli_backend_on_device(o->backend); /* device memory over NCCL */
    j->exec.precision = o->precision;
    if (j->gpu) {
        /* NVLink multicast (NVLS) serves reductions, which these calls make none of. */
        setenv("NCCL_NVLS_ENABLE", "0", 0);
        if (cli_sp_gpu_open(&j->dev, &j->mpi, j->rank, j->size, j->local_rank, err, ERRLEN) != 0)
            return CLI_EXIT_FAILURE;
        j->exec.backend = o->backend;
        j->exec.memory = JATTN_MEMORY_DEVICE;
        j->exec.cuda_stream = cli_sp_gpu_stream(j->dev);
        j->comm.transport = JATTN_SP_NCCL;
        j->comm.handle = cli_sp_gpu_comm(j->dev);
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int share = (int)(cores > 0 ? cores : 1) / (j->local_size > 0 ? j->local_size : 1);
        j->exec.backend = o->backend == JATTN_BACKEND_AUTO ? cli_first_cpu_backend(NULL, NULL) : o->backend;
        j->exec.memory = JATTN_MEMORY_HOST;
        j->exec.threads = o->n_threads ? o->threads[0] : (share > 0 ? share : 1); /* the host's cores, shared */
        j->comm.transport = JATTN_SP_MPI;
        j->comm.handle = &j->mpi;
    }
    return 0;
}

/* Whole inputs on every rank, this rank's shard tensors, its problem, workspace and context. */
static int make_tensors(par_job *j, const cli_options *o, char *err) {
    const jattn_problem *w = &j->whole;
    const int64_t B = w->batch, H = w->heads, D = w->head_dim, sq = j->qs[j->rank], qo = offset_of(j->qs, j->rank);
    const int64_t skv = j->kvs ? j->kvs[j->rank] : w->seq_kv, kvo = j->kvs ? offset_of(j->kvs, j->rank) : 0;
    const int64_t n_q = kit_elems(w, w->seq_q), n_kv = kit_elems(w, w->seq_kv), n_out = B * sq * H * D;
    /* every rank on a host draws the whole inputs; rank 0 also holds the assembled output and the reference */
    double bytes = (double)j->local_size * (double)(n_q + 2 * n_kv + n_out) * sizeof(float) +
                   (o->check ? 3.0 * (double)kit_elems(w, w->seq_q) * sizeof(float) : 0.0);
    if (cli_memory_fits(bytes, "this problem on this host's ranks", err, ERRLEN) != 0) return CLI_EXIT_FAILURE;
    j->q = kit_alloc_floats(n_q);
    j->k = kit_alloc_floats(n_kv);
    j->v = kit_alloc_floats(n_kv);
    j->out = kit_alloc_floats(n_out);
    if (!j->q || !j->k || !j->v || !j->out) {
        snprintf(err, ERRLEN, "out of memory for the inputs (%lld elements each)", (long long)n_q);
        return CLI_EXIT_FAILURE;
    }
    jattn_rng_fill_normal(j->q, n_q, o->seed, 0);
    jattn_rng_fill_normal(j->k, n_kv, o->seed, 1);
    jattn_rng_fill_normal(j->v, n_kv, o->seed, 2);

    jattn_sp_problem *sp = &j->sp;
    memset(sp, 0, sizeof *sp);
    sp->whole = *w;
    sp->ranks = j->size;
    sp->seq_q_shards = j->qs;
    sp->seq_kv_shards = j->kvs;
    sp->algorithm = (jattn_sp_algorithm)(o->parallel - 1);
    sp->whole.out = jattn_strides_token_major(H, sq, D);
    if (j->gpu) { /* dense head-major shards on this rank's GPU */
        sp->whole.q = jattn_strides_head_major(H, sq, D);
        sp->whole.k = sp->whole.v = jattn_strides_head_major(H, skv, D);
        if (cli_sp_gpu_alloc((size_t)(B * H * sq * D) * sizeof(float), &j->dq, err, ERRLEN) ||
            cli_sp_gpu_alloc((size_t)(B * H * skv * D) * sizeof(float), &j->dk, err, ERRLEN) ||
            cli_sp_gpu_alloc((size_t)(B * H * skv * D) * sizeof(float), &j->dv, err, ERRLEN) ||
            cli_sp_gpu_alloc((size_t)n_out * sizeof(float), &j->dout, err, ERRLEN) ||
            cli_sp_gpu_upload(j->dq, j->q + qo * D, B * H, sq * D, w->seq_q * D, err, ERRLEN) ||
            cli_sp_gpu_upload(j->dk, j->k + kvo * D, B * H, skv * D, w->seq_kv * D, err, ERRLEN) ||
            cli_sp_gpu_upload(j->dv, j->v + kvo * D, B * H, skv * D, w->seq_kv * D, err, ERRLEN))
            return CLI_EXIT_FAILURE;
    } /* host: views into the whole head-major tensors, the strides of the whole */
    jattn_status st = jattn_sp_select(sp, &j->exec, &j->comm, &j->sel);
    if (st == JATTN_OK) st = jattn_sp_workspace_size(sp, &j->exec, &j->comm, &j->workspace_bytes);
    if (st != JATTN_OK) {
        snprintf(err, ERRLEN, "cannot run this problem in parallel: %s (%s)", jattn_last_error(),
                 jattn_status_name(st));
        return cli_exit_for_status(st);
    }
    if (j->gpu ? cli_sp_gpu_alloc(j->workspace_bytes, &j->workspace, err, ERRLEN) != 0
               : !(j->workspace = kit_alloc_floats((int64_t)(j->workspace_bytes / sizeof(float)) + 1))) {
        if (!j->gpu) snprintf(err, ERRLEN, "out of memory for the workspace (%zu bytes)", j->workspace_bytes);
        return CLI_EXIT_FAILURE;
    }
    j->exec.workspace = j->workspace;
    j->exec.workspace_bytes = j->workspace_bytes;
    if ((st = jattn_sp_ctx_create(&j->ctx)) != JATTN_OK) {
        snprintf(err, ERRLEN, "%s", jattn_last_error());
        return CLI_EXIT_FAILURE;
    }
    return 0;
}

/* One call, to completion on this rank. */
static jattn_status call_once(par_job *j, char *err) {
    const jattn_problem *w = &j->whole;
    const int64_t qo = offset_of(j->qs, j->rank), kvo = j->kvs ? offset_of(j->kvs, j->rank) : 0, D = w->head_dim;
    jattn_status st;
    if (j->gpu) {
        st = jattn_sp_forward(j->ctx, &j->sp, &j->exec, &j->comm, j->dq, j->dk, j->dv, j->dout, NULL);
        if (st == JATTN_OK && cli_sp_gpu_sync(j->dev, err, ERRLEN) != 0) return JATTN_ERROR_CUDA;
    } else {
        st = jattn_sp_forward(j->ctx, &j->sp, &j->exec, &j->comm, j->q + qo * D, j->k + kvo * D, j->v + kvo * D, j->out,
                              NULL);
    }
    if (st != JATTN_OK) snprintf(err, ERRLEN, "%s (%s)", jattn_last_error(), jattn_status_name(st));
    return st;
}

/* Timed calls: one warm-up, then reps (0 = about PAR_AUTO_SECONDS), each between barriers,
 * the slowest rank's time. */
static int time_calls(par_job *j, int reps, kit_timing *t, char *err) {
    double t0 = kit_now();
    jattn_status st = call_once(j, err);
    double warm = kit_now() - t0, slowest = 0;
    int rc = agree(j, st == JATTN_OK ? 0 : cli_exit_for_status(st), err);
    if (rc) return rc;
    MPI_Allreduce(&warm, &slowest, 1, MPI_DOUBLE, MPI_MAX, j->mpi);
    if (!reps) {
        double r = ceil(PAR_AUTO_SECONDS / (slowest > 1e-9 ? slowest : 1e-9));
        reps = r < PAR_AUTO_REPS_MIN ? PAR_AUTO_REPS_MIN : r > PAR_AUTO_REPS_MAX ? PAR_AUTO_REPS_MAX : (int)r;
    }
    double *times = malloc((size_t)reps * sizeof *times);
    rc = agree(j, times ? 0 : CLI_EXIT_FAILURE, "out of memory");
    if (rc) return rc;
    for (int r = 0; r < reps && rc == 0; r++) {
        MPI_Barrier(j->mpi);
        t0 = kit_now();
        st = call_once(j, err);
        double mine = 1e3 * (kit_now() - t0);
        MPI_Allreduce(&mine, &times[r], 1, MPI_DOUBLE, MPI_MAX, j->mpi);
        rc = agree(j, st == JATTN_OK ? 0 : cli_exit_for_status(st), err);
    }
    if (!rc) {
        t->ms = kit_median(times, reps); /* sorts */
        t->ms_min = times[0];
        t->ms_max = times[reps - 1];
        t->reps = reps;
        t->clock = "host";
    }
    free(times);
    return rc;
}

/* Rank 0: the assembled output [B, S, H*D] from every rank's shard. */
static int gather_out(par_job *j, float *assembled, char *err) {
    const jattn_problem *w = &j->whole;
    const int64_t B = w->batch, HD = w->heads * w->head_dim, sq = j->qs[j->rank];
    if (j->gpu && cli_sp_gpu_download(j->out, j->dout, (size_t)(B * sq * HD), err, ERRLEN) != 0) return -1;
    for (int r = 0; r < j->size; r++) {
        const int64_t len = j->qs[r], first = offset_of(j->qs, r);
        for (int64_t b = 0; b < B; b++) {
            /* one message per rank and batch: a block of len tokens (int counts: checked below) */
            const int64_t floats = len * HD;
            if (floats > INT32_MAX) {
                snprintf(err, ERRLEN, "--check: a shard of %lld floats is too large to gather", (long long)floats);
                return -1;
            }
            if (r == j->rank && r == 0) {
                memcpy(assembled + (b * w->seq_q + first) * HD, j->out + b * len * HD, (size_t)floats * sizeof(float));
            } else if (j->rank == 0) {
                MPI_Recv(assembled + (b * w->seq_q + first) * HD, (int)floats, MPI_FLOAT, r, 0, j->mpi,
                         MPI_STATUS_IGNORE);
            } else if (r == j->rank) {
                MPI_Send(j->out + b * len * HD, (int)floats, MPI_FLOAT, 0, 0, j->mpi);
            }
        }
    }
    return 0;
}

static void format_shards(const int64_t *shards, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int r = 0; r < n && len + 24 < cap; r++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", r ? "," : "", (long long)shards[r]);
    if (n > 0 && len + 24 >= cap) snprintf(buf + len, cap - len, ",...");
}

static void report(const par_job *j, const cli_options *o, const kit_timing *t, const kit_reference *ref,
                   const kit_parity *par) {
    const jattn_problem *p = &j->whole;
    const jattn_selection *l = &j->sel.local;
    const char *prec = kit_precision_name(o->precision);
    const char *requested = o->parallel == 1 + JATTN_SP_AUTO ? "auto" : j->sel.algorithm_name;
    const double gflops = kit_flops(p) / (t->ms * 1e-3) / 1e9;
    char qs[256], kvs[256];
    format_shards(j->qs, j->size, qs, sizeof qs);
    if (j->kvs)
        format_shards(j->kvs, j->size, kvs, sizeof kvs);
    else
        snprintf(kvs, sizeof kvs, "replicated");
    if (o->json) {
        kit_json js;
        kit_json_begin(&js, stdout);
        kit_json_str(&js, "command", "run");
        kit_json_str(&js, "version", jattn_version_string());
        kit_json_str(&js, "parallel", j->sel.algorithm_name);
        kit_json_str(&js, "parallel_requested", requested);
        kit_json_str(&js, "transport", j->sel.transport_name);
        kit_json_int(&js, "ranks", j->size);
        kit_json_str(&js, "q_shards", qs);
        kit_json_str(&js, "kv_shards", kvs);
        kit_json_selection(&js, l);
        kit_json_problem(&js, p, o->precision);
        kit_json_str(&js, "inputs", "synthetic");
        kit_json_int(&js, "seed", (long long)o->seed);
        kit_json_timing(&js, t, "host, slowest rank", gflops);
        kit_json_parity(&js, ref, par);
        kit_json_end(&js);
        return;
    }
    printf("jattn %s run: attention B=%lld H=%lld Sq=%lld Skv=%lld D=%lld, %s, synthetic standard-normal inputs "
           "(seed %llu)\n",
           jattn_version_string(), (long long)p->batch, (long long)p->heads, (long long)p->seq_q, (long long)p->seq_kv,
           (long long)p->head_dim, prec, (unsigned long long)o->seed);
    printf("parallel %s%s over %d rank%s (%s, %s memory): query shards %s; key shards %s\n", j->sel.algorithm_name,
           o->parallel == 1 + JATTN_SP_AUTO ? " (auto)" : "", j->size, j->size == 1 ? "" : "s", j->sel.transport_name,
           j->gpu ? "device" : "host", qs, kvs);
    printf("backend  %s\n", l->backend_name);
    printf("kernel   %s   isa %s   threads %d   (rank 0: %d attention call%s over %lld head%s)\n", l->kernel, l->isa,
           l->threads, j->sel.attention_calls, j->sel.attention_calls == 1 ? "" : "s", (long long)j->sel.heads,
           j->sel.heads == 1 ? "" : "s");
    printf("time     %.3f ms  median of %d after a warm-up (host clock, the slowest rank; min %.3f, max %.3f)\n", t->ms,
           t->reps, t->ms_min, t->ms_max);
    printf("speed    %.2f GFLOP/s  (4*B*H*Sq*Skv*D = %.3g GFLOP per call, all ranks together)\n", gflops,
           kit_flops(p) / 1e9);
    if (!par) {
        printf("parity   not checked (--no-check)\n");
        return;
    }
    kit_print_parity(ref, par, p, o->precision, " of the whole problem");
    printf("\n");
}

static void free_job(par_job *j) {
    jattn_sp_ctx_free(j->ctx);
    if (j->gpu) {
        cli_sp_gpu_free(j->workspace);
        cli_sp_gpu_free(j->dq);
        cli_sp_gpu_free(j->dk);
        cli_sp_gpu_free(j->dv);
        cli_sp_gpu_free(j->dout);
    } else {
        free(j->workspace);
    }
    cli_sp_gpu_close(j->dev);
    free(j->q);
    free(j->k);
    free(j->v);
    free(j->out);
    free(j->q_shards_heap);
    free(j->kv_shards_heap);
}

int cli_run_parallel(const cli_options *o) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised && MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return cli_error(CLI_EXIT_FAILURE, "--parallel: MPI_Init failed");
    par_job j;
    memset(&j, 0, sizeof j);
    j.mpi = MPI_COMM_WORLD;
    MPI_Comm_rank(j.mpi, &j.rank);
    MPI_Comm_size(j.mpi, &j.size);
    MPI_Comm host;
    MPI_Comm_split_type(j.mpi, MPI_COMM_TYPE_SHARED, j.rank, MPI_INFO_NULL, &host);
    MPI_Comm_rank(host, &j.local_rank);
    MPI_Comm_size(host, &j.local_size);
    MPI_Comm_free(&host);

    char err[ERRLEN] = "";
    kit_timing t;
    memset(&t, 0, sizeof t);
    kit_reference ref = {0};
    kit_parity par, *parp = NULL;
    float *assembled = NULL;
    int rc = agree(&j, plan_job(&j, o, err), err);
    if (!rc) rc = agree(&j, open_transport(&j, o, err), err);
    if (!rc) rc = agree(&j, make_tensors(&j, o, err), err);
    if (!rc) rc = time_calls(&j, o->reps, &t, err);
    if (!rc && o->check) {
        int local = 0;
        if (j.rank == 0 && !(assembled = kit_alloc_floats(kit_elems(&j.whole, j.whole.seq_q)))) {
            snprintf(err, ERRLEN, "out of memory for the assembled output");
            local = CLI_EXIT_FAILURE;
        }
        rc = agree(&j, local, err);
        if (!rc) rc = agree(&j, gather_out(&j, assembled, err) ? CLI_EXIT_FAILURE : 0, err);
        if (!rc && j.rank == 0) {
            jattn_status st =
                kit_reference_compute(&ref, &j.whole, NULL, j.q, j.k, j.v, PAR_CHECK_BUDGET_FLOPS, 0, err, ERRLEN);
            if (st == JATTN_OK) {
                kit_reference_compare(&ref, &j.whole, assembled, NULL, o->precision, &par);
                parp = &par;
            } else {
                local = CLI_EXIT_FAILURE;
            }
        }
        if (!rc) rc = agree(&j, local, err);
    }
    if (!rc && j.rank == 0) {
        report(&j, o, &t, &ref, parp);
        if (parp && !par.pass) {
            fflush(stdout);
            rc = cli_error(CLI_EXIT_FAILURE,
                           "parity FAIL against the float64 reference (rel_l2 %.3g, max_abs %.3g, cos %.9g)",
                           par.m.rel_l2, par.m.max_abs, par.m.cos);
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, j.mpi);
    kit_reference_free(&ref);
    free(assembled);
    free_job(&j);
    if (!initialised) MPI_Finalize();
    return rc;
}
