/* One-line JSON writer; see json.h. */
#include "json.h"

#include <math.h>

void kit_json_begin(kit_json *j, FILE *f) {
    j->f = f;
    j->fields = 0;
    fputc('{', f);
}

static void key(kit_json *j, const char *k) { fprintf(j->f, "%s\"%s\":", j->fields++ ? "," : "", k); }

void kit_json_str(kit_json *j, const char *k, const char *value) {
    key(j, k);
    if (!value) {
        fputs("null", j->f);
        return;
    }
    fputc('"', j->f);
    for (const unsigned char *s = (const unsigned char *)value; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(j->f, "\\%c", *s);
        else if (*s < 0x20)
            fprintf(j->f, "\\u%04x", *s);
        else
            fputc(*s, j->f);
    }
    fputc('"', j->f);
}

void kit_json_int(kit_json *j, const char *k, long long value) {
    key(j, k);
    fprintf(j->f, "%lld", value);
}

void kit_json_num(kit_json *j, const char *k, double value) {
    key(j, k);
    if (isfinite(value))
        fprintf(j->f, "%.9g", value);
    else
        fputs("null", j->f);
}

void kit_json_bool(kit_json *j, const char *k, int value) {
    key(j, k);
    fputs(value ? "true" : "false", j->f);
}

void kit_json_null(kit_json *j, const char *k) {
    key(j, k);
    fputs("null", j->f);
}

void kit_json_end(kit_json *j) { fputs("}\n", j->f); }
