/* Parsing of the jattn command line (see cli_args.h). Every option is described once, in
 * `options[]`: its name, the commands that take it, and whether it takes a value (always, or
 * only after '=': --causal and --causal=bottom-right). */
#include "cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char jattn_cli_usage[] =
    "usage: jattn <command> [options]\n"
    "\n"
    "Exact float32 multi-head attention for diffusion transformers (FLUX-style joint attention).\n"
    "\n"
    "commands:\n"
    "  run                one attention call: time it and check it against the float64 reference\n"
    "  bench              a table over shapes, backends and thread counts, beside the CPU's FMA\n"
    "                     peak and a BLAS attention baseline measured in the same run\n"
    "  compare A.npy B.npy  compare an output A with a reference B under the parity gate\n"
    "  gen                write a standard-normal float32 .npy (for trying --q/--k/--v)\n"
    "  backends           the library's backends, in the order auto tries them: what each runs on\n"
    "                     and whether it can run here\n"
    "  help, --help       print this text;  --version  print the version\n"
    "\n"
    "run (no options: FLUX.2 DiT attention B=1 H=24 S=1536 D=128, synthetic standard-normal\n"
    "inputs, the best backend present, parity checked):\n"
    "  --backend NAME                auto (default): the first backend, in auto's order, that can run\n"
    "                                the problem; or one of those 'jattn backends' lists\n"
    "  --precision f32|tf32          f32-exact (default), or tf32 (GPU, opt-in)\n"
    "  --threads N                   CPU threads, 0 = all cores (default 0)\n"
    "  --batch B --heads H --seq S --seq-kv S2 --dim D\n"
    "                                problem size (default 1 24 1536 S 128); B, H and the sequences\n"
    "                                may be 0 (PyTorch's answer: with no key, out rows 0 and lse -inf)\n"
    "  --kv-heads N                  grouped-query heads: k and v have N heads, N dividing H (1: MQA)\n"
    "  --causal[=top-left|bottom-right]\n"
    "                                causal: query t attends keys u <= t (top-left, the default:\n"
    "                                PyTorch's is_causal) or u <= t + Skv - Sq (bottom-right:\n"
    "                                FlashAttention's); inside each segment with --segments\n"
    "  --blocks N                    block-causal: N equal blocks over the queries and over the keys;\n"
    "                                a query of block a attends the keys of blocks 0..a\n"
    "  --segments L1,L2,...          packed sequences (varlen): segments of L1, L2, ... tokens; a query\n"
    "                                attends the keys of its own segment (--seq defaults to the sum)\n"
    "  --segments-kv K1,K2,...       with --segments: the keys' lengths, one per segment (cross-\n"
    "                                attention; --seq-kv defaults to their sum)\n"
    "  --key-bias[=batch|head|shared] an additive key bias: standard normal, about 1 key in 8 -inf;\n"
    "                                one row per batch (default), per batch and head, or one for all.\n"
    "                                The masks combine with each other and with --kv-len, --key-mask;\n"
    "                                --check applies the same mask to the reference, and the speed\n"
    "                                counts 4*D FLOPs per attended (query, key) pair of each head\n"
    "  --scale X                     softmax scale (default 1/sqrt(D))\n"
    "  --seed N                      seed of the synthetic inputs (default 42)\n"
    "  --reps N                      timed runs after one warm-up, median reported\n"
    "                                (default: about 2 s worth, 3 to 25)\n"
    "  --check, --no-check           compare with the float64 reference (default: check; problems\n"
    "                                larger than the default job: every n-th query row); FAIL exits 1\n"
    "  --json                        print one JSON object on one line instead of the report\n"
    "  --q F --k F --v F             inputs: float32 .npy, head-major [H,S,D] or [B,H,S,D] (k and\n"
    "                                v may have another S); they set the size, size options must agree\n"
    "  --out F                       write the output: float32 .npy, token-major [S,H*D] (3-d\n"
    "                                inputs) or [B,S,H*D] (4-d or synthetic inputs)\n"
    "  --lse F                       write the log-sum-exp: float32 .npy [H,S] or [B,H,S]\n"
    "  --kv-len L | L0,L1,...        key padding: batch b attends its first L (or Lb) keys only\n"
    "  --key-mask F                  key padding: a bool or uint8 .npy, [Skv] (every batch) or\n"
    "                                [B,Skv]; nonzero = attend (with --kv-len: both apply). A query\n"
    "                                row with no key to attend gets 0 (and lse -inf)\n"
    "  --parallel ulysses|ring|auto  sequence parallel over the ranks of mpirun: each rank computes\n"
    "                                its shard of the sequence (host memory over MPI on the cpu\n"
    "                                backend; --backend cuda: device memory over NCCL, one GPU a\n"
    "                                rank); rank 0 reports, and --check gathers the whole output\n"
    "                                and checks it against the reference of the whole problem:\n"
    "                                mpirun -np 4 jattn run --parallel ring --check --seq 4096\n"
    "  --shards N,N,...              with --parallel: query tokens of each rank (default: even)\n"
    "  --replicate-kv                with --parallel: k and v whole on every rank (cross-attention)\n"
    "  --backward                    time the backward (jattn_backward: dq, dk, dv for a standard-\n"
    "                                normal dout, out and lse from the backend's forward) and check\n"
    "                                the gradients against the float64 ref backward (first heads);\n"
    "                                with --kv-heads and the masks above\n"
    "\n"
    "bench (default shapes B=1 H=24 D=128, S = 512, 1536, 4608; backends: auto's choice, and beside\n"
    "a GPU backend the first CPU backend present):\n"
    "  --backend B                   this backend only (ref is benched only when asked for)\n"
    "  --threads N[,N...]            CPU thread counts (default: 1 and all cores)\n"
    "  --batch --heads --seq --seq-kv --dim   one shape instead of the default ones\n"
    "  --kv-heads, --causal, --blocks, --segments, --segments-kv, --key-bias   as for run, on every\n"
    "                                shape (GFLOP/s from the attended pairs; the BLAS baseline is\n"
    "                                unmasked: not run then)\n"
    "  --backward                    the backward instead (S = 1536, 4608; threads default: all\n"
    "                                cores), beside the FMA peak and PyTorch's CPU SDPA backward\n"
    "                                (python3 with torch, or JATTN_BENCH_PYTHON) in the same run\n"
    "  --precision, --scale, --seed, --reps (default: about 3 s worth, 3 to 20), --json (a JSON\n"
    "                                object per row)\n"
    "\n"
    "compare A.npy B.npy [--precision f32|tf32] [--json]: exit 0 when A passes the gate, 1 when not\n"
    "gen --shape N,N,... --out F [--seed N]\n"
    "backends [--json]\n"
    "\n"
    "exit status: 0 success; 1 runtime failure (backend unavailable or failing, output not\n"
    "writable, parity FAIL; no output file is left then); 2 bad usage or bad input (unknown option,\n"
    "bad number, bad or mismatched .npy, invalid problem). An error is one line on stderr.\n";

enum {
    ON_RUN = 1 << CLI_CMD_RUN,
    ON_BENCH = 1 << CLI_CMD_BENCH,
    ON_COMPARE = 1 << CLI_CMD_COMPARE,
    ON_GEN = 1 << CLI_CMD_GEN,
    ON_BACKENDS = 1 << CLI_CMD_BACKENDS
};

typedef enum option_id {
    OPT_BACKEND,
    OPT_PRECISION,
    OPT_THREADS,
    OPT_BATCH,
    OPT_HEADS,
    OPT_SEQ,
    OPT_SEQ_KV,
    OPT_DIM,
    OPT_SCALE,
    OPT_SEED,
    OPT_REPS,
    OPT_CHECK,
    OPT_NO_CHECK,
    OPT_JSON,
    OPT_Q,
    OPT_K,
    OPT_V,
    OPT_OUT,
    OPT_LSE,
    OPT_SHAPE,
    OPT_KV_LEN,
    OPT_KEY_MASK,
    OPT_HELP,
    OPT_PARALLEL,
    OPT_SHARDS,
    OPT_REPLICATE_KV,
    OPT_BACKWARD,
    OPT_KV_HEADS,
    OPT_CAUSAL,
    OPT_BLOCKS,
    OPT_SEGMENTS,
    OPT_SEGMENTS_KV,
    OPT_KEY_BIAS
} option_id;

enum { VALUE_NONE = 0, VALUE_REQUIRED = 1, VALUE_OPTIONAL = 2 /* only after '=' */ };

typedef struct option_spec {
    const char *name;
    option_id id;
    unsigned commands; /* ON_* mask */
    int takes_value;   /* VALUE_* */
} option_spec;

static const option_spec options[] = {
    {"--backend", OPT_BACKEND, ON_RUN | ON_BENCH, 1},
    {"--precision", OPT_PRECISION, ON_RUN | ON_BENCH | ON_COMPARE, 1},
    {"--threads", OPT_THREADS, ON_RUN | ON_BENCH, 1},
    {"--batch", OPT_BATCH, ON_RUN | ON_BENCH, 1},
    {"--heads", OPT_HEADS, ON_RUN | ON_BENCH, 1},
    {"--seq", OPT_SEQ, ON_RUN | ON_BENCH, 1},
    {"--seq-kv", OPT_SEQ_KV, ON_RUN | ON_BENCH, 1},
    {"--dim", OPT_DIM, ON_RUN | ON_BENCH, 1},
    {"--scale", OPT_SCALE, ON_RUN | ON_BENCH, 1},
    {"--seed", OPT_SEED, ON_RUN | ON_BENCH | ON_GEN, 1},
    {"--reps", OPT_REPS, ON_RUN | ON_BENCH, 1},
    {"--check", OPT_CHECK, ON_RUN, 0},
    {"--no-check", OPT_NO_CHECK, ON_RUN, 0},
    {"--json", OPT_JSON, ON_RUN | ON_BENCH | ON_COMPARE | ON_BACKENDS, 0},
    {"--q", OPT_Q, ON_RUN, 1},
    {"--k", OPT_K, ON_RUN, 1},
    {"--v", OPT_V, ON_RUN, 1},
    {"--out", OPT_OUT, ON_RUN | ON_GEN, 1},
    {"--lse", OPT_LSE, ON_RUN, 1},
    {"--shape", OPT_SHAPE, ON_GEN, 1},
    {"--kv-len", OPT_KV_LEN, ON_RUN, 1},
    {"--key-mask", OPT_KEY_MASK, ON_RUN, 1},
    {"--help", OPT_HELP, ON_RUN | ON_BENCH | ON_COMPARE | ON_GEN | ON_BACKENDS, 0},
    {"-h", OPT_HELP, ON_RUN | ON_BENCH | ON_COMPARE | ON_GEN | ON_BACKENDS, 0},
    {"--parallel", OPT_PARALLEL, ON_RUN, 1},
    {"--shards", OPT_SHARDS, ON_RUN, 1},
    {"--replicate-kv", OPT_REPLICATE_KV, ON_RUN, 0},
    {"--backward", OPT_BACKWARD, ON_RUN | ON_BENCH, 0},
    {"--kv-heads", OPT_KV_HEADS, ON_RUN | ON_BENCH, 1},
    {"--causal", OPT_CAUSAL, ON_RUN | ON_BENCH, VALUE_OPTIONAL},
    {"--blocks", OPT_BLOCKS, ON_RUN | ON_BENCH, 1},
    {"--segments", OPT_SEGMENTS, ON_RUN | ON_BENCH, 1},
    {"--segments-kv", OPT_SEGMENTS_KV, ON_RUN | ON_BENCH, 1},
    {"--key-bias", OPT_KEY_BIAS, ON_RUN | ON_BENCH, VALUE_OPTIONAL},
};

static const char *const command_names[] = {"help", "version", "run", "bench", "compare", "gen", "backends"};

static int usage_error(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int usage_error(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return CLI_EXIT_USAGE;
}

/* An argument quoted for a message: at most 40 characters, control characters as '?'. */
static const char *shown(const char *s, char *buf, size_t cap) {
    size_t j = 0, limit = 40;
    for (size_t i = 0; s[i] && j + 1 < cap; i++) {
        if (i == limit) {
            if (j + 4 < cap) buf[j++] = '.', buf[j++] = '.', buf[j++] = '.';
            break;
        }
        unsigned char c = (unsigned char)s[i];
        buf[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    buf[j] = '\0';
    return buf;
}

int cli_parse_int64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v, char *err, size_t errlen) {
    char buf[48];
    /* strtoll would skip leading spaces and accept a sign before them; digits must come first. */
    const char *digits = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
    if (!(digits[0] >= '0' && digits[0] <= '9')) {
        usage_error(err, errlen, "%s: '%s' is not an integer", opt, shown(s, buf, sizeof buf));
        return -1;
    }
    errno = 0;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (*end != '\0') {
        usage_error(err, errlen, "%s: '%s' is not an integer", opt, shown(s, buf, sizeof buf));
        return -1;
    }
    if (errno == ERANGE || x < lo || x > hi) {
        if (hi == INT64_MAX)
            usage_error(err, errlen, "%s: %s is out of range (must be >= %lld)", opt, shown(s, buf, sizeof buf),
                        (long long)lo);
        else
            usage_error(err, errlen, "%s: %s is out of range (must be %lld..%lld)", opt, shown(s, buf, sizeof buf),
                        (long long)lo, (long long)hi);
        return -1;
    }
    *v = (int64_t)x;
    return 0;
}

/* A comma-separated list of integers in [lo, hi]: at most `cap` of them. */
static int parse_int_list(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *vals, int cap, int *n,
                          char *err, size_t errlen) {
    char item[32], buf[48];
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= sizeof item) {
            usage_error(err, errlen, "%s: '%s' is not a comma-separated list of integers", opt,
                        shown(s, buf, sizeof buf));
            return -1;
        }
        if (*n == cap) {
            usage_error(err, errlen, "%s: more than %d values", opt, cap);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_int64(opt, item, lo, hi, &vals[*n], err, errlen) != 0) return -1;
        (*n)++;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int parse_choice(const char *opt, const char *s, const char *const *names, int count, int *v, char *err,
                        size_t errlen) {
    for (int i = 0; i < count; i++)
        if (strcmp(s, names[i]) == 0) {
            *v = i;
            return 0;
        }
    char buf[48], list[96] = "";
    for (int i = 0; i < count; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    usage_error(err, errlen, "%s: '%s' is not one of %s", opt, shown(s, buf, sizeof buf), list);
    return -1;
}

static int parse_scale(const char *s, float *v, char *err, size_t errlen) {
    char buf[48], *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || s[0] == ' ' || s[0] == '\t') {
        usage_error(err, errlen, "--scale: '%s' is not a number", shown(s, buf, sizeof buf));
        return -1;
    }
    if (!(x >= 0) || !isfinite(x) || (float)x > 3.4e38f || errno == ERANGE) {
        usage_error(err, errlen, "--scale: %s, must be finite and >= 0 (0 = 1/sqrt(D))", shown(s, buf, sizeof buf));
        return -1;
    }
    *v = (float)x;
    return 0;
}

static int parse_command(const char *word, cli_command *cmd) {
    if (strcmp(word, "--help") == 0 || strcmp(word, "-h") == 0) word = "help";
    if (strcmp(word, "--version") == 0) word = "version";
    for (int i = 0; i < (int)(sizeof command_names / sizeof command_names[0]); i++)
        if (strcmp(word, command_names[i]) == 0) {
            *cmd = (cli_command)i;
            return 0;
        }
    return -1;
}

/* Applies one option with its value (NULL for flags). */
static int apply_option(cli_options *o, option_id id, const char *name, const char *value, char *err, size_t errlen) {
    static const char *const precision_names[] = {"f32", "tf32"};
    int64_t x, list[CLI_MAX_THREAD_COUNTS > NPY_MAX_DIMS ? CLI_MAX_THREAD_COUNTS : NPY_MAX_DIMS];
    int n, choice;
    switch (id) {
    case OPT_BACKEND: {
        const char *backend_names[JATTN_BACKEND_COUNT]; /* the library's names: every backend it knows */
        for (int b = 0; b < JATTN_BACKEND_COUNT; b++) backend_names[b] = jattn_backend_name((jattn_backend)b);
        if (parse_choice(name, value, backend_names, JATTN_BACKEND_COUNT, &choice, err, errlen)) return -1;
        o->backend = (jattn_backend)choice;
        o->backend_given = 1;
        return 0;
    }
    case OPT_PRECISION:
        if (parse_choice(name, value, precision_names, 2, &choice, err, errlen)) return -1;
        o->precision = (jattn_precision)choice;
        return 0;
    case OPT_THREADS:
        if (parse_int_list(name, value, 0, CLI_MAX_THREADS, list, CLI_MAX_THREAD_COUNTS, &n, err, errlen)) return -1;
        for (int i = 0; i < n; i++) o->threads[i] = (int)list[i];
        o->n_threads = n;
        return 0;
    case OPT_BATCH:
    case OPT_HEADS:
    case OPT_SEQ:
    case OPT_SEQ_KV:
    case OPT_DIM:
        /* >= 0 here (a zero-size problem has PyTorch's answer), head_dim >= 1; sizes too large for
         * memory or int64 arithmetic are rejected by the library's validation of the problem,
         * with its own message. */
        if (cli_parse_int64(name, value, id == OPT_DIM ? 1 : 0, INT64_MAX, &x, err, errlen)) return -1;
        *(id == OPT_BATCH    ? &o->batch
          : id == OPT_HEADS  ? &o->heads
          : id == OPT_SEQ    ? &o->seq_q
          : id == OPT_SEQ_KV ? &o->seq_kv
                             : &o->dim) = x;
        o->sizes_given |= id == OPT_BATCH    ? CLI_SIZE_BATCH
                          : id == OPT_HEADS  ? CLI_SIZE_HEADS
                          : id == OPT_SEQ    ? CLI_SIZE_SEQ_Q
                          : id == OPT_SEQ_KV ? CLI_SIZE_SEQ_KV
                                             : CLI_SIZE_DIM;
        return 0;
    case OPT_SCALE: return parse_scale(value, &o->scale, err, errlen);
    case OPT_SEED:
        if (cli_parse_int64(name, value, 0, INT64_MAX, &x, err, errlen)) return -1;
        o->seed = (uint64_t)x;
        return 0;
    case OPT_REPS:
        if (cli_parse_int64(name, value, 1, CLI_MAX_REPS, &x, err, errlen)) return -1;
        o->reps = (int)x;
        return 0;
    case OPT_CHECK: o->check = 1; return 0;
    case OPT_NO_CHECK: o->check = 0; return 0;
    case OPT_JSON: o->json = 1; return 0;
    case OPT_Q: o->q_path = value; return 0;
    case OPT_K: o->k_path = value; return 0;
    case OPT_V: o->v_path = value; return 0;
    case OPT_OUT: o->out_path = value; return 0;
    case OPT_LSE: o->lse_path = value; return 0;
    case OPT_SHAPE:
        if (parse_int_list(name, value, 0, INT64_MAX, list, NPY_MAX_DIMS, &n, err, errlen)) return -1;
        for (int i = 0; i < n; i++) o->shape[i] = list[i];
        o->ndim = n;
        return 0;
    case OPT_KV_LEN: {
        int count;
        /* >= 0 here; against seq_kv once the problem is known (cli_run) */
        if (parse_int_list(name, value, 0, INT64_MAX, o->kv_len, CLI_MAX_KV_LENS, &count, err, errlen)) return -1;
        o->n_kv_len = count;
        return 0;
    }
    case OPT_KEY_MASK: o->key_mask_path = value; return 0;
    case OPT_HELP: o->command = CLI_CMD_HELP; return 0;
    case OPT_PARALLEL: {
        static const char *const algorithm_names[] = {"auto", "ulysses", "ring"}; /* jattn_sp_algorithm order */
        if (parse_choice(name, value, algorithm_names, 3, &choice, err, errlen)) return -1;
        o->parallel = 1 + choice;
        return 0;
    }
    case OPT_SHARDS:
        if (parse_int_list(name, value, 1, INT64_MAX, o->shards, CLI_MAX_SHARDS, &o->n_shards, err, errlen)) return -1;
        return 0;
    case OPT_REPLICATE_KV: o->replicate_kv = 1; return 0;
    case OPT_BACKWARD: o->backward = 1; return 0;
    case OPT_KV_HEADS:
        /* >= 1 here; dividing --heads is the library's check (its message names kv_heads) */
        if (cli_parse_int64(name, value, 1, INT64_MAX, &o->kv_heads, err, errlen)) return -1;
        return 0;
    case OPT_CAUSAL: {
        static const char *const causal_names[] = {"top-left", "bottom-right"};
        if (!value) {
            o->causal = JATTN_CAUSAL_TOP_LEFT;
            return 0;
        }
        if (parse_choice(name, value, causal_names, 2, &choice, err, errlen)) return -1;
        o->causal = choice ? JATTN_CAUSAL_BOTTOM_RIGHT : JATTN_CAUSAL_TOP_LEFT;
        return 0;
    }
    case OPT_BLOCKS:
        if (cli_parse_int64(name, value, 1, CLI_MAX_BLOCKS, &o->blocks, err, errlen)) return -1;
        return 0;
    case OPT_SEGMENTS:
    case OPT_SEGMENTS_KV:
        if (parse_int_list(name, value, 0, CLI_MAX_SEGMENT_LEN, id == OPT_SEGMENTS ? o->segments : o->segments_kv,
                           CLI_MAX_SEGMENTS, id == OPT_SEGMENTS ? &o->n_segments : &o->n_segments_kv, err, errlen))
            return -1;
        return 0;
    case OPT_KEY_BIAS: {
        static const char *const bias_names[] = {"batch", "head", "shared"}; /* cli_key_bias order, from 1 */
        if (!value) {
            o->key_bias = CLI_KEY_BIAS_BATCH;
            return 0;
        }
        if (parse_choice(name, value, bias_names, 3, &choice, err, errlen)) return -1;
        o->key_bias = CLI_KEY_BIAS_BATCH + choice;
        return 0;
    }
    }
    usage_error(err, errlen, "%s: internal error: unhandled option", name);
    return -1;
}

/* Whether a size option was given as 0. */
static int cli_zero_size_given(const cli_options *o) {
    const unsigned g = o->sizes_given;
    return (g & CLI_SIZE_BATCH && !o->batch) || (g & CLI_SIZE_HEADS && !o->heads) ||
           (g & CLI_SIZE_SEQ_Q && !o->seq_q) || (g & CLI_SIZE_SEQ_KV && !o->seq_kv);
}

/* The mask options of run and bench, together. */
static int check_mask_options(const cli_options *o, char *err, size_t errlen) {
    if (o->n_segments_kv && !o->n_segments)
        return usage_error(err, errlen, "--segments-kv goes with --segments (the queries' lengths)");
    if (o->n_segments_kv && o->n_segments_kv != o->n_segments)
        return usage_error(err, errlen, "--segments-kv: %d lengths, --segments has %d: give one per segment",
                           o->n_segments_kv, o->n_segments);
    return CLI_EXIT_OK;
}

static int check_combination(const cli_options *o, char *err, size_t errlen) {
    if ((o->command == CLI_CMD_RUN || o->command == CLI_CMD_BENCH) && check_mask_options(o, err, errlen))
        return CLI_EXIT_USAGE;
    switch (o->command) {
    case CLI_CMD_RUN: {
        int files = !!o->q_path + !!o->k_path + !!o->v_path;
        if (files != 0 && files != 3) return usage_error(err, errlen, "--q, --k and --v go together (give all three)");
        if (o->n_threads > 1) return usage_error(err, errlen, "--threads: run takes one thread count");
        if (o->out_path && o->lse_path && strcmp(o->out_path, o->lse_path) == 0)
            return usage_error(err, errlen, "--out and --lse name the same file");
        if (!o->parallel && (o->n_shards || o->replicate_kv))
            return usage_error(err, errlen, "%s goes with --parallel", o->n_shards ? "--shards" : "--replicate-kv");
        if (o->parallel && (files || o->out_path || o->lse_path))
            return usage_error(err, errlen, "--parallel runs on synthetic inputs (no --q, --k, --v, --out, --lse)");
        if (o->parallel && (o->n_kv_len || o->key_mask_path))
            return usage_error(err, errlen, "--parallel has no key padding (no --kv-len, --key-mask)");
        if (o->parallel && (cli_has_mask(o) || o->kv_heads))
            return usage_error(err, errlen,
                               "--parallel has no masks nor grouped-query heads (no --kv-heads, --causal, --blocks, "
                               "--segments, --key-bias)");
        if (o->parallel && cli_zero_size_given(o))
            return usage_error(err, errlen, "--parallel: sizes must be >= 1 (no zero-size problem)");
        if (o->backward && (files || o->out_path || o->lse_path || o->parallel || o->n_kv_len || o->key_mask_path))
            return usage_error(err, errlen,
                               "--backward runs on synthetic inputs (no --q, --k, --v, --out, --lse, --parallel, "
                               "--kv-len, --key-mask)");
        return CLI_EXIT_OK;
    }
    case CLI_CMD_COMPARE:
        if (o->n_operands != 2) return usage_error(err, errlen, "compare takes two .npy files: compare A.npy B.npy");
        return CLI_EXIT_OK;
    case CLI_CMD_GEN:
        if (!o->ndim) return usage_error(err, errlen, "gen: --shape is required (e.g. --shape 24,1536,128)");
        if (!o->out_path) return usage_error(err, errlen, "gen: --out is required");
        return CLI_EXIT_OK;
    default: return CLI_EXIT_OK;
    }
}

int jattn_cli_parse(int argc, char **argv, cli_options *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->backend = JATTN_BACKEND_AUTO;
    o->precision = JATTN_PRECISION_F32;
    o->seed = CLI_DEFAULT_SEED;
    o->check = 1;
    if (err && errlen) err[0] = '\0';
    char buf[48];
    if (argc < 2 || !argv || !argv[1])
        return usage_error(err, errlen, "missing command (run, bench, compare, gen, backends; see 'jattn --help')");
    if (parse_command(argv[1], &o->command) != 0)
        return usage_error(err, errlen, "unknown command '%s' (see 'jattn --help')", shown(argv[1], buf, sizeof buf));
    if (o->command == CLI_CMD_HELP || o->command == CLI_CMD_VERSION) {
        if (argc > 2)
            return usage_error(err, errlen, "unexpected argument '%s' after '%s'", shown(argv[2], buf, sizeof buf),
                               argv[1]);
        return CLI_EXIT_OK;
    }
    const cli_command cmd = o->command;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (!arg) break;
        if (arg[0] != '-' || arg[1] == '\0') {
            if (cmd == CLI_CMD_COMPARE && o->n_operands < 2) {
                o->operand[o->n_operands++] = arg;
                continue;
            }
            return usage_error(err, errlen, "unexpected argument '%s' (see 'jattn --help')",
                               shown(arg, buf, sizeof buf));
        }
        /* --name or --name=value */
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const option_spec *spec = NULL;
        for (size_t j = 0; j < sizeof options / sizeof options[0]; j++)
            if (strlen(options[j].name) == name_len && strncmp(arg, options[j].name, name_len) == 0) spec = &options[j];
        if (!spec) {
            char name[48];
            snprintf(name, sizeof name, "%.*s", (int)(name_len < 40 ? name_len : 40), arg);
            return usage_error(err, errlen, "unknown option '%s' (see 'jattn --help')", shown(name, buf, sizeof buf));
        }
        if (!(spec->commands & (1u << cmd)))
            return usage_error(err, errlen, "%s is not an option of '%s'", spec->name, command_names[cmd]);
        const char *value = NULL;
        if (spec->takes_value == VALUE_REQUIRED) {
            if (eq) {
                value = eq + 1;
            } else if (i + 1 < argc && argv[i + 1] && strncmp(argv[i + 1], "--", 2) != 0) {
                value = argv[++i];
            } else {
                return usage_error(err, errlen, "%s: missing value", spec->name);
            }
            if (value[0] == '\0') return usage_error(err, errlen, "%s: empty value", spec->name);
        } else if (spec->takes_value == VALUE_OPTIONAL) {
            if (eq) {
                value = eq + 1;
                if (value[0] == '\0') return usage_error(err, errlen, "%s=: empty value", spec->name);
            }
        } else if (eq) {
            return usage_error(err, errlen, "%s takes no value", spec->name);
        }
        if (apply_option(o, spec->id, spec->name, value, err, errlen) != 0) return CLI_EXIT_USAGE;
        if (o->command == CLI_CMD_HELP) return CLI_EXIT_OK;
    }
    return check_combination(o, err, errlen);
}

int cli_has_mask(const cli_options *o) { return o->causal || o->blocks || o->n_segments || o->key_bias; }

static int64_t sum_lengths(const int64_t *lengths, int n) {
    int64_t sum = 0; /* each <= CLI_MAX_SEGMENT_LEN, at most CLI_MAX_SEGMENTS of them: no overflow */
    for (int i = 0; i < n; i++) sum += lengths[i];
    return sum;
}

void cli_sizes(const cli_options *o, int64_t seq_default, int64_t sizes[5]) {
    const unsigned g = o->sizes_given;
    sizes[0] = g & CLI_SIZE_BATCH ? o->batch : CLI_DEFAULT_BATCH;
    sizes[1] = g & CLI_SIZE_HEADS ? o->heads : CLI_DEFAULT_HEADS;
    sizes[2] = g & CLI_SIZE_SEQ_Q ? o->seq_q : o->n_segments ? sum_lengths(o->segments, o->n_segments) : seq_default;
    sizes[3] = g & CLI_SIZE_SEQ_KV ? o->seq_kv
               : o->n_segments_kv  ? sum_lengths(o->segments_kv, o->n_segments_kv)
                                   : sizes[2];
    sizes[4] = g & CLI_SIZE_DIM ? o->dim : CLI_DEFAULT_DIM;
}
