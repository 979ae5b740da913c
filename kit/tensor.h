/* Sizes of a problem's tensors, written once for the command, the tests and the benchmarks. */
#ifndef JATTN_KIT_TENSOR_H
#define JATTN_KIT_TENSOR_H

#include <stdint.h>

#include "jattn.h"

/* FLOPs of one call: 4 * B * H * Sq * Skv * D (two matrix products of 2 FLOPs per term). */
double kit_flops(const jattn_problem *p);

/* The (query, key) pairs a masked call attends, summed over batches and heads: for each batch b,
 * head h and query row i, the keys of its window (segments, causal, blocks: jattn.h's rule) that
 * the key padding attends and whose key bias is not -inf. B * H * Sq * Skv for m NULL or a mask
 * that narrows nothing. The mask's arrays are read (host memory, valid for p: call it after the
 * library accepted the mask). O(B * H * (Sq log + Skv)). */
double kit_attended_pairs(const jattn_problem *p, const jattn_mask *m);

/* FLOPs of one masked call, counting only the work a mask leaves: 4 * D * kit_attended_pairs
 * (QK^T and PV, 2 FLOPs per term, per attended pair of each head); kit_flops(p) without a mask.
 * So a causal call at Sq = Skv counts about half the unmasked FLOPs, and its rate is comparable. */
double kit_flops_masked(const jattn_problem *p, const jattn_mask *m);

/* Elements of a contiguous tensor of the problem: B * H * seq * D. */
int64_t kit_elems(const jattn_problem *p, int64_t seq);

/* Elements a tensor of `seq` tokens described by strides s spans: 1 + its largest offset,
 * 1 + (B-1)*s.batch + (H-1)*s.head + (seq-1)*s.token + (D-1), for strides >= 0. */
int64_t kit_tensor_span(const jattn_problem *p, jattn_strides s, int64_t seq);

/* The key/value heads of a problem (kv_heads, 0 meaning heads), and the elements k or v spans. */
int64_t kit_kv_heads(const jattn_problem *p);
int64_t kit_kv_span(const jattn_problem *p, jattn_strides s);

/* 64-byte aligned allocation of n floats (NULL on failure or overflow); free with free(). */
float *kit_alloc_floats(int64_t n);

#endif
