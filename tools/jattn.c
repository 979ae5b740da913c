/* The jattn command: parse the arguments (cli_args.c), run the subcommand (cli_run.c,
 * cli_bench.c, cli_backward.c, cli_tools.c, cli_backends.c), and make sure stdout was really
 * written. */
#include <stdio.h>

#include "cli_commands.h"

int main(int argc, char **argv) {
    cli_options o;
    char err[512];
    int rc = jattn_cli_parse(argc, argv, &o, err, sizeof err);
    if (rc != CLI_EXIT_OK) return cli_error(rc, "%s", err);
    switch (o.command) {
    case CLI_CMD_HELP: fputs(jattn_cli_usage, stdout); break;
    case CLI_CMD_VERSION: printf("jattn %s (library %s)\n", JATTN_VERSION_STRING, jattn_version_string()); break;
    case CLI_CMD_RUN: rc = o.backward ? cli_run_backward(&o) : cli_run(&o); break;
    case CLI_CMD_BENCH: rc = o.backward ? cli_bench_backward(&o) : cli_bench(&o); break;
    case CLI_CMD_COMPARE: rc = cli_compare(&o); break;
    case CLI_CMD_GEN: rc = cli_gen(&o); break;
    case CLI_CMD_BACKENDS: rc = cli_backends(&o); break;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) return cli_error(CLI_EXIT_FAILURE, "cannot write to stdout");
    return rc;
}
