/* The jattn command's arguments: one parse function filling an options struct, separate from
 * running anything, so that tests and fuzzers can call it on any argv. */
#ifndef JATTN_CLI_ARGS_H
#define JATTN_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "jattn_parallel.h"
#include "npy.h"

/* Exit codes of the command. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILURE = 1, /* runtime failure: backend failure, output not writable, parity FAIL */
    CLI_EXIT_USAGE = 2    /* bad usage or bad input */
};

typedef enum cli_command {
    CLI_CMD_HELP,
    CLI_CMD_VERSION,
    CLI_CMD_RUN,
    CLI_CMD_BENCH,
    CLI_CMD_COMPARE,
    CLI_CMD_GEN,
    CLI_CMD_BACKENDS
} cli_command;

#define CLI_MAX_THREAD_COUNTS 16
/* Upper bounds that keep a typo from asking for something absurd. */
#define CLI_MAX_THREADS 4096
#define CLI_MAX_REPS 100000
#define CLI_MAX_KV_LENS 256 /* --kv-len values: one, or one per batch up to this batch */
#define CLI_MAX_SHARDS 64
#define CLI_MAX_SEGMENTS 256                   /* --segments, --segments-kv: lengths */
#define CLI_MAX_SEGMENT_LEN (INT64_C(1) << 40) /* one segment's tokens (keeps their sum in int64) */
#define CLI_MAX_BLOCKS (INT64_C(1) << 20)      /* --blocks */

/* The FLUX.2 DiT attention of the default job: B=1, H=24, S=1536 (512 text + 1024 image
 * tokens at 512x512), D=128. */
#define CLI_DEFAULT_BATCH 1
#define CLI_DEFAULT_HEADS 24
#define CLI_DEFAULT_SEQ 1536
#define CLI_DEFAULT_DIM 128
#define CLI_DEFAULT_SEED 42

typedef struct cli_options {
    cli_command command;
    jattn_backend backend; /* default AUTO */
    int backend_given;
    jattn_precision precision;          /* default F32 */
    int threads[CLI_MAX_THREAD_COUNTS]; /* run: exactly one (default 0 = all cores); bench: a list */
    int n_threads;                      /* 0 when --threads was not given */
    /* Problem size; 0 = not given, unless its bit in sizes_given is set (batch, heads and the
     * sequences may be 0: a zero-size problem). cli_sizes() resolves them with the defaults. */
    int64_t batch, heads, seq_q, seq_kv, dim;
    unsigned sizes_given; /* CLI_SIZE_* bits of the size options given */
    float scale;          /* 0 = 1/sqrt(D) */
    uint64_t seed;
    int reps;  /* 0 = automatic */
    int check; /* run: 1 (default) or 0 with --no-check */
    int json;
    const char *q_path, *k_path, *v_path, *out_path, *lse_path;
    int64_t kv_len[CLI_MAX_KV_LENS]; /* run --kv-len: one length for every batch, or one per batch */
    int n_kv_len;                    /* 0 when --kv-len was not given */
    const char *key_mask_path;       /* run --key-mask: bool or uint8 .npy, [Skv] or [B, Skv] */
    const char *operand[2];          /* compare: A and B */
    int n_operands;
    int64_t shape[NPY_MAX_DIMS]; /* gen --shape */
    int ndim;
    /* run --parallel: the job spread over the ranks of mpirun (cli_parallel.c) */
    int parallel;                   /* 0 off; else 1 + the jattn_sp_algorithm */
    int64_t shards[CLI_MAX_SHARDS]; /* --shards: query tokens of each rank */
    int n_shards;
    int replicate_kv; /* --replicate-kv: k, v whole on every rank */
    int backward;     /* run, bench --backward: time and check jattn_backward */
    /* The mask and grouped-query heads of run and bench (cli_mask.h makes the jattn_mask). */
    int64_t kv_heads;                      /* --kv-heads: 0 = not given (each head its own) */
    jattn_causal causal;                   /* --causal[=top-left|bottom-right] */
    int64_t blocks;                        /* --blocks N: 0 = none */
    int64_t segments[CLI_MAX_SEGMENTS];    /* --segments: query (and key) lengths */
    int n_segments;                        /* 0 = none */
    int64_t segments_kv[CLI_MAX_SEGMENTS]; /* --segments-kv: key lengths (cross-attention) */
    int n_segments_kv;                     /* 0 = the keys' are the queries' */
    int key_bias;                          /* --key-bias: a cli_key_bias */
} cli_options;

/* Bits of cli_options.sizes_given. */
enum { CLI_SIZE_BATCH = 1, CLI_SIZE_HEADS = 2, CLI_SIZE_SEQ_Q = 4, CLI_SIZE_SEQ_KV = 8, CLI_SIZE_DIM = 16 };

/* --key-bias: none, or the rows of the random bias (cli_mask.h). */
typedef enum cli_key_bias {
    CLI_KEY_BIAS_NONE = 0,
    CLI_KEY_BIAS_BATCH,  /* [B, Skv]: one row per batch (--key-bias, --key-bias=batch) */
    CLI_KEY_BIAS_HEAD,   /* [B, H, Skv]: one row per batch and head (--key-bias=head) */
    CLI_KEY_BIAS_SHARED, /* [Skv]: one row for every batch and head (--key-bias=shared) */
} cli_key_bias;

/* The problem size the options ask for: B, H, Sq, Skv, D. A size given (0 included) is taken;
 * otherwise the default: B, H, D of the default job, Sq the sum of --segments when given, else
 * seq_default, and Skv the sum of --segments-kv when given, else Sq. */
void cli_sizes(const cli_options *o, int64_t seq_default, int64_t sizes[5]);

/* Whether the options ask for a mask beyond key padding (--causal, --blocks, --segments,
 * --key-bias). */
int cli_has_mask(const cli_options *o);

/* Parses argv (argv[0] is the program name). Never prints, exits or allocates; pointers in *o
 * point into argv. @return CLI_EXIT_OK with *o filled, or CLI_EXIT_USAGE with a one-line
 * reason in err (no "jattn:" prefix, no newline). */
int jattn_cli_parse(int argc, char **argv, cli_options *o, char *err, size_t errlen);

/* The usage text printed by `jattn --help`. */
extern const char jattn_cli_usage[];

/* Strict numbers: the whole string, decimal, within [lo, hi]. @return 0 or -1 (err set, the
 * option named). */
int cli_parse_int64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v, char *err, size_t errlen);

#endif
