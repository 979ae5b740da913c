/* The mask of a call as include/jattn.h defines it, read by the tests from that text (not from
 * src/mask.c, so that no test shares the library's window code): which keys a query row attends
 * and the key bias it adds. Dense and by linear search: for float64 references and checks. */
#ifndef JATTN_TEST_MASK_RULE_H
#define JATTN_TEST_MASK_RULE_H

#include <stdint.h>

#include "jattn.h"

/* Whether batch b attends key j under the key padding kp (kv_len, then the key mask); NULL: yes. */
int jt_padding_attends(const jattn_key_padding *kp, int64_t b, int64_t j);

/* The key bias of (b, h) at key j: 0 without a mask or a bias. */
double jt_key_bias(const jattn_mask *m, int64_t b, int64_t h, int64_t j);

/* Whether query row i of (b, h) attends key j: the key padding, the segment of i (its own keys,
 * positions counted from the segment's start), causal in either alignment, the block-causal
 * blocks, and a -inf key bias. m NULL: every key. */
int jt_mask_attends(const jattn_mask *m, const jattn_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

#endif
