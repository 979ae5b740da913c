/* The two sequence-parallel algorithms (jattn_parallel.h): each adds its workspace regions and
 * local attention calls to a plan (sp_plan_make calls it), then runs on that plan (sp_api.c). */
#ifndef JATTN_SP_ALGORITHMS_H
#define JATTN_SP_ALGORITHMS_H

#include "sp_blocks.h"

jattn_status sp_ulysses_plan(sp_plan *pl);
jattn_status sp_ulysses_run(const sp_plan *pl, const sp_run *run);
jattn_status sp_ring_plan(sp_plan *pl);
jattn_status sp_ring_run(const sp_plan *pl, const sp_run *run);

#endif
