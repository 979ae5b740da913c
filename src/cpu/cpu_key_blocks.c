/* The attended keys of one query block, walked in blocks (cpu_kernels.h, cpu_key_blocks): the
 * mask of a call (jattn_mask) turned into the blocks a task runs. List mode (at most key
 * padding): a block is a run of consecutive rows below kv_len (or Skv), or with a key mask the next
 * attended rows in ascending order, which the task packs when they are not consecutive. Grid mode
 * (windows or a key bias): a block is the attended keys of one cell of BK keys of the query block's
 * key range [ilo, ihi), the windows read from src/mask.c (jattn_call_key_window). */
#include "../backend.h"
#include "cpu_kernels.h"

void cpu_key_blocks_init(cpu_key_blocks *kb, const cpu_flash_args *a, int64_t b) {
    kb->mask = a->mask ? a->mask + b * a->mask_stride : NULL;
    kb->bias = NULL;
    kb->end = a->kv_len ? a->kv_len[b] : a->Skv;
    kb->next = 0;
    kb->grid = 0;
    kb->cell = 0;
}

void cpu_key_blocks_init_grid(cpu_key_blocks *kb, const cpu_flash_args *a, int64_t b, int64_t h, int64_t from,
                              int64_t to, int64_t cell) {
    kb->mask = a->mask ? a->mask + b * a->mask_stride : NULL;
    kb->bias = cpu_bias_row(a, b, h);
    const int64_t end = a->kv_len ? a->kv_len[b] : a->Skv;
    kb->end = to < end ? to : end;
    kb->next = from;
    kb->grid = 1;
    kb->cell = cell;
}

int cpu_key_blocks_next(cpu_key_blocks *kb, int max, int64_t *rows) {
    int n = 0;
    int64_t j = kb->next;
    if (kb->grid) { /* the listed keys of the next cell that has any */
        for (; n == 0 && j < kb->end; j = kb->next) {
            const int64_t stop = j + kb->cell < kb->end ? j + kb->cell : kb->end;
            kb->next = j + kb->cell;
            if (!kb->mask && !kb->bias)
                for (; j < stop; j++) rows[n++] = j;
            else
                for (; j < stop; j++)
                    if ((!kb->mask || kb->mask[j]) && !(kb->bias && kb->bias[j] == -INFINITY)) rows[n++] = j;
        }
        (void)max; /* a cell holds at most cell <= max keys */
        return n;
    }
    if (!kb->mask) {
        for (; n < max && j < kb->end; j++) rows[n++] = j;
    } else {
        for (; n < max && j < kb->end; j++)
            if (kb->mask[j]) rows[n++] = j;
    }
    kb->next = j;
    return n;
}

void cpu_query_windows(const cpu_flash_args *a, int64_t b, int64_t q0, int nq, int64_t *lane_hi, int64_t *ilo,
                       int64_t *ihi) {
    int64_t base = -1, top = 0;
    for (int i = 0; i < nq; i++) {
        int64_t lo, hi;
        jattn_call_key_window(a->call, b, q0 + i, &lo, &hi);
        if (lo < hi) {
            if (base < 0) base = lo; /* every row with a key shares it (the block is in one segment) */
            if (hi > top) top = hi;
            lane_hi[i] = hi;
        } else
            lane_hi[i] = -1; /* no key: below ilo, resolved below */
    }
    if (base < 0) base = top = 0;
    for (int i = 0; i < nq; i++)
        if (lane_hi[i] < 0) lane_hi[i] = base;
    *ilo = base;
    *ihi = top;
}
