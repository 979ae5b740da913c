//! [`Exec`] (how a call runs), [`Selection`] (what would run) and [`select`].

use std::ffi::c_int;
use std::fmt;

use jattn_sys as ffi;

use crate::error::{Error, Status, static_str};
use crate::problem::Problem;

/// Which backend runs a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// The best backend present that can run the problem: cuda, then vk (a GPU), then cpu, then ref.
    #[default]
    Auto,
    /// The float64 scalar reference: the oracle of jattn's tests (slow).
    Ref,
    /// Flash attention on the CPU: SIMD micro-kernels (AVX-512F, AVX2+FMA, NEON), OpenMP threads.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
    /// Any Vulkan GPU (Apple through MoltenVK, AMD, Intel, NVIDIA), host memory; `auto` never
    /// picks a software Vulkan device such as lavapipe.
    Vk,
}

impl Backend {
    /// Every backend, in the order of their C numbers.
    pub const ALL: [Backend; 5] = [Backend::Auto, Backend::Ref, Backend::Cpu, Backend::Cuda, Backend::Vk];

    /// The C number (`jattn_backend`).
    pub const fn code(self) -> i32 {
        match self {
            Backend::Auto => ffi::JATTN_BACKEND_AUTO,
            Backend::Ref => ffi::JATTN_BACKEND_REF,
            Backend::Cpu => ffi::JATTN_BACKEND_CPU,
            Backend::Cuda => ffi::JATTN_BACKEND_CUDA,
            Backend::Vk => ffi::JATTN_BACKEND_VK,
        }
    }

    /// The backend of a C number; `None` for one this crate does not know.
    pub fn from_code(code: i32) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.code() == code)
    }

    /// The library's name of the backend: `"auto"`, `"ref"`, `"cpu"`, `"cuda"`, `"vk"`.
    pub fn name(self) -> &'static str {
        // SAFETY: any number is valid input; the result is NULL or a static string.
        static_str(unsafe { ffi::jattn_backend_name(self.code()) })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The arithmetic a backend may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Precision {
    /// float32-exact (rel_l2 <= 2e-6 against float64), on every backend. The default.
    #[default]
    F32,
    /// Opt-in, GPU only: TF32 tensor-core products, rel_l2 <= 1e-3.
    Tf32,
}

impl Precision {
    /// The C number (`jattn_precision`).
    pub const fn code(self) -> i32 {
        match self {
            Precision::F32 => ffi::JATTN_PRECISION_F32,
            Precision::Tf32 => ffi::JATTN_PRECISION_TF32,
        }
    }
}

/// How a call runs: backend, precision and CPU threads. `Exec::default()` is the best backend
/// present, float32 precision, all CPU cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exec {
    backend: Backend,
    precision: Precision,
    threads: usize,
}

impl Exec {
    /// The defaults: [`Backend::Auto`], [`Precision::F32`], all CPU cores.
    pub const fn new() -> Exec {
        Exec { backend: Backend::Auto, precision: Precision::F32, threads: 0 }
    }

    /// These settings on `backend`.
    #[must_use]
    pub const fn with_backend(mut self, backend: Backend) -> Exec {
        self.backend = backend;
        self
    }

    /// These settings with `precision`.
    #[must_use]
    pub const fn with_precision(mut self, precision: Precision) -> Exec {
        self.precision = precision;
        self
    }

    /// These settings with `threads` CPU threads (0: all cores; at most `c_int::MAX`).
    #[must_use]
    pub const fn with_threads(mut self, threads: usize) -> Exec {
        self.threads = threads;
        self
    }

    /// The backend.
    pub const fn backend(&self) -> Backend {
        self.backend
    }

    /// The precision.
    pub const fn precision(&self) -> Precision {
        self.precision
    }

    /// The CPU threads asked for (0: all cores).
    pub const fn threads(&self) -> usize {
        self.threads
    }

    /// The C settings for pointers in `memory`, with no stream and no workspace.
    pub(crate) fn to_raw(self, memory: ffi::jattn_memory) -> Result<ffi::jattn_exec, Error> {
        let threads = c_int::try_from(self.threads).map_err(|_| {
            Error::new(Status::InvalidArgument, format!("exec.threads: {}, more than an int holds", self.threads))
        })?;
        Ok(ffi::jattn_exec {
            backend: self.backend.code(),
            precision: self.precision.code(),
            memory,
            threads,
            ..ffi::jattn_exec::default()
        })
    }
}

/// What a backend would run for a problem: the answer of [`select`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Selection {
    /// The backend chosen (never [`Backend::Auto`]).
    pub backend: Backend,
    /// The kernel that runs, e.g. `"cpu_flash_f32_avx512_4x48"`.
    pub kernel: &'static str,
    /// Its instruction set: `"scalar"`, `"avx512"`, `"avx2"`, `"neon"`, `"generic"`, `"sm_90a"`, ...
    pub isa: &'static str,
    /// The CPU threads it would use (1 for GPU backends).
    pub threads: usize,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({}, {} threads)", self.backend, self.kernel, self.isa, self.threads)
    }
}

/// The C selection for a C problem and exec; the same function the forward call dispatches with.
pub(crate) fn select_raw(problem: &ffi::jattn_problem, exec: &ffi::jattn_exec) -> Result<Selection, Error> {
    let mut sel = ffi::jattn_selection {
        backend: ffi::JATTN_BACKEND_AUTO,
        backend_name: std::ptr::null(),
        kernel: std::ptr::null(),
        isa: std::ptr::null(),
        threads: 0,
    };
    // SAFETY: the pointers are to live values; jattn_select reads the first two and writes the
    // third only.
    Error::check(unsafe { ffi::jattn_select(problem, exec, &mut sel) })?;
    Ok(Selection {
        // jattn never selects a backend it does not have a number for; Auto marks the impossible.
        backend: Backend::from_code(sel.backend).unwrap_or(Backend::Auto),
        kernel: static_str(sel.kernel),
        isa: static_str(sel.isa),
        threads: usize::try_from(sel.threads).unwrap_or(0),
    })
}

/// Which backend and kernel [`forward`](crate::forward) would run for `problem` under `exec`
/// (host memory), with the same checks of the problem: `Ok` means the backend can run it.
///
/// # Errors
/// The status of the first problem found: an invalid problem, [`Status::Unsupported`] with the
/// limit named, or [`Status::BackendUnavailable`].
///
/// ```
/// let sel = jattn::select(&jattn::Problem::flux(1, 24, 1536, 1536, 128), &jattn::Exec::default())?;
/// println!("{} runs {}", sel.backend, sel.kernel);
/// # Ok::<(), jattn::Error>(())
/// ```
pub fn select(problem: &Problem, exec: &Exec) -> Result<Selection, Error> {
    select_raw(&problem.raw()?, &exec.to_raw(ffi::JATTN_MEMORY_HOST)?)
}
