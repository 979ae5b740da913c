//! Raw FFI declarations of [jattn](../jattn/index.html)'s C API (`include/jattn.h`, version 0.4),
//! and the build of the C library.
//!
//! This crate only builds and declares: every item mirrors `jattn.h` one to one, with the C
//! names, and every function is `unsafe` to call. Use the `jattn` crate for the safe API.
//!
//! The declarations are written by hand from the header; the test `tests/ffi_layout.rs`
//! compiles a C program against the header and checks every struct's size, alignment and field
//! offsets and every enum value and macro against this file.
//!
//! Not declared: the sequence-parallel API (`jattn_parallel.h`, `jattn_sp_*`), whose functions live in
//! the separate library libjattn_parallel (MPI, NCCL), which this crate neither builds nor links.
//!
//! # Linking
//!
//! By default `build.rs` builds libjattn from the C sources of the repository this crate lives
//! in (or of `JATTN_SRC_DIR`) with CMake, into `OUT_DIR`, and links it statically together with
//! what the static library needs: the OpenMP runtime, libm, and the CUDA runtime when the C
//! build compiled the cuda backend (it does when `nvcc` is found). With the feature `system`,
//! or `JATTN_SYS_USE_PKG_CONFIG=1`, it links an installed libjattn found by `pkg-config`
//! instead. `build.rs` documents every environment variable it reads.
//!
//! # Enums
//!
//! The C enums are declared as `c_int` type aliases with one constant per enumerator (a C
//! function may return a number this version does not know; a Rust `enum` could not hold it).
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};

// ---- version ---------------------------------------------------------------------------------

/// `JATTN_VERSION_MAJOR` of the header these declarations were written from.
pub const JATTN_VERSION_MAJOR: c_uint = 0;
/// `JATTN_VERSION_MINOR` of the header these declarations were written from.
pub const JATTN_VERSION_MINOR: c_uint = 4;
/// `JATTN_VERSION_PATCH` of the header these declarations were written from.
pub const JATTN_VERSION_PATCH: c_uint = 0;
/// `JATTN_VERSION_NUMBER`: major * 10000 + minor * 100 + patch.
pub const JATTN_VERSION_NUMBER: c_uint = JATTN_VERSION_MAJOR * 10000 + JATTN_VERSION_MINOR * 100 + JATTN_VERSION_PATCH;

// ---- status ----------------------------------------------------------------------------------

/// `jattn_status`: the result of every call; numbers are stable across versions.
pub type jattn_status = c_int;
/// Success.
pub const JATTN_OK: jattn_status = 0;
/// A required pointer is NULL.
pub const JATTN_ERROR_NULL_POINTER: jattn_status = 1;
/// A dimension out of range (< 0; head_dim < 1; kv_heads not dividing heads).
pub const JATTN_ERROR_INVALID_DIMENSION: jattn_status = 2;
/// An element count or byte offset overflows.
pub const JATTN_ERROR_OVERFLOW: jattn_status = 3;
/// A negative stride.
pub const JATTN_ERROR_INVALID_STRIDE: jattn_status = 4;
/// Strides make a tensor overlap itself.
pub const JATTN_ERROR_SELF_OVERLAP: jattn_status = 5;
/// An output overlaps an input or another output.
pub const JATTN_ERROR_ALIASING: jattn_status = 6;
/// The scale is NaN, infinite or negative.
pub const JATTN_ERROR_INVALID_SCALE: jattn_status = 7;
/// An enum out of range, a negative thread count.
pub const JATTN_ERROR_INVALID_ARGUMENT: jattn_status = 8;
/// The chosen backend cannot run this problem.
pub const JATTN_ERROR_UNSUPPORTED: jattn_status = 9;
/// The backend is not built in, or no device is present.
pub const JATTN_ERROR_BACKEND_UNAVAILABLE: jattn_status = 10;
/// The caller's workspace is smaller than `jattn_workspace_size` says.
pub const JATTN_ERROR_WORKSPACE_TOO_SMALL: jattn_status = 11;
/// An allocation failed.
pub const JATTN_ERROR_OUT_OF_MEMORY: jattn_status = 12;
/// A CUDA call failed; the message names the CUDA error.
pub const JATTN_ERROR_CUDA: jattn_status = 13;
/// An MPI or NCCL call failed (sequence parallel); the message names it.
pub const JATTN_ERROR_TRANSPORT: jattn_status = 14;
/// `JATTN_STATUS_COUNT`: the number of status codes.
pub const JATTN_STATUS_COUNT: c_int = 15;

// ---- problem description ---------------------------------------------------------------------

/// `jattn_dtype`: the element type of q, k, v and out.
pub type jattn_dtype = c_int;
/// float32, the only element type implemented.
pub const JATTN_DTYPE_F32: jattn_dtype = 0;
/// bfloat16 (reserved).
pub const JATTN_DTYPE_BF16: jattn_dtype = 1;
/// float16 (reserved).
pub const JATTN_DTYPE_F16: jattn_dtype = 2;

/// `jattn_strides`: element strides of a 4-d tensor `[batch, head, token, head_dim]`, head_dim
/// contiguous.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct jattn_strides {
    /// Elements between batches.
    pub batch: i64,
    /// Elements between heads.
    pub head: i64,
    /// Elements between tokens.
    pub token: i64,
}

/// `jattn_problem`: the dimensions, scale, element type and layouts of one attention call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct jattn_problem {
    /// B >= 0.
    pub batch: i64,
    /// H >= 0: query heads (q, out, lse).
    pub heads: i64,
    /// Sq >= 0: query tokens.
    pub seq_q: i64,
    /// Skv >= 0: key/value tokens.
    pub seq_kv: i64,
    /// D >= 1.
    pub head_dim: i64,
    /// > 0 and finite, or 0 for 1/sqrt(head_dim).
    pub scale: f32,
    /// Element type of q, k, v and out.
    pub dtype: jattn_dtype,
    /// Strides of q `[B, H, Sq, D]`.
    pub q: jattn_strides,
    /// Strides of k `[B, Hkv, Skv, D]`.
    pub k: jattn_strides,
    /// Strides of v `[B, Hkv, Skv, D]`.
    pub v: jattn_strides,
    /// Strides of out `[B, H, Sq, D]`.
    pub out: jattn_strides,
    /// Hkv: key/value heads (grouped-query attention); 0 means `heads`, else >= 1 and dividing
    /// `heads`. Query head h reads key/value head `h / (heads / kv_heads)`.
    pub kv_heads: i64,
}

// ---- execution -------------------------------------------------------------------------------

/// `jattn_backend`: which backend runs a call (`JATTN_BACKEND_LIST`). What each backend is, and
/// AUTO's order, the library says at run time: `jattn_backend_info_at`.
pub type jattn_backend = c_int;
/// The first backend, in AUTO's order, that is present and able.
pub const JATTN_BACKEND_AUTO: jattn_backend = 0;
/// The float64 scalar reference (the oracle; slow).
pub const JATTN_BACKEND_REF: jattn_backend = 1;
/// Flash attention on the CPU, SIMD micro-kernels, OpenMP.
pub const JATTN_BACKEND_CPU: jattn_backend = 2;
/// NVIDIA GPUs.
pub const JATTN_BACKEND_CUDA: jattn_backend = 3;
/// Any Vulkan GPU, host memory.
pub const JATTN_BACKEND_VK: jattn_backend = 4;
/// `JATTN_BACKEND_COUNT`: the number of backends (AUTO included).
pub const JATTN_BACKEND_COUNT: c_int = 5;

/// `jattn_precision`: the arithmetic a backend may use.
pub type jattn_precision = c_int;
/// float32-exact (default).
pub const JATTN_PRECISION_F32: jattn_precision = 0;
/// Opt-in, GPU: TF32 tensor-core products, rel_l2 <= 1e-3.
pub const JATTN_PRECISION_TF32: jattn_precision = 1;

/// `jattn_memory`: where q, k, v, out and lse live.
pub type jattn_memory = c_int;
/// Host pointers.
pub const JATTN_MEMORY_HOST: jattn_memory = 0;
/// CUDA device pointers of the current device.
pub const JATTN_MEMORY_DEVICE: jattn_memory = 1;

/// `jattn_exec`: how a call runs. All zero means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct jattn_exec {
    /// The backend.
    pub backend: jattn_backend,
    /// The precision.
    pub precision: jattn_precision,
    /// Host or device pointers.
    pub memory: jattn_memory,
    /// CPU threads; 0 = all cores.
    pub threads: c_int,
    /// A `cudaStream_t`; NULL = the legacy default stream.
    pub cuda_stream: *mut c_void,
    /// Optional caller workspace (host memory for cpu, device for cuda).
    pub workspace: *mut c_void,
    /// Bytes of `workspace`.
    pub workspace_bytes: usize,
    /// Plans only: the byte alignment of every data pointer of the plan's runs (a power of two
    /// >= 4); 0 means 16. The one-call functions ignore it.
    pub alignment: usize,
}

impl Default for jattn_exec {
    /// The zero-initialised `jattn_exec` of the C API: every default.
    fn default() -> Self {
        jattn_exec {
            backend: JATTN_BACKEND_AUTO,
            precision: JATTN_PRECISION_F32,
            memory: JATTN_MEMORY_HOST,
            threads: 0,
            cuda_stream: core::ptr::null_mut(),
            workspace: core::ptr::null_mut(),
            workspace_bytes: 0,
            alignment: 0,
        }
    }
}

/// `jattn_selection`: what a backend would run for a problem. Strings have static storage.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct jattn_selection {
    /// The backend chosen (never AUTO).
    pub backend: jattn_backend,
    /// Its name.
    pub backend_name: *const c_char,
    /// The kernel that runs, e.g. `"cpu_flash_f32_avx512_4x48"`.
    pub kernel: *const c_char,
    /// Instruction set: `"scalar"`, `"avx512"`, `"avx2"`, `"neon"`, `"generic"`, `"sm_90a"`, ...
    pub isa: *const c_char,
    /// CPU threads it would use (1 for GPU backends).
    pub threads: c_int,
}

/// `jattn_backend_info`: what a backend is (`jattn_backend_info_at`). Strings have static storage.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct jattn_backend_info {
    /// Its value (never AUTO).
    pub backend: jattn_backend,
    /// `jattn_backend_name(backend)`.
    pub name: *const c_char,
    /// The memory it computes from: `JATTN_MEMORY_DEVICE` (it also takes host pointers, copied)
    /// or `JATTN_MEMORY_HOST`.
    pub memory: jattn_memory,
    /// 1 when it computes on a GPU, 0 on the CPU.
    pub is_gpu: c_int,
    /// 1 when `jattn_backward` can run on it.
    pub has_backward: c_int,
    /// Its place in AUTO's order: 0 is tried first.
    pub auto_rank: c_int,
}

impl Default for jattn_backend_info {
    /// A zeroed description (name NULL), to be filled by `jattn_backend_info_at`.
    fn default() -> Self {
        jattn_backend_info {
            backend: JATTN_BACKEND_AUTO,
            name: core::ptr::null(),
            memory: JATTN_MEMORY_HOST,
            is_gpu: 0,
            has_backward: 0,
            auto_rank: 0,
        }
    }
}

/// `jattn_grad_strides`: element strides of the backward's gradient tensors, each
/// `[batch, head, token, head_dim]`: `dout` has out's extent, `dq` q's, `dk` k's, `dv` v's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct jattn_grad_strides {
    /// Strides of the output's gradient (read).
    pub dout: jattn_strides,
    /// Strides of q's gradient (written).
    pub dq: jattn_strides,
    /// Strides of k's gradient (written).
    pub dk: jattn_strides,
    /// Strides of v's gradient (written).
    pub dv: jattn_strides,
}

/// `jattn_ctx`: an opaque context holding grow-only buffers between calls.
#[repr(C)]
pub struct jattn_ctx {
    _opaque: [u8; 0],
    // Neither Send, Sync nor Unpin: only ever handled through a pointer.
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// `jattn_key_padding`: which keys each batch attends. All zero attends every key.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct jattn_key_padding {
    /// NULL, or `[batch]` key lengths, `0 <= kv_len[b] <= seq_kv`.
    pub kv_len: *const i64,
    /// NULL, or a boolean key mask: one byte per key, nonzero = attend.
    pub mask: *const u8,
    /// The mask's rows: batch, or 1 (one row broadcast over the batch).
    pub mask_batch: i64,
    /// The mask's bytes per row: must equal seq_kv.
    pub mask_keys: i64,
    /// Bytes between rows when `mask_batch > 1`, >= `mask_keys`; 0 means `mask_keys`.
    pub mask_batch_stride: i64,
}

impl Default for jattn_key_padding {
    /// The zero-initialised `jattn_key_padding`: every key attended.
    fn default() -> Self {
        jattn_key_padding {
            kv_len: core::ptr::null(),
            mask: core::ptr::null(),
            mask_batch: 0,
            mask_keys: 0,
            mask_batch_stride: 0,
        }
    }
}

/// `jattn_causal`: causal attention (with segments: inside each segment, in its own positions).
pub type jattn_causal = c_int;
/// Every query may attend every key (the DiT default).
pub const JATTN_CAUSAL_NONE: jattn_causal = 0;
/// Query t attends keys u <= t: PyTorch's `is_causal`.
pub const JATTN_CAUSAL_TOP_LEFT: jattn_causal = 1;
/// Query t attends keys u <= t + Lk - Lq: FlashAttention's causal (the last query sees every key).
pub const JATTN_CAUSAL_BOTTOM_RIGHT: jattn_causal = 2;

/// `jattn_mask`: everything that narrows the keys a query attends, and an additive key bias.
/// All zero attends every key with no bias.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct jattn_mask {
    /// Per-key lengths and boolean masks, as `jattn_forward_padded`.
    pub padding: jattn_key_padding,
    /// Causal attention.
    pub causal: jattn_causal,
    /// NULL, or `num_blocks + 1` non-decreasing query offsets from 0 to seq_q (block-causal).
    pub block_q: *const i64,
    /// NULL, or `num_blocks + 1` non-decreasing key offsets from 0 to seq_kv (may be `block_q`).
    pub block_kv: *const i64,
    /// Blocks (>= 1 with `block_q`; 0 without).
    pub num_blocks: i64,
    /// NULL, or `num_segments + 1` non-decreasing query offsets from 0 per row (varlen `cu_seqlens_q`).
    pub cu_seqlens_q: *const i64,
    /// NULL, or `num_segments + 1` non-decreasing key offsets from 0 per row (`cu_seqlens_k`).
    pub cu_seqlens_kv: *const i64,
    /// Segments (>= 1 with `cu_seqlens_q`; 0 without).
    pub num_segments: i64,
    /// Elements between batches' offset rows; 0 = one row for all.
    pub segments_batch_stride: i64,
    /// NULL, or an additive float32 key bias, rows of seq_kv values.
    pub key_bias: *const f32,
    /// Elements between batches' bias rows (0 broadcasts).
    pub key_bias_batch_stride: i64,
    /// Elements between heads' bias rows (0 broadcasts).
    pub key_bias_head_stride: i64,
}

impl Default for jattn_mask {
    /// The zero-initialised `jattn_mask`: every key attended, no bias.
    fn default() -> Self {
        jattn_mask {
            padding: jattn_key_padding::default(),
            causal: JATTN_CAUSAL_NONE,
            block_q: core::ptr::null(),
            block_kv: core::ptr::null(),
            num_blocks: 0,
            cu_seqlens_q: core::ptr::null(),
            cu_seqlens_kv: core::ptr::null(),
            num_segments: 0,
            segments_batch_stride: 0,
            key_bias: core::ptr::null(),
            key_bias_batch_stride: 0,
            key_bias_head_stride: 0,
        }
    }
}

/// `jattn_pass`: the pass a plan is made for.
pub type jattn_pass = c_int;
/// `jattn_forward_masked`.
pub const JATTN_PASS_FORWARD: jattn_pass = 0;
/// `jattn_backward_masked`.
pub const JATTN_PASS_BACKWARD: jattn_pass = 1;

/// `jattn_plan`: an opaque, immutable plan (problem, mask structure and exec decided once).
#[repr(C)]
pub struct jattn_plan {
    _opaque: [u8; 0],
    // Only ever handled through a pointer; the safe crate decides Send and Sync.
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

// ---- functions -------------------------------------------------------------------------------

unsafe extern "C" {
    /// @return `JATTN_VERSION_NUMBER` of the library actually linked.
    pub fn jattn_version_number() -> c_uint;
    /// @return `JATTN_VERSION_STRING` of the library actually linked (static storage).
    pub fn jattn_version_string() -> *const c_char;
    /// @return the name of a status code (`"JATTN_STATUS_UNKNOWN"` outside the enum); static.
    pub fn jattn_status_name(status: jattn_status) -> *const c_char;
    /// @return the message of this thread's last failing call, `""` after a success.
    /// Thread-local storage, valid until this thread's next jattn call.
    pub fn jattn_last_error() -> *const c_char;
    /// Makes `message` (NULL: `""`) what `jattn_last_error()` returns on this thread, truncated
    /// to 255 bytes, for layers built on the API. @return `status`, unchanged.
    pub fn jattn_set_last_error(status: jattn_status, message: *const c_char) -> jattn_status;

    /// @return strides of a contiguous head-major tensor `[B, H, S, D]`.
    pub fn jattn_strides_head_major(heads: i64, seq: i64, head_dim: i64) -> jattn_strides;
    /// @return strides of a contiguous token-major tensor `[B, S, H*D]`.
    pub fn jattn_strides_token_major(heads: i64, seq: i64, head_dim: i64) -> jattn_strides;
    /// @return the FLUX problem: q, k, v head-major, out token-major, float32, default scale.
    pub fn jattn_problem_flux(batch: i64, heads: i64, seq_q: i64, seq_kv: i64, head_dim: i64) -> jattn_problem;

    /// @return the name of a backend (`"auto"`, `"ref"`, `"cpu"`, `"cuda"`, `"vk"`), NULL if out of range.
    pub fn jattn_backend_name(backend: jattn_backend) -> *const c_char;
    /// @return the number of backends of the library linked (AUTO is not one).
    pub fn jattn_backend_info_count() -> c_int;
    /// Describes the backend AUTO tries at place `auto_rank` (0 first).
    /// @return `JATTN_OK` and `*info` filled; `JATTN_ERROR_NULL_POINTER`, or
    /// `JATTN_ERROR_INVALID_ARGUMENT` for a rank out of range (`*info` untouched).
    pub fn jattn_backend_info_at(auto_rank: c_int, info: *mut jattn_backend_info) -> jattn_status;
    /// Can the backend of `exec` (NULL: defaults) run `problem`, and with which kernel?
    /// @return `JATTN_OK` and `*selection` filled, or the status of the first problem found.
    pub fn jattn_select(
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        selection: *mut jattn_selection,
    ) -> jattn_status;
    /// @return `JATTN_OK` and `*bytes` = the workspace the selected kernel needs (0 when none).
    pub fn jattn_workspace_size(
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        bytes: *mut usize,
    ) -> jattn_status;

    /// @return `JATTN_OK` and `*ctx` a new context; `JATTN_ERROR_NULL_POINTER` or
    /// `JATTN_ERROR_OUT_OF_MEMORY`.
    pub fn jattn_ctx_create(ctx: *mut *mut jattn_ctx) -> jattn_status;
    /// Frees a context and every buffer it holds. Accepts NULL.
    pub fn jattn_ctx_free(ctx: *mut jattn_ctx);

    /// Computes the attention of `problem` with the backend of `exec` (NULL: defaults).
    /// @return `JATTN_OK`, or the status of the first problem found; nothing is written to
    /// `out` or `lse` on failure.
    pub fn jattn_forward(
        ctx: *mut jattn_ctx,
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *mut c_void,
        lse: *mut f32,
    ) -> jattn_status;
    /// `jattn_forward` attending only the keys `padding` selects (NULL: every key).
    /// @return `JATTN_OK`, or the status of the first problem found; nothing is written on
    /// failure.
    pub fn jattn_forward_padded(
        ctx: *mut jattn_ctx,
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        padding: *const jattn_key_padding,
        out: *mut c_void,
        lse: *mut f32,
    ) -> jattn_status;

    /// @return the gradient strides that mirror the problem's own (dout like out, dq like q,
    /// dk like k, dv like v: what a NULL `jattn_grad_strides` means).
    pub fn jattn_grad_strides_like(problem: *const jattn_problem) -> jattn_grad_strides;
    /// Can the backend of `exec` run the backward of `problem`, and with which kernel?
    /// @return `JATTN_OK` and `*selection` filled, or the status of the first problem found.
    pub fn jattn_backward_select(
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        selection: *mut jattn_selection,
    ) -> jattn_status;
    /// @return `JATTN_OK` and `*bytes` = the workspace `jattn_backward` needs (0 when none).
    pub fn jattn_backward_workspace_size(
        problem: *const jattn_problem,
        grad: *const jattn_grad_strides,
        exec: *const jattn_exec,
        bytes: *mut usize,
    ) -> jattn_status;
    /// dq, dk, dv (overwritten) of the attention of `problem`, from q, k, v, the forward's out
    /// and lse, dout and (may be NULL) dlse; padding may be NULL. `grad` NULL: the gradients
    /// at the strides of the tensors they belong to.
    /// @return `JATTN_OK`, or the status of the first problem found; nothing is written on
    /// failure.
    pub fn jattn_backward(
        ctx: *mut jattn_ctx,
        problem: *const jattn_problem,
        grad: *const jattn_grad_strides,
        exec: *const jattn_exec,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *const c_void,
        lse: *const f32,
        dout: *const c_void,
        dlse: *const f32,
        padding: *const jattn_key_padding,
        dq: *mut c_void,
        dk: *mut c_void,
        dv: *mut c_void,
    ) -> jattn_status;

    /// `jattn_forward` with a mask (NULL: `jattn_forward`).
    /// @return `JATTN_OK`, or the status of the first problem found; nothing is written on failure.
    pub fn jattn_forward_masked(
        ctx: *mut jattn_ctx,
        problem: *const jattn_problem,
        exec: *const jattn_exec,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        mask: *const jattn_mask,
        out: *mut c_void,
        lse: *mut f32,
    ) -> jattn_status;
    /// `jattn_backward` with a mask (NULL: `jattn_backward` without padding).
    /// @return as `jattn_backward`.
    pub fn jattn_backward_masked(
        ctx: *mut jattn_ctx,
        problem: *const jattn_problem,
        grad: *const jattn_grad_strides,
        exec: *const jattn_exec,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *const c_void,
        lse: *const f32,
        dout: *const c_void,
        dlse: *const f32,
        mask: *const jattn_mask,
        dq: *mut c_void,
        dk: *mut c_void,
        dv: *mut c_void,
    ) -> jattn_status;

    /// Makes a plan for `pass` (grad: NULL like the problem's; mask: the structure the runs' masks
    /// have, NULL none; exec NULL: defaults).
    /// @return `JATTN_OK` and `*plan` a new plan (free with `jattn_plan_free`), or the status the
    /// one-call function would give (`*plan` untouched).
    pub fn jattn_plan_create(
        plan: *mut *mut jattn_plan,
        pass: jattn_pass,
        problem: *const jattn_problem,
        grad: *const jattn_grad_strides,
        mask: *const jattn_mask,
        exec: *const jattn_exec,
    ) -> jattn_status;
    /// Frees a plan. Accepts NULL.
    pub fn jattn_plan_free(plan: *mut jattn_plan);
    /// @return `JATTN_OK` and `*selection` what the plan's runs launch; `JATTN_ERROR_NULL_POINTER`.
    pub fn jattn_plan_selection(plan: *const jattn_plan, selection: *mut jattn_selection) -> jattn_status;
    /// @return the workspace bytes a run of the plan needs when the caller provides one (0: none;
    /// 0 for NULL).
    pub fn jattn_plan_workspace_size(plan: *const jattn_plan) -> usize;
    /// Runs a forward plan (as `jattn_forward_masked`) on `cuda_stream` with the caller's workspace
    /// (NULL: the context's or one allocated).
    /// @return as `jattn_forward_masked`; `JATTN_ERROR_INVALID_ARGUMENT` for a backward plan or a
    /// mask of another structure.
    pub fn jattn_plan_forward(
        plan: *const jattn_plan,
        ctx: *mut jattn_ctx,
        cuda_stream: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        mask: *const jattn_mask,
        out: *mut c_void,
        lse: *mut f32,
    ) -> jattn_status;
    /// Runs a backward plan (as `jattn_backward_masked`; see `jattn_plan_forward`).
    pub fn jattn_plan_backward(
        plan: *const jattn_plan,
        ctx: *mut jattn_ctx,
        cuda_stream: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *const c_void,
        lse: *const f32,
        dout: *const c_void,
        dlse: *const f32,
        mask: *const jattn_mask,
        dq: *mut c_void,
        dk: *mut c_void,
        dv: *mut c_void,
    ) -> jattn_status;
}
