/* One JSON object on one line: the reports of the command (--json) and of the benchmarks. */
#ifndef JATTN_KIT_JSON_H
#define JATTN_KIT_JSON_H

#include <stdio.h>

typedef struct kit_json {
    FILE *f;
    int fields;
} kit_json;

void kit_json_begin(kit_json *j, FILE *f);
void kit_json_str(kit_json *j, const char *key, const char *value); /* NULL -> null */
void kit_json_int(kit_json *j, const char *key, long long value);
void kit_json_num(kit_json *j, const char *key, double value); /* non-finite -> null */
void kit_json_bool(kit_json *j, const char *key, int value);
void kit_json_null(kit_json *j, const char *key);
void kit_json_end(kit_json *j); /* "}\n" */

#endif
