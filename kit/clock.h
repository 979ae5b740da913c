/* Clocks and medians of the measurement kit: what every timing loop of the command, the
 * benchmarks and the peers reads. */
#ifndef JATTN_KIT_CLOCK_H
#define JATTN_KIT_CLOCK_H

#include <stddef.h>

/* Monotonic clock in seconds. */
double kit_now(void);

/* Sorts n values in place, ascending (percentiles, the best and worst of a run). */
void kit_sort(double *v, int n);

/* Median of n values (sorts them in place); NaN when n <= 0. */
double kit_median(double *v, int n);

/* "0.12 0.10 0.05" from /proc/loadavg, or "unknown": benchmarks record how loaded the machine was. */
void kit_load_average(char *buf, size_t cap);

#endif
