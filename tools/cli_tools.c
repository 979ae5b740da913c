/* `jattn compare A B` (an output against a reference, under the parity gate) and
 * `jattn gen` (a standard-normal float32 .npy): small tools for scripts and tests that have
 * no numpy. */
#include <stdlib.h>
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"

enum { ERRLEN = 512 };

int cli_compare(const cli_options *o) {
    npy_array a[2];
    memset(a, 0, sizeof a);
    char why[ERRLEN];
    int rc = CLI_EXIT_OK;
    for (int i = 0; i < 2; i++) {
        npy_status st = npy_read_f32(o->operand[i], &a[i], why, sizeof why);
        if (st != NPY_OK) {
            rc = cli_error(st == NPY_ERR_NOMEM ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE, "compare %s: %s", o->operand[i],
                           why);
            goto done;
        }
    }
    if (a[0].ndim != a[1].ndim || memcmp(a[0].shape, a[1].shape, (size_t)a[0].ndim * sizeof a[0].shape[0]) != 0) {
        char s0[NPY_MAX_DIMS * 22 + 4], s1[NPY_MAX_DIMS * 22 + 4];
        npy_format_shape(a[0].shape, a[0].ndim, s0, sizeof s0);
        npy_format_shape(a[1].shape, a[1].ndim, s1, sizeof s1);
        rc = cli_error(CLI_EXIT_USAGE, "compare: shapes differ: %s is %s, %s is %s", o->operand[0], s0, o->operand[1],
                       s1);
        goto done;
    }
    jattn_metrics m;
    jattn_metrics_compute_dense(a[0].data, a[1].data, a[0].count, &m);
    int pass = jattn_metrics_pass(&m, o->precision);
    const char *prec = kit_precision_name(o->precision);
    if (o->json) {
        kit_json j;
        kit_json_begin(&j, stdout);
        kit_json_str(&j, "command", "compare");
        kit_json_int(&j, "count", a[0].count);
        kit_json_str(&j, "precision", prec);
        kit_json_num(&j, "max_abs", m.max_abs);
        kit_json_num(&j, "rel_l2", m.rel_l2);
        kit_json_num(&j, "cos", m.cos);
        kit_json_num(&j, "max_ref", m.max_ref);
        kit_json_int(&j, "nonfinite", m.nonfinite);
        kit_json_bool(&j, "pass", pass);
        kit_json_end(&j);
    } else {
        printf("max_abs %.3g  rel_l2 %.3g  cos %.9g  over %lld elements (max|B| %.3g", m.max_abs, m.rel_l2, m.cos,
               (long long)a[0].count, m.max_ref);
        if (m.nonfinite) printf(", %lld non-finite in A where B is finite", (long long)m.nonfinite);
        printf("): %s (%s gate)\n", pass ? "PASS" : "FAIL", prec);
    }
    if (!pass) {
        fflush(stdout);
        rc = cli_error(CLI_EXIT_FAILURE, "compare: %s is outside the %s gate against %s", o->operand[0], prec,
                       o->operand[1]);
    }
done:
    npy_free(&a[0]);
    npy_free(&a[1]);
    return rc;
}

int cli_gen(const cli_options *o) {
    int64_t count = 1;
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] && count > INT64_MAX / 4 / o->shape[d])
            return cli_error(CLI_EXIT_USAGE, "--shape: too many elements");
        count *= o->shape[d];
    }
    char why[ERRLEN];
    if (cli_memory_fits((double)count * sizeof(float), "--shape", why, sizeof why) != 0)
        return cli_error(CLI_EXIT_FAILURE, "%s", why);
    float *x = kit_alloc_floats(count);
    if (!x) return cli_error(CLI_EXIT_FAILURE, "--shape: out of memory for %lld elements", (long long)count);
    jattn_rng_fill_normal(x, count, o->seed, 0);
    int rc = CLI_EXIT_OK;
    if (npy_write_f32(o->out_path, o->shape, o->ndim, x, why, sizeof why) != NPY_OK)
        rc = cli_error(CLI_EXIT_FAILURE, "--out %s: %s", o->out_path, why);
    free(x);
    return rc;
}
