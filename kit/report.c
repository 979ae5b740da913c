/* Shared pieces of the measurement reports; see report.h. */
#include "report.h"

#include <stdio.h>

const char *kit_precision_name(jattn_precision precision) { return precision == JATTN_PRECISION_TF32 ? "tf32" : "f32"; }

void kit_json_selection(kit_json *j, const jattn_selection *sel) {
    kit_json_str(j, "backend", sel->backend_name);
    kit_json_str(j, "kernel", sel->kernel);
    kit_json_str(j, "isa", sel->isa);
    kit_json_int(j, "threads", sel->threads);
}

void kit_json_problem(kit_json *j, const jattn_problem *p, jattn_precision precision) {
    kit_json_int(j, "batch", p->batch);
    kit_json_int(j, "heads", p->heads);
    kit_json_int(j, "seq_q", p->seq_q);
    kit_json_int(j, "seq_kv", p->seq_kv);
    kit_json_int(j, "dim", p->head_dim);
    kit_json_str(j, "precision", kit_precision_name(precision));
}

void kit_json_timing(kit_json *j, const kit_timing *t, const char *clock, double gflops) {
    kit_json_num(j, "ms", t->ms);
    kit_json_num(j, "ms_min", t->ms_min);
    kit_json_num(j, "ms_max", t->ms_max);
    kit_json_int(j, "reps", t->reps);
    kit_json_str(j, "timing", clock);
    kit_json_num(j, "gflops", gflops);
}

void kit_json_parity(kit_json *j, const kit_reference *ref, const kit_parity *par) {
    if (!par) {
        kit_json_str(j, "check", "off");
        return;
    }
    kit_json_str(j, "check", ref->stride == 1 ? "full" : "sampled");
    kit_json_int(j, "check_stride", ref->stride);
    kit_json_num(j, "max_abs", par->m.max_abs);
    kit_json_num(j, "rel_l2", par->m.rel_l2);
    kit_json_num(j, "cos", par->m.cos);
    if (par->lse_checked) kit_json_bool(j, "lse_pass", par->lse_pass);
    kit_json_bool(j, "pass", par->pass && (!par->lse_checked || par->lse_pass));
}

void kit_print_parity(const kit_reference *ref, const kit_parity *par, const jattn_problem *p,
                      jattn_precision precision, const char *what) {
    printf("parity   max_abs %.3g  rel_l2 %.3g  cos %.9g  vs the float64 reference%s", par->m.max_abs, par->m.rel_l2,
           par->m.cos, what);
    if (ref->stride == 1)
        printf(", all %lld query rows", (long long)p->seq_q);
    else
        printf(", sampled: 1 query row in %lld (%lld of %lld per head)", (long long)ref->stride, (long long)ref->rows,
               (long long)p->seq_q);
    printf(": %s (%s gate)", par->pass ? "PASS" : "FAIL", kit_precision_name(precision));
}
