/* The jattn subcommands. Each takes parsed options, prints its report on stdout and at most
 * one error line ("jattn: ...") on stderr, and returns the exit code (cli_args.h). */
#ifndef JATTN_CLI_COMMANDS_H
#define JATTN_CLI_COMMANDS_H

#include "cli_args.h"

int cli_run(const cli_options *o);     /* cli_run.c */
int cli_bench(const cli_options *o);   /* cli_bench.c */
int cli_compare(const cli_options *o); /* cli_tools.c */
int cli_gen(const cli_options *o);     /* cli_tools.c */
int cli_run_parallel(const cli_options *o);
int cli_run_backward(const cli_options *o); /* run --backward: cli_backward.c */
int cli_bench_backward(const cli_options *o);
/* bench --backward: cli_backward.c */ /* run --parallel: cli_parallel.c (MPI) or cli_parallel_unavailable.c */

/* Prints "jattn: <message>\n" on stderr. @return code. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
