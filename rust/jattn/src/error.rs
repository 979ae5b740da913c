//! [`Error`] and [`Status`]: what a failed call returns.

use std::ffi::{CStr, c_char};
use std::fmt;

use jattn_sys as ffi;

/// Why a call failed: `jattn_status` of the C API, with the same numbers (stable across
/// versions). Success (`JATTN_OK`, 0) is `Ok(..)` and has no variant here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i32)]
pub enum Status {
    /// A required pointer is NULL (`JATTN_ERROR_NULL_POINTER`; only [`forward_device`] can get it).
    ///
    /// [`forward_device`]: crate::forward_device
    NullPointer = ffi::JATTN_ERROR_NULL_POINTER,
    /// A dimension is < 1 (`JATTN_ERROR_INVALID_DIMENSION`).
    InvalidDimension = ffi::JATTN_ERROR_INVALID_DIMENSION,
    /// An element count or byte offset overflows (`JATTN_ERROR_OVERFLOW`).
    Overflow = ffi::JATTN_ERROR_OVERFLOW,
    /// A negative stride (`JATTN_ERROR_INVALID_STRIDE`).
    InvalidStride = ffi::JATTN_ERROR_INVALID_STRIDE,
    /// Strides make a tensor overlap itself (`JATTN_ERROR_SELF_OVERLAP`).
    SelfOverlap = ffi::JATTN_ERROR_SELF_OVERLAP,
    /// An output overlaps an input or another output (`JATTN_ERROR_ALIASING`).
    Aliasing = ffi::JATTN_ERROR_ALIASING,
    /// The scale is NaN, infinite or negative (`JATTN_ERROR_INVALID_SCALE`).
    InvalidScale = ffi::JATTN_ERROR_INVALID_SCALE,
    /// An argument out of range (`JATTN_ERROR_INVALID_ARGUMENT`); also what this crate
    /// reports for a slice shorter than the extent its strides address.
    InvalidArgument = ffi::JATTN_ERROR_INVALID_ARGUMENT,
    /// The chosen backend cannot run this problem (`JATTN_ERROR_UNSUPPORTED`).
    Unsupported = ffi::JATTN_ERROR_UNSUPPORTED,
    /// The backend is not built in, or no device is present (`JATTN_ERROR_BACKEND_UNAVAILABLE`).
    BackendUnavailable = ffi::JATTN_ERROR_BACKEND_UNAVAILABLE,
    /// A caller workspace is smaller than the call needs (`JATTN_ERROR_WORKSPACE_TOO_SMALL`).
    WorkspaceTooSmall = ffi::JATTN_ERROR_WORKSPACE_TOO_SMALL,
    /// An allocation failed (`JATTN_ERROR_OUT_OF_MEMORY`).
    OutOfMemory = ffi::JATTN_ERROR_OUT_OF_MEMORY,
    /// A CUDA call failed; the message names the CUDA error (`JATTN_ERROR_CUDA`).
    Cuda = ffi::JATTN_ERROR_CUDA,
    /// An MPI or NCCL call of the sequence-parallel layer failed (`JATTN_ERROR_TRANSPORT`; no
    /// call of this crate returns it).
    Transport = ffi::JATTN_ERROR_TRANSPORT,
    /// A code this version of the crate does not know (from a newer library):
    /// [`Error::code`] has its number.
    Unknown = -1,
}

impl Status {
    /// Every status a call can fail with, in the order of their numbers ([`Status::Unknown`] aside).
    pub const ALL: [Status; 14] = [
        Status::NullPointer,
        Status::InvalidDimension,
        Status::Overflow,
        Status::InvalidStride,
        Status::SelfOverlap,
        Status::Aliasing,
        Status::InvalidScale,
        Status::InvalidArgument,
        Status::Unsupported,
        Status::BackendUnavailable,
        Status::WorkspaceTooSmall,
        Status::OutOfMemory,
        Status::Cuda,
        Status::Transport,
    ];

    /// The number of the C status (`jattn_status`); -1 for [`Status::Unknown`].
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The status of a C status number; `None` for 0 (success) and for numbers this crate
    /// does not know.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }

    /// The C name of the status, e.g. `"JATTN_ERROR_ALIASING"` (`jattn_status_name`).
    pub fn name(self) -> &'static str {
        status_name(self.code())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A C string of static storage as `&'static str` (`""` for NULL or non-UTF-8, which jattn
/// never returns).
pub(crate) fn static_str(ptr: *const c_char) -> &'static str {
    if ptr.is_null() {
        return "";
    }
    // SAFETY: jattn returns NUL-terminated strings of static storage here (jattn.h).
    unsafe { CStr::from_ptr(ptr) }.to_str().unwrap_or("")
}

fn status_name(code: i32) -> &'static str {
    // SAFETY: any number is valid input; the result has static storage.
    static_str(unsafe { ffi::jattn_status_name(code) })
}

/// A failed call: the [`Status`], its name, and a message naming the offending field.
///
/// Errors found by the C library carry its own message (`jattn_last_error()`, copied right
/// after the call); errors this crate finds before calling C (a slice shorter than its strides
/// address, a number that does not fit the C types) carry one worded the same way.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Error {
    code: i32,
    message: String,
}

impl Error {
    /// The status.
    pub fn status(&self) -> Status {
        Status::from_code(self.code).unwrap_or(Status::Unknown)
    }

    /// The C status number (what [`Status::code`] gives, also for a [`Status::Unknown`]).
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The C name of the status, e.g. `"JATTN_ERROR_INVALID_DIMENSION"`.
    pub fn name(&self) -> &'static str {
        status_name(self.code)
    }

    /// The message, e.g. `"head_dim: 0, must be >= 1"`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// An error found by this crate, before any C call.
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error { code: status.code(), message: message.into() }
    }

    /// `Ok` for `JATTN_OK`, else the error with the library's message for this thread's last
    /// call. Call it right after the C call: the message is overwritten by the next one.
    pub(crate) fn check(code: ffi::jattn_status) -> Result<(), Error> {
        if code == ffi::JATTN_OK {
            return Ok(());
        }
        // SAFETY: no arguments.
        let last = unsafe { ffi::jattn_last_error() };
        let message = if last.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string of this thread, valid until its next jattn call;
            // copied before any other.
            unsafe { CStr::from_ptr(last) }.to_string_lossy().into_owned()
        };
        Err(Error { code, message })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.message)
    }
}

impl std::error::Error for Error {}
