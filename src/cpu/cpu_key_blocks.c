/* The attended keys of one batch, walked in blocks (cpu_kernels.h, cpu_key_blocks): the key
 * padding of a call (jattn_key_padding) turned into the blocks a task runs. Without a mask a
 * block is a run of consecutive rows below kv_len (or Skv); with one, the next attended rows
 * in ascending order, which the task packs when they are not consecutive. */
#include "cpu_kernels.h"

void cpu_key_blocks_init(cpu_key_blocks *kb, const cpu_flash_args *a, int64_t b) {
    kb->mask = a->mask ? a->mask + b * a->mask_stride : NULL;
    kb->end = a->kv_len ? a->kv_len[b] : a->Skv;
    kb->next = 0;
}

int cpu_key_blocks_next(cpu_key_blocks *kb, int max, int64_t *rows) {
    int n = 0;
    int64_t j = kb->next;
    if (!kb->mask) {
        for (; n < max && j < kb->end; j++) rows[n++] = j;
    } else {
        for (; n < max && j < kb->end; j++)
            if (kb->mask[j]) rows[n++] = j;
    }
    kb->next = j;
    return n;
}
