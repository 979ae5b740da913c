/* Pieces the jattn subcommands share that are the command's own: synthetic inputs, the memory
 * check before allocating, the mapping of library statuses to exit codes. Clocks, medians, the
 * timing loop, the sampled reference and the JSON writer are the measurement kit's (kit/). */
#ifndef JATTN_CLI_COMMON_H
#define JATTN_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jattn.h"
#include "json.h"
#include "metrics.h"
#include "reference.h"
#include "report.h"
#include "tensor.h"
#include "timing.h"
#include "clock.h"
#include "rng.h"

/* Whether `bytes` of buffers fit in this machine's physical memory: checked before allocating,
 * since with memory overcommit an allocation far larger than memory may succeed and then
 * thrash when touched. @return 0 (fits, or memory size unknown), or -1 with a one-line
 * "out of memory: ..." in err. */
int cli_memory_fits(double bytes, const char *what, char *err, size_t errlen);

/* Exit code for a failing library status: 2 for an invalid problem or an unsupported
 * combination the user asked for, 1 for runtime failures (backend unavailable, out of
 * memory, CUDA errors). */
int cli_exit_for_status(jattn_status st);

#endif
