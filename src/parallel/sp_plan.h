/* A rank's plan of a sequence-parallel call: its arguments validated (everything this rank
 * can check alone), the algorithm resolved, its shard and head group, the local attention
 * calls selected, and the workspace laid out in regions. Plans are pure: no communication, no
 * allocation. */
#ifndef JATTN_SP_PLAN_H
#define JATTN_SP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "jattn_parallel.h"
#include "sp_blocks.h"

/* The algorithm AUTO resolves to (jattn.h). */
jattn_sp_algorithm sp_auto_algorithm(int64_t heads, int ranks, int kv_replicated);
const char *sp_algorithm_name(jattn_sp_algorithm a);

/* Validates this rank's arguments and makes its plan: `rank` and `size` are the
 * communicator's, `memory` the memory its transport moves. @return JATTN_OK, or the status of
 * the first problem found (message set). */
jattn_status sp_plan_make(sp_plan *pl, const jattn_sp_problem *sp, const jattn_exec *exec, int rank, int size,
                          jattn_memory memory, int64_t max_message);

/* Total workspace bytes the caller provides: the layout, the local workspace, alignment slack. */
size_t sp_plan_workspace_bytes(const sp_plan *pl);

/* The pointers of a call: non-NULL, aligned, and neither output overlapping an input or the
 * other. @return JATTN_OK or the failing status (message set). */
jattn_status sp_plan_check_pointers(const sp_plan *pl, const void *q, const void *k, const void *v, const void *out,
                                    const float *lse);

#endif
