/* Shared pieces of the jattn subcommands; see cli_common.h. */
#include "cli_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_commands.h"

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("jattn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_memory_fits(double bytes, const char *what, char *err, size_t errlen) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes > (double)pages * (double)page) {
        snprintf(err, errlen, "out of memory: %s needs %.3g GB, this machine has %.3g GB", what, bytes / 1e9,
                 (double)pages * (double)page / 1e9);
        return -1;
    }
#else
    (void)bytes, (void)what, (void)err, (void)errlen;
#endif
    return 0;
}

int cli_exit_for_status(jattn_status st) {
    switch (st) {
    case JATTN_OK: return CLI_EXIT_OK;
    case JATTN_ERROR_NULL_POINTER:
    case JATTN_ERROR_INVALID_DIMENSION:
    case JATTN_ERROR_OVERFLOW:
    case JATTN_ERROR_INVALID_STRIDE:
    case JATTN_ERROR_SELF_OVERLAP:
    case JATTN_ERROR_ALIASING:
    case JATTN_ERROR_INVALID_SCALE:
    case JATTN_ERROR_INVALID_ARGUMENT:
    case JATTN_ERROR_UNSUPPORTED: return CLI_EXIT_USAGE;
    default: return CLI_EXIT_FAILURE;
    }
}
