/* `jattn bench`: a table over shapes x backends x thread counts. Each row times one backend
 * (median after a warm-up), checks its output against the float64 reference on sampled query
 * rows, and, for the CPU backends, measures in the same run and at the same thread count the
 * machine's FMA peak and the BLAS attention baseline on the same inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_mask.h"
#include "device_timer.h"
#include "peers.h"

/* Reference work per shape for the parity column (about 0.2 s on 2 cores): query rows are
 * sampled beyond it. */
#define BENCH_CHECK_BUDGET_FLOPS 4e9
#define BENCH_AUTO_SECONDS 3.0
#define BENCH_AUTO_REPS_MIN 3
#define BENCH_AUTO_REPS_MAX 20
#define BENCH_DEVICE_REPS 50
#define BENCH_MAX_NOTES 8

enum { ERRLEN = 512 };

typedef struct bench_shape {
    int64_t batch, heads, seq_q, seq_kv, dim;
} bench_shape;

/* Default shapes: the FLUX.2 DiT attention at 512x512 (seq 1536 = 512 text + 1024 image
 * tokens), at 1024x1024 (4608 = 512 + 4096), and the text tokens alone (512). */
static int bench_shapes(const cli_options *o, bench_shape *s) {
    if (o->sizes_given || o->n_segments) { /* one shape: the sizes given (0 included), --segments' sums */
        int64_t n[5];
        cli_sizes(o, CLI_DEFAULT_SEQ, n);
        s[0] = (bench_shape){n[0], n[1], n[2], n[3], n[4]};
        return 1;
    }
    const int64_t text = CLI_DEFAULT_SEQ / 3, seqs[3] = {text, CLI_DEFAULT_SEQ, text + 4 * (CLI_DEFAULT_SEQ - text)};
    for (int i = 0; i < 3; i++)
        s[i] = (bench_shape){CLI_DEFAULT_BATCH, CLI_DEFAULT_HEADS, seqs[i], seqs[i], CLI_DEFAULT_DIM};
    return 3;
}

/* Notes printed once under the table. */
typedef struct notes {
    char text[BENCH_MAX_NOTES][ERRLEN];
    int n;
} notes;

static void add_note(notes *ns, const char *s) {
    for (int i = 0; i < ns->n; i++)
        if (strcmp(ns->text[i], s) == 0) return;
    if (ns->n < BENCH_MAX_NOTES) snprintf(ns->text[ns->n++], ERRLEN, "%s", s);
}

/* The FMA peak, measured once per thread count. */
typedef struct peak_cache {
    int threads[CLI_MAX_THREAD_COUNTS + 2];
    int ok[CLI_MAX_THREAD_COUNTS + 2];
    double gflops[CLI_MAX_THREAD_COUNTS + 2];
    char err[CLI_MAX_THREAD_COUNTS + 2][ERRLEN];
    int n;
} peak_cache;

static int fma_peak(peak_cache *c, int threads, double *gflops, const char **err) {
    for (int i = 0; i < c->n; i++)
        if (c->threads[i] == threads) {
            *gflops = c->gflops[i];
            *err = c->err[i];
            return c->ok[i];
        }
    int i = c->n < CLI_MAX_THREAD_COUNTS + 2 ? c->n++ : c->n - 1;
    const char *isa = NULL;
    c->threads[i] = threads;
    c->err[i][0] = '\0';
    c->ok[i] = jattn_peer_fma_peak(threads, &c->gflops[i], &isa, c->err[i], ERRLEN) == 0;
    *gflops = c->gflops[i];
    *err = c->err[i];
    return c->ok[i];
}

typedef struct bench_row {
    const jattn_problem *p;
    const cli_mask *cm; /* the mask's note ("" without) */
    double flops;       /* per call: 4*B*H*Sq*Skv*D, or 4*D*attended pairs with a mask */
    jattn_selection sel;
    kit_timing t;
    kit_parity par;
    int64_t check_stride;
    int have_peak, have_blas;
    double peak_gflops, blas_ms;
} bench_row;

static void print_header(void) {
    printf("%-7s %7s %5s %5s %7s %7s %5s %11s %9s %9s %6s %9s %7s %6s  %s\n", "backend", "threads", "B", "H", "Sq",
           "Skv", "D", "ms", "GFLOP/s", "FMA peak", "%peak", "BLAS", "vs BLAS", "parity", "kernel (isa)");
}

static void print_row(const cli_options *o, const bench_row *r, const char *note) {
    const jattn_problem *p = r->p;
    double gflops = r->flops / (r->t.ms * 1e-3) / 1e9;
    double blas_gflops = r->have_blas ? kit_flops(p) / (r->blas_ms * 1e-3) / 1e9 : NAN;
    int pass = r->par.pass;
    if (o->json) {
        kit_json j;
        kit_json_begin(&j, stdout);
        kit_json_str(&j, "command", "bench");
        kit_json_str(&j, "backend", r->sel.backend_name);
        kit_json_str(&j, "kernel", r->sel.kernel);
        kit_json_str(&j, "isa", r->sel.isa);
        kit_json_int(&j, "threads", r->sel.threads);
        kit_json_int(&j, "batch", p->batch);
        kit_json_int(&j, "heads", p->heads);
        kit_json_int(&j, "kv_heads", kit_kv_heads(p));
        kit_json_int(&j, "seq_q", p->seq_q);
        kit_json_int(&j, "seq_kv", p->seq_kv);
        kit_json_int(&j, "dim", p->head_dim);
        kit_json_str(&j, "precision", kit_precision_name(o->precision));
        if (r->cm->note[0]) kit_json_str(&j, "mask", r->cm->note);
        kit_json_num(&j, "flops", r->flops);
        kit_json_num(&j, "ms", r->t.ms);
        kit_json_num(&j, "ms_min", r->t.ms_min);
        kit_json_num(&j, "ms_max", r->t.ms_max);
        kit_json_int(&j, "reps", r->t.reps);
        kit_json_str(&j, "timing", r->t.clock);
        kit_json_num(&j, "gflops", gflops);
        kit_json_num(&j, "fma_peak_gflops", r->have_peak ? r->peak_gflops : NAN);
        kit_json_num(&j, "pct_fma_peak", r->have_peak ? 100.0 * gflops / r->peak_gflops : NAN);
        kit_json_num(&j, "blas_ms", r->have_blas ? r->blas_ms : NAN);
        kit_json_num(&j, "blas_gflops", blas_gflops);
        kit_json_num(&j, "vs_blas", r->have_blas ? r->blas_ms / r->t.ms : NAN);
        kit_json_str(&j, "check", r->check_stride == 1 ? "full" : "sampled");
        kit_json_int(&j, "check_stride", r->check_stride);
        kit_json_num(&j, "max_abs", r->par.m.max_abs);
        kit_json_num(&j, "rel_l2", r->par.m.rel_l2);
        kit_json_num(&j, "cos", r->par.m.cos);
        kit_json_bool(&j, "pass", pass);
        kit_json_str(&j, "note", note && note[0] ? note : NULL);
        kit_json_end(&j);
    } else {
        char peak[16] = "-", pct[16] = "-", blas[16] = "-", ratio[16] = "-";
        if (r->have_peak) {
            snprintf(peak, sizeof peak, "%.1f", r->peak_gflops);
            snprintf(pct, sizeof pct, "%.1f%%", 100.0 * gflops / r->peak_gflops);
        }
        if (r->have_blas) {
            snprintf(blas, sizeof blas, "%.1f", blas_gflops);
            snprintf(ratio, sizeof ratio, "%.2fx", r->blas_ms / r->t.ms);
        }
        printf("%-7s %7d %5lld %5lld %7lld %7lld %5lld %11.3f %9.1f %9s %6s %9s %7s %6s  %s (%s)\n",
               r->sel.backend_name, r->sel.threads, (long long)p->batch, (long long)p->heads, (long long)p->seq_q,
               (long long)p->seq_kv, (long long)p->head_dim, r->t.ms, gflops, peak, pct, blas, ratio,
               pass ? "PASS" : "FAIL", r->sel.kernel, r->sel.isa);
    }
    fflush(stdout);
}

/* Whether backend b of e can run p under the mask m (NULL: none): the plan of the call, its
 * selection in *sel (may be NULL). @return JATTN_OK, or the status with the reason in
 * jattn_last_error(). */
static jattn_status can_run(const jattn_problem *p, const jattn_exec *e, jattn_backend b, const jattn_mask *m,
                            jattn_selection *sel) {
    jattn_exec x = *e;
    x.backend = b;
    jattn_plan *plan = NULL;
    const jattn_status st = jattn_plan_create(&plan, JATTN_PASS_FORWARD, p, NULL, m, &x);
    if (st != JATTN_OK) return st;
    if (sel) jattn_plan_selection(plan, sel);
    jattn_plan_free(plan);
    return JATTN_OK;
}

/* The backends to bench: the one asked for; else the one auto picks for the problem and its mask
 * and, when that is a GPU backend, the first CPU backend (in auto's order) that can run them beside
 * it. The reference is benched only when asked for (it is the oracle, and slow). */
static int bench_backends(const cli_options *o, const jattn_problem *p, const jattn_mask *m, jattn_backend *list,
                          char *why, size_t cap) {
    if (o->backend_given) {
        list[0] = o->backend;
        return 1;
    }
    jattn_exec e = {0};
    e.precision = o->precision;
    jattn_selection sel;
    if (can_run(p, &e, JATTN_BACKEND_AUTO, m, &sel) != JATTN_OK) {
        snprintf(why, cap, "auto: %s", jattn_last_error());
        return 0;
    }
    if (sel.backend == JATTN_BACKEND_REF) {
        /* why the others passed: each one's refusal, in auto's order */
        snprintf(why, cap, "auto picks %s", sel.backend_name);
        for (int r = 0; r < jattn_backend_info_count(); r++) {
            jattn_backend_info info;
            if (jattn_backend_info_at(r, &info) != JATTN_OK || info.backend == JATTN_BACKEND_REF) break;
            if (can_run(p, &e, info.backend, m, NULL) != JATTN_OK) {
                const size_t len = strlen(why);
                snprintf(why + len, cap - len, "; %s: %.200s", info.name, jattn_last_error());
            }
        }
        return 0;
    }
    int n = 0;
    list[n++] = sel.backend;
    jattn_backend cpu_side = cli_backend_is_gpu(sel.backend) ? cli_first_cpu_backend(p, &e) : JATTN_BACKEND_AUTO;
    if (cpu_side != JATTN_BACKEND_AUTO && m && can_run(p, &e, cpu_side, m, NULL) != JATTN_OK)
        cpu_side = JATTN_BACKEND_AUTO;
    if (cpu_side != JATTN_BACKEND_AUTO && cpu_side != JATTN_BACKEND_REF) list[n++] = cpu_side;
    return n;
}

/* Thread counts for a backend: a GPU backend one row; a CPU backend the list given, else 1 and
 * all cores. */
static int thread_counts(const cli_options *o, const jattn_selection *all_cores, int *counts) {
    if (cli_backend_is_gpu(all_cores->backend)) {
        counts[0] = 0;
        return 1;
    }
    if (o->n_threads) {
        memcpy(counts, o->threads, (size_t)o->n_threads * sizeof *counts);
        return o->n_threads;
    }
    counts[0] = 1;
    if (all_cores->threads <= 1) return 1;
    counts[1] = all_cores->threads;
    return 2;
}

typedef struct shape_buffers {
    float *q, *k, *v, *out, *blas_out;
} shape_buffers;

static void free_buffers(shape_buffers *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->out);
    free(b->blas_out);
    memset(b, 0, sizeof *b);
}

/* Runs every row of one shape. @return an exit code; *rows_run and *any_fail accumulate. */
static int bench_one_shape(const cli_options *o, const bench_shape *s, peak_cache *peaks, notes *ns, jattn_ctx *ctx,
                           int *rows_run, int *any_fail) {
    jattn_problem p = jattn_problem_flux(s->batch, s->heads, s->seq_q, s->seq_kv, s->dim);
    cli_apply_kv_heads(o, &p);
    p.scale = o->scale;
    int rc = cli_check_kv_heads(o, p.heads);
    if (rc) return rc;
    jattn_exec ref_exec = {0};
    ref_exec.backend = JATTN_BACKEND_REF;
    jattn_selection sel;
    jattn_status st = jattn_select(&p, &ref_exec, &sel);
    if (st != JATTN_OK)
        return cli_error(cli_exit_for_status(st), "invalid problem: %s (%s)", jattn_last_error(),
                         jattn_status_name(st));

    shape_buffers buf = {0};
    kit_reference ref = {0};
    cli_mask cm;
    jattn_plan *plan = NULL;
    char why[ERRLEN];
    if ((rc = cli_mask_make(o, &p, NULL, o->seed, &cm))) goto done;
    const jattn_mask *mask = cli_mask_of(&cm);
    char desc[ERRLEN];
    cli_mask_describe(&p, &cm, desc, sizeof desc);
    if (desc[0]) {
        char line[ERRLEN];
        snprintf(line, sizeof line, "Sq=%lld Skv=%lld: %.440s", (long long)p.seq_q, (long long)p.seq_kv, desc + 2);
        add_note(ns, line);
    }
    jattn_backend backends[2];
    int n_backends = bench_backends(o, &p, mask, backends, why, sizeof why);
    if (!n_backends) {
        rc = cli_error(CLI_EXIT_FAILURE, "no optimised backend present (%s); bench the reference with --backend ref",
                       why);
        goto done;
    }

    const int64_t n_q = kit_elems(&p, p.seq_q), n_kv = cli_kv_elems(&p);
    const int gqa = p.kv_heads && p.kv_heads != p.heads;
    /* The peer computes the plain attention of B=1, Sq=Skv: no mask, no grouped-query heads. */
    const int blas_shape_ok = p.batch == 1 && p.seq_q == p.seq_kv && p.heads >= 1 && p.seq_q >= 1 && !mask && !gqa &&
                              p.heads <= INT32_MAX && p.seq_q <= INT32_MAX && p.head_dim <= INT32_MAX;
    if (cli_memory_fits(((blas_shape_ok ? 3.0 : 2.0) * (double)n_q + 2.0 * (double)n_kv) * sizeof(float), "this shape",
                        why, sizeof why) != 0) {
        rc = cli_error(CLI_EXIT_FAILURE, "%s", why);
        goto done;
    }
    buf.q = kit_alloc_floats(n_q);
    buf.k = kit_alloc_floats(n_kv);
    buf.v = kit_alloc_floats(n_kv);
    buf.out = kit_alloc_floats(n_q);
    if (blas_shape_ok) buf.blas_out = kit_alloc_floats(n_q);
    if (!buf.q || !buf.k || !buf.v || !buf.out || (blas_shape_ok && !buf.blas_out)) {
        rc = cli_error(CLI_EXIT_FAILURE, "out of memory for the shape B=%lld H=%lld Sq=%lld Skv=%lld D=%lld",
                       (long long)p.batch, (long long)p.heads, (long long)p.seq_q, (long long)p.seq_kv,
                       (long long)p.head_dim);
        goto done;
    }
    jattn_rng_fill_normal(buf.q, n_q, o->seed, 0);
    jattn_rng_fill_normal(buf.k, n_kv, o->seed, 1);
    jattn_rng_fill_normal(buf.v, n_kv, o->seed, 2);
    /* FLOPs per call (kit/tensor.h): 4*B*H*Sq*Skv*D, or with a mask 4*D per attended pair. */
    const double flops = kit_flops_masked(&p, mask);
    st = mask
             ? cli_mask_reference(&ref, &p, mask, kit_attended_pairs(&p, mask), buf.q, buf.k, buf.v,
                                  BENCH_CHECK_BUDGET_FLOPS, 0, why, sizeof why)
             : kit_reference_compute(&ref, &p, NULL, buf.q, buf.k, buf.v, BENCH_CHECK_BUDGET_FLOPS, 0, why, sizeof why);
    if (st != JATTN_OK) {
        rc = cli_error(CLI_EXIT_FAILURE, "%s", why);
        goto done;
    }
    if (mask || gqa)
        add_note(ns, "BLAS baseline: the peer computes the plain attention (no mask, no grouped-query heads): not run");
    else if (!blas_shape_ok)
        add_note(ns, "BLAS baseline: the peer runs B=1 with Sq=Skv only");

    for (int b = 0; b < n_backends; b++) {
        jattn_exec e = {0};
        e.backend = backends[b];
        e.precision = o->precision;
        jattn_selection all_cores;
        if ((st = can_run(&p, &e, backends[b], mask, &all_cores)) != JATTN_OK) {
            rc = cli_error(cli_exit_for_status(st), "cannot run this problem on backend %s: %s (%s)",
                           jattn_backend_name(backends[b]), jattn_last_error(), jattn_status_name(st));
            goto done;
        }
        e.backend = all_cores.backend;
        int counts[CLI_MAX_THREAD_COUNTS];
        int n_counts = thread_counts(o, &all_cores, counts);
        for (int c = 0; c < n_counts; c++) {
            bench_row r;
            memset(&r, 0, sizeof r);
            r.p = &p;
            r.cm = &cm;
            r.flops = flops;
            r.t.ms_min = r.t.ms_max = NAN;
            e.threads = counts[c];
            /* the plan of the row: what it names is what runs (the mask's, without one the same as jattn_select) */
            if ((st = jattn_plan_create(&plan, JATTN_PASS_FORWARD, &p, NULL, mask, &e)) != JATTN_OK) {
                rc = cli_error(cli_exit_for_status(st), "backend %s, %d threads: %s (%s)",
                               jattn_backend_name(e.backend), counts[c], jattn_last_error(), jattn_status_name(st));
                goto done;
            }
            jattn_plan_selection(plan, &r.sel);
            char note[ERRLEN] = "";
            int timed = 0;
            const int gpu = cli_backend_is_gpu(r.sel.backend), on_device = cli_backend_on_device(r.sel.backend);
            if (on_device) { /* the mask's arrays go to the device with the tensors */
                int reps = o->reps ? o->reps : BENCH_DEVICE_REPS;
                if (jattn_device_timed_run(&p, &e, mask, buf.q, buf.k, buf.v, buf.out, NULL, 1, reps, &r.t.ms, why,
                                           sizeof why) == 0) {
                    r.t.reps = reps;
                    r.t.clock = "device";
                    timed = 1;
                } else {
                    snprintf(note, sizeof note, "%s timed on the host clock, copies included (%.400s)",
                             r.sel.backend_name, why);
                    add_note(ns, note);
                }
            }
            if (!timed) {
                st = mask ? cli_time_plan(plan, ctx, buf.q, buf.k, buf.v, mask, buf.out, NULL, o->reps,
                                          BENCH_AUTO_SECONDS, BENCH_AUTO_REPS_MIN, BENCH_AUTO_REPS_MAX, &r.t)
                          : kit_time_forward(ctx, &p, &e, NULL, buf.q, buf.k, buf.v, buf.out, NULL, o->reps,
                                             BENCH_AUTO_SECONDS, BENCH_AUTO_REPS_MIN, BENCH_AUTO_REPS_MAX, &r.t);
                if (st != JATTN_OK) {
                    rc = cli_error(CLI_EXIT_FAILURE, "backend %s failed: %s (%s)", r.sel.backend_name,
                                   jattn_last_error(), jattn_status_name(st));
                    goto done;
                }
            }
            jattn_plan_free(plan);
            plan = NULL;
            if (mask)
                cli_mask_compare(&ref, &p, buf.out, NULL, o->precision, &r.par);
            else
                kit_reference_compare(&ref, &p, buf.out, NULL, o->precision, &r.par);
            r.check_stride = ref.stride;
            if (!r.par.pass) *any_fail = 1;
            if (gpu && !on_device) {
                char host_clock[ERRLEN];
                snprintf(host_clock, sizeof host_clock,
                         "%s timed on the host clock: the copies of its host-memory tensors to and from the GPU are "
                         "included",
                         r.sel.backend_name);
                add_note(ns, host_clock);
            }
            if (!gpu) {
                const char *peak_err;
                r.have_peak = fma_peak(peaks, r.sel.threads, &r.peak_gflops, &peak_err);
                if (!r.have_peak) {
                    snprintf(why, sizeof why, "FMA peak unavailable: %.400s", peak_err);
                    add_note(ns, why);
                    snprintf(note + strlen(note), sizeof note - strlen(note), "%s%.400s", note[0] ? "; " : "", why);
                }
                if (blas_shape_ok) {
                    char blas_err[ERRLEN] = "";
                    r.have_blas = jattn_peer_blas_attention((int)p.heads, (int)p.seq_q, (int)p.head_dim, r.sel.threads,
                                                            r.t.reps, buf.q, buf.k, buf.v, buf.blas_out, &r.blas_ms,
                                                            blas_err, sizeof blas_err) == 0;
                    if (!r.have_blas) {
                        snprintf(why, sizeof why, "BLAS baseline unavailable: %.400s", blas_err);
                        add_note(ns, why);
                        snprintf(note + strlen(note), sizeof note - strlen(note), "%s%.400s", note[0] ? "; " : "", why);
                    }
                }
            }
            print_row(o, &r, note);
            (*rows_run)++;
        }
    }
done:
    jattn_plan_free(plan);
    kit_reference_free(&ref);
    cli_mask_free(&cm);
    free_buffers(&buf);
    return rc;
}

int cli_bench(const cli_options *o) {
    bench_shape shapes[3];
    int n_shapes = bench_shapes(o, shapes);
    peak_cache *peaks = calloc(1, sizeof *peaks);
    notes *ns = calloc(1, sizeof *ns);
    jattn_ctx *ctx = NULL;
    int rc = CLI_EXIT_OK, rows = 0, any_fail = 0;
    if (!peaks || !ns || jattn_ctx_create(&ctx) != JATTN_OK) {
        rc = cli_error(CLI_EXIT_FAILURE, "out of memory");
        goto done;
    }
    if (!o->json) {
        char load[64];
        kit_load_average(load, sizeof load);
        printf("jattn %s bench: %s, synthetic standard-normal inputs (seed %llu), load average %s\n",
               jattn_version_string(), kit_precision_name(o->precision), (unsigned long long)o->seed, load);
        printf("time: median after a warm-up; GFLOP/s = 4*B*H*Sq*Skv*D / time (with a mask: 4*D*attended (query, key) "
               "pairs / time); FMA peak and BLAS attention measured now, at the row's threads; parity vs the float64 "
               "reference (query rows sampled beyond %.0f GFLOP of reference work; with a mask, the first heads' "
               "whole rows)\n",
               BENCH_CHECK_BUDGET_FLOPS / 1e9);
        print_header();
        fflush(stdout);
    }
    for (int s = 0; s < n_shapes && rc == CLI_EXIT_OK; s++)
        rc = bench_one_shape(o, &shapes[s], peaks, ns, ctx, &rows, &any_fail);
    if (!o->json)
        for (int i = 0; i < ns->n; i++) printf("note: %s\n", ns->text[i]);
    if (rc == CLI_EXIT_OK && any_fail) {
        fflush(stdout);
        rc = cli_error(CLI_EXIT_FAILURE, "parity FAIL in at least one row");
    }
done:
    jattn_ctx_free(ctx);
    free(peaks);
    free(ns);
    return rc;
}
