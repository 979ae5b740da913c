/* Which micro-kernel table runs: the widest instruction set this CPU supports (cpuid, via the
 * compiler's __builtin_cpu_supports, which also checks that the OS saves the registers), or
 * the one JATTN_CPU_ISA=avx512|avx2|neon|generic names. Read on every select (a getenv and a
 * few compares); the cpuid answer itself is cached by the compiler runtime. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define ISA_ENV "JATTN_CPU_ISA"

static int isa_supported(const cpu_kernels *k) {
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__)
    if (strcmp(k->isa, "avx512") == 0) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    if (strcmp(k->isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    if (strcmp(k->isa, "avx512") == 0 || strcmp(k->isa, "avx2") == 0) return 0;
#endif
#endif
    (void)k;
    return 1; /* neon is baseline where it is built; generic runs anywhere */
}

/* Tables built into this library, best first. */
static const cpu_kernels *const built[] = {
#if defined(JATTN_CPU_HAVE_AVX512)
    &cpu_kernels_avx512,
#endif
#if defined(JATTN_CPU_HAVE_AVX2)
    &cpu_kernels_avx2,
#endif
#if defined(JATTN_CPU_HAVE_NEON)
    &cpu_kernels_neon,
#endif
    &cpu_kernels_generic,
};
#define N_BUILT ((int)(sizeof built / sizeof built[0]))

int cpu_kernels_available(const cpu_kernels **out, int max) {
    int n = 0;
    for (int i = 0; i < N_BUILT && n < max; i++)
        if (isa_supported(built[i])) out[n++] = built[i];
    return n;
}

const cpu_kernels *cpu_kernels_select(const char **why) {
    const char *want = getenv(ISA_ENV);
    if (!want || !want[0]) {
        for (int i = 0; i < N_BUILT; i++)
            if (isa_supported(built[i])) return built[i];
        return &cpu_kernels_generic;
    }
    for (int i = 0; i < N_BUILT; i++)
        if (strcmp(want, built[i]->isa) == 0) {
            if (isa_supported(built[i])) return built[i];
            *why = ISA_ENV ": this CPU does not support the instruction set it names";
            return NULL;
        }
    if (strcmp(want, "avx512") == 0 || strcmp(want, "avx2") == 0 || strcmp(want, "neon") == 0)
        *why = ISA_ENV ": the instruction set it names is not built into this library (other architecture)";
    else
        *why = ISA_ENV ": not one of avx512, avx2, neon, generic";
    return NULL;
}
