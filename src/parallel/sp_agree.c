/* See sp_agree.h. */
#include "sp_agree.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sp_error.h"

#define SP_DESCRIPTOR_MAGIC (0x4a530000u + (uint32_t)JATTN_VERSION_NUMBER) /* "JS" + version */

static uint64_t hash_shards(const int64_t *shards, int ranks) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int r = 0; r < ranks; r++) {
        uint64_t x = (uint64_t)shards[r];
        for (int i = 0; i < 8; i++, x >>= 8) h = (h ^ (x & 0xFF)) * 0x100000001B3ull;
    }
    return h;
}

void sp_describe(sp_descriptor *d, const jattn_sp_problem *sp, const jattn_exec *exec, jattn_status status,
                 const char *message) {
    memset(d, 0, sizeof *d);
    d->magic = SP_DESCRIPTOR_MAGIC;
    d->status = (int32_t)status;
    snprintf(d->message, sizeof d->message, "%s", status == JATTN_OK ? "" : message);
    if (!sp) return;
    const jattn_problem *w = &sp->whole;
    d->ranks = sp->ranks;
    d->algorithm = (int32_t)sp->algorithm;
    d->kv_replicated = sp->seq_kv_shards == NULL;
    d->dtype = (int32_t)w->dtype;
    d->batch = w->batch;
    d->heads = w->heads;
    d->seq_q = w->seq_q;
    d->seq_kv = w->seq_kv;
    d->head_dim = w->head_dim;
    memcpy(&d->scale_bits, &w->scale, sizeof d->scale_bits);
    if (exec) {
        d->precision = (int32_t)exec->precision;
        d->memory = (int32_t)exec->memory;
    }
    if (status == JATTN_OK) { /* the arrays were checked: ranks entries, not NULL */
        d->q_shards_hash = hash_shards(sp->seq_q_shards, sp->ranks);
        if (sp->seq_kv_shards) d->kv_shards_hash = hash_shards(sp->seq_kv_shards, sp->ranks);
    }
}

/* One field the ranks must agree on, printed as its value (or only named). */
typedef struct field {
    const char *label;
    size_t offset;
    int is64;        /* int64 (else int32 / uint32) */
    int value_shown; /* print the values: shapes and enums; hashes and bit patterns are only named */
} field;

#define FIELD32(member, label, shown) \
    { label, offsetof(sp_descriptor, member), 0, shown }
#define FIELD64(member, label, shown) \
    { label, offsetof(sp_descriptor, member), 1, shown }

static const field fields[] = {
    FIELD32(ranks, "problem.ranks", 1),
    FIELD32(algorithm, "problem.algorithm", 1),
    FIELD32(kv_replicated, "k, v replicated (problem.seq_kv_shards NULL)", 1),
    FIELD32(dtype, "problem.whole.dtype", 1),
    FIELD64(batch, "problem.whole.batch", 1),
    FIELD64(heads, "problem.whole.heads", 1),
    FIELD64(seq_q, "problem.whole.seq_q", 1),
    FIELD64(seq_kv, "problem.whole.seq_kv", 1),
    FIELD64(head_dim, "problem.whole.head_dim", 1),
    FIELD32(scale_bits, "problem.whole.scale", 0),
    FIELD32(precision, "exec.precision", 1),
    FIELD32(memory, "exec.memory", 1),
    FIELD64(q_shards_hash, "problem.seq_q_shards", 0),
    FIELD64(kv_shards_hash, "problem.seq_kv_shards", 0),
};

static long long field_value(const sp_descriptor *d, const field *f) {
    const char *p = (const char *)d + f->offset;
    if (f->is64) {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return (long long)v;
    }
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

jattn_status sp_agree(const sp_descriptor *all, int size) {
    for (int r = 0; r < size; r++)
        if (all[r].magic != SP_DESCRIPTOR_MAGIC)
            return sp_fail(JATTN_ERROR_INVALID_ARGUMENT,
                           "ranks disagree: rank %d runs another jattn library (descriptor 0x%08x, this one 0x%08x)", r,
                           (unsigned)all[r].magic, (unsigned)SP_DESCRIPTOR_MAGIC);
    for (int r = 0; r < size; r++)
        if (all[r].status != JATTN_OK) {
            char message[SP_MESSAGE_BYTES + 1];
            memcpy(message, all[r].message, SP_MESSAGE_BYTES);
            message[SP_MESSAGE_BYTES] = '\0';
            return sp_fail((jattn_status)all[r].status, "rank %d: %s", r, message);
        }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        for (int r = 1; r < size; r++) {
            const long long a = field_value(&all[0], &fields[i]), b = field_value(&all[r], &fields[i]);
            if (a == b) continue;
            if (fields[i].value_shown)
                return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "ranks disagree: %s is %lld on rank 0, %lld on rank %d",
                               fields[i].label, a, b, r);
            return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "ranks disagree: %s differs between rank 0 and rank %d",
                           fields[i].label, r);
        }
    return jattn_set_last_error(JATTN_OK, "");
}
