/* The agreement between ranks before any data moves: each rank describes its call in a small
 * fixed-size descriptor (its shapes, the hashes of its shard arrays, its algorithm and the
 * status of its own validation, with that message); one all-gather hands every rank all of
 * them, and every rank decides the same status and message from the same bytes. */
#ifndef JATTN_SP_AGREE_H
#define JATTN_SP_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "jattn_parallel.h"

#define SP_MESSAGE_BYTES 192

typedef struct sp_descriptor {
    uint32_t magic; /* layout and library version: a rank linked to another jattn differs */
    int32_t status; /* of this rank's own validation */
    int32_t ranks, algorithm, kv_replicated, dtype, precision, memory;
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    uint32_t scale_bits;
    uint32_t reserved;
    uint64_t q_shards_hash, kv_shards_hash;
    char message[SP_MESSAGE_BYTES]; /* this rank's jattn_last_error() when status != OK */
} sp_descriptor;

/* Describes this rank's call; sp may be NULL (then status is not OK). `ranks` bounds the
 * shard arrays that are hashed (arrays are hashed only when status is OK). */
void sp_describe(sp_descriptor *d, const jattn_sp_problem *sp, const jattn_exec *exec, jattn_status status,
                 const char *message);

/* The decision every rank makes from all descriptors, in rank order: the status of the
 * lowest rank whose own validation failed ("rank r: <its message>"); else
 * JATTN_ERROR_INVALID_ARGUMENT naming the first field in which some rank differs from rank 0;
 * else JATTN_OK. @return the status, with the message set for jattn_last_error(). */
jattn_status sp_agree(const sp_descriptor *all, int size);

#endif
