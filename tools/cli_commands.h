/* The jattn subcommands. Each takes parsed options, prints its report on stdout and at most
 * one error line ("jattn: ...") on stderr, and returns the exit code (cli_args.h). */
#ifndef JATTN_CLI_COMMANDS_H
#define JATTN_CLI_COMMANDS_H

#include "cli_args.h"

int cli_run(const cli_options *o);      /* cli_run.c */
int cli_bench(const cli_options *o);    /* cli_bench.c */
int cli_compare(const cli_options *o);  /* cli_tools.c */
int cli_gen(const cli_options *o);      /* cli_tools.c */
int cli_backends(const cli_options *o); /* cli_backends.c */
int cli_run_parallel(const cli_options *o);
int cli_run_backward(const cli_options *o); /* run --backward: cli_backward.c */
int cli_bench_backward(const cli_options *o);
/* bench --backward: cli_backward.c */ /* run --parallel: cli_parallel.c (MPI) or cli_parallel_unavailable.c */

/* The library's description of a backend (jattn_backend_info_at; cli_backends.c), and the two
 * facts the commands ask of it. Each call is a successful library call: it clears
 * jattn_last_error(), so read a failure's message before asking. @return 1 (and *info), or 0 for
 * AUTO or a value the library does not know (*info zeroed). */
int cli_backend_info(jattn_backend backend, jattn_backend_info *info);
int cli_backend_is_gpu(jattn_backend backend);    /* it computes on a GPU */
int cli_backend_on_device(jattn_backend backend); /* it computes from (CUDA) device memory */
/* The first backend, in auto's order, that computes on the CPU and (p not NULL) can run p under e
 * (e's backend aside); JATTN_BACKEND_AUTO when none. */
jattn_backend cli_first_cpu_backend(const jattn_problem *p, const jattn_exec *e);

/* Prints "jattn: <message>\n" on stderr (cli_common.c). @return code. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
