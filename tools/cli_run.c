/* `jattn run`: one attention call on synthetic or .npy inputs; timed, checked against the
 * float64 reference, and written out (all or nothing). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_mask.h"
#include "device_timer.h"

/* Reference work of a full check: the kit's (kit/reference.h), the default job's 4*B*H*S*S*D. */
#define RUN_CHECK_BUDGET_FLOPS KIT_CHECK_BUDGET_FLOPS
/* Automatic repeats: about this many seconds of timed runs, within [min, max] repeats. */
#define RUN_AUTO_SECONDS 2.0
#define RUN_AUTO_REPS_MIN 3
#define RUN_AUTO_REPS_MAX 25
/* Repeats of the device-resident timer (GPU calls are short). */
#define RUN_DEVICE_REPS 20

enum { ERRLEN = 512 };

/* ---- inputs ---- */

typedef struct run_inputs {
    jattn_problem p;
    int ndim; /* of the .npy inputs (3 or 4); 4 for synthetic inputs */
    int from_files;
    npy_array file[3];   /* q, k, v read from .npy */
    float *synthetic[3]; /* q, k, v generated */
    const float *q, *k, *v;
} run_inputs;

static void free_inputs(run_inputs *in) {
    for (int i = 0; i < 3; i++) {
        npy_free(&in->file[i]);
        free(in->synthetic[i]);
    }
}

/* The [B, H, S, D] of a 3-d or 4-d head-major array. */
static void head_major_dims(const npy_array *a, int64_t dims[4]) {
    int off = a->ndim - 3;
    dims[0] = a->ndim == 4 ? a->shape[0] : 1;
    for (int i = 0; i < 3; i++) dims[1 + i] = a->shape[off + i];
}

static int load_tensor(const char *opt, const char *path, npy_array *a) {
    char why[ERRLEN];
    npy_status st = npy_read_f32(path, a, why, sizeof why);
    if (st != NPY_OK)
        return cli_error(st == NPY_ERR_NOMEM ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE, "%s %s: %s", opt, path, why);
    char shape[NPY_MAX_DIMS * 22 + 4];
    npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
    if (a->ndim != 3 && a->ndim != 4)
        return cli_error(CLI_EXIT_USAGE, "%s %s: shape %s has %d dimensions; expected [H,S,D] or [B,H,S,D]", opt, path,
                         shape, a->ndim);
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] == 0)
            return cli_error(CLI_EXIT_USAGE, "%s %s: shape %s has a zero dimension", opt, path, shape);
    return CLI_EXIT_OK;
}

static int load_files(const cli_options *o, run_inputs *in) {
    static const char *const opt[3] = {"--q", "--k", "--v"};
    static const char *const dim_name[4] = {"batch", "heads", "seq", "head_dim"};
    const char *path[3] = {o->q_path, o->k_path, o->v_path};
    int64_t dims[3][4];
    for (int t = 0; t < 3; t++) {
        int rc = load_tensor(opt[t], path[t], &in->file[t]);
        if (rc) return rc;
        head_major_dims(&in->file[t], dims[t]);
    }
    /* q, k, v: the same number of dimensions; batch, heads and head_dim agree; k and v agree on seq
     * (and on heads, which with --kv-heads are k's own). */
    for (int t = 1; t < 3; t++) {
        if (in->file[t].ndim != in->file[0].ndim)
            return cli_error(CLI_EXIT_USAGE, "%s %s: %d dimensions but --q %s has %d", opt[t], path[t],
                             in->file[t].ndim, path[0], in->file[0].ndim);
        for (int d = 0; d < 4; d++) {
            const int own_heads = d == 1 && o->kv_heads; /* grouped-query heads: k's and v's, checked below */
            int against = d == 2 || own_heads ? 1 : 0;   /* seq: v against k; the others against q */
            if ((d == 2 || own_heads) && t == 1) continue;
            if (dims[t][d] != dims[against][d])
                return cli_error(CLI_EXIT_USAGE, "%s %s: %s %lld differs from %s %s's %lld", opt[t], path[t],
                                 dim_name[d], (long long)dims[t][d], opt[against], path[against],
                                 (long long)dims[against][d]);
        }
    }
    const struct {
        const char *name;
        int64_t given, actual;
        const char *from;
        int is_given;
    } agree[] = {{"--batch", o->batch, dims[0][0], "--q", !!(o->sizes_given & CLI_SIZE_BATCH)},
                 {"--heads", o->heads, dims[0][1], "--q", !!(o->sizes_given & CLI_SIZE_HEADS)},
                 {"--seq", o->seq_q, dims[0][2], "--q", !!(o->sizes_given & CLI_SIZE_SEQ_Q)},
                 {"--seq-kv", o->seq_kv, dims[1][2], "--k", !!(o->sizes_given & CLI_SIZE_SEQ_KV)},
                 {"--dim", o->dim, dims[0][3], "--q", !!(o->sizes_given & CLI_SIZE_DIM)},
                 {"--kv-heads", o->kv_heads, dims[1][1], "--k", o->kv_heads != 0}};
    for (size_t i = 0; i < sizeof agree / sizeof agree[0]; i++)
        if (agree[i].is_given && agree[i].given != agree[i].actual)
            return cli_error(CLI_EXIT_USAGE, "%s %lld disagrees with the %s file (%lld)", agree[i].name,
                             (long long)agree[i].given, agree[i].from, (long long)agree[i].actual);
    in->from_files = 1;
    in->ndim = in->file[0].ndim;
    in->p = jattn_problem_flux(dims[0][0], dims[0][1], dims[0][2], dims[1][2], dims[0][3]);
    cli_apply_kv_heads(o, &in->p); /* k and v [B, Hkv, Skv, D], as read */
    in->q = in->file[0].data;
    in->k = in->file[1].data;
    in->v = in->file[2].data;
    return CLI_EXIT_OK;
}

static void synthetic_problem(const cli_options *o, run_inputs *in) {
    int64_t n[5];
    cli_sizes(o, CLI_DEFAULT_SEQ, n);
    in->ndim = 4;
    in->p = jattn_problem_flux(n[0], n[1], n[2], n[3], n[4]);
    cli_apply_kv_heads(o, &in->p);
}

/* After the problem is validated: allocate and fill q, k, v. */
static int make_synthetic(const cli_options *o, run_inputs *in) {
    const int64_t n[3] = {kit_elems(&in->p, in->p.seq_q), cli_kv_elems(&in->p), cli_kv_elems(&in->p)};
    for (int t = 0; t < 3; t++) {
        if (!(in->synthetic[t] = kit_alloc_floats(n[t])))
            return cli_error(CLI_EXIT_FAILURE, "out of memory for the inputs (%lld elements each)", (long long)n[t]);
        jattn_rng_fill_normal(in->synthetic[t], n[t], o->seed, (uint64_t)t);
    }
    in->q = in->synthetic[0];
    in->k = in->synthetic[1];
    in->v = in->synthetic[2];
    return CLI_EXIT_OK;
}

/* ---- key padding (--kv-len, --key-mask) ---- */

typedef struct run_padding {
    jattn_key_padding kp;
    int64_t *kv_len; /* [B] */
    npy_array mask;  /* bytes */
    double attended; /* mean attended keys per batch */
    char note[160];  /* for the report, "" without padding */
} run_padding;

static void free_padding(run_padding *pad) {
    free(pad->kv_len);
    npy_free(&pad->mask);
}

/* The padding of the options, checked against the problem; pad->kp stays zero without any. */
static int make_padding(const cli_options *o, const jattn_problem *p, run_padding *pad) {
    if (o->n_kv_len) {
        if (o->n_kv_len != 1 && o->n_kv_len != p->batch)
            return cli_error(CLI_EXIT_USAGE, "--kv-len: %d values for batch %lld: give one length, or one per batch",
                             o->n_kv_len, (long long)p->batch);
        if (!(pad->kv_len = malloc((size_t)p->batch * sizeof *pad->kv_len)))
            return cli_error(CLI_EXIT_FAILURE, "out of memory for --kv-len");
        for (int64_t b = 0; b < p->batch; b++) {
            pad->kv_len[b] = o->kv_len[o->n_kv_len == 1 ? 0 : b];
            if (pad->kv_len[b] > p->seq_kv)
                return cli_error(CLI_EXIT_USAGE, "--kv-len: %lld exceeds seq_kv %lld", (long long)pad->kv_len[b],
                                 (long long)p->seq_kv);
        }
        pad->kp.kv_len = pad->kv_len;
    }
    if (o->key_mask_path) {
        char why[ERRLEN], shape[NPY_MAX_DIMS * 22 + 4];
        npy_status st = npy_read_u8(o->key_mask_path, &pad->mask, why, sizeof why);
        if (st != NPY_OK)
            return cli_error(st == NPY_ERR_NOMEM ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE, "--key-mask %s: %s",
                             o->key_mask_path, why);
        const npy_array *m = &pad->mask;
        npy_format_shape(m->shape, m->ndim, shape, sizeof shape);
        const int64_t rows = m->ndim == 2 ? m->shape[0] : 1, keys = m->ndim ? m->shape[m->ndim - 1] : 0;
        if (m->ndim < 1 || m->ndim > 2 || keys != p->seq_kv || (rows != 1 && rows != p->batch))
            return cli_error(CLI_EXIT_USAGE,
                             "--key-mask %s: shape %s is neither [Skv] = (%lld,) nor [B, Skv] = (%lld, %lld)",
                             o->key_mask_path, shape, (long long)p->seq_kv, (long long)p->batch, (long long)p->seq_kv);
        pad->kp.mask = m->bytes;
        pad->kp.mask_batch = rows;
        pad->kp.mask_keys = keys;
    }
    if (!pad->kp.kv_len && !pad->kp.mask) return CLI_EXIT_OK;
    double total = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const int64_t end = pad->kv_len ? pad->kv_len[b] : p->seq_kv;
        const unsigned char *row = pad->kp.mask ? pad->kp.mask + (pad->kp.mask_batch > 1 ? b : 0) * p->seq_kv : NULL;
        for (int64_t j = 0; j < end; j++) total += !row || row[j];
    }
    pad->attended = total / (double)p->batch;
    snprintf(pad->note, sizeof pad->note, "%s%s%s: %.1f of %lld keys attended per batch on average",
             pad->kp.kv_len ? "--kv-len" : "", pad->kp.kv_len && pad->kp.mask ? " and " : "",
             pad->kp.mask ? "--key-mask" : "", pad->attended, (long long)p->seq_kv);
    return CLI_EXIT_OK;
}

/* ---- report ---- */

/* What a run measured and checked, for the report. */
typedef struct run_result {
    const jattn_selection *sel;
    const char *auto_reasons;
    const kit_timing *t;
    const char *timing_note;
    double flops, pairs; /* per call; pairs: attended (query, key) pairs, with a mask (else -1) */
    const kit_reference *ref;
    const kit_parity *par; /* NULL: not checked */
    int masked_check;      /* ref is cli_mask_reference's: whole rows of the first batches and heads */
    const char *wrote;
} run_result;

static void print_report(const cli_options *o, const run_inputs *in, const run_padding *pad, const cli_mask *cm,
                         const run_result *r) {
    const jattn_problem *p = &in->p;
    const char *prec = kit_precision_name(o->precision);
    const jattn_selection *sel = r->sel;
    const kit_timing *t = r->t;
    const double gflops = r->flops / (t->ms * 1e-3) / 1e9;
    const double all_pairs = (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv;
    if (o->json) {
        kit_json j;
        kit_json_begin(&j, stdout);
        kit_json_str(&j, "command", "run");
        kit_json_str(&j, "version", jattn_version_string());
        kit_json_selection(&j, sel);
        kit_json_problem(&j, p, o->precision);
        kit_json_int(&j, "kv_heads", kit_kv_heads(p));
        kit_json_str(&j, "inputs", in->from_files ? "npy" : "synthetic");
        if (!in->from_files) kit_json_int(&j, "seed", (long long)o->seed);
        if (pad->note[0]) {
            kit_json_str(&j, "key_mask", o->key_mask_path);
            kit_json_bool(&j, "kv_len", pad->kp.kv_len != NULL);
            kit_json_num(&j, "attended_keys", pad->attended);
        }
        if (cm->note[0]) kit_json_str(&j, "mask", cm->note);
        if (r->pairs >= 0) kit_json_num(&j, "attended_pairs", r->pairs);
        kit_json_num(&j, "flops", r->flops);
        kit_json_timing(&j, t, t->clock, gflops);
        kit_json_parity(&j, r->ref, r->par);
        if (r->par && r->masked_check) {
            kit_json_int(&j, "checked_batches", r->ref->dense.batch);
            kit_json_int(&j, "checked_heads", r->ref->dense.heads);
        }
        kit_json_end(&j);
        return;
    }
    printf("jattn %s run: attention B=%lld H=%lld Sq=%lld Skv=%lld D=%lld", jattn_version_string(), (long long)p->batch,
           (long long)p->heads, (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim);
    if (p->kv_heads && p->kv_heads != p->heads) printf(" Hkv=%lld", (long long)p->kv_heads);
    printf(", %s, ", prec);
    if (in->from_files)
        printf("inputs %s %s %s\n", o->q_path, o->k_path, o->v_path);
    else
        printf("synthetic standard-normal inputs (seed %llu)\n", (unsigned long long)o->seed);
    printf("backend  %s", sel->backend_name);
    if (o->backend == JATTN_BACKEND_AUTO) printf(" (auto%s%s)", r->auto_reasons[0] ? "; " : "", r->auto_reasons);
    printf("\nkernel   %s   isa %s   threads %d\n", sel->kernel, sel->isa, sel->threads);
    if (isnan(t->ms_min))
        printf("time     %.3f ms  median of %d after a warm-up (%s clock)\n", t->ms, t->reps, t->clock);
    else
        printf("time     %.3f ms  median of %d after a warm-up (%s clock; min %.3f, max %.3f)\n", t->ms, t->reps,
               t->clock, t->ms_min, t->ms_max);
    if (r->timing_note[0]) printf("         note: %s\n", r->timing_note);
    if (pad->note[0]) printf("padding  %s\n", pad->note);
    if (cli_has_mask(o)) printf("mask     %s\n", cm->note);
    if (r->pairs >= 0)
        printf("speed    %.2f GFLOP/s  (4*D*attended pairs = %.3g GFLOP per call; %.4g of the %.4g (query, key) pairs "
               "of B*H*Sq*Skv attended, %.1f%%)\n",
               gflops, r->flops / 1e9, r->pairs, all_pairs, all_pairs > 0 ? 100.0 * r->pairs / all_pairs : 0.0);
    else
        printf("speed    %.2f GFLOP/s  (4*B*H*Sq*Skv*D = %.3g GFLOP per call)\n", gflops, r->flops / 1e9);
    if (r->par) {
        char what[160] = "";
        if (r->masked_check) cli_mask_checked(r->ref, p, what, sizeof what);
        kit_print_parity(r->ref, r->par, p, o->precision, what);
        if (r->par->lse_checked) printf("; lse %s", r->par->lse_pass ? "PASS" : "FAIL");
        if (sel->backend == JATTN_BACKEND_REF) printf("; the backend is the reference: this checks its determinism");
        printf("\n");
    } else {
        printf("parity   not checked (--no-check)\n");
    }
    if (r->wrote[0]) printf("wrote    %s\n", r->wrote);
}

/* ---- the command ---- */

/* Why AUTO passed over the backends it tries before the one it chose (the library's order,
 * jattn_backend_info_at): "cuda passed over: <reason>; ...". With a mask, each is asked for it. */
static void auto_reasons(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, jattn_backend chosen,
                         char *buf, size_t cap) {
    buf[0] = '\0';
    for (int r = 0; r < jattn_backend_info_count(); r++) {
        jattn_backend_info info;
        if (jattn_backend_info_at(r, &info) != JATTN_OK || info.backend == chosen) break;
        jattn_exec x = *e;
        x.backend = info.backend;
        jattn_plan *plan = NULL;
        if (jattn_plan_create(&plan, JATTN_PASS_FORWARD, p, NULL, mask, &x) == JATTN_OK) {
            jattn_plan_free(plan);
            continue;
        }
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s passed over: %s", len ? "; " : "", info.name, jattn_last_error());
    }
}

int cli_run(const cli_options *o) {
    if (o->parallel) return cli_run_parallel(o);
    run_inputs in;
    memset(&in, 0, sizeof in);
    npy_writer out_w = {0}, lse_w = {0};
    jattn_ctx *ctx = NULL;
    jattn_plan *plan = NULL;
    float *out = NULL, *lse = NULL;
    kit_reference ref = {0};
    run_padding pad;
    memset(&pad, 0, sizeof pad);
    cli_mask cm;
    memset(&cm, 0, sizeof cm);
    char why[ERRLEN];
    int rc = CLI_EXIT_OK;

    if (o->q_path)
        rc = load_files(o, &in);
    else
        synthetic_problem(o, &in);
    if (rc) goto done;
    in.p.scale = o->scale;

    jattn_exec e = {0};
    e.backend = o->backend;
    e.precision = o->precision;
    e.threads = o->n_threads ? o->threads[0] : 0;
    if ((rc = cli_check_kv_heads(o, in.p.heads))) goto done;
    jattn_selection sel;
    jattn_status st = jattn_select(&in.p, &e, &sel); /* the problem, validated before anything is made for it */
    if (st != JATTN_OK) {
        rc = cli_error(cli_exit_for_status(st), "cannot run this problem on backend %s: %s (%s)",
                       jattn_backend_name(o->backend), jattn_last_error(), jattn_status_name(st));
        goto done;
    }
    if ((rc = make_padding(o, &in.p, &pad))) goto done;
    const jattn_key_padding *kp = pad.note[0] ? &pad.kp : NULL;
    if ((rc = cli_mask_make(o, &in.p, kp, o->seed, &cm))) goto done;
    /* With a mask beyond key padding, a plan decides the backend and kernel for it, and runs it. */
    const jattn_mask *mask = cli_has_mask(o) ? cli_mask_of(&cm) : NULL;
    if (mask) {
        if ((st = jattn_plan_create(&plan, JATTN_PASS_FORWARD, &in.p, NULL, mask, &e)) != JATTN_OK) {
            rc = cli_error(cli_exit_for_status(st), "cannot run this problem on backend %s: %s (%s)",
                           jattn_backend_name(o->backend), jattn_last_error(), jattn_status_name(st));
            goto done;
        }
        jattn_plan_selection(plan, &sel);
    }
    char reasons[ERRLEN] = "";
    if (o->backend == JATTN_BACKEND_AUTO) auto_reasons(&in.p, &e, mask, sel.backend, reasons, sizeof reasons);
    e.backend = sel.backend; /* every call of this run uses the backend chosen now */

    /* Outputs first: an unwritable destination fails before any work is done. */
    if (o->out_path && npy_writer_open(&out_w, o->out_path, why, sizeof why) != NPY_OK) {
        rc = cli_error(CLI_EXIT_FAILURE, "--out %s: %s", o->out_path, why);
        goto done;
    }
    if (o->lse_path && npy_writer_open(&lse_w, o->lse_path, why, sizeof why) != NPY_OK) {
        rc = cli_error(CLI_EXIT_FAILURE, "--lse %s: %s", o->lse_path, why);
        goto done;
    }
    const int64_t n_out = kit_elems(&in.p, in.p.seq_q), n_lse = in.p.batch * in.p.heads * in.p.seq_q;
    /* q, k, v (unless read already), out, lse, and the reference's two buffers of at most out's size. */
    double elems = (in.from_files ? 0.0 : (double)n_out + 2.0 * (double)cli_kv_elems(&in.p)) +
                   (o->check ? 3.0 : 1.0) * ((double)n_out + (o->lse_path ? (double)n_lse : 0.0));
    if (cli_memory_fits(elems * sizeof(float), "this problem", why, sizeof why) != 0) {
        rc = cli_error(CLI_EXIT_FAILURE, "%s", why);
        goto done;
    }
    if (!in.from_files && (rc = make_synthetic(o, &in))) goto done;
    out = kit_alloc_floats(n_out);
    if (o->lse_path) lse = kit_alloc_floats(n_lse);
    if (!out || (o->lse_path && !lse)) {
        rc = cli_error(CLI_EXIT_FAILURE, "out of memory for the output (%lld elements)", (long long)n_out);
        goto done;
    }
    if ((st = jattn_ctx_create(&ctx)) != JATTN_OK) {
        rc = cli_error(CLI_EXIT_FAILURE, "%s", jattn_last_error());
        goto done;
    }

    kit_timing t;
    char timing_note[ERRLEN] = "";
    memset(&t, 0, sizeof t);
    t.ms_min = t.ms_max = NAN;
    int timed = 0;
    if (cli_backend_on_device(sel.backend)) {
        int reps = o->reps ? o->reps : RUN_DEVICE_REPS;
        /* the mask's arrays (key padding alone, or every part) go to the device with the tensors */
        jattn_mask padding_only = {0};
        if (kp) padding_only.padding = *kp;
        const jattn_mask *dm = mask ? mask : kp ? &padding_only : NULL;
        if (jattn_device_timed_run(&in.p, &e, dm, in.q, in.k, in.v, out, lse, 1, reps, &t.ms, why, sizeof why) == 0) {
            t.reps = reps;
            t.clock = "device";
            timed = 1;
        } else {
            snprintf(timing_note, sizeof timing_note,
                     "device timer unavailable (%.400s); host clock includes the copies", why);
        }
    }
    if (!timed) {
        st = mask ? cli_time_plan(plan, ctx, in.q, in.k, in.v, mask, out, lse, o->reps, RUN_AUTO_SECONDS,
                                  RUN_AUTO_REPS_MIN, RUN_AUTO_REPS_MAX, &t)
                  : kit_time_forward(ctx, &in.p, &e, kp, in.q, in.k, in.v, out, lse, o->reps, RUN_AUTO_SECONDS,
                                     RUN_AUTO_REPS_MIN, RUN_AUTO_REPS_MAX, &t);
        if (st != JATTN_OK) {
            rc = cli_error(cli_exit_for_status(st), "backend %s failed: %s (%s)", sel.backend_name,
                           st == JATTN_ERROR_OUT_OF_MEMORY && !jattn_last_error()[0] ? "out of memory"
                                                                                     : jattn_last_error(),
                           jattn_status_name(st));
            goto done;
        }
    }
    /* FLOPs: 4*B*H*Sq*Skv*D, or with a mask (key padding included) 4*D per attended pair (kit/tensor.h). */
    const double pairs = cm.any ? kit_attended_pairs(&in.p, &cm.m) : -1.0;
    const double flops = cm.any ? kit_flops_masked(&in.p, &cm.m) : kit_flops(&in.p);

    kit_parity par, *parp = NULL;
    if (o->check && mask) {
        if ((st = cli_mask_reference(&ref, &in.p, mask, pairs, in.q, in.k, in.v, RUN_CHECK_BUDGET_FLOPS, lse != NULL,
                                     why, sizeof why)) != JATTN_OK) {
            rc = cli_error(CLI_EXIT_FAILURE, "%s", why);
            goto done;
        }
        cli_mask_compare(&ref, &in.p, out, lse, o->precision, &par);
        parp = &par;
    } else if (o->check) {
        if ((st = kit_reference_compute(&ref, &in.p, kp, in.q, in.k, in.v, RUN_CHECK_BUDGET_FLOPS, lse != NULL, why,
                                        sizeof why)) != JATTN_OK) {
            rc = cli_error(CLI_EXIT_FAILURE, "%s", why);
            goto done;
        }
        kit_reference_compare(&ref, &in.p, out, lse, o->precision, &par);
        parp = &par;
    }
    int pass = !parp || (par.pass && (!par.lse_checked || par.lse_pass));

    /* Token-major output [S, H*D] for 3-d inputs, [B, S, H*D] otherwise; lse [H, S] or [B, H, S]. */
    const int four_d = in.ndim == 4;
    const int64_t out_shape[3] = {in.p.batch, in.p.seq_q, in.p.heads * in.p.head_dim};
    const int64_t lse_shape[3] = {in.p.batch, in.p.heads, in.p.seq_q};
    char wrote[2 * ERRLEN] = "", shape_text[96];
    if (pass) {
        if (o->out_path) {
            if (npy_writer_commit(&out_w, out_shape + !four_d, 2 + four_d, out, why, sizeof why) != NPY_OK) {
                rc = cli_error(CLI_EXIT_FAILURE, "--out %s: %s", o->out_path, why);
                goto done;
            }
            npy_format_shape(out_shape + !four_d, 2 + four_d, shape_text, sizeof shape_text);
            snprintf(wrote, sizeof wrote, "%s float32 %s", o->out_path, shape_text);
        }
        if (o->lse_path) {
            if (npy_writer_commit(&lse_w, lse_shape + !four_d, 2 + four_d, lse, why, sizeof why) != NPY_OK) {
                /* out is already in place: remove it, so that a failure leaves no output at all. */
                if (o->out_path) remove(o->out_path);
                rc = cli_error(CLI_EXIT_FAILURE, "--lse %s: %s", o->lse_path, why);
                goto done;
            }
            npy_format_shape(lse_shape + !four_d, 2 + four_d, shape_text, sizeof shape_text);
            size_t len = strlen(wrote);
            snprintf(wrote + len, sizeof wrote - len, "%s%s float32 %s", len ? ", " : "", o->lse_path, shape_text);
        }
    }
    const run_result res = {&sel, reasons, &t, timing_note, flops, pairs, &ref, parp, mask != NULL, wrote};
    print_report(o, &in, &pad, &cm, &res);
    if (!pass) {
        fflush(stdout);
        rc = cli_error(
            CLI_EXIT_FAILURE, "parity FAIL against the float64 reference (rel_l2 %.3g, max_abs %.3g, cos %.9g%s)%s",
            par.m.rel_l2, par.m.max_abs, par.m.cos, par.lse_checked && !par.lse_pass ? ", lse outside its gate" : "",
            o->out_path || o->lse_path ? "; no output written" : "");
    }

done:
    npy_writer_abort(&out_w);
    npy_writer_abort(&lse_w);
    kit_reference_free(&ref);
    jattn_plan_free(plan);
    cli_mask_free(&cm);
    jattn_ctx_free(ctx);
    free(out);
    free(lse);
    free_inputs(&in);
    free_padding(&pad);
    return rc;
}
