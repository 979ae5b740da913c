//! Safe Rust bindings of **jattn**: exact float32 multi-head attention for diffusion
//! transformers (FLUX-style joint attention over text + image tokens) on CPUs (AVX-512, AVX2,
//! NEON; OpenMP threads) and NVIDIA GPUs.
//!
//! For every batch b and head h (by default non-causal: every query sees every key):
//!
//! ```text
//! S[i,j]     = scale * Σ_d q[b,h,i,d] k[b,g,j,d] + bias[b,h,j]   scale = 1/sqrt(D) unless set
//! out[i,:]   = softmax(S[i,:]) · v[b,g,:,:]                      over the keys row i attends
//! lse[b,h,i] = log Σ_j exp(S[i,j])                                (optional output)
//! ```
//!
//! with g = h / (H / Hkv) the key/value head of query head h (grouped-query heads; g = h by
//! default), the key bias 0 and every key attended unless a [`Mask`] says otherwise.
//!
//! with the float32 accuracy contract of the C library on every backend: rel_l2 <= 2e-6,
//! max_abs <= 1e-5 · max(1, max|ref|) and cosine >= 0.99999 against a float64 evaluation.
//!
//! # The FLUX call
//!
//! ```
//! use jattn::{Exec, Problem, Tensor};
//! // q, k, v head-major [H, S, D] after RoPE; out token-major [S, H*D].
//! let problem = Problem::flux(1, 24, 1536, 1536, 128);
//! # let n = problem.required_len(Tensor::Q)?;
//! # let (q, k, v) = (vec![0.1f32; n], vec![0.2f32; n], vec![0.3f32; n]);
//! let mut out = vec![0.0f32; problem.required_len(Tensor::Out)?];
//! jattn::forward(&problem, &Exec::default(), &q, &k, &v, &mut out, None)?;
//! # Ok::<(), jattn::Error>(())
//! ```
//!
//! * [`Problem`] describes the call: [`Problem::flux`] and `with_*` for other [`Layout`]s
//!   (head-major, token-major, explicit [`Strides`]: padded rows, fused QKV views), the scale and
//!   grouped-query heads ([`Problem::with_kv_heads`]). Batch, heads and sequences may be 0.
//! * [`Exec`] says how it runs ([`Backend`], [`Precision`], threads); [`select`] says which
//!   backend and kernel would run it.
//! * [`forward`] computes it on host slices; [`forward_padded`] with [`KeyPadding`] (key
//!   lengths, a boolean mask); [`forward_masked`] with a [`Mask`] ([`Causal`], [`Blocks`],
//!   [`Segments`], [`KeyBias`], key padding); a [`Context`] keeps buffers between calls.
//! * [`backward`] and [`backward_masked`] compute the gradients (training).
//! * A [`Plan`] decides the backend, kernel and workspace once, for a [`Pass`] and a mask
//!   structure, and runs many times (from any number of threads).
//! * [`forward_device`] (`unsafe`) runs on CUDA device pointers and a stream.
//!
//! # Safety of the host path
//!
//! No safe call can make the library read or write out of bounds: before the C call, every
//! slice is checked against the extent its strides address (`1 + Σ (extent − 1) · stride`,
//! overflow-checked, [`Problem::required_len`]); the C library validates the rest (dimensions,
//! scale, strides that overlap, backend limits). `out` and `lse` are exclusive borrows, so
//! they cannot alias the inputs. Bad input is an [`Error`] — with the library's [`Status`] and
//! its message — never a panic.
//!
//! # Linking
//!
//! `jattn-sys` builds libjattn from the C sources with CMake and links it statically (CUDA
//! backend included when `nvcc` is found); the feature `system` links an installed libjattn
//! found by `pkg-config` instead.
#![deny(missing_docs, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
// No panic on any input: no unwrap, no indexing, no unchecked arithmetic.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]

mod backward;
mod call;
mod device;
mod error;
mod exec;
mod mask;
mod padding;
mod plan;
mod problem;

pub use backward::{BackwardInputs, backward, backward_masked, select_backward};
pub use call::{Context, forward, forward_masked, forward_padded};
pub use device::{
    DeviceKeyPadding, DeviceTensors, DeviceWorkspace, device_workspace_size, forward_device, select_device,
};
pub use error::{Error, Status};
pub use exec::{Backend, BackendInfo, Exec, Precision, Selection, backends, select};
pub use mask::{Blocks, Causal, KeyBias, Mask, Segments};
pub use padding::{KeyPadding, MaskElement};
pub use plan::{Pass, Plan, Scratch};
pub use problem::{Layout, Problem, Strides, Tensor};

/// The raw C API (`jattn-sys`), for what the safe API does not cover.
pub use jattn_sys as sys;

/// The version of the linked library, e.g. `"0.4.0"` (`jattn_version_string`).
pub fn version() -> &'static str {
    // SAFETY: no arguments; the result is a static string.
    error::static_str(unsafe { sys::jattn_version_string() })
}

/// The version of the linked library as major · 10000 + minor · 100 + patch
/// (`jattn_version_number`).
pub fn version_number() -> u32 {
    // SAFETY: no arguments.
    unsafe { sys::jattn_version_number() }
}
