/* Messages of the sequence-parallel layer: through jattn_set_last_error, so that
 * jattn_last_error() reports them like the library's own. */
#ifndef JATTN_SP_ERROR_H
#define JATTN_SP_ERROR_H

#include "jattn_parallel.h"

/* Formats the message (printf) for jattn_last_error(). @return status. */
jattn_status sp_fail(jattn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
