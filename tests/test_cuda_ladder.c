/* test_cuda_ladder: the kernel ladders of src/cuda/NOTES.md ("The kernel ladders": which version
 * AUTO runs, forward and backward) against the code that walks them (src/cuda/cuda_versions.c: where
 * AUTO starts, each version's refusals and fallbacks; src/cuda/sm90_contract.c), on a grid of calls:
 * compute capability 8.0 to 12.0, head_dim 1 to 512, both precisions, sequences up to 2^31 - 1, batch
 * and heads past 65535, strides multiples of 4 or not, pointer alignment (a plan's: 16 bytes or 4),
 * and the plan's mask parts (none, key padding, causal, block-causal, segments, a key bias, grouped
 * heads, all of them). For every call the table's first matching row must name the kernel the code
 * runs; every row must be the first match of some call and every call must match a row. Run by
 * tests/test_docs.sh (which also checks that a changed table fails here).
 *
 * Plain C: built on every machine, with or without the cuda backend. It compiles cuda_versions.c and
 * sm90_contract.c itself (tests/tool.cmake); the launchers and workspace sizes those name are the
 * stubs below, never called.
 *
 * usage: test_cuda_ladder NOTES.md
 * @return 0 when the table and the code agree, 1 when they differ (each difference printed, the
 *         first 20), 2 when the table cannot be read (the line and cell named). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jattn_internal.h" /* cuda/cuda_versions.h: the versions' tables and the ladders */

/* ---- the stubs of what the versions' table names ---- */

size_t attention_f32_sm90_fa3_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv,
                                                    int64_t head_dim);

#define STUB_LAUNCH(name)                                               \
    int name(const jattn_cuda_args *a, void *workspace, void *stream) { \
        (void)a, (void)workspace, (void)stream;                         \
        return 0;                                                       \
    }
STUB_LAUNCH(jattn_cuda_launch_v1)
STUB_LAUNCH(jattn_cuda_launch_v6)
STUB_LAUNCH(jattn_cuda_launch_v7)
STUB_LAUNCH(jattn_cuda_launch_bwd_v3)
STUB_LAUNCH(jattn_cuda_launch_bwd_v4)

size_t attention_f32_sm90_fa3_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv,
                                                    int64_t head_dim) {
    return (size_t)(batch + heads + kv_heads + seq_kv + head_dim);
}
size_t jattn_cuda_v7_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv, int64_t head_dim) {
    return (size_t)(batch + heads + kv_heads + seq_kv + head_dim);
}
size_t jattn_cuda_bwd_v4_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_kv,
                                         int64_t head_dim) {
    return (size_t)(batch + heads + kv_heads + seq_q + seq_kv + head_dim);
}
size_t jattn_cuda_bwd_v3_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                         int64_t head_dim) {
    return (size_t)(batch + heads + seq_q + seq_kv + head_dim);
}
size_t jattn_cuda_bwd_v3_workspace_bytes_gqa(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
                                             int64_t seq_kv, int64_t head_dim) {
    return (size_t)(batch + heads + kv_heads + seq_q + seq_kv + head_dim);
}

/* ---- one call of the grid ---- */

enum { FORWARD, BACKWARD };
/* The plan's mask parts (JATTN_FEATURE_* bits): none, key padding, causal, block-causal, segments, a key bias,
 * grouped heads, and all of them at once. */
enum { F_NONE, F_PADDING, F_CAUSAL, F_BLOCKS, F_SEGMENTS, F_BIAS, F_GQA, F_ALL, F_COUNT };
static const unsigned kFeatures[F_COUNT] = {0,
                                            JATTN_FEATURE_KEY_PADDING,
                                            JATTN_FEATURE_CAUSAL,
                                            JATTN_FEATURE_BLOCKS,
                                            JATTN_FEATURE_SEGMENTS,
                                            JATTN_FEATURE_KEY_BIAS,
                                            JATTN_FEATURE_GQA,
                                            (1u << JATTN_FEATURE_COUNT) - 1};
/* Layouts: every stride of every tensor a multiple of 4 elements, or one tensor's token stride not. */
enum { L_ALIGNED, L_Q_ODD, L_OUT_ODD, L_DOUT_ODD, L_DQ_ODD, L_COUNT };
/* The plan's pointer alignment: 16 bytes (the default) or 4. */
enum { P_ALIGNED, P_FLOAT, P_COUNT };

typedef struct call {
    int pass, cc, layout, pointers, features;
    jattn_causal causal; /* with a causal part: its alignment */
    jattn_precision precision;
    jattn_problem p;
    jattn_grad_strides g;
} call;

static jattn_strides strides_of(int64_t heads, int64_t seq, int64_t head_dim, int odd) {
    const int64_t token = (head_dim + 3) / 4 * 4 + (odd ? 1 : 0);
    const jattn_strides s = {.batch = heads * seq * token, .head = seq * token, .token = token};
    return s;
}

static void call_init(call *c, int pass, int cc, int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d,
                      jattn_precision precision, int layout, int pointers, int features) {
    memset(c, 0, sizeof *c);
    c->pass = pass, c->cc = cc, c->layout = layout, c->pointers = pointers, c->features = features;
    c->precision = precision;
    jattn_problem *p = &c->p;
    p->batch = b, p->heads = h, p->seq_q = sq, p->seq_kv = skv, p->head_dim = d;
    p->kv_heads = h;
    p->scale = 0.125f;
    p->q = strides_of(h, sq, d, layout == L_Q_ODD);
    p->k = strides_of(h, skv, d, 0);
    p->v = strides_of(h, skv, d, 0);
    p->out = strides_of(h, sq, d, layout == L_OUT_ODD);
    c->g.dout = strides_of(h, sq, d, layout == L_DOUT_ODD);
    c->g.dq = strides_of(h, sq, d, layout == L_DQ_ODD);
    c->g.dk = p->k;
    c->g.dv = p->v;
}

static void call_describe(const call *c, char *buf, size_t n) {
    static const char *layouts[L_COUNT] = {"every stride a multiple of 4", "q's token stride odd",
                                           "out's token stride odd", "dout's token stride odd",
                                           "dq's token stride odd"};
    static const char *pointers[P_COUNT] = {"pointers 16-byte aligned", "pointers 4-byte aligned"};
    static const char *features[F_COUNT] = {"no mask",  "key padding", "causal",        "block-causal",
                                            "segments", "a key bias",  "grouped heads", "every mask part"};
    snprintf(buf, n,
             "%s, cc %d.%d, B %" PRId64 " H %" PRId64 " Sq %" PRId64 " Skv %" PRId64 " D %" PRId64 ", %s, %s, %s, %s%s",
             c->pass == FORWARD ? "forward" : "backward", c->cc / 10, c->cc % 10, c->p.batch, c->p.heads, c->p.seq_q,
             c->p.seq_kv, c->p.head_dim, c->precision == JATTN_PRECISION_TF32 ? "tf32" : "f32", layouts[c->layout],
             pointers[c->pointers], features[c->features],
             c->causal == JATTN_CAUSAL_TOP_LEFT       ? " (top-left)"
             : c->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? " (bottom-right)"
                                                      : "");
}

/* ---- what the code runs ---- */

static const char *version_name(const cuda_version *v) {
    static char names[2][JATTN_CUDA_KERNEL_COUNT][8];
    for (int t = 0; t < 2; t++) {
        const cuda_version *table = t ? jattn_cuda_bwd_versions : jattn_cuda_versions;
        const int count = t ? JATTN_CUDA_BWD_KERNEL_COUNT : JATTN_CUDA_KERNEL_COUNT;
        for (int k = 0; k < count; k++)
            if (v == &table[k]) {
                snprintf(names[t][k], sizeof names[t][k], "v%d", k);
                return names[t][k];
            }
    }
    return "?";
}

/* The kernel AUTO runs for c ("refused" when none), asked as a plan asks (cuda_backend.c). */
static const char *code_kernel(const call *c) {
    const char *why = "";
    const cuda_query q = {.p = &c->p,
                          .grad = c->pass == BACKWARD ? &c->g : NULL,
                          .precision = c->precision,
                          .cc = c->cc,
                          .features = kFeatures[c->features],
                          .causal = c->causal,
                          .alignment = c->pointers == P_ALIGNED ? 16 : 4};
    const cuda_version *v = c->pass == FORWARD ? jattn_cuda_forward_version(JATTN_CUDA_KERNEL_AUTO, &q, &why)
                                               : jattn_cuda_backward_version(JATTN_CUDA_BWD_KERNEL_AUTO, &q, &why);
    return v ? version_name(v) : "refused";
}

/* ---- the table ---- */

#define COLUMNS 9
#define MAX_ROWS 32
#define CELL 96
static const char *const kHeader[COLUMNS] = {
    "pass", "device", "head_dim", "precision", "seq_q, seq_kv", "B, H", "strides, alignment", "mask", "kernel"};

typedef struct row {
    int line;
    char cell[COLUMNS][CELL];
    long first_matches; /* calls whose first matching row this is */
} row;

static row rows[MAX_ROWS];
static int n_rows;
static const char *path;

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    size_t i = 0;
    while (s[i] == ' ') i++;
    memmove(s, s + i, n - i + 1);
}

/* Splits a table line "| a | b | ... |" into cells; @return their number. */
static int split(const char *line, char cells[][CELL], int max) {
    int n = 0;
    const char *p = strchr(line, '|');
    while (p && n < max) {
        const char *q = strchr(p + 1, '|');
        if (!q) break;
        size_t len = (size_t)(q - p - 1);
        if (len >= CELL) len = CELL - 1;
        memcpy(cells[n], p + 1, len);
        cells[n][len] = '\0';
        trim(cells[n]);
        n++;
        p = q;
    }
    return n;
}

static int bad_table(int line, const char *what) {
    fprintf(stderr, "FAIL %s:%d: %s\n", path, line, what);
    return 2;
}

/* Reads the first table after "## The kernel ladders". @return 0, or 2 when it cannot. */
static int read_table(void) {
    FILE *f = fopen(path, "r");
    if (!f) return bad_table(0, "cannot open it");
    char line[1024];
    int at = 0, in_section = 0, header = 0;
    while (fgets(line, sizeof line, f)) {
        at++;
        if (strncmp(line, "## ", 3) == 0) {
            if (header) break; /* the next section */
            in_section = strncmp(line, "## The kernel ladders", 21) == 0;
            continue;
        }
        if (!in_section) continue;
        if (line[0] != '|') {
            if (header && n_rows) break; /* the table's end */
            continue;
        }
        char cells[COLUMNS + 1][CELL];
        const int n = split(line, cells, COLUMNS + 1);
        if (!header) {
            if (n != COLUMNS)
                return fclose(f), bad_table(at, "the table's header needs the nine columns of the ladder");
            for (int i = 0; i < COLUMNS; i++)
                if (strcmp(cells[i], kHeader[i]) != 0) {
                    fprintf(stderr, "FAIL %s:%d: column %d is \"%s\", want \"%s\"\n", path, at, i + 1, cells[i],
                            kHeader[i]);
                    return fclose(f), 2;
                }
            header = 1;
            continue;
        }
        if (strncmp(cells[0], "---", 3) == 0) continue;
        if (n != COLUMNS) return fclose(f), bad_table(at, "a row without nine cells");
        if (n_rows == MAX_ROWS) return fclose(f), bad_table(at, "more rows than this test reads");
        rows[n_rows].line = at;
        memcpy(rows[n_rows].cell, cells, sizeof rows[n_rows].cell);
        n_rows++;
    }
    fclose(f);
    if (!header) return bad_table(0, "no table after \"## The kernel ladders\"");
    if (!n_rows) return bad_table(0, "the ladder table has no rows");
    return 0;
}

/* A cell's condition on a call: 1 matches, 0 does not, -1 the cell cannot be read. */
static int int_after(const char *s, const char *key, int64_t *out) {
    const char *p = strstr(s, key);
    if (!p) return 0;
    *out = strtoll(p + strlen(key), NULL, 10);
    return 1;
}

static int match_device(const char *c, int cc) {
    if (!strcmp(c, "any")) return 1;
    int major = 0, minor = 0;
    if (sscanf(c, "%d.%d", &major, &minor) == 2) return cc == 10 * major + minor;
    return -1;
}

static int match_head_dim(const char *c, int64_t d) {
    if (!strcmp(c, "any")) return 1;
    long long lo = 0, hi = 0;
    if (sscanf(c, "%lld to %lld", &lo, &hi) == 2) return d >= lo && d <= hi;
    int matched = 0, any = 0;
    for (const char *p = c; *p;) {
        char *end = NULL;
        const long long v = strtoll(p, &end, 10);
        if (end == p) return -1;
        any = 1;
        matched |= d == v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return any ? matched : -1;
}

static int match_precision(const char *c, jattn_precision precision) {
    if (!strcmp(c, "any")) return 1;
    if (!strcmp(c, "f32")) return precision == JATTN_PRECISION_F32;
    if (!strcmp(c, "tf32")) return precision == JATTN_PRECISION_TF32;
    return -1;
}

/* "any", "seq_kv 1", "each <= 2^31 - N", "seq_kv 2 or more, each <= 2^31 - N", and after "each": "; with a
 * window or a key bias seq_q <= N" */
static int match_seq(const char *c, const call *k) {
    const int64_t sq = k->p.seq_q, skv = k->p.seq_kv;
    if (!strcmp(c, "any")) return 1;
    if (!strcmp(c, "seq_kv 1")) return skv == 1;
    int ok = 1, read = 0;
    if (strstr(c, "seq_kv 2 or more")) read = 1, ok &= skv >= 2;
    int64_t below = 0;
    if (int_after(c, "each <= 2^31 - ", &below)) {
        read = 1;
        const int64_t max = INT32_MAX + (int64_t)1 - below;
        ok &= sq <= max && skv <= max;
    }
    int64_t masked_max = 0;
    if (int_after(c, "with a window or a key bias seq_q <= ", &masked_max)) {
        if (!read) return -1;
        const unsigned masked =
            JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS | JATTN_FEATURE_SEGMENTS | JATTN_FEATURE_KEY_BIAS;
        if (kFeatures[k->features] & masked) ok &= sq <= masked_max;
    }
    /* after either of the above: B H ceil(seq_q / 64) ceil(seq_kv / 128), the backward v4's work units */
    if (int_after(c, "units <= 2^31 - ", &below)) {
        if (!read) return -1;
        const int64_t tq = (sq + 63) / 64, tk = (skv + 127) / 128, bh = k->p.batch * k->p.heads;
        const int64_t max = INT32_MAX + (int64_t)1 - below;
        ok &= bh <= max / tk && bh * tk <= max / tq;
    }
    return read ? ok : -1;
}

/* "any", "each <= N", "B H <= N" */
static int match_bh(const char *c, int64_t b, int64_t h) {
    if (!strcmp(c, "any")) return 1;
    int64_t max = 0;
    if (int_after(c, "B H <= ", &max)) return b * h <= max;
    if (int_after(c, "each <= ", &max)) return b <= max && h <= max;
    return -1;
}

static int match_layout(const char *c, const call *k) {
    if (!strcmp(c, "any")) return 1;
    if (strcmp(c, "float4")) return -1;
    const int fwd_ok = k->layout != L_Q_ODD && k->layout != L_OUT_ODD && k->pointers == P_ALIGNED;
    const int bwd_ok = k->layout != L_DOUT_ODD && k->layout != L_DQ_ODD;
    return k->pass == FORWARD ? fwd_ok : fwd_ok && bwd_ok;
}

/* "any", "none", "key padding at most", "causal at most, every key attended" (none, or causal alone and not
 * top-left with seq_q < seq_kv), "grouped heads, key padding or causal, every key attended" (the same, key padding
 * alone, or grouped heads: the calls here take one part at a time), "any but a key bias" (every part alone but the
 * key bias; all of them at once has one) */
static int match_mask(const char *c, const call *k) {
    const int features = k->features;
    if (!strcmp(c, "any")) return 1;
    if (!strcmp(c, "none")) return features == F_NONE;
    if (!strcmp(c, "key padding at most")) return features == F_NONE || features == F_PADDING;
    const int causal_ok = features == F_NONE ||
                          (features == F_CAUSAL && !(k->causal == JATTN_CAUSAL_TOP_LEFT && k->p.seq_q < k->p.seq_kv));
    if (!strcmp(c, "causal at most, every key attended")) return causal_ok;
    if (!strcmp(c, "grouped heads, key padding or causal, every key attended"))
        return causal_ok || features == F_GQA || features == F_PADDING;
    if (!strcmp(c, "any but a key bias")) return features != F_BIAS && features != F_ALL;
    return -1;
}

/* The first row of the call's pass that matches it: its index, -1 when none, -2 when a cell of a
 * row it reaches cannot be read (*bad: that row and column). */
static int first_row(const call *k, int *bad_row, int *bad_col) {
    for (int r = 0; r < n_rows; r++) {
        const row *w = &rows[r];
        if (strcmp(w->cell[0], "forward") && strcmp(w->cell[0], "backward")) {
            *bad_row = r, *bad_col = 0;
            return -2;
        }
        if (strcmp(w->cell[0], k->pass == FORWARD ? "forward" : "backward")) continue;
        const int m[7] = {match_device(w->cell[1], k->cc),
                          match_head_dim(w->cell[2], k->p.head_dim),
                          match_precision(w->cell[3], k->precision),
                          match_seq(w->cell[4], k),
                          match_bh(w->cell[5], k->p.batch, k->p.heads),
                          match_layout(w->cell[6], k),
                          match_mask(w->cell[7], k)};
        int all = 1;
        for (int i = 0; i < 7; i++) {
            if (m[i] < 0) {
                *bad_row = r, *bad_col = i + 1;
                return -2;
            }
            all &= m[i];
        }
        if (all) return r;
    }
    return -1;
}

/* The grid: every combination of these. */
static const int kCcs[] = {80, 89, 90, 100, 120};
static const int64_t kDims[] = {1, 15, 16, 40, 63, 64, 72, 100, 128, 160, 256, 257, 512};
static const int64_t kBh[][2] = {{1, 24}, {2, 3}, {65535, 1}, {65536, 1}, {1, 65536}, {300, 300}};
/* around each limit of the versions: 2^31 - 129 (v6, v7, the backward v4), 2^31 - 65 (the sm_90a
 * contract), 2^31 - 1 (the backend); 2^20, where the backward v4's work units pass 2^31 at B H = 24 (not at
 * B H = 6) */
static const int64_t kSeqs[] = {
    1, 2, 1536, 1048576, INT32_MAX - 128, INT32_MAX - 127, INT32_MAX - 64, INT32_MAX - 63, INT32_MAX};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static long calls, differences, unmatched;

/* Checks one call: the table's first matching row against the code. @return 2 when a cell cannot
 * be read, else 0. */
static int check_call(const call *k) {
    char what[320];
    const char *kernel = code_kernel(k);
    int bad_row = 0, bad_col = 0;
    const int r = first_row(k, &bad_row, &bad_col);
    calls++;
    if (r == -2) {
        char msg[200];
        snprintf(msg, sizeof msg, "cannot read the cell \"%s\" (column %s)", rows[bad_row].cell[bad_col],
                 kHeader[bad_col]);
        return bad_table(rows[bad_row].line, msg);
    }
    if (r < 0) {
        if (unmatched++ < 20) {
            call_describe(k, what, sizeof what);
            printf("FAIL no row of the table matches (%s); the code runs %s\n", what, kernel);
        }
        return 0;
    }
    rows[r].first_matches++;
    if (strcmp(rows[r].cell[8], kernel) && differences++ < 20) {
        call_describe(k, what, sizeof what);
        printf("FAIL %s: the table (line %d) says %s, the code runs %s\n", what, rows[r].line, rows[r].cell[8], kernel);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_cuda_ladder src/cuda/NOTES.md\n");
        return 2;
    }
    path = argv[1];
    const int st = read_table();
    if (st) return st;

    /* one index per dimension of the grid, walked as the digits of a mixed-radix counter */
    enum { D_PASS, D_CC, D_DIM, D_PREC, D_BH, D_SQ, D_SKV, D_LAYOUT, D_PTR, D_FEAT, D_ALIGN, D_COUNT };
    const int radix[D_COUNT] = {2,       COUNT(kCcs), COUNT(kDims), 2, COUNT(kBh), COUNT(kSeqs), COUNT(kSeqs),
                                L_COUNT, P_COUNT,     F_COUNT,      2};
    int at[D_COUNT] = {0};
    for (;;) {
        const int pass = at[D_PASS] ? BACKWARD : FORWARD;
        /* the gradients' layouts are the backward's; the causal alignment, of the calls with a causal part */
        const int causal = kFeatures[at[D_FEAT]] & JATTN_FEATURE_CAUSAL;
        if ((pass == BACKWARD || at[D_LAYOUT] < L_DOUT_ODD) && (causal || at[D_ALIGN] == 0)) {
            call k;
            call_init(&k, pass, kCcs[at[D_CC]], kBh[at[D_BH]][0], kBh[at[D_BH]][1], kSeqs[at[D_SQ]], kSeqs[at[D_SKV]],
                      kDims[at[D_DIM]], at[D_PREC] ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32, at[D_LAYOUT],
                      at[D_PTR], at[D_FEAT]);
            k.causal = !causal ? JATTN_CAUSAL_NONE : at[D_ALIGN] ? JATTN_CAUSAL_BOTTOM_RIGHT : JATTN_CAUSAL_TOP_LEFT;
            if (check_call(&k)) return 2;
        }
        int d = 0;
        while (d < D_COUNT && ++at[d] == radix[d]) at[d++] = 0;
        if (d == D_COUNT) break;
    }
    long dead = 0;
    for (int r = 0; r < n_rows; r++)
        if (!rows[r].first_matches) {
            dead++;
            printf("FAIL %s:%d: no call of the grid reaches this row (%s, %s, head_dim %s)\n", path, rows[r].line,
                   rows[r].cell[0], rows[r].cell[1], rows[r].cell[2]);
        }
    printf("test_cuda_ladder: %ld calls, %d rows; %ld differ from the code, %ld match no row, %ld rows never "
           "reached\n",
           calls, n_rows, differences, unmatched, dead);
    const int ok = differences == 0 && unmatched == 0 && dead == 0;
    printf("test_cuda_ladder: %s\n", ok ? "PASS (the ladder table is the code's)" : "FAIL");
    return ok ? 0 : 1;
}
