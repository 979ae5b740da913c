/* The ABI of jattn.h as data, for the language bindings' ABI tests: one "kind name value" line
 * per fact, in the header's order:
 *     sizeof jattn_problem 120        alignof jattn_problem 8      offsetof jattn_problem.batch 0
 *     status JATTN_ERROR_ALIASING 6   value JATTN_BACKEND_CUDA 3
 * Structs list every field in declaration order; `status` lines come from JATTN_STATUS_LIST and
 * the backends' `value` lines from JATTN_BACKEND_LIST, so a new code or backend reaches both
 * bindings' tests without an edit here. The Rust crate's
 * tests/ffi_layout.rs compiles and runs it and compares with the lines its declarations give;
 * the Python package's build runs it (python/CMakeLists.txt) and python/tests/test_abi.py
 * compares its ctypes mirrors. Both tests also scan jattn.h for anything this file misses.
 * The sequence-parallel API (jattn_parallel.h) is not bound by either. */
#include <jattn.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#define STRUCT(t) printf("sizeof %s %zu\nalignof %s %zu\n", #t, sizeof(t), #t, alignof(t))
#define FIELD(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))
#define VALUE(c) printf("value %s %lld\n", #c, (long long)(c))
#define STATUS(name, value, meaning) printf("status %s %d\n", #name, (int)(name));
#define BACKEND(name, value) VALUE(name);

int main(void) {
    STRUCT(jattn_strides);
    FIELD(jattn_strides, batch);
    FIELD(jattn_strides, head);
    FIELD(jattn_strides, token);

    STRUCT(jattn_problem);
    FIELD(jattn_problem, batch);
    FIELD(jattn_problem, heads);
    FIELD(jattn_problem, seq_q);
    FIELD(jattn_problem, seq_kv);
    FIELD(jattn_problem, head_dim);
    FIELD(jattn_problem, scale);
    FIELD(jattn_problem, dtype);
    FIELD(jattn_problem, q);
    FIELD(jattn_problem, k);
    FIELD(jattn_problem, v);
    FIELD(jattn_problem, out);
    FIELD(jattn_problem, kv_heads);

    STRUCT(jattn_exec);
    FIELD(jattn_exec, backend);
    FIELD(jattn_exec, precision);
    FIELD(jattn_exec, memory);
    FIELD(jattn_exec, threads);
    FIELD(jattn_exec, cuda_stream);
    FIELD(jattn_exec, workspace);
    FIELD(jattn_exec, workspace_bytes);
    FIELD(jattn_exec, alignment);

    STRUCT(jattn_selection);
    FIELD(jattn_selection, backend);
    FIELD(jattn_selection, backend_name);
    FIELD(jattn_selection, kernel);
    FIELD(jattn_selection, isa);
    FIELD(jattn_selection, threads);

    STRUCT(jattn_backend_info);
    FIELD(jattn_backend_info, backend);
    FIELD(jattn_backend_info, name);
    FIELD(jattn_backend_info, memory);
    FIELD(jattn_backend_info, is_gpu);
    FIELD(jattn_backend_info, has_backward);
    FIELD(jattn_backend_info, auto_rank);

    STRUCT(jattn_key_padding);
    FIELD(jattn_key_padding, kv_len);
    FIELD(jattn_key_padding, mask);
    FIELD(jattn_key_padding, mask_batch);
    FIELD(jattn_key_padding, mask_keys);
    FIELD(jattn_key_padding, mask_batch_stride);

    STRUCT(jattn_mask);
    FIELD(jattn_mask, padding);
    FIELD(jattn_mask, causal);
    FIELD(jattn_mask, block_q);
    FIELD(jattn_mask, block_kv);
    FIELD(jattn_mask, num_blocks);
    FIELD(jattn_mask, cu_seqlens_q);
    FIELD(jattn_mask, cu_seqlens_kv);
    FIELD(jattn_mask, num_segments);
    FIELD(jattn_mask, segments_batch_stride);
    FIELD(jattn_mask, key_bias);
    FIELD(jattn_mask, key_bias_batch_stride);
    FIELD(jattn_mask, key_bias_head_stride);

    STRUCT(jattn_grad_strides);
    FIELD(jattn_grad_strides, dout);
    FIELD(jattn_grad_strides, dq);
    FIELD(jattn_grad_strides, dk);
    FIELD(jattn_grad_strides, dv);

    /* The enums: their storage, then every enumerator. */
    STRUCT(jattn_status);
    STRUCT(jattn_dtype);
    STRUCT(jattn_backend);
    STRUCT(jattn_precision);
    STRUCT(jattn_memory);
    STRUCT(jattn_causal);
    STRUCT(jattn_pass);

    JATTN_STATUS_LIST(STATUS)
    VALUE(JATTN_STATUS_COUNT);
    VALUE(JATTN_DTYPE_F32);
    VALUE(JATTN_DTYPE_BF16);
    VALUE(JATTN_DTYPE_F16);
    JATTN_BACKEND_LIST(BACKEND)
    VALUE(JATTN_BACKEND_COUNT);
    VALUE(JATTN_PRECISION_F32);
    VALUE(JATTN_PRECISION_TF32);
    VALUE(JATTN_MEMORY_HOST);
    VALUE(JATTN_MEMORY_DEVICE);
    VALUE(JATTN_CAUSAL_NONE);
    VALUE(JATTN_CAUSAL_TOP_LEFT);
    VALUE(JATTN_CAUSAL_BOTTOM_RIGHT);
    VALUE(JATTN_PASS_FORWARD);
    VALUE(JATTN_PASS_BACKWARD);
    VALUE(JATTN_VERSION_MAJOR);
    VALUE(JATTN_VERSION_MINOR);
    VALUE(JATTN_VERSION_PATCH);
    VALUE(JATTN_VERSION_NUMBER);
    return 0;
}
