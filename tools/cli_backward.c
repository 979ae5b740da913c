/* `jattn run --backward` and `jattn bench --backward`: the backward (jattn_backward) timed on
 * synthetic inputs, its gradients checked against the float64 ref backward of the same inputs
 * (out and lse from the backend's own forward, as in training), and, in bench, beside the
 * machine's FMA peak and PyTorch's CPU SDPA backward measured in the same run.
 *
 * FLOPs of a backward: 2.5x the forward's, 10 * B * H * Sq * Skv * D (five products; the
 * convention of FlashAttention and the Triton tutorial). The check runs the ref backward on the
 * first heads of batch 0 (a head's dq, dk, dv depend on that head alone), as many as fit in
 * about the forward check's budget (at least one). */
#define _POSIX_C_SOURCE 200809L /* popen, pclose: PyTorch's backward runs in a child process */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_mask.h"
#include "clock.h"
#include "device_timer.h"
#include "json.h"
#include "peers.h"
#include "rng.h"
#include "tensor.h"
#include "timing.h"

#define BWD_CHECK_BUDGET_FLOPS 1.5e10 /* float64 reference work of the check: ~1 head at FLUX sizes */
#define BWD_AUTO_SECONDS 3.0
#define BWD_REPS_MIN 3
#define BWD_REPS_MAX 20

/* 2.5x the forward's FLOPs: with a mask, of the attended pairs (kit_flops_masked). */
static double backward_flops(const jattn_problem *p, const jattn_mask *m) { return 2.5 * kit_flops_masked(p, m); }

/* One backward job: inputs, forward outputs, gradients (all FLUX layout, dense; k, v, dk, dv with
 * the key/value heads), and the mask (NULL: none). */
typedef struct bwd_job {
    jattn_problem p;
    const jattn_mask *mask;
    float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
} bwd_job;

static void job_free(bwd_job *j) {
    float *ptrs[9] = {j->q, j->k, j->v, j->out, j->lse, j->dout, j->dq, j->dk, j->dv};
    for (int i = 0; i < 9; i++) free(ptrs[i]);
    memset(j, 0, sizeof *j);
}

static jattn_status job_init(bwd_job *j, const jattn_problem *p, const jattn_mask *mask, uint64_t seed,
                             const jattn_exec *e, jattn_ctx *ctx) {
    memset(j, 0, sizeof *j);
    j->p = *p;
    j->mask = mask;
    const int64_t nq = kit_elems(p, p->seq_q), nk = cli_kv_elems(p), nl = p->batch * p->heads * p->seq_q;
    j->q = kit_alloc_floats(nq), j->k = kit_alloc_floats(nk), j->v = kit_alloc_floats(nk);
    j->out = kit_alloc_floats(nq), j->lse = kit_alloc_floats(nl), j->dout = kit_alloc_floats(nq);
    j->dq = kit_alloc_floats(nq), j->dk = kit_alloc_floats(nk), j->dv = kit_alloc_floats(nk);
    if (!j->q || !j->k || !j->v || !j->out || !j->lse || !j->dout || !j->dq || !j->dk || !j->dv)
        return JATTN_ERROR_OUT_OF_MEMORY;
    jattn_rng_fill_normal(j->q, nq, seed, 1);
    jattn_rng_fill_normal(j->k, nk, seed, 2);
    jattn_rng_fill_normal(j->v, nk, seed, 3);
    jattn_rng_fill_normal(j->dout, nq, seed, 7);
    return jattn_forward_masked(ctx, p, e, j->q, j->k, j->v, mask, j->out, j->lse);
}

static jattn_status job_backward(const bwd_job *j, jattn_ctx *ctx, const jattn_exec *e) {
    return jattn_backward_masked(ctx, &j->p, NULL, e, j->q, j->k, j->v, j->out, j->lse, j->dout, NULL, j->mask, j->dq,
                                 j->dk, j->dv);
}

#define BWD_DEVICE_REPS 20 /* cuda: timed calls when --reps is not given */

/* Median of reps timed calls after one warm-up (reps 0: about BWD_AUTO_SECONDS worth). On the
 * cuda backend (device): the inputs copied to the GPU once, each call on device pointers timed
 * with CUDA events (kit/device_timer.h), the gradients copied back into the job. */
static jattn_status time_backward(const bwd_job *j, jattn_ctx *ctx, const jattn_exec *e, int reps, int device,
                                  kit_timing *t) {
    if (device) {
        char err[256];
        double ms = 0;
        const int n = reps ? reps : BWD_DEVICE_REPS;
        if (jattn_device_timed_backward(&j->p, e, j->mask, j->q, j->k, j->v, j->out, j->lse, j->dout, j->dq, j->dk,
                                        j->dv, 2, n, &ms, err, sizeof err) == 0) {
            t->ms = t->ms_min = t->ms_max = ms;
            t->reps = n;
            t->clock = "device";
            return JATTN_OK;
        }
        fprintf(stderr, "jattn: device timer unavailable (%.200s); the host clock includes the copies\n", err);
    }
    double t0 = kit_now();
    jattn_status st = job_backward(j, ctx, e);
    const double warm = kit_now() - t0;
    if (st != JATTN_OK) return st;
    if (!reps) {
        const double r = ceil(BWD_AUTO_SECONDS / (warm > 1e-9 ? warm : 1e-9));
        reps = r < BWD_REPS_MIN ? BWD_REPS_MIN : r > BWD_REPS_MAX ? BWD_REPS_MAX : (int)r;
    }
    double *times = malloc((size_t)reps * sizeof *times);
    if (!times) return JATTN_ERROR_OUT_OF_MEMORY;
    for (int r = 0; r < reps && st == JATTN_OK; r++) {
        t0 = kit_now();
        st = job_backward(j, ctx, e);
        times[r] = 1e3 * (kit_now() - t0);
    }
    if (st == JATTN_OK) {
        t->ms = kit_median(times, reps);
        t->ms_min = times[0];
        t->ms_max = times[reps - 1];
        t->reps = reps;
        t->clock = "host";
    }
    free(times);
    return st;
}

/* The check: the ref backward of the first `heads` heads of batch 0, from the same inputs. */
typedef struct bwd_check {
    int64_t heads; /* heads checked */
    jattn_metrics m[3];
    int pass;
} bwd_check;

static jattn_status check_backward(const bwd_job *j, bwd_check *c) {
    const jattn_problem *p = &j->p;
    /* whole groups of query heads (those sharing a key/value head), at least one, within the budget */
    const int64_t kvh = kit_kv_heads(p), group = kvh > 0 ? p->heads / kvh : 1;
    const double bh = (double)p->batch * (double)p->heads, flops = backward_flops(p, j->mask);
    const double per_head = bh > 0 ? flops / bh : 0;
    int64_t heads = per_head > 0 ? (int64_t)fmin(BWD_CHECK_BUDGET_FLOPS / per_head, (double)p->heads) : p->heads;
    heads = heads / group * group;
    if (heads < group) heads = group;
    if (heads > p->heads) heads = p->heads;
    jattn_problem sub = *p;
    sub.batch = p->batch ? 1 : 0;
    sub.heads = heads;
    if (p->kv_heads) sub.kv_heads = heads / group;
    /* the same strides: the first heads of batch 0 are a valid sub-problem in place */
    const int64_t nq = p->seq_q * p->head_dim * heads, nk = p->seq_kv * p->head_dim * (heads / group);
    float *dq = kit_alloc_floats(nq), *dk = kit_alloc_floats(nk), *dv = kit_alloc_floats(nk);
    jattn_status st = JATTN_ERROR_OUT_OF_MEMORY;
    if (dq && dk && dv) {
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_REF;
        st = jattn_backward_masked(NULL, &sub, NULL, &e, j->q, j->k, j->v, j->out, j->lse, j->dout, NULL, j->mask, dq,
                                   dk, dv);
    }
    if (st == JATTN_OK) {
        /* q is head-major [B,H,S,D] in the FLUX layout: the first heads of batch 0 are contiguous, as
         * are the first key/value heads of dk, dv. */
        const int64_t n_q = sub.batch * nq, n_k = sub.batch * nk;
        jattn_metrics_compute_dense(j->dq, dq, n_q, &c->m[0]);
        jattn_metrics_compute_dense(j->dk, dk, n_k, &c->m[1]);
        jattn_metrics_compute_dense(j->dv, dv, n_k, &c->m[2]);
        c->heads = heads;
        c->pass = 1;
        for (int i = 0; i < 3; i++) c->pass &= jattn_metrics_pass_backward(&c->m[i]);
    }
    free(dq), free(dk), free(dv);
    return st;
}

static jattn_problem job_problem(const cli_options *o, int64_t seq_default) {
    int64_t n[5];
    cli_sizes(o, seq_default, n);
    jattn_problem p = jattn_problem_flux(n[0], n[1], n[2], n[3], n[4]);
    cli_apply_kv_heads(o, &p);
    p.scale = o->scale;
    return p;
}

/* The backward's selection for p under e, with the options' mask (made into *cm): the plan of the
 * pass decides it. @return CLI_EXIT_OK, or an exit code with the error printed. */
static int select_backward(const cli_options *o, const jattn_problem *p, const jattn_exec *e, cli_mask *cm,
                           jattn_selection *sel) {
    memset(cm, 0, sizeof *cm);
    int rc = cli_check_kv_heads(o, p->heads);
    if (rc) return rc;
    jattn_status st = jattn_backward_select(p, e, sel); /* the problem, validated before anything is made */
    if (st != JATTN_OK) return cli_error(cli_exit_for_status(st), "%s: %s", jattn_status_name(st), jattn_last_error());
    if ((rc = cli_mask_make(o, p, NULL, o->seed, cm))) return rc;
    if (!cm->any) return CLI_EXIT_OK;
    jattn_plan *plan = NULL;
    st = jattn_plan_create(&plan, JATTN_PASS_BACKWARD, p, NULL, &cm->m, e);
    if (st != JATTN_OK) return cli_error(cli_exit_for_status(st), "%s: %s", jattn_status_name(st), jattn_last_error());
    jattn_plan_selection(plan, sel);
    jattn_plan_free(plan);
    return CLI_EXIT_OK;
}

int cli_run_backward(const cli_options *o) {
    jattn_problem p = job_problem(o, CLI_DEFAULT_SEQ);
    jattn_exec e = {0};
    e.backend = o->backend;
    e.precision = o->precision;
    e.threads = o->n_threads ? o->threads[0] : 0;
    jattn_selection sel;
    cli_mask cm;
    int rc = select_backward(o, &p, &e, &cm, &sel);
    if (rc) {
        cli_mask_free(&cm);
        return rc;
    }
    const jattn_mask *mask = cli_mask_of(&cm);
    char err[256];
    const double bytes = 4.0 * (6.0 * (double)kit_elems(&p, p.seq_q) + 5.0 * (double)cli_kv_elems(&p));
    if (cli_memory_fits(bytes, "the backward's tensors", err, sizeof err) != 0) {
        cli_mask_free(&cm);
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    }
    jattn_ctx *ctx = NULL;
    bwd_job j;
    memset(&j, 0, sizeof j);
    jattn_status st = jattn_ctx_create(&ctx);
    if (st == JATTN_OK) st = job_init(&j, &p, mask, o->seed, &e, ctx);
    kit_timing t = {0};
    if (st == JATTN_OK) st = time_backward(&j, ctx, &e, o->reps, cli_backend_on_device(sel.backend), &t);
    bwd_check c;
    memset(&c, 0, sizeof c);
    if (st == JATTN_OK && o->check) st = check_backward(&j, &c);
    if (st != JATTN_OK) {
        rc = cli_error(cli_exit_for_status(st), "%s: %s", jattn_status_name(st), jattn_last_error());
        job_free(&j);
        jattn_ctx_free(ctx);
        cli_mask_free(&cm);
        return rc;
    }
    const double flops = backward_flops(&p, mask), gflops = flops / (t.ms * 1e-3) / 1e9;
    static const char *const names[3] = {"dq", "dk", "dv"};
    if (o->json) {
        kit_json js;
        kit_json_begin(&js, stdout);
        kit_json_str(&js, "command", "run");
        kit_json_str(&js, "pass_kind", "backward");
        kit_json_str(&js, "version", jattn_version_string());
        kit_json_str(&js, "backend", sel.backend_name);
        kit_json_str(&js, "kernel", sel.kernel);
        kit_json_str(&js, "isa", sel.isa);
        kit_json_int(&js, "threads", sel.threads);
        kit_json_int(&js, "batch", p.batch);
        kit_json_int(&js, "heads", p.heads);
        kit_json_int(&js, "kv_heads", kit_kv_heads(&p));
        kit_json_int(&js, "seq_q", p.seq_q);
        kit_json_int(&js, "seq_kv", p.seq_kv);
        kit_json_int(&js, "dim", p.head_dim);
        kit_json_int(&js, "seed", (long long)o->seed);
        if (mask) {
            kit_json_str(&js, "mask", cm.note);
            kit_json_num(&js, "attended_pairs", kit_attended_pairs(&p, mask));
        }
        kit_json_num(&js, "flops", flops);
        kit_json_num(&js, "ms", t.ms);
        kit_json_num(&js, "ms_min", t.ms_min);
        kit_json_num(&js, "ms_max", t.ms_max);
        kit_json_int(&js, "reps", t.reps);
        kit_json_num(&js, "gflops", gflops);
        if (o->check) {
            kit_json_int(&js, "checked_heads", c.heads);
            for (int i = 0; i < 3; i++) {
                char key[32];
                snprintf(key, sizeof key, "%s_rel_l2", names[i]);
                kit_json_num(&js, key, c.m[i].rel_l2);
                snprintf(key, sizeof key, "%s_max_abs", names[i]);
                kit_json_num(&js, key, c.m[i].max_abs);
                snprintf(key, sizeof key, "%s_cos", names[i]);
                kit_json_num(&js, key, c.m[i].cos);
            }
            kit_json_bool(&js, "pass", c.pass);
        } else {
            kit_json_str(&js, "check", "off");
        }
        kit_json_end(&js);
    } else {
        char desc[400];
        cli_mask_describe(&p, &cm, desc, sizeof desc);
        printf("backward B=%lld H=%lld Sq=%lld Skv=%lld D=%lld%s on %s: %s (%s), %d threads\n", (long long)p.batch,
               (long long)p.heads, (long long)p.seq_q, (long long)p.seq_kv, (long long)p.head_dim, desc,
               sel.backend_name, sel.kernel, sel.isa, sel.threads);
        printf("time     %.3f ms (median of %d; min %.3f, max %.3f), %.1f GFLOP/s (%s)\n", t.ms, t.reps, t.ms_min,
               t.ms_max, gflops, mask ? "10*D*attended pairs" : "10*B*H*Sq*Skv*D");
        if (o->check) {
            printf("parity   %s against the float64 ref backward%s (first %lld heads of batch 0; gate rel_l2 <= %g, "
                   "max_abs <= %g*max(1,|ref|), cos >= %g)\n",
                   c.pass ? "PASS" : "FAIL", mask ? " with the same mask" : "", (long long)c.heads,
                   JATTN_BWD_GATE_REL_L2, JATTN_BWD_GATE_MAX_ABS, JATTN_BWD_GATE_COS);
            for (int i = 0; i < 3; i++)
                printf("         %s rel_l2 %.3g max_abs %.3g (max|ref| %.3g) cos %.9f\n", names[i], c.m[i].rel_l2,
                       c.m[i].max_abs, c.m[i].max_ref, c.m[i].cos);
        } else {
            printf("parity   not checked (--no-check)\n");
        }
    }
    job_free(&j);
    jattn_ctx_free(ctx);
    cli_mask_free(&cm);
    return o->check && !c.pass ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

/* PyTorch's SDPA backward on the same shape, in a child process: the interpreter of
 * JATTN_BENCH_PYTHON (default python3). On the CPU with `threads` threads; on the GPU (on_gpu) in
 * fp32 with TF32 off and its default algorithm choice, each backward timed by the host clock
 * between synchronisations. @return 0 and *ms (median of reps), or -1 when Python or torch is
 * absent or the run fails. */
static int torch_backward_ms(const jattn_problem *p, int on_gpu, int threads, int reps, double *ms) {
    const char *py = getenv("JATTN_BENCH_PYTHON");
    char setup[160], cmd[1536];
    if (on_gpu)
        snprintf(setup, sizeof setup, "%s",
                 "c=torch.device('cuda');torch.backends.cuda.matmul.allow_tf32=False;"
                 "torch.backends.cudnn.allow_tf32=False;");
    else
        snprintf(setup, sizeof setup, "c=torch.device('cpu');torch.set_num_threads(%d);", threads);
    const char *sync = on_gpu ? "torch.cuda.synchronize();" : "";
    snprintf(cmd, sizeof cmd,
             "%s -c \"import time,torch,statistics as s;%s"
             "q=torch.randn(%lld,%lld,%lld,%lld,device=c,requires_grad=True);"
             "k,v=[torch.randn(%lld,%lld,%lld,%lld,device=c,requires_grad=True) for _ in range(2)];"
             "g=torch.randn_like(q);f=torch.nn.functional.scaled_dot_product_attention;f(q,k,v).backward(g);t=[]\n"
             "for _ in range(%d):\n o=f(q,k,v);%sa=time.perf_counter();o.backward(g);"
             "%st.append(time.perf_counter()-a)\n"
             "print(1e3*s.median(t))\" 2>/dev/null",
             py && *py ? py : "python3", setup, (long long)p->batch, (long long)p->heads, (long long)p->seq_q,
             (long long)p->head_dim, (long long)p->batch, (long long)p->heads, (long long)p->seq_kv,
             (long long)p->head_dim, reps, sync, sync);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    double v = NAN;
    const int got = fscanf(f, "%lf", &v);
    const int rc = pclose(f);
    if (got != 1 || rc != 0 || !(v > 0)) return -1;
    *ms = v;
    return 0;
}

int cli_bench_backward(const cli_options *o) {
    int64_t seqs[2] = {CLI_DEFAULT_SEQ, CLI_DEFAULT_SEQ / 3 + 4 * (CLI_DEFAULT_SEQ - CLI_DEFAULT_SEQ / 3)};
    const int n_seqs = o->sizes_given || o->n_segments ? 1 : 2;
    int thread_list[CLI_MAX_THREAD_COUNTS] = {0};
    const int n_threads = o->n_threads ? o->n_threads : 1;
    for (int i = 0; i < n_threads; i++) thread_list[i] = o->n_threads ? o->threads[i] : 0;
    if (!o->json)
        printf("%-7s %7s %5s %5s %6s %4s %10s %9s %9s %6s %10s %8s  %s\n", "backend", "threads", "B", "H", "S", "D",
               "ms", "GFLOP/s", "FMA peak", "%peak", "torch ms", "vs torch", "kernel (isa)");
    int rc = CLI_EXIT_OK;
    for (int si = 0; si < n_seqs; si++) {
        jattn_problem p = job_problem(o, seqs[si]);
        for (int ti = 0; ti < n_threads; ti++) {
            jattn_exec e = {0};
            e.backend = o->backend;
            e.precision = o->precision;
            e.threads = thread_list[ti];
            jattn_selection sel;
            cli_mask cm;
            const int bad = select_backward(o, &p, &e, &cm, &sel);
            if (bad) {
                cli_mask_free(&cm);
                rc = bad;
                continue;
            }
            const jattn_mask *mask = cli_mask_of(&cm);
            jattn_ctx *ctx = NULL;
            bwd_job j;
            memset(&j, 0, sizeof j);
            kit_timing t = {0};
            jattn_status st = jattn_ctx_create(&ctx);
            if (st == JATTN_OK) st = job_init(&j, &p, mask, o->seed, &e, ctx);
            if (st == JATTN_OK) st = time_backward(&j, ctx, &e, o->reps, cli_backend_on_device(sel.backend), &t);
            job_free(&j);
            jattn_ctx_free(ctx);
            const double flops = backward_flops(&p, mask);
            cli_mask_free(&cm);
            if (st != JATTN_OK) {
                rc = cli_error(cli_exit_for_status(st), "%s: %s", jattn_status_name(st), jattn_last_error());
                continue;
            }
            double peak = NAN, torch_ms = NAN;
            const char *isa = NULL;
            char err[256];
            if (!cli_backend_is_gpu(sel.backend) && jattn_peer_fma_peak(sel.threads, &peak, &isa, err, sizeof err) != 0)
                peak = NAN;
            const int on_gpu = cli_backend_on_device(sel.backend); /* torch's peer on the CUDA device */
            /* the peer runs the plain SDPA: beside a masked or grouped-query backward it is no peer */
            const int plain = !mask && !(p.kv_heads && p.kv_heads != p.heads);
            if (!plain || torch_backward_ms(&p, on_gpu, sel.threads, t.reps, &torch_ms) != 0) torch_ms = NAN;
            const double gflops = flops / (t.ms * 1e-3) / 1e9;
            if (o->json) {
                kit_json js;
                kit_json_begin(&js, stdout);
                kit_json_str(&js, "command", "bench");
                kit_json_str(&js, "pass_kind", "backward");
                kit_json_str(&js, "backend", sel.backend_name);
                kit_json_str(&js, "kernel", sel.kernel);
                kit_json_str(&js, "isa", sel.isa);
                kit_json_int(&js, "threads", sel.threads);
                kit_json_int(&js, "batch", p.batch);
                kit_json_int(&js, "heads", p.heads);
                kit_json_int(&js, "kv_heads", kit_kv_heads(&p));
                kit_json_int(&js, "seq_q", p.seq_q);
                kit_json_int(&js, "seq_kv", p.seq_kv);
                kit_json_int(&js, "dim", p.head_dim);
                kit_json_num(&js, "flops", flops);
                kit_json_num(&js, "ms", t.ms);
                kit_json_int(&js, "reps", t.reps);
                kit_json_num(&js, "gflops", gflops);
                kit_json_num(&js, "fma_peak_gflops", peak);
                kit_json_num(&js, "torch_ms", torch_ms);
                kit_json_num(&js, "vs_torch", torch_ms / t.ms);
                kit_json_end(&js);
            } else {
                printf("%-7s %7d %5lld %5lld %6lld %4lld %10.2f %9.1f %9.1f %5.1f%% %10.2f %7.2fx  %s (%s)\n",
                       sel.backend_name, sel.threads, (long long)p.batch, (long long)p.heads, (long long)p.seq_q,
                       (long long)p.head_dim, t.ms, gflops, peak, 100.0 * gflops / peak, torch_ms, torch_ms / t.ms,
                       sel.kernel, sel.isa);
            }
            fflush(stdout);
        }
    }
    if (!o->json)
        printf("FLOPs of a backward: 10*B*H*Sq*Skv*D (2.5x the forward's; with a mask 10*D per attended (query, key) "
               "pair); torch: SDPA backward of the same shape (CPU: same threads; cuda: fp32 on the GPU, TF32 off; "
               "nan when absent, and beside a mask or grouped-query heads; JATTN_BENCH_PYTHON names the "
               "interpreter)\n");
    return rc;
}
