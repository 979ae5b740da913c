/* One AVX-512 instance of the cpu backend's template with tile constants of the benchmark's
 * choosing, for loop_lab: compiled once per variant with -DLAB_NAME=<suffix> -DLAB_QB= -DLAB_SJ=
 * -DLAB_DR= -DLAB_BK= -DLAB_DB= [-DLAB_PV_PF=] (bench/CMakeLists.txt), defining lab_kernels_<suffix>. Not
 * part of the library: the template's C kernels only (no inline-asm scores tile), no narrow table. */
#define LAB_CAT2(a, b) a##b
#define LAB_CAT(a, b) LAB_CAT2(a, b)
#define LAB_STR2(x) #x
#define LAB_STR(x) LAB_STR2(x)
#define JK_ISA "lab-" LAB_STR(LAB_NAME) /* in the kernel name: cpu_flash_f32_lab-<name>_<SJ>x<QB> */
#define JK(name) LAB_CAT(LAB_CAT(lab_, LAB_NAME), LAB_CAT(_, name))
#define JK_TABLE LAB_CAT(lab_kernels_, LAB_NAME)
#define JK_VL 16
#define JK_QB LAB_QB
#define JK_SJ LAB_SJ
#define JK_DR LAB_DR
#define JK_BK LAB_BK
#define JK_DB LAB_DB
#define JK_GK 6
#define JK_GD 4
#ifdef LAB_PV_PF
#define JK_PV_PF LAB_PV_PF
#endif

#include "cpu/cpu_vocab_avx512.h"

#include "cpu/cpu_flash_template.h"
