//! The backward (training): [`backward`], [`backward_masked`] and [`select_backward`].

use std::ptr;

use jattn_sys as ffi;

use crate::call::check_len;
use crate::error::Error;
use crate::exec::{Exec, Selection};
use crate::mask::Mask;
use crate::padding::KeyPadding;
use crate::problem::{Problem, Tensor};

/// What the backward reads: the forward's inputs, its output and log-sum-exp, and the gradient
/// flowing into them. Every tensor at the problem's strides (`dout` at the output's); `lse` and
/// `dlse` are `[B, H, Sq]` contiguous. Any of the slices may be the same memory. The gradients
/// are written at the strides of the tensors they belong to (dq like q, dk like k, dv like v).
#[derive(Clone, Copy, Debug)]
pub struct BackwardInputs<'a> {
    /// The queries, as given to the forward.
    pub q: &'a [f32],
    /// The keys.
    pub k: &'a [f32],
    /// The values.
    pub v: &'a [f32],
    /// The forward's output (or the global output of a larger attention these keys are part of).
    pub out: &'a [f32],
    /// The forward's log-sum-exp, `[B, H, Sq]`.
    pub lse: &'a [f32],
    /// The gradient of the output, at the output's strides.
    pub dout: &'a [f32],
    /// The gradient of the log-sum-exp, `[B, H, Sq]`, when the lse output has one.
    pub dlse: Option<&'a [f32]>,
}

/// Which backend and kernel [`backward`] would run for `problem` under `exec` (host memory).
///
/// # Errors
/// As [`select`](crate::select); [`Status::Unsupported`](crate::Status::Unsupported) from a
/// backend without a backward.
pub fn select_backward(problem: &Problem, exec: &Exec) -> Result<Selection, Error> {
    let raw = problem.raw()?;
    let raw_exec = exec.to_raw(ffi::JATTN_MEMORY_HOST)?;
    let mut sel = Selection::raw_empty();
    // SAFETY: the pointers are to live values; jattn_backward_select reads the first two and
    // writes the third only.
    Error::check(unsafe { ffi::jattn_backward_select(&raw, &raw_exec, &mut sel) })?;
    Ok(Selection::from_raw(&sel))
}

/// The slice lengths of a backward run against `problem`: every input and gradient holds the
/// elements its strides address. @return the dlse pointer (NULL when none).
pub(crate) fn check_backward_lens(
    problem: &Problem,
    inputs: &BackwardInputs<'_>,
    dq: &[f32],
    dk: &[f32],
    dv: &[f32],
) -> Result<*const f32, Error> {
    let (nq, nk, nv, no, nl) = (
        problem.required_len(Tensor::Q)?,
        problem.required_len(Tensor::K)?,
        problem.required_len(Tensor::V)?,
        problem.required_len(Tensor::Out)?,
        problem.lse_len()?,
    );
    check_len("q", inputs.q.len(), nq)?;
    check_len("k", inputs.k.len(), nk)?;
    check_len("v", inputs.v.len(), nv)?;
    check_len("out", inputs.out.len(), no)?;
    check_len("lse", inputs.lse.len(), nl)?;
    check_len("dout", inputs.dout.len(), no)?;
    let dlse = match inputs.dlse {
        Some(d) => {
            check_len("dlse", d.len(), nl)?;
            d.as_ptr()
        }
        None => ptr::null(),
    };
    check_len("dq", dq.len(), nq)?;
    check_len("dk", dk.len(), nk)?;
    check_len("dv", dv.len(), nv)?;
    Ok(dlse)
}

/// The gradients of the attention of `problem` with respect to q, k and v (`jattn_backward`):
/// `dq`, `dk` and `dv` are overwritten, at the strides of q, k and v. Deterministic: bitwise
/// identical across runs and CPU thread counts. With `padding`, keys that are not attended are
/// never read and get `dk` = `dv` = +0 rows; a query row with no key gets a `dq` row of +0.
///
/// ```
/// use jattn::{BackwardInputs, Exec, Problem, Tensor};
/// let p = Problem::flux(1, 2, 64, 64, 32);
/// let n = p.required_len(Tensor::Q)?;
/// let x = |s: f32| (0..n).map(|i| (i as f32 * s).sin()).collect::<Vec<f32>>();
/// let (q, k, v, dout) = (x(0.37), x(0.61), x(0.23), x(0.11));
/// let mut out = vec![0.0f32; p.required_len(Tensor::Out)?];
/// let mut lse = vec![0.0f32; p.lse_len()?];
/// jattn::forward(&p, &Exec::default(), &q, &k, &v, &mut out, Some(&mut lse))?;
/// let (mut dq, mut dk, mut dv) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
/// let inputs = BackwardInputs { q: &q, k: &k, v: &v, out: &out, lse: &lse, dout: &dout, dlse: None };
/// jattn::backward(&p, &Exec::default(), &inputs, None, &mut dq, &mut dk, &mut dv)?;
/// assert!(dq.iter().chain(&dk).chain(&dv).all(|g| g.is_finite()));
/// # Ok::<(), jattn::Error>(())
/// ```
///
/// # Errors
/// Nothing is written on failure. The problem is checked and the backend chosen first (as
/// [`select_backward`]); then every slice against the extent its strides address: a shorter one
/// is [`Status::InvalidArgument`](crate::Status::InvalidArgument). Padding as in
/// [`forward_padded`](crate::forward_padded).
pub fn backward(
    problem: &Problem,
    exec: &Exec,
    inputs: &BackwardInputs<'_>,
    padding: Option<&KeyPadding<'_>>,
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) -> Result<(), Error> {
    let mask = Mask::none().with_padding(padding.copied().unwrap_or_default());
    backward_masked(problem, exec, inputs, &mask, dq, dk, dv)
}

/// The gradients of [`forward_masked`](crate::forward_masked)'s attention
/// (`jattn_backward_masked`): [`backward`] with a [`Mask`]. With grouped-query heads, dk and dv
/// of a key/value head sum over the query heads that read it; the key bias gets no gradient.
///
/// # Errors
/// As [`backward`], and the mask's as [`forward_masked`](crate::forward_masked)'s.
pub fn backward_masked(
    problem: &Problem,
    exec: &Exec,
    inputs: &BackwardInputs<'_>,
    mask: &Mask<'_>,
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) -> Result<(), Error> {
    let raw = problem.raw()?;
    let raw_exec = exec.to_raw(ffi::JATTN_MEMORY_HOST)?;
    select_backward(problem, exec)?;
    let dlse = check_backward_lens(problem, inputs, dq, dk, dv)?;
    let raw_mask = if mask.is_none() { None } else { Some(mask.raw(problem)?) };
    let mask_ptr = raw_mask.as_ref().map_or(ptr::null(), ptr::from_ref);
    // SAFETY: `raw` and `raw_exec` describe this problem with host memory; every slice holds at
    // least the elements its strides address (checked above with the library's own extents;
    // the gradients have the strides of q, k, v and dout those of out: a NULL grad strides), as
    // do the mask's arrays (Mask::raw). The inputs are only read; dq, dk, dv are exclusive
    // borrows, so they overlap no input and no other gradient.
    let status = unsafe {
        ffi::jattn_backward_masked(
            ptr::null_mut(),
            &raw,
            ptr::null(),
            &raw_exec,
            inputs.q.as_ptr().cast(),
            inputs.k.as_ptr().cast(),
            inputs.v.as_ptr().cast(),
            inputs.out.as_ptr().cast(),
            inputs.lse.as_ptr(),
            inputs.dout.as_ptr().cast(),
            dlse,
            mask_ptr,
            dq.as_mut_ptr().cast(),
            dk.as_mut_ptr().cast(),
            dv.as_mut_ptr().cast(),
        )
    };
    Error::check(status)
}
