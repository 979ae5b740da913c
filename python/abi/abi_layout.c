/* Prints the size of each struct of jattn.h and the offset of each field, as JSON, so that
 * the Python package's ctypes mirrors (jattn/_clib.py) are checked against the C compiler's
 * own layout (python/tests/test_abi.py). Run at build time; the output ships in the wheel. */
#include <stddef.h>
#include <stdio.h>

#include <jattn.h>

#define FIELD(T, f) printf("%s\"%s\": %zu", first ? "" : ", ", #f, offsetof(T, f)), first = 0
#define OPEN(T) printf("  \"%s\": {\"size\": %zu, \"fields\": {", #T, sizeof(T)), first = 1
#define CLOSE(last) printf("}}%s\n", (last) ? "" : ",")
#define CONST(c) printf("%s\"%s\": %lld", first ? "" : ", ", #c, (long long)(c)), first = 0

int main(void) {
    int first;
    printf("{\n");
    OPEN(jattn_strides);
    FIELD(jattn_strides, batch); FIELD(jattn_strides, head); FIELD(jattn_strides, token);
    CLOSE(0);
    OPEN(jattn_problem);
    FIELD(jattn_problem, batch); FIELD(jattn_problem, heads); FIELD(jattn_problem, seq_q);
    FIELD(jattn_problem, seq_kv); FIELD(jattn_problem, head_dim); FIELD(jattn_problem, scale);
    FIELD(jattn_problem, dtype); FIELD(jattn_problem, q); FIELD(jattn_problem, k);
    FIELD(jattn_problem, v); FIELD(jattn_problem, out);
    CLOSE(0);
    OPEN(jattn_exec);
    FIELD(jattn_exec, backend); FIELD(jattn_exec, precision); FIELD(jattn_exec, memory);
    FIELD(jattn_exec, threads); FIELD(jattn_exec, cuda_stream); FIELD(jattn_exec, workspace);
    FIELD(jattn_exec, workspace_bytes);
    CLOSE(0);
    OPEN(jattn_selection);
    FIELD(jattn_selection, backend); FIELD(jattn_selection, backend_name); FIELD(jattn_selection, kernel);
    FIELD(jattn_selection, isa); FIELD(jattn_selection, threads);
    CLOSE(0);
    OPEN(jattn_key_padding);
    FIELD(jattn_key_padding, kv_len); FIELD(jattn_key_padding, mask); FIELD(jattn_key_padding, mask_batch);
    FIELD(jattn_key_padding, mask_keys); FIELD(jattn_key_padding, mask_batch_stride);
    CLOSE(0);
    /* enum sizes and the values the mirrors use */
    printf("  \"enum_size\": %zu,\n", sizeof(jattn_status));
    printf("  \"constants\": {"), first = 1;
    CONST(JATTN_VERSION_NUMBER); CONST(JATTN_STATUS_COUNT); CONST(JATTN_BACKEND_COUNT);
    CONST(JATTN_OK); CONST(JATTN_ERROR_NULL_POINTER); CONST(JATTN_ERROR_INVALID_DIMENSION);
    CONST(JATTN_ERROR_OVERFLOW); CONST(JATTN_ERROR_INVALID_STRIDE); CONST(JATTN_ERROR_SELF_OVERLAP);
    CONST(JATTN_ERROR_ALIASING); CONST(JATTN_ERROR_INVALID_SCALE); CONST(JATTN_ERROR_INVALID_ARGUMENT);
    CONST(JATTN_ERROR_UNSUPPORTED); CONST(JATTN_ERROR_BACKEND_UNAVAILABLE);
    CONST(JATTN_ERROR_WORKSPACE_TOO_SMALL); CONST(JATTN_ERROR_OUT_OF_MEMORY); CONST(JATTN_ERROR_CUDA); CONST(JATTN_ERROR_TRANSPORT);
    CONST(JATTN_DTYPE_F32); CONST(JATTN_BACKEND_AUTO); CONST(JATTN_BACKEND_REF); CONST(JATTN_BACKEND_CPU);
    CONST(JATTN_BACKEND_CUDA); CONST(JATTN_PRECISION_F32); CONST(JATTN_PRECISION_TF32);
    CONST(JATTN_MEMORY_HOST); CONST(JATTN_MEMORY_DEVICE);
    printf("}\n}\n");
    return 0;
}
