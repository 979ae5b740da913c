/* Shared pieces of the jattn subcommands; see cli_common.h. */
#include "cli_common.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_args.h"

double cli_flops(const jattn_problem *p) {
    return 4.0 * (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv * (double)p->head_dim;
}

int64_t cli_elems(const jattn_problem *p, int64_t seq) { return p->batch * p->heads * seq * p->head_dim; }

/* ---- random inputs ---- */

void cli_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream) {
    jattn_rng r;
    jattn_rng_seed(&r, seed ^ (stream * 0xD1B54A32D192ED03ull));
    for (int64_t i = 0; i < n; i++) x[i] = (float)jattn_rng_normal(&r);
}

float *cli_alloc_floats(int64_t n) {
    enum { ALIGN = 64 };
    if (n < 0 || (uint64_t)n > (SIZE_MAX - ALIGN) / sizeof(float)) return NULL;
    size_t bytes = ((size_t)(n ? n : 1) * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
    return aligned_alloc(ALIGN, bytes);
}

int cli_memory_fits(double bytes, const char *what, char *err, size_t errlen) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes > (double)pages * (double)page) {
        snprintf(err, errlen, "out of memory: %s needs %.3g GB, this machine has %.3g GB", what, bytes / 1e9,
                 (double)pages * (double)page / 1e9);
        return -1;
    }
#else
    (void)bytes, (void)what, (void)err, (void)errlen;
#endif
    return 0;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void cli_load_average(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, cap, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

int cli_exit_for_status(jattn_status st) {
    switch (st) {
    case JATTN_OK:
        return CLI_EXIT_OK;
    case JATTN_ERROR_NULL_POINTER:
    case JATTN_ERROR_INVALID_DIMENSION:
    case JATTN_ERROR_OVERFLOW:
    case JATTN_ERROR_INVALID_STRIDE:
    case JATTN_ERROR_SELF_OVERLAP:
    case JATTN_ERROR_ALIASING:
    case JATTN_ERROR_INVALID_SCALE:
    case JATTN_ERROR_INVALID_ARGUMENT:
    case JATTN_ERROR_UNSUPPORTED:
        return CLI_EXIT_USAGE;
    default:
        return CLI_EXIT_FAILURE;
    }
}

/* ---- timing ---- */

jattn_status cli_time_forward(jattn_ctx *ctx, const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                              const float *q, const float *k, const float *v, float *out, float *lse, int reps,
                              double auto_seconds, int reps_min, int reps_max, cli_timing *t) {
    double t0 = cli_now();
    jattn_status st = jattn_forward_padded(ctx, p, e, q, k, v, kp, out, lse);
    double warm = cli_now() - t0;
    if (st != JATTN_OK) return st;
    if (!reps) {
        double r = ceil(auto_seconds / (warm > 1e-9 ? warm : 1e-9));
        reps = r < reps_min ? reps_min : r > reps_max ? reps_max : (int)r;
    }
    double *times = malloc((size_t)reps * sizeof *times);
    if (!times) return JATTN_ERROR_OUT_OF_MEMORY;
    for (int r = 0; r < reps && st == JATTN_OK; r++) {
        t0 = cli_now();
        st = jattn_forward_padded(ctx, p, e, q, k, v, kp, out, lse);
        times[r] = 1e3 * (cli_now() - t0);
    }
    if (st == JATTN_OK) {
        t->ms = cli_median(times, reps); /* sorts in place */
        t->ms_min = times[0];
        t->ms_max = times[reps - 1];
        t->reps = reps;
        t->clock = "host";
    }
    free(times);
    return st;
}

/* ---- parity ---- */

void cli_reference_free(cli_reference *r) {
    free(r->out);
    free(r->lse);
    free(r->gather);
    free(r->gather_lse);
    memset(r, 0, sizeof *r);
}

jattn_status cli_reference_compute(cli_reference *r, const jattn_problem *p, const jattn_key_padding *kp,
                                   const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                   char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    int64_t stride = 1;
    double flops = cli_flops(p);
    if (flops > budget_flops) {
        double s = ceil(flops / budget_flops);
        stride = s >= (double)p->seq_q ? p->seq_q : (int64_t)s;
    }
    r->stride = stride;
    r->rows = (p->seq_q + stride - 1) / stride;
    r->dense = *p;
    r->dense.seq_q = r->rows;
    if (r->rows > 1) r->dense.q.token = p->q.token * stride; /* (rows-1)*stride < Sq: the span still fits */
    r->dense.out = jattn_strides_token_major(p->heads, r->rows, p->head_dim);
    int64_t n_out = cli_elems(p, r->rows), n_lse = p->batch * p->heads * r->rows;
    r->out = cli_alloc_floats(n_out);
    r->gather = cli_alloc_floats(n_out);
    if (want_lse) {
        r->lse = cli_alloc_floats(n_lse);
        r->gather_lse = cli_alloc_floats(n_lse);
    }
    if (!r->out || !r->gather || (want_lse && (!r->lse || !r->gather_lse))) {
        cli_reference_free(r);
        snprintf(err, errlen, "reference: out of memory for %lld output elements", (long long)n_out);
        return JATTN_ERROR_OUT_OF_MEMORY;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward_padded(NULL, &r->dense, &e, q, k, v, kp, r->out, want_lse ? r->lse : NULL);
    if (st != JATTN_OK) {
        snprintf(err, errlen, "reference: %s: %s", jattn_status_name(st), jattn_last_error());
        cli_reference_free(r);
    }
    return st;
}

void cli_reference_compare(cli_reference *r, const jattn_problem *p, const float *out, const float *lse,
                           jattn_precision precision, cli_parity *res) {
    const jattn_problem *d = &r->dense;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < r->rows; i++)
                memcpy(r->gather + b * d->out.batch + h * d->out.head + i * d->out.token,
                       out + b * p->out.batch + h * p->out.head + i * r->stride * p->out.token,
                       (size_t)p->head_dim * sizeof(float));
    memset(res, 0, sizeof *res);
    jattn_metrics_compute(d, r->gather, r->out, &res->m);
    res->pass = jattn_metrics_pass(&res->m, precision);
    if (lse && r->lse) {
        for (int64_t bh = 0; bh < p->batch * p->heads; bh++)
            for (int64_t i = 0; i < r->rows; i++)
                r->gather_lse[bh * r->rows + i] = lse[bh * p->seq_q + i * r->stride];
        res->lse_checked = 1;
        res->lse_pass = jattn_lse_pass(r->gather_lse, r->lse, p->batch * p->heads * r->rows, precision);
    }
}

/* ---- JSON ---- */

void cli_json_begin(cli_json *j, FILE *f) {
    j->f = f;
    j->fields = 0;
    fputc('{', f);
}

static void key(cli_json *j, const char *k) {
    fprintf(j->f, "%s\"%s\":", j->fields++ ? "," : "", k);
}

void cli_json_str(cli_json *j, const char *k, const char *value) {
    key(j, k);
    if (!value) {
        fputs("null", j->f);
        return;
    }
    fputc('"', j->f);
    for (const unsigned char *s = (const unsigned char *)value; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(j->f, "\\%c", *s);
        else if (*s < 0x20)
            fprintf(j->f, "\\u%04x", *s);
        else
            fputc(*s, j->f);
    }
    fputc('"', j->f);
}

void cli_json_int(cli_json *j, const char *k, long long value) {
    key(j, k);
    fprintf(j->f, "%lld", value);
}

void cli_json_num(cli_json *j, const char *k, double value) {
    key(j, k);
    if (isfinite(value))
        fprintf(j->f, "%.9g", value);
    else
        fputs("null", j->f);
}

void cli_json_bool(cli_json *j, const char *k, int value) {
    key(j, k);
    fputs(value ? "true" : "false", j->f);
}

void cli_json_null(cli_json *j, const char *k) {
    key(j, k);
    fputs("null", j->f);
}

void cli_json_end(cli_json *j) { fputs("}\n", j->f); }
