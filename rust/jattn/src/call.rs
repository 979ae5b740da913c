//! The host call: [`forward`], [`forward_padded`], [`forward_masked`] and the reusable [`Context`].

use std::fmt;
use std::ptr::{self, NonNull};

use jattn_sys as ffi;

use crate::error::{Error, Status};
use crate::exec::{Exec, select_raw};
use crate::mask::Mask;
use crate::padding::KeyPadding;
use crate::problem::{Problem, Tensor};

/// Computes the attention of `problem` on host memory: `out` receives it at the output's
/// strides, and `lse` (when given) the log-sum-exp of each query row, `[B, H, Sq]` contiguous.
///
/// `q`, `k` and `v` may be the same slice (views into one fused projection); `out` and `lse`
/// are exclusive borrows, so they can overlap neither the inputs nor each other.
///
/// ```
/// use jattn::{Exec, Problem, Tensor};
/// // FLUX.2 at 512x512: 24 heads, 1536 tokens (512 text + 1024 image), head_dim 128.
/// // q, k, v head-major [H, S, D] after RoPE; out token-major [S, H*D].
/// let problem = Problem::flux(1, 24, 1536, 1536, 128);
/// let n = problem.required_len(Tensor::Q)?; // 24 * 1536 * 128
/// let input = |seed: f32| (0..n).map(|i| (i as f32 * seed).sin()).collect::<Vec<f32>>();
/// let (q, k, v) = (input(0.37), input(0.61), input(0.23));
/// let mut out = vec![0.0f32; problem.required_len(Tensor::Out)?];
/// jattn::forward(&problem, &Exec::default(), &q, &k, &v, &mut out, None)?;
/// assert!(out.iter().all(|x| x.is_finite()));
/// # Ok::<(), jattn::Error>(())
/// ```
///
/// # Errors
/// Nothing is written on failure. Before calling C, the library checks the problem and picks
/// the backend (as [`select`](crate::select)); then every slice is checked against the extent
/// its strides address ([`Problem::required_len`], [`Problem::lse_len`]): a shorter one is
/// [`Status::InvalidArgument`]. The call itself can still fail with [`Status::OutOfMemory`].
pub fn forward(
    problem: &Problem,
    exec: &Exec,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) -> Result<(), Error> {
    forward_host(ptr::null_mut(), problem, exec, q, k, v, None, out, lse)
}

/// [`forward`] attending only the keys `mask` leaves, with its key bias (see [`Mask`]): causal,
/// block-causal, segments (packed sequences), key padding and an additive key bias, in any
/// combination.
///
/// # Errors
/// As [`forward`]; also a mask slice shorter than the problem needs ([`Status::InvalidArgument`],
/// naming the field, e.g. `mask.key_bias`), offsets the library refuses (not from 0, decreasing,
/// past the sequence: [`Status::InvalidArgument`] naming the offset), and
/// [`Status::Unsupported`] from a backend that does not serve a part of the mask yet (the message
/// names it; [`Backend::Ref`](crate::Backend::Ref) serves every part).
#[allow(clippy::too_many_arguments)] // the arguments of forward, and the mask
pub fn forward_masked(
    problem: &Problem,
    exec: &Exec,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &Mask<'_>,
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) -> Result<(), Error> {
    forward_host(ptr::null_mut(), problem, exec, q, k, v, Some(mask), out, lse)
}

/// [`forward`] attending only the keys `padding` selects (see [`KeyPadding`]).
///
/// # Errors
/// As [`forward`]; also a padding slice shorter than the problem needs
/// ([`Status::InvalidArgument`]), a length out of `0..=seq_kv`, a mask of a row count other than
/// 1 or batch, and [`Status::Unsupported`] from a backend that does not implement key padding
/// yet.
#[allow(clippy::too_many_arguments)] // the arguments of forward, and the padding
pub fn forward_padded(
    problem: &Problem,
    exec: &Exec,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    padding: &KeyPadding<'_>,
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) -> Result<(), Error> {
    let mask = Mask::none().with_padding(*padding);
    forward_host(ptr::null_mut(), problem, exec, q, k, v, Some(&mask), out, lse)
}

pub(crate) fn check_len(name: &str, len: usize, need: usize) -> Result<(), Error> {
    if len < need {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{name}: a slice of {len} elements, the problem addresses {need}"),
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn forward_host(
    ctx: *mut ffi::jattn_ctx,
    problem: &Problem,
    exec: &Exec,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&Mask<'_>>,
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) -> Result<(), Error> {
    let raw = problem.raw()?;
    let raw_exec = exec.to_raw(ffi::JATTN_MEMORY_HOST)?;
    // The library validates the problem and picks the backend first (its message names the
    // field); the problem is then known to be well formed, and its extents are computable ...
    select_raw(&raw, &raw_exec)?;
    // ... so that every slice can be checked against what the library will address.
    check_len("q", q.len(), problem.required_len(Tensor::Q)?)?;
    check_len("k", k.len(), problem.required_len(Tensor::K)?)?;
    check_len("v", v.len(), problem.required_len(Tensor::V)?)?;
    check_len("out", out.len(), problem.required_len(Tensor::Out)?)?;
    let lse_ptr = match lse {
        Some(lse) => {
            check_len("lse", lse.len(), problem.lse_len()?)?;
            lse.as_mut_ptr()
        }
        None => ptr::null_mut(),
    };
    let raw_mask = match mask {
        Some(m) if !m.is_none() => Some(m.raw(problem)?),
        _ => None,
    };
    // SAFETY: `raw` and `raw_exec` describe this problem with host memory; every slice holds at
    // least the elements its strides address (checked above, with the extents the library
    // itself computes), and so do the mask's arrays (Mask::raw). The inputs are only
    // read; `out` and `lse` are exclusive borrows, so no other reference sees them written. The
    // context pointer is NULL or an exclusively borrowed live context.
    unsafe {
        forward_raw(
            ctx,
            (&raw, &raw_exec),
            [q.as_ptr(), k.as_ptr(), v.as_ptr()],
            raw_mask.as_ref(),
            out.as_mut_ptr(),
            lse_ptr,
        )
    }
}

/// The one C call of the host and the device path: `jattn_forward_masked`, its status as a
/// `Result` with the library's message.
///
/// # Safety
/// `ctx` is NULL or a live context nobody else uses; the pointers meet jattn_forward_masked's
/// contract for the problem and exec given (memory valid for the extents the problem's strides
/// address, in the memory `exec` says, not written by anyone else during the call).
pub(crate) unsafe fn forward_raw(
    ctx: *mut ffi::jattn_ctx,
    (problem, exec): (&ffi::jattn_problem, &ffi::jattn_exec),
    [q, k, v]: [*const f32; 3],
    mask: Option<&ffi::jattn_mask>,
    out: *mut f32,
    lse: *mut f32,
) -> Result<(), Error> {
    let mask = mask.map_or(ptr::null(), ptr::from_ref);
    // SAFETY: the caller's obligations are this call's.
    let status =
        unsafe { ffi::jattn_forward_masked(ctx, problem, exec, q.cast(), k.cast(), v.cast(), mask, out.cast(), lse) };
    Error::check(status)
}

/// A reusable context (`jattn_ctx`): it keeps grow-only buffers between calls (the host
/// workspace; for the cuda backend, device buffers), so repeated calls of one size allocate
/// nothing after the first. Calls of other sizes may use the same context.
///
/// `Send` but not `Sync`, as the C contract says (a context may be used by one thread at a
/// time): it can move to another thread, and every call borrows it exclusively.
///
/// ```
/// use jattn::{Context, Exec, Problem, Tensor};
/// let mut ctx = Context::new()?;
/// for seq in [77, 512, 77] {
///     let p = Problem::flux(1, 2, seq, seq, 64);
///     let x = vec![0.5f32; p.required_len(Tensor::Q)?];
///     let mut out = vec![0.0f32; p.required_len(Tensor::Out)?];
///     ctx.forward(&p, &Exec::default(), &x, &x, &x, &mut out, None)?;
/// }
/// # Ok::<(), jattn::Error>(())
/// ```
pub struct Context {
    raw: NonNull<ffi::jattn_ctx>,
}

// SAFETY: jattn.h: "A context may be used by one thread at a time." It holds heap buffers
// (host, and device memory of the process), nothing tied to the thread that made it. Every use
// takes `&mut self`, and Context is not Sync.
unsafe impl Send for Context {}

impl Context {
    /// A new, empty context.
    ///
    /// # Errors
    /// [`Status::OutOfMemory`] when its allocation fails.
    pub fn new() -> Result<Context, Error> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid place for the result.
        Error::check(unsafe { ffi::jattn_ctx_create(&mut raw) })?;
        NonNull::new(raw)
            .map(|raw| Context { raw })
            .ok_or_else(|| Error::new(Status::OutOfMemory, "ctx: jattn_ctx_create gave no context"))
    }

    /// [`forward`](crate::forward) with this context's buffers.
    ///
    /// # Errors
    /// As [`forward`](crate::forward).
    #[allow(clippy::too_many_arguments)] // the arguments of forward, and self
    pub fn forward(
        &mut self,
        problem: &Problem,
        exec: &Exec,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
        lse: Option<&mut [f32]>,
    ) -> Result<(), Error> {
        forward_host(self.raw.as_ptr(), problem, exec, q, k, v, None, out, lse)
    }

    /// [`forward_padded`](crate::forward_padded) with this context's buffers.
    ///
    /// # Errors
    /// As [`forward_padded`](crate::forward_padded).
    #[allow(clippy::too_many_arguments)] // the arguments of forward_padded, and self
    pub fn forward_padded(
        &mut self,
        problem: &Problem,
        exec: &Exec,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        padding: &KeyPadding<'_>,
        out: &mut [f32],
        lse: Option<&mut [f32]>,
    ) -> Result<(), Error> {
        let mask = Mask::none().with_padding(*padding);
        forward_host(self.raw.as_ptr(), problem, exec, q, k, v, Some(&mask), out, lse)
    }

    /// [`forward_masked`](crate::forward_masked) with this context's buffers.
    ///
    /// # Errors
    /// As [`forward_masked`](crate::forward_masked).
    #[allow(clippy::too_many_arguments)] // the arguments of forward_masked, and self
    pub fn forward_masked(
        &mut self,
        problem: &Problem,
        exec: &Exec,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: &Mask<'_>,
        out: &mut [f32],
        lse: Option<&mut [f32]>,
    ) -> Result<(), Error> {
        forward_host(self.raw.as_ptr(), problem, exec, q, k, v, Some(mask), out, lse)
    }

    /// The C context, for calls through `jattn-sys`. It stays owned by this `Context` (do not
    /// free it) and valid while the exclusive borrow lasts.
    pub fn as_mut_ptr(&mut self) -> *mut ffi::jattn_ctx {
        self.raw.as_ptr()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context came from jattn_ctx_create and is freed once, here.
        unsafe { ffi::jattn_ctx_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("raw", &self.raw).finish()
    }
}
