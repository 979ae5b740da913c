/* `jattn run --parallel` when jattn is built without MPI. */
#include "cli_commands.h"

int cli_run_parallel(const cli_options *o) {
    (void)o;
    return cli_error(CLI_EXIT_FAILURE, "--parallel: this jattn was built without MPI (install an MPI, e.g. Debian's "
                                       "libopenmpi-dev and openmpi-bin, and configure again)");
}
