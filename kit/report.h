/* The pieces of a measurement report that `jattn run` and `jattn run --parallel` (and any bench
 * that reports one call) share: the selection, the problem, the timing and the parity check, as
 * JSON fields (json.h) and as the text lines of the human-readable report. */
#ifndef JATTN_KIT_REPORT_H
#define JATTN_KIT_REPORT_H

#include "jattn.h"
#include "json.h"
#include "reference.h"
#include "timing.h"

/* "f32" or "tf32". */
const char *kit_precision_name(jattn_precision precision);

/* backend, kernel, isa, threads */
void kit_json_selection(kit_json *j, const jattn_selection *sel);

/* batch, heads, seq_q, seq_kv, dim, precision */
void kit_json_problem(kit_json *j, const jattn_problem *p, jattn_precision precision);

/* ms, ms_min, ms_max, reps, timing (clock: what was timed), gflops */
void kit_json_timing(kit_json *j, const kit_timing *t, const char *clock, double gflops);

/* check ("full", "sampled" or "off" when par is NULL), check_stride, max_abs, rel_l2, cos,
 * lse_pass (when lse was checked), pass (output and, when checked, lse). */
void kit_json_parity(kit_json *j, const kit_reference *ref, const kit_parity *par);

/* "parity   max_abs .. rel_l2 .. cos ..  vs the float64 reference<what>, <rows>: PASS (f32 gate)"
 * without the end of the line: the caller may add to it. */
void kit_print_parity(const kit_reference *ref, const kit_parity *par, const jattn_problem *p,
                      jattn_precision precision, const char *what);

#endif
