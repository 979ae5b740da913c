/* Fuzz harness: the jattn command's argument parser (jattn_cli_parse, tools/cli_args.h).
 *
 * The input is split at NUL bytes into up to MAX_ARGS arguments after argv[0] = "jattn"; each
 * argument is a separate exact-size allocation, so reading past one trips the sanitizers.
 * Properties: the parser returns CLI_EXIT_OK or CLI_EXIT_USAGE; on USAGE the message is one
 * non-empty line within the buffer; on OK the options are within their documented bounds (the
 * masks' and grouped-query heads' included, and the sizes cli_sizes derives from them) and every
 * path points into argv. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"

#define MAX_ARGS 24

#define REQUIRE(cond)                                                                           \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz_cli_args: property broken: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

static int points_into(const char *p, char **argv, int argc) {
    if (!p) return 1;
    for (int i = 0; i < argc; i++)
        if (p >= argv[i] && p <= argv[i] + strlen(argv[i])) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    static char prog[] = "jattn";
    argv[argc++] = prog;
    size_t start = 0;
    while (start <= size && argc < MAX_ARGS + 1) {
        const uint8_t *end = memchr(data + start, '\0', size - start);
        size_t len = end ? (size_t)(end - (data + start)) : size - start;
        if (!end && len == 0 && argc > 1) break;
        char *arg = malloc(len + 1);
        if (!arg) break;
        memcpy(arg, data + start, len);
        arg[len] = '\0';
        argv[argc++] = arg;
        start += len + 1;
        if (!end) break;
    }
    argv[argc] = NULL;

    cli_options o;
    char err[200];
    memset(err, 'x', sizeof err);
    int rc = jattn_cli_parse(argc, argv, &o, err, sizeof err);
    REQUIRE(rc == CLI_EXIT_OK || rc == CLI_EXIT_USAGE);
    if (rc == CLI_EXIT_USAGE) {
        REQUIRE(memchr(err, '\0', sizeof err) != NULL);
        REQUIRE(err[0] != '\0' && strchr(err, '\n') == NULL);
    } else {
        REQUIRE((int)o.command >= CLI_CMD_HELP && (int)o.command <= CLI_CMD_BACKENDS);
        REQUIRE((int)o.backend >= 0 && (int)o.backend < JATTN_BACKEND_COUNT);
        REQUIRE((int)o.precision >= 0 && (int)o.precision <= JATTN_PRECISION_TF32);
        REQUIRE(o.n_threads >= 0 && o.n_threads <= CLI_MAX_THREAD_COUNTS);
        for (int i = 0; i < o.n_threads; i++) REQUIRE(o.threads[i] >= 0 && o.threads[i] <= CLI_MAX_THREADS);
        REQUIRE(o.batch >= 0 && o.heads >= 0 && o.seq_q >= 0 && o.seq_kv >= 0 && o.dim >= 0);
        REQUIRE((o.sizes_given & ~31u) == 0 && (!(o.sizes_given & CLI_SIZE_DIM) || o.dim >= 1));
        REQUIRE(o.kv_heads >= 0);
        REQUIRE((int)o.causal >= JATTN_CAUSAL_NONE && (int)o.causal <= JATTN_CAUSAL_BOTTOM_RIGHT);
        REQUIRE(o.blocks >= 0 && o.blocks <= CLI_MAX_BLOCKS);
        REQUIRE(o.n_segments >= 0 && o.n_segments <= CLI_MAX_SEGMENTS);
        REQUIRE(o.n_segments_kv == 0 || o.n_segments_kv == o.n_segments || o.command == CLI_CMD_HELP);
        for (int i = 0; i < o.n_segments; i++) REQUIRE(o.segments[i] >= 0 && o.segments[i] <= CLI_MAX_SEGMENT_LEN);
        for (int i = 0; i < o.n_segments_kv; i++)
            REQUIRE(o.segments_kv[i] >= 0 && o.segments_kv[i] <= CLI_MAX_SEGMENT_LEN);
        REQUIRE((int)o.key_bias >= CLI_KEY_BIAS_NONE && (int)o.key_bias <= CLI_KEY_BIAS_SHARED);
        /* the sizes the commands compute from them: within int64, never negative */
        int64_t sizes[5];
        cli_sizes(&o, CLI_DEFAULT_SEQ, sizes);
        for (int i = 0; i < 5; i++) REQUIRE(sizes[i] >= 0);
        REQUIRE(!o.parallel || o.command != CLI_CMD_RUN || (!cli_has_mask(&o) && !o.kv_heads));
        REQUIRE(o.reps >= 0 && o.reps <= CLI_MAX_REPS);
        REQUIRE(!(o.scale < 0) && o.scale == o.scale);
        REQUIRE(o.n_operands >= 0 && o.n_operands <= 2);
        REQUIRE(o.ndim >= 0 && o.ndim <= NPY_MAX_DIMS);
        REQUIRE(o.parallel >= 0 && o.parallel <= 3);
        REQUIRE(o.n_shards >= 0 && o.n_shards <= CLI_MAX_SHARDS);
        for (int i = 0; i < o.n_shards; i++) REQUIRE(o.shards[i] >= 1);
        REQUIRE(o.command != CLI_CMD_RUN || o.parallel || (!o.n_shards && !o.replicate_kv));
        const char *paths[] = {o.q_path, o.k_path, o.v_path, o.out_path, o.lse_path};
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) REQUIRE(points_into(paths[i], argv, argc));
        for (int i = 0; i < o.n_operands; i++) REQUIRE(points_into(o.operand[i], argv, argc));
    }
    for (int i = 1; i < argc; i++) free(argv[i]);
    return 0;
}
