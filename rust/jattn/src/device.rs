//! The device call: [`forward_device`] on CUDA device pointers and a stream.

use std::ffi::c_void;
use std::ptr;

use jattn_sys as ffi;

use crate::call::{Context, forward_raw};
use crate::error::Error;
use crate::exec::{Exec, Selection, select_raw};
use crate::problem::{Problem, to_i64};

/// The CUDA device pointers of one [`forward_device`] call: q, k, v and out at the problem's
/// strides, and lse (`[B, H, Sq]` contiguous) or NULL for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTensors {
    /// Queries, device memory.
    pub q: *const f32,
    /// Keys, device memory.
    pub k: *const f32,
    /// Values, device memory.
    pub v: *const f32,
    /// Output, device memory.
    pub out: *mut f32,
    /// Log-sum-exp output, device memory, or NULL for none.
    pub lse: *mut f32,
}

impl DeviceTensors {
    /// The tensors q, k, v and out, without lse.
    pub const fn new(q: *const f32, k: *const f32, v: *const f32, out: *mut f32) -> DeviceTensors {
        DeviceTensors { q, k, v, out, lse: ptr::null_mut() }
    }

    /// These tensors with an lse output.
    #[must_use]
    pub const fn with_lse(mut self, lse: *mut f32) -> DeviceTensors {
        self.lse = lse;
        self
    }
}

/// A caller-owned device workspace of at least [`device_workspace_size`] bytes: with one, a
/// call allocates nothing (without one, the cuda backend takes its workspace from the stream's
/// memory pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceWorkspace {
    /// Device memory.
    pub ptr: *mut c_void,
    /// Its size in bytes.
    pub bytes: usize,
}

/// Key padding in device memory (see [`KeyPadding`](crate::KeyPadding) for the rule): NULL
/// pointers for what is not given. The library cannot read device lengths on the host, so a
/// length out of `0..=seq_kv` is clamped rather than reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceKeyPadding {
    /// NULL, or `[batch]` key lengths (int64), device memory.
    pub kv_len: *const i64,
    /// NULL, or a key mask of `mask_rows` rows of seq_kv bytes, device memory.
    pub mask: *const u8,
    /// The mask's rows: 1 or batch.
    pub mask_rows: usize,
    /// Bytes between mask rows (>= seq_kv); 0 means seq_kv.
    pub mask_row_stride: usize,
}

impl Default for DeviceKeyPadding {
    /// No padding.
    fn default() -> DeviceKeyPadding {
        DeviceKeyPadding { kv_len: ptr::null(), mask: ptr::null(), mask_rows: 0, mask_row_stride: 0 }
    }
}

impl DeviceKeyPadding {
    fn to_raw(self, problem: &Problem) -> Result<ffi::jattn_key_padding, Error> {
        let mut raw = ffi::jattn_key_padding { kv_len: self.kv_len, ..ffi::jattn_key_padding::default() };
        if !self.mask.is_null() {
            raw.mask = self.mask;
            raw.mask_batch = to_i64("key_padding.mask_batch", self.mask_rows)?;
            raw.mask_keys = to_i64("key_padding.mask_keys", problem.seq_kv())?;
            raw.mask_batch_stride = to_i64("key_padding.mask_batch_stride", self.mask_row_stride)?;
        }
        Ok(raw)
    }
}

/// Which backend and kernel [`forward_device`] would run for `problem` under `exec`, with the
/// same checks of the problem.
///
/// # Errors
/// As [`select`](crate::select); on a machine without a GPU (or a build without the cuda
/// backend), [`Status::BackendUnavailable`](crate::Status::BackendUnavailable) for [`Backend::Cuda`](crate::Backend::Cuda) and
/// [`Status::Unsupported`](crate::Status::Unsupported) for [`Backend::Auto`](crate::Backend::Auto).
pub fn select_device(problem: &Problem, exec: &Exec) -> Result<Selection, Error> {
    select_raw(&problem.raw()?, &exec.to_raw(ffi::JATTN_MEMORY_DEVICE)?)
}

/// The bytes of device workspace [`forward_device`] needs for `problem` under `exec` (0 when
/// none), for a [`DeviceWorkspace`].
///
/// # Errors
/// As [`select_device`].
pub fn device_workspace_size(problem: &Problem, exec: &Exec) -> Result<usize, Error> {
    let raw = problem.raw()?;
    let raw_exec = exec.to_raw(ffi::JATTN_MEMORY_DEVICE)?;
    let mut bytes = 0usize;
    // SAFETY: pointers to live values; the last is written only.
    Error::check(unsafe { ffi::jattn_workspace_size(&raw, &raw_exec, &mut bytes) })?;
    Ok(bytes)
}

/// Computes the attention of `problem` on CUDA device memory, asynchronously on `stream`
/// (a `cudaStream_t`; NULL for the legacy default stream). The call queues the work and returns:
/// it never synchronises, and with a `workspace` (or none needed) it allocates nothing, so it
/// can be captured in a CUDA graph. The other arguments are as in [`forward`](crate::forward).
///
/// The library checks the problem, the backend, the pointers' alignment, that no pointer is
/// NULL and that the outputs' byte ranges overlap neither the inputs nor each other; what it
/// cannot check is the caller's, below.
///
/// # Safety
/// The caller guarantees that, from the call until the work it queued on `stream` has completed:
///
/// * `tensors.q`, `.k`, `.v` and `.out` (and `.lse` when not NULL) point to device memory of the
///   current CUDA device (or memory it can address), each valid for the extent the problem's
///   strides address: [`Problem::required_len`] elements of f32 for q, k, v and out,
///   [`Problem::lse_len`] for lse;
/// * nothing else writes q, k, v (or the padding arrays), and nothing reads or writes out and
///   lse: the memory stays allocated and unused until the stream's work is done (synchronise
///   the stream, or order later work after it, before reading the output or freeing anything);
/// * `stream` is NULL or a live stream of the current device;
/// * `workspace`, when given, is device memory of at least `bytes` bytes that no other call
///   uses concurrently;
/// * `padding`'s non-NULL pointers are device memory holding `batch` int64 lengths and
///   `(mask_rows − 1) · mask_row_stride + seq_kv` mask bytes.
///
/// # Errors
/// Failures found before the launch are reported, and nothing is written then: an invalid
/// problem, [`Status::NullPointer`](crate::Status::NullPointer), [`Status::Aliasing`](crate::Status::Aliasing), [`Status::Unsupported`](crate::Status::Unsupported) (a host
/// backend asked for device memory), [`Status::BackendUnavailable`](crate::Status::BackendUnavailable) (no GPU),
/// [`Status::WorkspaceTooSmall`](crate::Status::WorkspaceTooSmall), [`Status::Cuda`](crate::Status::Cuda). Errors of the kernel itself appear on the
/// stream, as for any CUDA launch.
pub unsafe fn forward_device(
    problem: &Problem,
    exec: &Exec,
    tensors: &DeviceTensors,
    stream: *mut c_void,
    workspace: Option<DeviceWorkspace>,
    padding: Option<&DeviceKeyPadding>,
) -> Result<(), Error> {
    // SAFETY: the caller's obligations are this function's.
    unsafe { forward_device_raw(ptr::null_mut(), problem, exec, tensors, stream, workspace, padding) }
}

impl Context {
    /// [`forward_device`] with this context's buffers (for the cuda backend: device copies it
    /// keeps between calls).
    ///
    /// # Safety
    /// As [`forward_device`]; and the context must not be used by a call on another stream
    /// while this call's work may still run.
    ///
    /// # Errors
    /// As [`forward_device`].
    pub unsafe fn forward_device(
        &mut self,
        problem: &Problem,
        exec: &Exec,
        tensors: &DeviceTensors,
        stream: *mut c_void,
        workspace: Option<DeviceWorkspace>,
        padding: Option<&DeviceKeyPadding>,
    ) -> Result<(), Error> {
        // SAFETY: the caller's obligations are this method's; the context is borrowed
        // exclusively.
        unsafe { forward_device_raw(self.as_mut_ptr(), problem, exec, tensors, stream, workspace, padding) }
    }
}

/// # Safety
/// As [`forward_device`]; `ctx` is NULL or a live context used by no one else.
unsafe fn forward_device_raw(
    ctx: *mut ffi::jattn_ctx,
    problem: &Problem,
    exec: &Exec,
    tensors: &DeviceTensors,
    stream: *mut c_void,
    workspace: Option<DeviceWorkspace>,
    padding: Option<&DeviceKeyPadding>,
) -> Result<(), Error> {
    let raw = problem.raw()?;
    let mut raw_exec = exec.to_raw(ffi::JATTN_MEMORY_DEVICE)?;
    raw_exec.cuda_stream = stream;
    if let Some(ws) = workspace {
        raw_exec.workspace = ws.ptr;
        raw_exec.workspace_bytes = ws.bytes;
    }
    let raw_mask = padding
        .map(|p| p.to_raw(problem).map(|padding| ffi::jattn_mask { padding, ..ffi::jattn_mask::default() }))
        .transpose()?;
    // SAFETY: the descriptions are live values; the library validates the problem and the
    // pointers it can check before using them, and the caller guarantees the rest (# Safety).
    unsafe {
        forward_raw(
            ctx,
            (&raw, &raw_exec),
            [tensors.q, tensors.k, tensors.v],
            raw_mask.as_ref(),
            tensors.out,
            tensors.lse,
        )
    }
}
