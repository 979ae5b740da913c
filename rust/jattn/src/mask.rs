//! [`Mask`]: which keys each query attends (key padding, causal, block-causal, segments) and an
//! additive key bias (`jattn_mask`).

use std::fmt;

use jattn_sys as ffi;

use crate::error::{Error, Status};
use crate::padding::KeyPadding;
use crate::problem::{Problem, to_i64};

/// Causal attention: which keys a query may attend by position. With [`Segments`] it applies
/// inside each segment, in the segment's own positions (t: the query's, u: the key's, Lq and Lk:
/// the segment's query and key counts; without segments, the whole sequences).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Causal {
    /// Every query may attend every key (the DiT default).
    #[default]
    None,
    /// Query t attends keys u <= t: PyTorch's `is_causal` (top-left aligned).
    TopLeft,
    /// Query t attends keys u <= t + Lk − Lq: FlashAttention's causal (bottom-right aligned: the
    /// last query sees every key). The same as [`Causal::TopLeft`] when Lq = Lk.
    BottomRight,
}

impl Causal {
    /// The C number (`jattn_causal`).
    pub const fn code(self) -> i32 {
        match self {
            Causal::None => ffi::JATTN_CAUSAL_NONE,
            Causal::TopLeft => ffi::JATTN_CAUSAL_TOP_LEFT,
            Causal::BottomRight => ffi::JATTN_CAUSAL_BOTTOM_RIGHT,
        }
    }
}

impl fmt::Display for Causal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Causal::None => "none",
            Causal::TopLeft => "top-left",
            Causal::BottomRight => "bottom-right",
        })
    }
}

/// Block-causal attention (streaming and autoregressive video: a block per frame or chunk):
/// `num_blocks` blocks cut the queries at `q[0..=num_blocks]` and the keys at
/// `kv[0..=num_blocks]`; a query of block a attends the keys of blocks 0..=a, i.e. keys
/// `j < kv[a + 1]`. The same blocks serve every batch and head.
///
/// Both slices hold `num_blocks + 1` non-decreasing offsets, from 0 to seq_q (`q`) and to seq_kv
/// (`kv`): their lengths must be equal and at least 2, which the call checks together with the
/// values (the library's message names the offset, e.g. `mask.block_q[2]`).
///
/// ```
/// use jattn::Blocks;
/// // Three frames of 4 tokens each, self-attention: one array serves queries and keys.
/// let frames = [0i64, 4, 8, 12];
/// let blocks = Blocks::new(&frames, &frames);
/// assert_eq!(blocks.count(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocks<'a> {
    q: &'a [i64],
    kv: &'a [i64],
}

impl<'a> Blocks<'a> {
    /// Blocks at the query offsets `q` and the key offsets `kv` (may be the same slice).
    pub const fn new(q: &'a [i64], kv: &'a [i64]) -> Blocks<'a> {
        Blocks { q, kv }
    }

    /// The number of blocks: one less than the offsets (0 for fewer than 2 offsets, which the call
    /// refuses).
    pub const fn count(&self) -> usize {
        self.q.len().saturating_sub(1)
    }

    /// The query offsets.
    pub const fn q(&self) -> &'a [i64] {
        self.q
    }

    /// The key offsets.
    pub const fn kv(&self) -> &'a [i64] {
        self.kv
    }
}

/// Segments: packed sequences of different lengths in one row (FlashAttention's varlen
/// `cu_seqlens_q` / `cu_seqlens_k`; a segment mask). Segment s holds the queries
/// `cu_seqlens_q[s]..cu_seqlens_q[s + 1]` and the keys `cu_seqlens_kv[s]..cu_seqlens_kv[s + 1]`;
/// a query attends only keys of its own segment, and queries past the last segment attend none.
///
/// Offsets are cumulative, non-decreasing and start at 0; the last is at most seq_q (seq_kv).
/// [`Segments::new`] gives one row of offsets for every batch; [`Segments::per_batch`] one row per
/// batch. The call checks the slices' lengths (this crate) and their values (the library).
///
/// ```
/// use jattn::Segments;
/// // Three images of 5, 3 and 8 tokens packed in one sequence of 16, self-attention.
/// let cu = [0i64, 5, 8, 16];
/// let packed = Segments::new(&cu, &cu);
/// assert_eq!(packed.count(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segments<'a> {
    q: &'a [i64],
    kv: &'a [i64],
    /// None: one row for every batch (`num_segments` = len − 1); else the per-batch rows.
    per_batch: Option<PerBatch>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PerBatch {
    num_segments: usize,
    row_stride: Option<usize>,
}

impl<'a> Segments<'a> {
    /// One row of `num_segments + 1` offsets for every batch: `cu_seqlens_q` and `cu_seqlens_kv`
    /// must be of equal length (at least 2). They may be the same slice (self-attention).
    pub const fn new(cu_seqlens_q: &'a [i64], cu_seqlens_kv: &'a [i64]) -> Segments<'a> {
        Segments { q: cu_seqlens_q, kv: cu_seqlens_kv, per_batch: None }
    }

    /// One row of `num_segments + 1` offsets per batch, rows back to back (`[B, num_segments + 1]`):
    /// each slice must hold at least `batch · (num_segments + 1)` offsets.
    pub const fn per_batch(cu_seqlens_q: &'a [i64], cu_seqlens_kv: &'a [i64], num_segments: usize) -> Segments<'a> {
        Segments { q: cu_seqlens_q, kv: cu_seqlens_kv, per_batch: Some(PerBatch { num_segments, row_stride: None }) }
    }

    /// These per-batch segments with rows `row_stride` offsets apart instead of back to back (no
    /// effect on [`Segments::new`]'s one row).
    #[must_use]
    pub const fn with_row_stride(mut self, row_stride: usize) -> Segments<'a> {
        if let Some(rows) = &mut self.per_batch {
            rows.row_stride = Some(row_stride);
        }
        self
    }

    /// The number of segments.
    pub const fn count(&self) -> usize {
        match self.per_batch {
            Some(rows) => rows.num_segments,
            None => self.q.len().saturating_sub(1),
        }
    }
}

/// How a [`KeyBias`] is laid out: which of batch and head it varies over (0 strides broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum BiasRows {
    Shared,
    PerBatch,
    PerHead,
    PerBatchAndHead,
}

/// An additive float32 key bias, added to the scaled score: `S[i,j] = scale · q_i · k_j +
/// bias[b, h, j]` (the float padding masks of text encoders: -10000 or `-inf` on padded keys).
/// `-inf` leaves the key out; `+inf` or NaN makes the row NaN. It is a constant of the call: the
/// backward gives no gradient for it.
///
/// Each row holds seq_kv values, contiguous; the constructor says which of batch and head the
/// rows vary over (the others broadcast). The call checks the slice's length against the problem.
///
/// ```
/// use jattn::KeyBias;
/// // Two prompts padded to 4 text tokens: -inf on the padding, one row per batch [B, Skv].
/// let bias = [0.0, 0.0, 0.0, f32::NEG_INFINITY, 0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY];
/// let key_bias = KeyBias::per_batch(&bias);
/// # let _ = key_bias;
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyBias<'a> {
    values: &'a [f32],
    rows: BiasRows,
}

impl<'a> KeyBias<'a> {
    /// One row `[Skv]` for every batch and head.
    pub const fn shared(values: &'a [f32]) -> KeyBias<'a> {
        KeyBias { values, rows: BiasRows::Shared }
    }

    /// One row per batch, `[B, Skv]`, the same for every head.
    pub const fn per_batch(values: &'a [f32]) -> KeyBias<'a> {
        KeyBias { values, rows: BiasRows::PerBatch }
    }

    /// One row per (query) head, `[H, Skv]`, the same for every batch.
    pub const fn per_head(values: &'a [f32]) -> KeyBias<'a> {
        KeyBias { values, rows: BiasRows::PerHead }
    }

    /// One row per batch and (query) head, `[B, H, Skv]`.
    pub const fn per_batch_and_head(values: &'a [f32]) -> KeyBias<'a> {
        KeyBias { values, rows: BiasRows::PerBatchAndHead }
    }

    /// The values.
    pub const fn values(&self) -> &'a [f32] {
        self.values
    }

    /// The element strides (batch, head) of this layout for `problem`, and the elements the call
    /// reads: `(B − 1) · batch + (H − 1) · head + Skv` (0 when B or H is 0).
    fn layout(&self, problem: &Problem) -> Result<(usize, usize, usize), Error> {
        let (b, h, skv) = (problem.batch(), problem.heads(), problem.seq_kv());
        let overflow =
            || Error::new(Status::Overflow, format!("mask.key_bias: batch {b} x heads {h} x seq_kv {skv} overflows"));
        let (bs, hs) = match self.rows {
            BiasRows::Shared => (0, 0),
            BiasRows::PerBatch => (skv, 0),
            BiasRows::PerHead => (0, skv),
            BiasRows::PerBatchAndHead => (h.checked_mul(skv).ok_or_else(overflow)?, skv),
        };
        if b == 0 || h == 0 {
            return Ok((bs, hs, 0));
        }
        let span = b
            .saturating_sub(1)
            .checked_mul(bs)
            .and_then(|x| h.saturating_sub(1).checked_mul(hs).and_then(|y| x.checked_add(y)))
            .and_then(|x| x.checked_add(skv))
            .ok_or_else(overflow)?;
        Ok((bs, hs, span))
    }

    fn shape(&self, problem: &Problem) -> String {
        let (b, h, s) = (problem.batch(), problem.heads(), problem.seq_kv());
        match self.rows {
            BiasRows::Shared => format!("[Skv] = [{s}]"),
            BiasRows::PerBatch => format!("[B, Skv] = [{b}, {s}]"),
            BiasRows::PerHead => format!("[H, Skv] = [{h}, {s}]"),
            BiasRows::PerBatchAndHead => format!("[B, H, Skv] = [{b}, {h}, {s}]"),
        }
    }
}

/// Everything that narrows the keys a query attends, and an additive key bias (`jattn_mask`).
/// [`Mask::none()`] (the default) attends every key with no bias.
///
/// The parts combine: query row i of batch b attends key j when j is inside every window that
/// is set ([`Segments`], [`Causal`], [`Blocks`]), the [`KeyPadding`] attends j, and the
/// [`KeyBias`] of j is not `-inf`. Keys a row does not attend never affect its outputs, whatever
/// k and v hold there. A query row with no attended key gets an out row of +0 and lse `-inf`
/// (its backward: a dq row of +0); keys no query attends get dk = dv = +0 rows.
///
/// A `Mask` only borrows its arrays; every length is checked against the problem by the call
/// that uses it, and every value by the library (whose message names the field).
///
/// ```
/// use jattn::{Backend, Causal, Exec, Mask, Problem, Tensor};
/// // Causal self-attention over 6 tokens, 2 heads sharing one key/value head.
/// let problem = Problem::flux(1, 2, 6, 6, 8).with_kv_heads(1);
/// let q = vec![0.25f32; problem.required_len(Tensor::Q)?];
/// let kv = vec![0.5f32; problem.required_len(Tensor::K)?];
/// let mut out = vec![0.0f32; problem.required_len(Tensor::Out)?];
/// let mask = Mask::none().with_causal(Causal::TopLeft);
/// jattn::forward_masked(&problem, &Exec::new().with_backend(Backend::Ref), &q, &kv, &kv, &mask, &mut out, None)?;
/// # Ok::<(), jattn::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mask<'a> {
    padding: KeyPadding<'a>,
    causal: Causal,
    blocks: Option<Blocks<'a>>,
    segments: Option<Segments<'a>>,
    key_bias: Option<KeyBias<'a>>,
}

impl<'a> Mask<'a> {
    /// No mask: every key attended, no bias.
    pub const fn none() -> Mask<'a> {
        Mask { padding: KeyPadding::none(), causal: Causal::None, blocks: None, segments: None, key_bias: None }
    }

    /// This mask with key padding (lengths and/or a boolean key mask; see [`KeyPadding`]).
    #[must_use]
    pub const fn with_padding(mut self, padding: KeyPadding<'a>) -> Mask<'a> {
        self.padding = padding;
        self
    }

    /// This mask with causal attention.
    #[must_use]
    pub const fn with_causal(mut self, causal: Causal) -> Mask<'a> {
        self.causal = causal;
        self
    }

    /// This mask with block-causal blocks.
    #[must_use]
    pub const fn with_blocks(mut self, blocks: Blocks<'a>) -> Mask<'a> {
        self.blocks = Some(blocks);
        self
    }

    /// This mask with segments (packed sequences).
    #[must_use]
    pub const fn with_segments(mut self, segments: Segments<'a>) -> Mask<'a> {
        self.segments = Some(segments);
        self
    }

    /// This mask with an additive key bias.
    #[must_use]
    pub const fn with_key_bias(mut self, key_bias: KeyBias<'a>) -> Mask<'a> {
        self.key_bias = Some(key_bias);
        self
    }

    /// The key padding.
    pub const fn padding(&self) -> &KeyPadding<'a> {
        &self.padding
    }

    /// The causal part.
    pub const fn causal(&self) -> Causal {
        self.causal
    }

    /// The blocks, if any.
    pub const fn blocks(&self) -> Option<&Blocks<'a>> {
        self.blocks.as_ref()
    }

    /// The segments, if any.
    pub const fn segments(&self) -> Option<&Segments<'a>> {
        self.segments.as_ref()
    }

    /// The key bias, if any.
    pub const fn key_bias(&self) -> Option<&KeyBias<'a>> {
        self.key_bias.as_ref()
    }

    /// Whether the mask attends every key with no bias (nothing set).
    pub const fn is_none(&self) -> bool {
        self.padding.is_none()
            && matches!(self.causal, Causal::None)
            && self.blocks.is_none()
            && self.segments.is_none()
            && self.key_bias.is_none()
    }

    /// The C description, after checking every slice's length against `problem` (the library
    /// checks the values).
    pub(crate) fn raw(&self, problem: &Problem) -> Result<ffi::jattn_mask, Error> {
        let mut raw = ffi::jattn_mask {
            padding: if self.padding.is_none() {
                ffi::jattn_key_padding::default()
            } else {
                self.padding.raw(problem)?
            },
            causal: self.causal.code(),
            ..ffi::jattn_mask::default()
        };
        if let Some(blocks) = &self.blocks {
            if blocks.kv.len() != blocks.q.len() {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "mask.block_kv: {} offsets, block_q has {}: both hold num_blocks + 1",
                        blocks.kv.len(),
                        blocks.q.len()
                    ),
                ));
            }
            // Fewer than 2 offsets: num_blocks 0, which the library refuses before reading.
            raw.block_q = blocks.q.as_ptr();
            raw.block_kv = blocks.kv.as_ptr();
            raw.num_blocks = to_i64("mask.num_blocks", blocks.count())?;
        }
        if let Some(seg) = &self.segments {
            let (n, stride) = match seg.per_batch {
                None => {
                    if seg.kv.len() != seg.q.len() {
                        return Err(Error::new(
                            Status::InvalidArgument,
                            format!(
                                "mask.cu_seqlens_kv: {} offsets, cu_seqlens_q has {}: both hold num_segments + 1",
                                seg.kv.len(),
                                seg.q.len()
                            ),
                        ));
                    }
                    (seg.count(), 0)
                }
                Some(rows) => {
                    let per_row = rows.num_segments.checked_add(1).ok_or_else(|| {
                        Error::new(Status::Overflow, "mask.num_segments: num_segments + 1 overflows usize")
                    })?;
                    (rows.num_segments, rows.row_stride.unwrap_or(per_row))
                }
            };
            // What the library addresses: num_segments + 1 offsets in each of `batch` rows
            // `stride` apart (one row when the stride is 0).
            let per_row = n.saturating_add(1);
            let need = if stride == 0 || problem.batch() <= 1 {
                Some(per_row)
            } else {
                problem.batch().saturating_sub(1).checked_mul(stride).and_then(|x| x.checked_add(per_row))
            }
            .ok_or_else(|| {
                Error::new(
                    Status::Overflow,
                    format!("mask.segments_batch_stride: {stride} times batch overflows usize"),
                )
            })?;
            for (name, slice) in [("mask.cu_seqlens_q", seg.q), ("mask.cu_seqlens_kv", seg.kv)] {
                if slice.len() < need {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "{name}: a slice of {} offsets; {} row(s) of num_segments + 1 = {per_row}, {stride} apart, \
                             need {need}",
                            slice.len(),
                            if stride == 0 { 1 } else { problem.batch() }
                        ),
                    ));
                }
            }
            raw.cu_seqlens_q = seg.q.as_ptr();
            raw.cu_seqlens_kv = seg.kv.as_ptr();
            raw.num_segments = to_i64("mask.num_segments", n)?;
            raw.segments_batch_stride = to_i64("mask.segments_batch_stride", stride)?;
        }
        if let Some(bias) = &self.key_bias {
            let (bs, hs, need) = bias.layout(problem)?;
            if bias.values.len() < need {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "mask.key_bias: a slice of {} elements; a bias of {} needs {need}",
                        bias.values.len(),
                        bias.shape(problem)
                    ),
                ));
            }
            raw.key_bias = bias.values.as_ptr();
            raw.key_bias_batch_stride = to_i64("mask.key_bias_batch_stride", bs)?;
            raw.key_bias_head_stride = to_i64("mask.key_bias_head_stride", hs)?;
        }
        Ok(raw)
    }
}
