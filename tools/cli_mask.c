/* The masks and grouped-query heads of run and bench; see cli_mask.h. */
#include "cli_mask.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"
#include "clock.h"
#include "rng.h"
#include "tensor.h"

void cli_apply_kv_heads(const cli_options *o, jattn_problem *p) {
    if (!o->kv_heads) return;
    p->kv_heads = o->kv_heads;
    p->k = p->v = jattn_strides_head_major(o->kv_heads, p->seq_kv, p->head_dim);
}

int cli_check_kv_heads(const cli_options *o, int64_t heads) {
    if (o->kv_heads && (o->kv_heads > heads || heads % o->kv_heads != 0))
        return cli_error(CLI_EXIT_USAGE,
                         "--kv-heads: %lld does not divide the %lld heads: each key/value head serves heads / "
                         "kv-heads query heads",
                         (long long)o->kv_heads, (long long)heads);
    return CLI_EXIT_OK;
}

int64_t cli_kv_elems(const jattn_problem *p) { return p->batch * kit_kv_heads(p) * p->seq_kv * p->head_dim; }

void cli_mask_free(cli_mask *cm) {
    free(cm->block_q);
    free(cm->block_kv);
    free(cm->cu_q);
    free(cm->cu_kv);
    free(cm->bias);
    memset(cm, 0, sizeof *cm);
}

const jattn_mask *cli_mask_of(const cli_mask *cm) { return cm->any ? &cm->m : NULL; }

/* n + 1 cumulative offsets of n lengths into a new array (NULL when out of memory). */
static int64_t *cumulative(const int64_t *lengths, int n) {
    int64_t *o = malloc(((size_t)n + 1) * sizeof *o);
    if (!o) return NULL;
    o[0] = 0;
    for (int i = 0; i < n; i++) o[i + 1] = o[i] + lengths[i]; /* bounded by CLI_MAX_SEGMENT_LEN each */
    return o;
}

/* N + 1 offsets cutting `total` tokens into N blocks as equal as integers allow. */
static int64_t *equal_blocks(int64_t n, int64_t total) {
    int64_t *o = malloc(((size_t)n + 1) * sizeof *o);
    if (!o) return NULL;
    for (int64_t a = 0; a <= n; a++) o[a] = a * (total / n) + a * (total % n) / n; /* no overflow: n <= 2^20 */
    return o;
}

static void add_note(cli_mask *cm, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void add_note(cli_mask *cm, const char *fmt, ...) {
    size_t len = strlen(cm->note);
    if (len && len + 2 < sizeof cm->note) {
        memcpy(cm->note + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cm->note + len, sizeof cm->note - len, fmt, ap);
    va_end(ap);
}

int cli_mask_make(const cli_options *o, const jattn_problem *p, const jattn_key_padding *kp, uint64_t seed,
                  cli_mask *cm) {
    memset(cm, 0, sizeof *cm);
    if (kp && (kp->kv_len || kp->mask)) {
        cm->m.padding = *kp;
        cm->any = 1;
        add_note(cm, "key padding (%s%s%s)", kp->kv_len ? "--kv-len" : "", kp->kv_len && kp->mask ? ", " : "",
                 kp->mask ? "--key-mask" : "");
    }
    if (o->causal) {
        cm->m.causal = o->causal;
        cm->any = 1;
        add_note(cm, "causal %s", o->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? "bottom-right" : "top-left");
    }
    if (o->blocks) {
        cm->block_q = equal_blocks(o->blocks, p->seq_q);
        cm->block_kv = equal_blocks(o->blocks, p->seq_kv);
        if (!cm->block_q || !cm->block_kv) return cli_error(CLI_EXIT_FAILURE, "out of memory for --blocks");
        cm->m.block_q = cm->block_q;
        cm->m.block_kv = cm->block_kv;
        cm->m.num_blocks = o->blocks;
        cm->any = 1;
        add_note(cm, "%lld block-causal blocks", (long long)o->blocks);
    }
    if (o->n_segments) {
        const int n = o->n_segments;
        const int64_t *kv_lengths = o->n_segments_kv ? o->segments_kv : o->segments;
        cm->cu_q = cumulative(o->segments, n);
        cm->cu_kv = cumulative(kv_lengths, n);
        if (!cm->cu_q || !cm->cu_kv) return cli_error(CLI_EXIT_FAILURE, "out of memory for --segments");
        if (cm->cu_q[n] > p->seq_q)
            return cli_error(CLI_EXIT_USAGE, "--segments: the lengths sum to %lld, more than seq_q %lld",
                             (long long)cm->cu_q[n], (long long)p->seq_q);
        if (cm->cu_kv[n] > p->seq_kv)
            return cli_error(CLI_EXIT_USAGE, "%s: the lengths sum to %lld, more than seq_kv %lld%s",
                             o->n_segments_kv ? "--segments-kv" : "--segments", (long long)cm->cu_kv[n],
                             (long long)p->seq_kv, o->n_segments_kv ? "" : " (--segments-kv gives the keys' lengths)");
        cm->m.cu_seqlens_q = cm->cu_q;
        cm->m.cu_seqlens_kv = cm->cu_kv;
        cm->m.num_segments = n;
        cm->any = 1;
        add_note(cm, "%d segments (%lld of %lld queries, %lld of %lld keys)", n, (long long)cm->cu_q[n],
                 (long long)p->seq_q, (long long)cm->cu_kv[n], (long long)p->seq_kv);
    }
    if (o->key_bias) {
        const int64_t rows = o->key_bias == CLI_KEY_BIAS_SHARED  ? 1
                             : o->key_bias == CLI_KEY_BIAS_BATCH ? p->batch
                                                                 : p->batch * p->heads;
        const int64_t n = rows * p->seq_kv; /* <= the elements of q or k: fits */
        char why[256];
        if (cli_memory_fits((double)n * sizeof(float), "--key-bias", why, sizeof why) != 0)
            return cli_error(CLI_EXIT_FAILURE, "%s", why);
        if (!(cm->bias = kit_alloc_floats(n)))
            return cli_error(CLI_EXIT_FAILURE, "out of memory for --key-bias (%lld values)", (long long)n);
        jattn_rng_fill_normal(cm->bias, n, seed, 9);
        jattn_rng r;
        jattn_rng_seed(&r, seed ^ UINT64_C(0x6b65795f62696173)); /* "key_bias" */
        int64_t masked = 0;
        for (int64_t i = 0; i < n; i++)
            if (jattn_rng_uniform(&r) < 0.125) cm->bias[i] = -INFINITY, masked++;
        cm->m.key_bias = cm->bias;
        cm->m.key_bias_batch_stride = o->key_bias == CLI_KEY_BIAS_BATCH  ? p->seq_kv
                                      : o->key_bias == CLI_KEY_BIAS_HEAD ? p->heads * p->seq_kv
                                                                         : 0;
        cm->m.key_bias_head_stride = o->key_bias == CLI_KEY_BIAS_HEAD ? p->seq_kv : 0;
        cm->any = 1;
        add_note(cm, "key bias %s, standard normal, %lld of %lld -inf",
                 o->key_bias == CLI_KEY_BIAS_SHARED  ? "[Skv] (shared)"
                 : o->key_bias == CLI_KEY_BIAS_BATCH ? "[B, Skv]"
                                                     : "[B, H, Skv]",
                 (long long)masked, (long long)n);
    }
    return CLI_EXIT_OK;
}

void cli_mask_describe(const jattn_problem *p, const cli_mask *cm, char *buf, size_t cap) {
    buf[0] = '\0';
    if (p->kv_heads && p->kv_heads != p->heads)
        snprintf(buf, cap, ", %lld key/value heads (groups of %lld)", (long long)p->kv_heads,
                 (long long)(p->heads / p->kv_heads));
    const size_t len = strlen(buf);
    if (cm && cm->note[0]) snprintf(buf + len, cap - len, ", %s", cm->note);
}

jattn_status cli_time_plan(const jattn_plan *plan, jattn_ctx *ctx, const float *q, const float *k, const float *v,
                           const jattn_mask *m, float *out, float *lse, int reps, double auto_seconds, int reps_min,
                           int reps_max, kit_timing *t) {
    double t0 = kit_now();
    jattn_status st = jattn_plan_forward(plan, ctx, NULL, NULL, 0, q, k, v, m, out, lse);
    const double warm = kit_now() - t0;
    if (st != JATTN_OK) return st;
    if (!reps) {
        const double r = ceil(auto_seconds / (warm > 1e-9 ? warm : 1e-9));
        reps = r < reps_min ? reps_min : r > reps_max ? reps_max : (int)r;
    }
    double *times = malloc((size_t)reps * sizeof *times);
    if (!times) return JATTN_ERROR_OUT_OF_MEMORY;
    for (int r = 0; r < reps && st == JATTN_OK; r++) {
        t0 = kit_now();
        st = jattn_plan_forward(plan, ctx, NULL, NULL, 0, q, k, v, m, out, lse);
        times[r] = 1e3 * (kit_now() - t0);
    }
    if (st == JATTN_OK) {
        t->ms = kit_median(times, reps); /* sorts in place */
        t->ms_min = times[0];
        t->ms_max = times[reps - 1];
        t->reps = reps;
        t->clock = "host";
    }
    free(times);
    return st;
}

jattn_status cli_mask_reference(kit_reference *r, const jattn_problem *p, const jattn_mask *m, double pairs,
                                const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->stride = 1;
    r->rows = p->seq_q;
    /* How many (batch, head) pairs fit in the budget, at the mean work of one. */
    const int64_t kvh = kit_kv_heads(p), group = kvh > 0 ? p->heads / kvh : 1;
    const double bh = (double)p->batch * (double)p->heads;
    const double per_bh = bh > 0 ? 4.0 * (double)p->head_dim * pairs / bh : 0;
    const double fit = per_bh > 0 ? floor(budget_flops / per_bh) : bh;
    int64_t nb = p->batch, nh = p->heads;
    if (fit < bh) {
        if (fit >= (double)p->heads) {
            nb = (int64_t)(fit / (double)p->heads);
        } else {
            nb = 1;
            nh = (int64_t)(fit / (double)group) * group;
            if (nh < group) nh = group;
        }
    }
    jattn_problem *sub = &r->dense;
    *sub = *p;
    sub->batch = nb;
    sub->heads = nh;
    if (p->kv_heads) sub->kv_heads = nh / group;
    jattn_mask sm = *m;
    if (sm.padding.mask && sm.padding.mask_batch > 1 && nb < p->batch) sm.padding.mask_batch = nb > 1 ? nb : 1;
    /* The reference's output at out's strides: the sub-problem's rows are the first ones of out. */
    const int64_t n_out = p->batch && p->heads && p->seq_q ? kit_tensor_span(p, p->out, p->seq_q) : 0;
    const int64_t n_lse = nb * nh * p->seq_q;
    r->out = kit_alloc_floats(n_out);
    if (want_lse) {
        r->lse = kit_alloc_floats(n_lse);
        r->gather_lse = kit_alloc_floats(n_lse);
    }
    if (!r->out || (want_lse && (!r->lse || !r->gather_lse))) {
        kit_reference_free(r);
        snprintf(err, errlen, "reference: out of memory for %lld output elements", (long long)n_out);
        return JATTN_ERROR_OUT_OF_MEMORY;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    const jattn_status st = jattn_forward_masked(NULL, sub, &e, q, k, v, &sm, r->out, r->lse);
    if (st != JATTN_OK) {
        snprintf(err, errlen, "reference: %s: %s", jattn_status_name(st), jattn_last_error());
        kit_reference_free(r);
    }
    return st;
}

void cli_mask_compare(kit_reference *r, const jattn_problem *p, const float *out, const float *lse,
                      jattn_precision precision, kit_parity *res) {
    const jattn_problem *sub = &r->dense;
    memset(res, 0, sizeof *res);
    jattn_metrics_compute(sub, out, r->out, &res->m);
    res->pass = jattn_metrics_pass(&res->m, precision);
    if (lse && r->lse) {
        for (int64_t b = 0; b < sub->batch; b++)
            for (int64_t h = 0; h < sub->heads; h++)
                memcpy(r->gather_lse + (b * sub->heads + h) * p->seq_q, lse + (b * p->heads + h) * p->seq_q,
                       (size_t)p->seq_q * sizeof(float));
        res->lse_checked = 1;
        res->lse_pass = jattn_lse_pass(r->gather_lse, r->lse, sub->batch * sub->heads * p->seq_q, precision);
    }
}

void cli_mask_checked(const kit_reference *r, const jattn_problem *p, char *buf, size_t cap) {
    if (r->dense.batch == p->batch && r->dense.heads == p->heads)
        snprintf(buf, cap, " with the same mask");
    else
        snprintf(buf, cap, " with the same mask (batches 0..%lld, heads 0..%lld)", (long long)r->dense.batch - 1,
                 (long long)r->dense.heads - 1);
}
