/* `jattn backends`: every backend of the library, in the order auto tries them, with what the
 * library says of each (jattn_backend_info_at) and whether it can run the default job here; and
 * the backend facts the other commands ask (which backends compute on a GPU, which from device
 * memory, AUTO's order). All come from the library: the command restates none of them. */
#include <string.h>

#include "cli_commands.h"
#include "cli_common.h"

int cli_backend_info(jattn_backend backend, jattn_backend_info *info) {
    for (int r = 0; r < jattn_backend_info_count(); r++)
        if (jattn_backend_info_at(r, info) == JATTN_OK && info->backend == backend) return 1;
    memset(info, 0, sizeof *info);
    return 0;
}

int cli_backend_is_gpu(jattn_backend backend) {
    jattn_backend_info info;
    return cli_backend_info(backend, &info) && info.is_gpu;
}

int cli_backend_on_device(jattn_backend backend) {
    jattn_backend_info info;
    return cli_backend_info(backend, &info) && info.memory == JATTN_MEMORY_DEVICE;
}

jattn_backend cli_first_cpu_backend(const jattn_problem *p, const jattn_exec *e) {
    for (int r = 0; r < jattn_backend_info_count(); r++) {
        jattn_backend_info info;
        if (jattn_backend_info_at(r, &info) != JATTN_OK || info.is_gpu) continue;
        if (!p) return info.backend;
        jattn_exec x = *e;
        x.backend = info.backend;
        jattn_selection sel;
        if (jattn_select(p, &x, &sel) == JATTN_OK) return info.backend;
    }
    return JATTN_BACKEND_AUTO;
}

int cli_backends(const cli_options *o) {
    const jattn_problem p =
        jattn_problem_flux(CLI_DEFAULT_BATCH, CLI_DEFAULT_HEADS, CLI_DEFAULT_SEQ, CLI_DEFAULT_SEQ, CLI_DEFAULT_DIM);
    if (!o->json) {
        printf("jattn %s: the backends in the order auto tries them; 'here': what each runs for the default job "
               "(B=%d H=%d S=%d D=%d, f32), or why it cannot\n",
               jattn_version_string(), CLI_DEFAULT_BATCH, CLI_DEFAULT_HEADS, CLI_DEFAULT_SEQ, CLI_DEFAULT_DIM);
        printf("%-4s  %-8s  %-7s  %-6s  %-8s  %s\n", "rank", "backend", "runs on", "memory", "backward", "here");
    }
    for (int r = 0; r < jattn_backend_info_count(); r++) {
        jattn_backend_info info;
        jattn_status st = jattn_backend_info_at(r, &info);
        if (st != JATTN_OK) return cli_error(CLI_EXIT_FAILURE, "backend %d: %s", r, jattn_last_error());
        jattn_exec e = {0};
        e.backend = info.backend;
        e.memory = info.memory;
        jattn_selection sel;
        st = jattn_select(&p, &e, &sel);
        const char *memory = info.memory == JATTN_MEMORY_DEVICE ? "device" : "host";
        if (o->json) {
            kit_json j;
            kit_json_begin(&j, stdout);
            kit_json_str(&j, "command", "backends");
            kit_json_str(&j, "backend", info.name);
            kit_json_int(&j, "auto_rank", info.auto_rank);
            kit_json_bool(&j, "is_gpu", info.is_gpu);
            kit_json_str(&j, "memory", memory);
            kit_json_bool(&j, "has_backward", info.has_backward);
            kit_json_bool(&j, "available", st == JATTN_OK);
            kit_json_str(&j, "kernel", st == JATTN_OK ? sel.kernel : NULL);
            kit_json_str(&j, "isa", st == JATTN_OK ? sel.isa : NULL);
            kit_json_str(&j, "reason", st == JATTN_OK ? NULL : jattn_last_error());
            kit_json_end(&j);
        } else {
            printf("%-4d  %-8s  %-7s  %-6s  %-8s  ", info.auto_rank, info.name, info.is_gpu ? "GPU" : "CPU", memory,
                   info.has_backward ? "yes" : "no");
            if (st == JATTN_OK)
                printf("%s (%s), %d thread%s\n", sel.kernel, sel.isa, sel.threads, sel.threads == 1 ? "" : "s");
            else
                printf("no: %s (%s)\n", jattn_last_error(), jattn_status_name(st));
        }
    }
    if (!o->json) {
        jattn_exec e = {0};
        jattn_selection sel;
        if (jattn_select(&p, &e, &sel) == JATTN_OK)
            printf("auto runs the default job on %s (host memory)\n", sel.backend_name);
        else
            printf("auto cannot run the default job here: %s\n", jattn_last_error());
    }
    return CLI_EXIT_OK;
}
