//! [`Plan`]: decide once, run many times (`jattn_plan_*`).

use std::fmt;
use std::ptr::{self, NonNull};

use jattn_sys as ffi;

use crate::backward::{BackwardInputs, check_backward_lens};
use crate::call::{Context, check_len};
use crate::error::{Error, Status};
use crate::exec::{Exec, Selection};
use crate::mask::Mask;
use crate::problem::{Problem, Tensor};

/// The pass a [`Plan`] is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pass {
    /// The forward: [`Plan::forward`] runs it.
    Forward,
    /// The backward: [`Plan::backward`] runs it.
    Backward,
}

impl Pass {
    /// The C number (`jattn_pass`).
    pub const fn code(self) -> i32 {
        match self {
            Pass::Forward => ffi::JATTN_PASS_FORWARD,
            Pass::Backward => ffi::JATTN_PASS_BACKWARD,
        }
    }
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        })
    }
}

/// Where a run of a [`Plan`] finds the workspace its kernel needs
/// ([`Plan::workspace_size`] bytes).
#[derive(Debug, Default)]
pub enum Scratch<'a> {
    /// Allocated for the run and freed before it returns (none when the kernel needs none).
    #[default]
    Alloc,
    /// A context's grow-only buffers (allocation-free after the first run of a size).
    Context(&'a mut Context),
    /// A caller-owned host workspace of at least [`Plan::workspace_size`] bytes (any alignment:
    /// the library aligns inside it). Only for a plan whose backend works in host memory: the
    /// cuda backend's workspace is device memory, and a run of its plan with a host workspace is
    /// refused ([`Status::InvalidArgument`]).
    Workspace(&'a mut [u8]),
}

/// A plan (`jattn_plan`): a problem, a mask structure and an [`Exec`] validated once, and the
/// backend, kernel and workspace decided once, for a [`Pass`]. Each run only checks its slices
/// (lengths here, pointers in the library) and launches the kernel the plan names: what
/// [`selection`](Plan::selection) says is what runs, with no second decision. For calls made many
/// times: a model's layers, a training loop.
///
/// A plan is made for a mask *structure*: which parts of the [`Mask`] are set, and their counts
/// (the number of blocks and segments, the key mask's rows, the key bias's layout). A run gives
/// the mask's arrays, which may change from run to run; a run whose mask differs in structure is
/// refused ([`Status::InvalidArgument`], naming the part), as is a run of the other pass. The
/// arrays of the mask given to [`Plan::new`] are not read.
///
/// Plans are immutable: `Plan` is `Send` and `Sync`, and any number of threads may run one at
/// once (each with its own [`Scratch`]). It is freed when dropped.
///
/// ```
/// use jattn::{Backend, Causal, Exec, Mask, Pass, Plan, Problem, Scratch, Tensor};
/// let problem = Problem::flux(1, 4, 64, 64, 32);
/// let exec = Exec::new().with_backend(Backend::Ref);
/// let causal = Mask::none().with_causal(Causal::TopLeft);
/// let plan = Plan::new(Pass::Forward, &problem, &exec, Some(&causal))?;
/// println!("{} runs {}", plan.selection().backend, plan.selection().kernel);
/// let x = vec![0.5f32; problem.required_len(Tensor::Q)?];
/// let mut out = vec![0.0f32; problem.required_len(Tensor::Out)?];
/// for _layer in 0..3 {
///     plan.forward(Scratch::Alloc, &x, &x, &x, Some(&causal), &mut out, None)?;
/// }
/// # Ok::<(), jattn::Error>(())
/// ```
pub struct Plan {
    raw: NonNull<ffi::jattn_plan>,
    pass: Pass,
    problem: Problem,
    selection: Selection,
    workspace: usize,
    host_workspace: bool,
}

// SAFETY: jattn.h: "A plan is immutable: any number of threads may run it at once (each with its
// own context, stream and workspace)." It holds no thread-bound state; it is freed once, by Drop.
unsafe impl Send for Plan {}
// SAFETY: as above: every method takes `&self` and the C plan is never written after creation;
// each run brings its own scratch (an exclusive borrow of a context or workspace).
unsafe impl Sync for Plan {}

impl Plan {
    /// Makes a plan for `pass` of `problem` under `exec` (host memory), for masks of `mask`'s
    /// structure (`None`: runs without a mask). The backward's gradients are at the strides of
    /// the tensors they belong to (dq like q, dk like k, dv like v).
    ///
    /// # Errors
    /// What the one-call function would give for this problem: an invalid problem, exec or mask
    /// structure (the message names the field; a mask slice shorter than the problem needs),
    /// [`Status::Unsupported`] (no backend can run it: the reason named),
    /// [`Status::BackendUnavailable`], [`Status::OutOfMemory`].
    pub fn new(pass: Pass, problem: &Problem, exec: &Exec, mask: Option<&Mask<'_>>) -> Result<Plan, Error> {
        let raw_problem = problem.raw()?;
        let raw_exec = exec.to_raw(ffi::JATTN_MEMORY_HOST)?;
        let raw_mask = mask.map(|m| m.raw(problem)).transpose()?;
        let mut raw = ptr::null_mut();
        // SAFETY: pointers to live values (the mask's arrays are not read: jattn_plan_create takes
        // the structure only); `raw` is written on success only.
        Error::check(unsafe {
            ffi::jattn_plan_create(
                &mut raw,
                pass.code(),
                &raw_problem,
                ptr::null(),
                raw_mask.as_ref().map_or(ptr::null(), ptr::from_ref),
                &raw_exec,
            )
        })?;
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::new(Status::OutOfMemory, "plan: jattn_plan_create gave no plan"))?;
        let mut plan = Plan {
            raw,
            pass,
            problem: *problem,
            selection: Selection::from_raw(&Selection::raw_empty()),
            workspace: 0,
            host_workspace: true,
        };
        let mut sel = Selection::raw_empty();
        // SAFETY: a live plan; `sel` is written only.
        Error::check(unsafe { ffi::jattn_plan_selection(plan.raw.as_ptr(), &mut sel) })?;
        plan.selection = Selection::from_raw(&sel);
        // SAFETY: a live plan.
        plan.workspace = unsafe { ffi::jattn_plan_workspace_size(plan.raw.as_ptr()) };
        plan.host_workspace = plan.selection.backend.info().is_none_or(|b| !b.on_device);
        Ok(plan)
    }

    /// The pass the plan was made for.
    pub const fn pass(&self) -> Pass {
        self.pass
    }

    /// The problem the plan was made for.
    pub const fn problem(&self) -> &Problem {
        &self.problem
    }

    /// What the plan's runs launch: backend, kernel, instruction set, threads
    /// (`jattn_plan_selection`). For an empty problem (no query or no key) the kernel is
    /// `"none (...)"`: the library writes the answer itself.
    pub const fn selection(&self) -> Selection {
        self.selection
    }

    /// The bytes of workspace a run needs when the caller provides one ([`Scratch::Workspace`]);
    /// 0 when none (`jattn_plan_workspace_size`).
    pub const fn workspace_size(&self) -> usize {
        self.workspace
    }

    /// The C plan, for calls through `jattn-sys`. It stays owned by this `Plan` (do not free it).
    pub const fn as_ptr(&self) -> *const ffi::jattn_plan {
        self.raw.as_ptr()
    }

    /// The context and workspace pointers of a run's scratch.
    fn scratch(&self, scratch: Scratch<'_>) -> Result<(*mut ffi::jattn_ctx, *mut u8, usize), Error> {
        Ok(match scratch {
            Scratch::Alloc => (ptr::null_mut(), ptr::null_mut(), 0),
            Scratch::Context(ctx) => (ctx.as_mut_ptr(), ptr::null_mut(), 0),
            Scratch::Workspace(ws) => {
                if !self.host_workspace {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "workspace: the {} backend's workspace is device memory; a host slice cannot serve it \
                             (use Scratch::Alloc or Scratch::Context)",
                            self.selection.backend
                        ),
                    ));
                }
                (ptr::null_mut(), ws.as_mut_ptr(), ws.len())
            }
        })
    }

    /// A run of the other pass: the library's refusal, asked with no data (it refuses before
    /// looking at any pointer; with NULL pointers nothing could be read in any case).
    fn refuse_pass(&self, run: Pass) -> Error {
        let plan = self.raw.as_ptr();
        let (n, m) = (ptr::null::<std::ffi::c_void>(), ptr::null_mut::<std::ffi::c_void>());
        let (nf, mf) = (ptr::null::<f32>(), ptr::null_mut::<f32>());
        // SAFETY: a live plan and NULL pointers only: nothing is read or written through them.
        let status = unsafe {
            match run {
                Pass::Forward => ffi::jattn_plan_forward(plan, ptr::null_mut(), m, m, 0, n, n, n, ptr::null(), m, mf),
                Pass::Backward => ffi::jattn_plan_backward(
                    plan,
                    ptr::null_mut(),
                    m,
                    m,
                    0,
                    n,
                    n,
                    n,
                    n,
                    nf,
                    n,
                    nf,
                    ptr::null(),
                    m,
                    m,
                    m,
                ),
            }
        };
        Error::check(status).err().unwrap_or_else(|| {
            Error::new(Status::InvalidArgument, format!("plan: made for the {}, run as the {run}", self.pass))
        })
    }

    /// Runs a forward plan (`jattn_plan_forward`): as [`forward_masked`](crate::forward_masked)
    /// with the plan's problem, exec and mask structure; `mask` gives this run's arrays (`None`
    /// for a plan made without a mask).
    ///
    /// # Errors
    /// Nothing is written on failure. [`Status::InvalidArgument`]: a backward plan, a mask of
    /// another structure than the plan's (naming the part), a slice shorter than its strides
    /// address or less aligned than the plan's [`Exec::with_alignment`]; the mask's values as
    /// [`forward_masked`](crate::forward_masked); [`Status::WorkspaceTooSmall`],
    /// [`Status::OutOfMemory`].
    #[allow(clippy::too_many_arguments)] // the tensors of a forward, the mask and the scratch
    pub fn forward(
        &self,
        scratch: Scratch<'_>,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&Mask<'_>>,
        out: &mut [f32],
        lse: Option<&mut [f32]>,
    ) -> Result<(), Error> {
        if self.pass != Pass::Forward {
            return Err(self.refuse_pass(Pass::Forward));
        }
        let p = &self.problem;
        check_len("q", q.len(), p.required_len(Tensor::Q)?)?;
        check_len("k", k.len(), p.required_len(Tensor::K)?)?;
        check_len("v", v.len(), p.required_len(Tensor::V)?)?;
        check_len("out", out.len(), p.required_len(Tensor::Out)?)?;
        let lse_ptr = match lse {
            Some(lse) => {
                check_len("lse", lse.len(), p.lse_len()?)?;
                lse.as_mut_ptr()
            }
            None => ptr::null_mut(),
        };
        let raw_mask = mask.map(|m| m.raw(p)).transpose()?;
        let (ctx, ws, ws_bytes) = self.scratch(scratch)?;
        // SAFETY: a live plan made for host memory and this problem; every slice holds at least
        // the elements its strides address (checked above with the library's extents), and so do
        // the mask's arrays (Mask::raw). Inputs are only read; out, lse, the context and the
        // workspace are exclusive borrows (the workspace: host memory, of the length given).
        let status = unsafe {
            ffi::jattn_plan_forward(
                self.raw.as_ptr(),
                ctx,
                ptr::null_mut(),
                ws.cast(),
                ws_bytes,
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                raw_mask.as_ref().map_or(ptr::null(), ptr::from_ref),
                out.as_mut_ptr().cast(),
                lse_ptr,
            )
        };
        Error::check(status)
    }

    /// Runs a backward plan (`jattn_plan_backward`): as
    /// [`backward_masked`](crate::backward_masked) with the plan's problem, exec and mask
    /// structure; `mask` gives this run's arrays.
    ///
    /// # Errors
    /// As [`Plan::forward`] (a forward plan is refused), and the slices as
    /// [`backward`](crate::backward).
    pub fn backward(
        &self,
        scratch: Scratch<'_>,
        inputs: &BackwardInputs<'_>,
        mask: Option<&Mask<'_>>,
        dq: &mut [f32],
        dk: &mut [f32],
        dv: &mut [f32],
    ) -> Result<(), Error> {
        if self.pass != Pass::Backward {
            return Err(self.refuse_pass(Pass::Backward));
        }
        let dlse = check_backward_lens(&self.problem, inputs, dq, dk, dv)?;
        let raw_mask = mask.map(|m| m.raw(&self.problem)).transpose()?;
        let (ctx, ws, ws_bytes) = self.scratch(scratch)?;
        // SAFETY: as in forward: every slice checked against its extent, the mask's arrays by
        // Mask::raw; dq, dk, dv, the context and the workspace are exclusive borrows.
        let status = unsafe {
            ffi::jattn_plan_backward(
                self.raw.as_ptr(),
                ctx,
                ptr::null_mut(),
                ws.cast(),
                ws_bytes,
                inputs.q.as_ptr().cast(),
                inputs.k.as_ptr().cast(),
                inputs.v.as_ptr().cast(),
                inputs.out.as_ptr().cast(),
                inputs.lse.as_ptr(),
                inputs.dout.as_ptr().cast(),
                dlse,
                raw_mask.as_ref().map_or(ptr::null(), ptr::from_ref),
                dq.as_mut_ptr().cast(),
                dk.as_mut_ptr().cast(),
                dv.as_mut_ptr().cast(),
            )
        };
        Error::check(status)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: the plan came from jattn_plan_create and is freed once, here.
        unsafe { ffi::jattn_plan_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("pass", &self.pass)
            .field("problem", &self.problem)
            .field("selection", &self.selection)
            .field("workspace", &self.workspace)
            .finish()
    }
}
