/* See sp_error.h. */
#include "sp_error.h"

#include <stdarg.h>
#include <stdio.h>

jattn_status sp_fail(jattn_status status, const char *fmt, ...) {
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return jattn_set_last_error(status, message);
}
