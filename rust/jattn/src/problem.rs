//! [`Problem`]: the dimensions, layouts and scale of one attention call.

use std::fmt;

use jattn_sys as ffi;

use crate::error::{Error, Status};

/// Element strides of one tensor `[batch, head, token, head_dim]`, head_dim contiguous
/// (stride 1). Unsigned, so a negative stride cannot be written; a stride that makes a tensor
/// overlap itself is refused by the call ([`Status::SelfOverlap`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Strides {
    /// Elements between one batch and the next.
    pub batch: usize,
    /// Elements between one head and the next.
    pub head: usize,
    /// Elements between one token and the next.
    pub token: usize,
}

impl Strides {
    /// Strides `(batch, head, token)`.
    pub const fn new(batch: usize, head: usize, token: usize) -> Strides {
        Strides { batch, head, token }
    }

    /// Strides of a contiguous head-major tensor `[B, H, S, D]`: `(H·S·D, S·D, D)`; `None` when
    /// they overflow `usize`.
    pub fn head_major(heads: usize, seq: usize, head_dim: usize) -> Option<Strides> {
        let head = seq.checked_mul(head_dim)?;
        Some(Strides { batch: heads.checked_mul(head)?, head, token: head_dim })
    }

    /// Strides of a contiguous token-major tensor `[B, S, H·D]` (= `[B, S, H, D]`):
    /// `(S·H·D, D, H·D)`; `None` when they overflow `usize`.
    pub fn token_major(heads: usize, seq: usize, head_dim: usize) -> Option<Strides> {
        let token = heads.checked_mul(head_dim)?;
        Some(Strides { batch: seq.checked_mul(token)?, head: head_dim, token })
    }
}

/// How one tensor is laid out in its slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Contiguous `[B, H, S, D]`.
    HeadMajor,
    /// Contiguous `[B, S, H, D]`, i.e. `[B, S, H·D]`: the layout of a projection's output.
    TokenMajor,
    /// Explicit element strides, for padded rows or views into a larger buffer (a fused QKV
    /// projection `[B, S, 3, H, D]` is `Strides::new(3·S·H·D, D, 3·H·D)`, with k and v starting
    /// `H·D` and `2·H·D` elements into the slice).
    Strides(Strides),
}

impl Layout {
    /// The strides of this layout for a tensor of `heads` heads, `seq` tokens and `head_dim`;
    /// `None` when they overflow `usize`.
    pub fn strides(self, heads: usize, seq: usize, head_dim: usize) -> Option<Strides> {
        match self {
            Layout::HeadMajor => Strides::head_major(heads, seq, head_dim),
            Layout::TokenMajor => Strides::token_major(heads, seq, head_dim),
            Layout::Strides(s) => Some(s),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::HeadMajor => f.write_str("head-major"),
            Layout::TokenMajor => f.write_str("token-major"),
            Layout::Strides(s) => write!(f, "strides (batch {}, head {}, token {})", s.batch, s.head, s.token),
        }
    }
}

/// One of the four strided tensors of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tensor {
    /// The queries, `[B, H, Sq, D]`.
    Q,
    /// The keys, `[B, Hkv, Skv, D]` (Hkv = H unless [`Problem::with_kv_heads`] says otherwise).
    K,
    /// The values, `[B, Hkv, Skv, D]`.
    V,
    /// The output, `[B, H, Sq, D]`.
    Out,
}

impl Tensor {
    /// The four tensors.
    pub const ALL: [Tensor; 4] = [Tensor::Q, Tensor::K, Tensor::V, Tensor::Out];

    /// The tensor's name as jattn's messages spell it: `"q"`, `"k"`, `"v"`, `"out"`.
    pub const fn name(self) -> &'static str {
        match self {
            Tensor::Q => "q",
            Tensor::K => "k",
            Tensor::V => "v",
            Tensor::Out => "out",
        }
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The shape of one attention call: for every batch b and head h,
/// `out[b,h,i,:] = softmax(scale · q[b,h,i,:] · k[b,g,:,:]ᵀ) · v[b,g,:,:]` over the keys row i
/// attends (every key unless a [`Mask`](crate::Mask) narrows them), with
/// `scale = 1/sqrt(head_dim)` unless set, and `g = h / (H / Hkv)` the key/value head of query
/// head h (grouped-query heads, [`with_kv_heads`](Problem::with_kv_heads); `g = h` by default).
///
/// A `Problem` is plain data: building one cannot fail. Everything about it is checked by the
/// call that uses it — head_dim >= 1, key/value heads dividing the heads, scale, strides that
/// make no tensor overlap itself (by the C library, whose message names the field) and every
/// slice against the extent its strides address (by this crate, before the C call).
///
/// Batch, heads, seq_q and seq_kv may be 0, with PyTorch's answer: nothing to compute when
/// batch, heads or seq_q is 0 (every slice may then be empty); with seq_kv = 0 no query row has
/// a key to attend, so every out row is 0 and every lse `-inf` (the backward: dq = 0; with
/// seq_q = 0, dk = dv = 0).
///
/// ```
/// use jattn::{Layout, Problem, Strides, Tensor};
/// // FLUX: q, k, v head-major [B, H, S, D], out token-major [B, S, H*D].
/// let flux = Problem::flux(1, 24, 1536, 1536, 128);
/// // The same attention reading q, k, v from a fused QKV projection [B, S, 3, H, D].
/// let (h, s, d) = (24, 1536, 128);
/// let fused = flux.with_qkv(Layout::Strides(Strides::new(3 * s * h * d, d, 3 * h * d)));
/// assert_eq!(fused.required_len(Tensor::V)?, 3 * s * h * d - 2 * h * d);
/// # Ok::<(), jattn::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    batch: usize,
    heads: usize,
    seq_q: usize,
    seq_kv: usize,
    head_dim: usize,
    scale: Option<f32>,
    q: Layout,
    k: Layout,
    v: Layout,
    out: Layout,
    kv_heads: usize,
}

impl Problem {
    /// The FLUX problem (`jattn_problem_flux`): q `[B, H, Sq, D]`, k and v `[B, H, Skv, D]`
    /// head-major, out `[B, Sq, H·D]` token-major, scale `1/sqrt(head_dim)`. `seq_q` may differ
    /// from `seq_kv` (cross-attention).
    pub const fn flux(batch: usize, heads: usize, seq_q: usize, seq_kv: usize, head_dim: usize) -> Problem {
        Problem {
            batch,
            heads,
            seq_q,
            seq_kv,
            head_dim,
            scale: None,
            q: Layout::HeadMajor,
            k: Layout::HeadMajor,
            v: Layout::HeadMajor,
            out: Layout::TokenMajor,
            kv_heads: 0,
        }
    }

    /// The problem with q laid out as `layout`.
    #[must_use]
    pub const fn with_q(mut self, layout: Layout) -> Problem {
        self.q = layout;
        self
    }

    /// The problem with k laid out as `layout`.
    #[must_use]
    pub const fn with_k(mut self, layout: Layout) -> Problem {
        self.k = layout;
        self
    }

    /// The problem with v laid out as `layout`.
    #[must_use]
    pub const fn with_v(mut self, layout: Layout) -> Problem {
        self.v = layout;
        self
    }

    /// The problem with q, k and v all laid out as `layout`.
    #[must_use]
    pub const fn with_qkv(self, layout: Layout) -> Problem {
        self.with_q(layout).with_k(layout).with_v(layout)
    }

    /// The problem with the output laid out as `layout`.
    #[must_use]
    pub const fn with_out(mut self, layout: Layout) -> Problem {
        self.out = layout;
        self
    }

    /// The problem with the softmax scale `scale` (> 0 and finite; 0 means `1/sqrt(head_dim)`).
    #[must_use]
    pub const fn with_scale(mut self, scale: f32) -> Problem {
        self.scale = Some(scale);
        self
    }

    /// The problem with `kv_heads` key/value heads (grouped-query attention; 1 is multi-query
    /// attention): k and v are `[B, kv_heads, Skv, D]` at their layouts, and query head h reads
    /// key/value head `h / (heads / kv_heads)`, in place (never copied). `kv_heads` must divide
    /// the heads (the call says so otherwise, [`Status::InvalidDimension`]); 0 means `heads`, the
    /// default.
    #[must_use]
    pub const fn with_kv_heads(mut self, kv_heads: usize) -> Problem {
        self.kv_heads = kv_heads;
        self
    }

    /// B: the batch size.
    pub const fn batch(&self) -> usize {
        self.batch
    }

    /// H: the number of (query) heads.
    pub const fn heads(&self) -> usize {
        self.heads
    }

    /// Hkv: the number of key/value heads (`heads` unless set by
    /// [`with_kv_heads`](Problem::with_kv_heads)).
    pub const fn kv_heads(&self) -> usize {
        if self.kv_heads == 0 { self.heads } else { self.kv_heads }
    }

    /// The number of heads of a tensor: H for q and out, Hkv for k and v.
    pub const fn tensor_heads(&self, tensor: Tensor) -> usize {
        match tensor {
            Tensor::Q | Tensor::Out => self.heads,
            Tensor::K | Tensor::V => self.kv_heads(),
        }
    }

    /// Sq: the number of query tokens.
    pub const fn seq_q(&self) -> usize {
        self.seq_q
    }

    /// Skv: the number of key and value tokens.
    pub const fn seq_kv(&self) -> usize {
        self.seq_kv
    }

    /// D: the head dimension.
    pub const fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The scale set with [`with_scale`](Problem::with_scale); `None` for the default
    /// `1/sqrt(head_dim)`.
    pub const fn scale(&self) -> Option<f32> {
        self.scale
    }

    /// The layout of a tensor.
    pub const fn layout(&self, tensor: Tensor) -> Layout {
        match tensor {
            Tensor::Q => self.q,
            Tensor::K => self.k,
            Tensor::V => self.v,
            Tensor::Out => self.out,
        }
    }

    /// The number of tokens of a tensor: Sq for q and out, Skv for k and v.
    pub const fn seq(&self, tensor: Tensor) -> usize {
        match tensor {
            Tensor::Q | Tensor::Out => self.seq_q,
            Tensor::K | Tensor::V => self.seq_kv,
        }
    }

    /// The element strides of a tensor.
    ///
    /// # Errors
    /// [`Status::Overflow`] when a contiguous layout's strides overflow `usize`.
    pub fn strides(&self, tensor: Tensor) -> Result<Strides, Error> {
        let layout = self.layout(tensor);
        let (heads, seq) = (self.tensor_heads(tensor), self.seq(tensor));
        layout.strides(heads, seq, self.head_dim).ok_or_else(|| {
            Error::new(
                Status::Overflow,
                format!(
                    "{tensor}: the {layout} strides of heads {heads} x seq {seq} x head_dim {} overflow usize",
                    self.head_dim
                ),
            )
        })
    }

    /// The number of elements a tensor's slice must hold at least: the extent its strides
    /// address, `1 + Σ (extent − 1) · stride` over batch, head, token and head_dim (0 when a
    /// dimension is 0: such a tensor has no element, and its slice may be empty). k and v have
    /// [`kv_heads`](Problem::kv_heads) heads.
    ///
    /// # Errors
    /// [`Status::Overflow`] when the extent overflows `usize`.
    pub fn required_len(&self, tensor: Tensor) -> Result<usize, Error> {
        let s = self.strides(tensor)?;
        let dims = [
            (self.batch, s.batch),
            (self.tensor_heads(tensor), s.head),
            (self.seq(tensor), s.token),
            (self.head_dim, 1),
        ];
        if dims.iter().any(|&(extent, _)| extent == 0) {
            return Ok(0);
        }
        dims.iter()
            .try_fold(1usize, |span, &(extent, stride)| span.checked_add(extent.saturating_sub(1).checked_mul(stride)?))
            .ok_or_else(|| {
                Error::new(Status::Overflow, format!("{tensor}: its strides address more elements than usize holds"))
            })
    }

    /// The number of elements of the optional lse output, float32 `[B, H, Sq]` contiguous.
    ///
    /// # Errors
    /// [`Status::Overflow`] when B·H·Sq overflows `usize`.
    pub fn lse_len(&self) -> Result<usize, Error> {
        self.batch
            .checked_mul(self.heads)
            .and_then(|n| n.checked_mul(self.seq_q))
            .ok_or_else(|| Error::new(Status::Overflow, "lse: batch x heads x seq_q overflows usize"))
    }

    /// The C description of the problem; fails where a number does not fit the C types.
    pub(crate) fn raw(&self) -> Result<ffi::jattn_problem, Error> {
        // kv_heads first: k's and v's strides depend on it.
        let kv_heads = to_i64("kv_heads", self.kv_heads)?;
        Ok(ffi::jattn_problem {
            batch: to_i64("batch", self.batch)?,
            heads: to_i64("heads", self.heads)?,
            seq_q: to_i64("seq_q", self.seq_q)?,
            seq_kv: to_i64("seq_kv", self.seq_kv)?,
            head_dim: to_i64("head_dim", self.head_dim)?,
            scale: self.scale.unwrap_or(0.0),
            dtype: ffi::JATTN_DTYPE_F32,
            q: self.raw_strides(Tensor::Q)?,
            k: self.raw_strides(Tensor::K)?,
            v: self.raw_strides(Tensor::V)?,
            out: self.raw_strides(Tensor::Out)?,
            kv_heads,
        })
    }

    fn raw_strides(&self, tensor: Tensor) -> Result<ffi::jattn_strides, Error> {
        let s = self.strides(tensor)?;
        let name = tensor.name();
        Ok(ffi::jattn_strides {
            batch: to_i64_field(name, "batch", s.batch)?,
            head: to_i64_field(name, "head", s.head)?,
            token: to_i64_field(name, "token", s.token)?,
        })
    }
}

/// A dimension as C's int64, or [`Status::Overflow`] naming it.
pub(crate) fn to_i64(name: &str, value: usize) -> Result<i64, Error> {
    i64::try_from(value).map_err(|_| Error::new(Status::Overflow, format!("{name}: {value} does not fit in int64")))
}

fn to_i64_field(tensor: &str, field: &str, value: usize) -> Result<i64, Error> {
    i64::try_from(value)
        .map_err(|_| Error::new(Status::Overflow, format!("{tensor}.{field}: stride {value} does not fit in int64")))
}
