//! [`Exec`] (how a call runs), [`Selection`] (what would run), [`select`], and the backends:
//! [`Backend`] and what the library says of each, [`backends`].

use std::ffi::c_int;
use std::fmt;
use std::str::FromStr;

use jattn_sys as ffi;

use crate::error::{Error, Status, static_str};
use crate::problem::Problem;

/// Declares [`Backend`] from one `Variant = C_CONSTANT` line per backend; what each backend is
/// (its name, AUTO's order, whether it is a GPU) is the library's answer, [`backends`].
macro_rules! backend_enum {
    ($($(#[$attr:meta])* $variant:ident = $code:ident,)*) => {
        /// Which backend runs a call. [`backends`] lists them, in the order [`Backend::Auto`]
        /// tries them, with what each runs on.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        #[repr(i32)]
        pub enum Backend {
            $($(#[$attr])* $variant = ffi::$code,)*
        }

        impl Backend {
            /// Every value this crate knows, [`Backend::Auto`] included.
            const KNOWN: &[Backend] = &[$(Backend::$variant),*];
        }
    };
}

backend_enum! {
    /// The first backend, in the library's order ([`backends`]), that is present and can run
    /// the problem; a software Vulkan device (lavapipe) is never picked.
    #[default]
    Auto = JATTN_BACKEND_AUTO,
    /// The float64 scalar reference: the oracle of jattn's tests (slow).
    Ref = JATTN_BACKEND_REF,
    /// Flash attention on the CPU: SIMD micro-kernels (AVX-512F, AVX2+FMA, NEON), OpenMP threads.
    Cpu = JATTN_BACKEND_CPU,
    /// NVIDIA GPUs.
    Cuda = JATTN_BACKEND_CUDA,
    /// Any Vulkan GPU (Apple through MoltenVK, AMD, Intel, NVIDIA), host memory.
    Vk = JATTN_BACKEND_VK,
}

impl Backend {
    /// The C number (`jattn_backend`).
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The backend of a C number; `None` for one this crate does not know.
    pub fn from_code(code: i32) -> Option<Backend> {
        Backend::KNOWN.iter().copied().find(|b| b.code() == code)
    }

    /// The library's name of the backend (`jattn_backend_name`), e.g. `"cpu"`; `"auto"` for
    /// [`Backend::Auto`].
    pub fn name(self) -> &'static str {
        // SAFETY: any number is valid input; the result is NULL or a static string.
        static_str(unsafe { ffi::jattn_backend_name(self.code()) })
    }

    /// What the library says of this backend; `None` for [`Backend::Auto`], which is a choice,
    /// not a backend.
    pub fn info(self) -> Option<BackendInfo> {
        backends().into_iter().find(|b| b.backend == self)
    }

    /// Whether the backend computes on a GPU (the library's answer; false for [`Backend::Auto`]).
    pub fn is_gpu(self) -> bool {
        self.info().is_some_and(|b| b.is_gpu)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// The backend of a library name (`"auto"` or one [`backends`] lists).
    fn from_str(name: &str) -> Result<Backend, Error> {
        Backend::KNOWN.iter().copied().find(|b| b.name() == name).ok_or_else(|| {
            let names: Vec<&str> = backends().iter().map(|b| b.name).collect();
            Error::new(Status::InvalidArgument, format!("backend: {name:?}, must be auto or one of {names:?}"))
        })
    }
}

/// One backend as the library describes it (`jattn_backend_info`): the answer of [`backends`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BackendInfo {
    /// The backend (never [`Backend::Auto`]).
    pub backend: Backend,
    /// Its name, e.g. `"cpu"`.
    pub name: &'static str,
    /// Whether it computes from CUDA device memory ([`forward_device`](crate::forward_device));
    /// host slices are then copied to the device and back. Otherwise from host memory.
    pub on_device: bool,
    /// Whether it computes on a GPU.
    pub is_gpu: bool,
    /// Whether [`backward`](crate::backward) can run on it.
    pub has_backward: bool,
    /// Its place in the order [`Backend::Auto`] tries backends: 0 first.
    pub auto_rank: usize,
}

/// Every backend of the library linked, in the order [`Backend::Auto`] tries them
/// (`jattn_backend_info_at`), whether or not it is built in or has a device here ([`select`]
/// says whether it can run). A backend of a newer library that this crate has no [`Backend`]
/// for is left out.
///
/// ```
/// for b in jattn::backends() {
///     println!("{} {}: GPU {}, backward {}", b.auto_rank, b.name, b.is_gpu, b.has_backward);
/// }
/// ```
pub fn backends() -> Vec<BackendInfo> {
    // SAFETY: no arguments.
    let count = unsafe { ffi::jattn_backend_info_count() };
    (0..count)
        .filter_map(|rank| {
            let mut info = ffi::jattn_backend_info::default();
            // SAFETY: `info` is a live value the call writes; a rank below the count is valid.
            let status = unsafe { ffi::jattn_backend_info_at(rank, &mut info) };
            if status != ffi::JATTN_OK {
                return None;
            }
            Some(BackendInfo {
                backend: Backend::from_code(info.backend)?,
                name: static_str(info.name),
                on_device: info.memory == ffi::JATTN_MEMORY_DEVICE,
                is_gpu: info.is_gpu != 0,
                has_backward: info.has_backward != 0,
                auto_rank: usize::try_from(info.auto_rank).ok()?,
            })
        })
        .collect()
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

/// How a call runs: backend, precision, CPU threads, and (for a [`Plan`](crate::Plan)) the
/// alignment of its slices. `Exec::default()` is the best backend present, float32 precision, all
/// CPU cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exec {
    backend: Backend,
    precision: Precision,
    threads: usize,
    alignment: usize,
}

impl Exec {
    /// The defaults: [`Backend::Auto`], [`Precision::F32`], all CPU cores.
    pub const fn new() -> Exec {
        Exec { backend: Backend::Auto, precision: Precision::F32, threads: 0, alignment: 0 }
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

    /// These settings for a [`Plan`](crate::Plan) whose runs' slices are all `alignment`-byte
    /// aligned (a power of two >= 4): a kernel that needs more is not chosen, and a run whose
    /// slice is less aligned is refused ([`Status::InvalidArgument`] naming it). 0, the default,
    /// is 4: any `f32` slice, views at any offset included (what a slice guarantees); 16 or more
    /// lets a plan choose kernels with wider loads (a `Vec` is 16-byte aligned). The one-call
    /// functions read their slices' own alignment and ignore it.
    #[must_use]
    pub const fn with_alignment(mut self, alignment: usize) -> Exec {
        self.alignment = alignment;
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

    /// The alignment a plan assumes (0: 4 bytes, any `f32` slice).
    pub const fn alignment(&self) -> usize {
        self.alignment
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
            // 0 is what a slice guarantees: 4 bytes (C's 0 would mean 16)
            alignment: if self.alignment == 0 { std::mem::align_of::<f32>() } else { self.alignment },
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

impl Selection {
    /// An empty C selection, for a call to fill.
    pub(crate) fn raw_empty() -> ffi::jattn_selection {
        ffi::jattn_selection {
            backend: ffi::JATTN_BACKEND_AUTO,
            backend_name: std::ptr::null(),
            kernel: std::ptr::null(),
            isa: std::ptr::null(),
            threads: 0,
        }
    }

    /// The selection a C call filled.
    pub(crate) fn from_raw(sel: &ffi::jattn_selection) -> Selection {
        Selection {
            // jattn never selects a backend it does not have a number for; Auto marks the impossible.
            backend: Backend::from_code(sel.backend).unwrap_or(Backend::Auto),
            kernel: static_str(sel.kernel),
            isa: static_str(sel.isa),
            threads: usize::try_from(sel.threads).unwrap_or(0),
        }
    }
}

/// The C selection for a C problem and exec; the same function the forward call dispatches with.
pub(crate) fn select_raw(problem: &ffi::jattn_problem, exec: &ffi::jattn_exec) -> Result<Selection, Error> {
    let mut sel = Selection::raw_empty();
    // SAFETY: the pointers are to live values; jattn_select reads the first two and writes the
    // third only.
    Error::check(unsafe { ffi::jattn_select(problem, exec, &mut sel) })?;
    Ok(Selection::from_raw(&sel))
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
