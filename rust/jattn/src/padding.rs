//! [`KeyPadding`]: which keys each batch attends (`jattn_key_padding`).

use jattn_sys as ffi;

use crate::error::{Error, Status};
use crate::problem::{Problem, to_i64};

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for bool {}
}

/// An element of a boolean key mask: `u8` (nonzero = attend) or `bool`. Sealed: jattn reads
/// one byte per key, which these two types are.
pub trait MaskElement: sealed::Sealed + Copy {
    /// The mask as the bytes jattn reads.
    fn as_bytes(mask: &[Self]) -> &[u8];
}

impl MaskElement for u8 {
    fn as_bytes(mask: &[u8]) -> &[u8] {
        mask
    }
}

impl MaskElement for bool {
    fn as_bytes(mask: &[bool]) -> &[u8] {
        // SAFETY: bool has the size and alignment of u8 and its values are the bytes 0 and 1,
        // all valid u8; the result borrows `mask` for its lifetime and is only read.
        unsafe { std::slice::from_raw_parts(mask.as_ptr().cast::<u8>(), mask.len()) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mask<'a> {
    bytes: &'a [u8],
    rows: usize,
    row_stride: Option<usize>,
}

/// Which keys each batch attends, for DiTs that batch prompts of different lengths.
///
/// Key `j` of batch `b` is attended when `j < lengths[b]` (if lengths are given) and
/// `mask[b * row_stride + j]` is nonzero (if a mask is given; a mask of one row serves every
/// batch). Softmax, out and lse run over the attended keys only: a key left out never affects
/// any output, whatever k and v hold there. A query row with no attended key gets an out row of
/// zeros and lse `-inf`.
///
/// The slices are checked against the problem by the call: `lengths` must hold at least
/// `batch` entries, each in `0..=seq_kv`; the mask has `rows` rows (1 or `batch`) of `seq_kv`
/// bytes, `row_stride` apart (default `seq_kv`), and must hold at least
/// `(rows − 1) · row_stride + seq_kv` elements.
///
/// ```
/// use jattn::{Backend, Exec, KeyPadding, Problem, Tensor};
/// // Two prompts of 5 and 3 text tokens, padded to 6 keys.
/// let problem = Problem::flux(2, 1, 4, 6, 8);
/// let q = vec![0.25f32; problem.required_len(Tensor::Q)?];
/// let kv = vec![0.5f32; problem.required_len(Tensor::K)?];
/// let mut out = vec![0.0f32; problem.required_len(Tensor::Out)?];
/// let lengths = [5i64, 3];
/// jattn::forward_padded(&problem, &Exec::new().with_backend(Backend::Ref), &q, &kv, &kv,
///                       &KeyPadding::lengths(&lengths), &mut out, None)?;
/// # Ok::<(), jattn::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyPadding<'a> {
    lengths: Option<&'a [i64]>,
    mask: Option<Mask<'a>>,
}

impl<'a> KeyPadding<'a> {
    /// No padding: every key attended.
    pub const fn none() -> KeyPadding<'a> {
        KeyPadding { lengths: None, mask: None }
    }

    /// Key lengths: batch `b` attends keys `0..lengths[b]`.
    pub const fn lengths(lengths: &'a [i64]) -> KeyPadding<'a> {
        KeyPadding { lengths: Some(lengths), mask: None }
    }

    /// A boolean key mask `[rows, seq_kv]`, rows back to back; `rows` is 1 (one row for every
    /// batch) or the batch size.
    pub fn mask<T: MaskElement>(mask: &'a [T], rows: usize) -> KeyPadding<'a> {
        KeyPadding::none().with_mask(mask, rows)
    }

    /// This padding with key lengths as well (see [`KeyPadding::lengths`]).
    #[must_use]
    pub const fn with_lengths(mut self, lengths: &'a [i64]) -> KeyPadding<'a> {
        self.lengths = Some(lengths);
        self
    }

    /// This padding with a key mask as well (see [`KeyPadding::mask`]).
    #[must_use]
    pub fn with_mask<T: MaskElement>(mut self, mask: &'a [T], rows: usize) -> KeyPadding<'a> {
        self.mask = Some(Mask { bytes: T::as_bytes(mask), rows, row_stride: None });
        self
    }

    /// This padding with the mask's rows `row_stride` elements apart (>= seq_kv) instead of
    /// back to back; no effect without a mask.
    #[must_use]
    pub const fn with_mask_row_stride(mut self, row_stride: usize) -> KeyPadding<'a> {
        if let Some(mask) = &mut self.mask {
            mask.row_stride = Some(row_stride);
        }
        self
    }

    /// Whether every key is attended (neither lengths nor a mask).
    pub const fn is_none(&self) -> bool {
        self.lengths.is_none() && self.mask.is_none()
    }

    /// The C description, after checking every slice's length against `problem`.
    pub(crate) fn raw(&self, problem: &Problem) -> Result<ffi::jattn_key_padding, Error> {
        let mut raw = ffi::jattn_key_padding::default();
        if let Some(lengths) = self.lengths {
            if lengths.len() < problem.batch() {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("key_padding.kv_len: {} entries, batch is {}", lengths.len(), problem.batch()),
                ));
            }
            raw.kv_len = lengths.as_ptr();
        }
        if let Some(mask) = self.mask {
            let keys = problem.seq_kv();
            let stride = mask.row_stride.unwrap_or(keys);
            // What the library reads when `rows` is valid (1 or batch; else it refuses the
            // mask before reading it).
            let span =
                mask.rows.saturating_sub(1).checked_mul(stride).and_then(|n| n.checked_add(keys)).ok_or_else(|| {
                    Error::new(
                        Status::Overflow,
                        format!("key_padding.mask: {} rows {stride} apart overflow usize", mask.rows),
                    )
                })?;
            let span = if mask.rows == 0 { 0 } else { span };
            if mask.bytes.len() < span {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "key_padding.mask: a slice of {} elements; {} row(s) of seq_kv = {keys} bytes, {stride} apart, need {span}",
                        mask.bytes.len(),
                        mask.rows
                    ),
                ));
            }
            raw.mask = mask.bytes.as_ptr();
            raw.mask_batch = to_i64("key_padding.mask_batch", mask.rows)?;
            raw.mask_keys = to_i64("key_padding.mask_keys", keys)?;
            raw.mask_batch_stride = to_i64("key_padding.mask_batch_stride", stride)?;
        }
        Ok(raw)
    }
}
