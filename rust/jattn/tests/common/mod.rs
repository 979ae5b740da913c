//! What the tests and the example share: random inputs (a seeded xoshiro256**, the four input
//! distributions of docs/DESIGN.md §2), the float64 reference attention written in Rust, and the
//! error metrics with the f32 gate.
//!
//! Inputs are fresh on every run: the seed is printed once per test binary and
//! `JATTN_TEST_SEED=<n>` replays it.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::sync::OnceLock;

use jattn::{Blocks, Causal, KeyBias, KeyPadding, Mask, Problem, Segments, Tensor};

// ---- random numbers --------------------------------------------------------------------------

/// xoshiro256**, seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(mut seed: u64) -> Rng {
        Rng { s: [splitmix(&mut seed), splitmix(&mut seed), splitmix(&mut seed), splitmix(&mut seed)] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * (1.0 - u).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// Uniform integer in lo..=hi.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

/// The run's seed: `JATTN_TEST_SEED`, or one drawn from the clock; printed once.
pub fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = match std::env::var("JATTN_TEST_SEED") {
            Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("JATTN_TEST_SEED={s:?} is not a u64")),
            Err(_) => {
                let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let mut x = t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
                splitmix(&mut x)
            }
        };
        note(&format!("seed {seed} (replay: JATTN_TEST_SEED={seed})"));
        seed
    })
}

/// A line on stderr that the test harness does not capture: shown in every run (the seed, a
/// skipped check), not only when a test fails.
pub fn note(line: &str) {
    use std::io::Write;
    let exe = std::env::current_exe().ok();
    let name = exe.as_ref().and_then(|p| p.file_stem()).and_then(|s| s.to_str()).unwrap_or("test");
    let name = name.rsplit_once('-').map_or(name, |(n, _hash)| n);
    let _ = writeln!(std::io::stderr(), "{name}: {line}");
}

/// A generator for one test: the run's seed mixed with the test's name, so each test's inputs
/// depend on the seed alone, whatever runs beside it.
pub fn rng_for(test: &str) -> Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
    for b in test.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Rng::new(base_seed() ^ h)
}

// ---- inputs ----------------------------------------------------------------------------------

/// The input distributions of docs/DESIGN.md §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    /// Uniform [-1, 1].
    Uniform,
    /// Standard normal.
    Normal,
    /// q and k normal, scaled so the logits have a standard deviation near 8 (sharp attention).
    Peaky,
    /// Uniform with |x| up to 1e3 (an unstabilised exp overflows), the scale set so the
    /// logits' standard deviation is near 8.
    Large,
}

impl Dist {
    pub const ALL: [Dist; 4] = [Dist::Uniform, Dist::Normal, Dist::Peaky, Dist::Large];
}

/// `n` values of `dist` for q/k (`qk`) or v.
pub fn draw(rng: &mut Rng, dist: Dist, qk: bool, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match dist {
            Dist::Uniform => (2.0 * rng.uniform() - 1.0) as f32,
            Dist::Normal => rng.normal() as f32,
            Dist::Peaky if qk => (8f64.sqrt() * rng.normal()) as f32,
            Dist::Peaky => rng.normal() as f32,
            Dist::Large => (1e3 * (2.0 * rng.uniform() - 1.0)) as f32,
        })
        .collect()
}

/// The problem as `dist` wants it: `Large` sets the scale that keeps its logits' spread near 8
/// (uniform(-A, A) has variance A²/3: logit std = scale · sqrt(D) · A²/3).
pub fn problem_for(problem: Problem, dist: Dist) -> Problem {
    match dist {
        Dist::Large => problem.with_scale((8.0 / ((problem.head_dim() as f64).sqrt() * 1e6 / 3.0)) as f32),
        _ => problem,
    }
}

/// Random q, k, v for `problem` (each as long as its strides address, plus `extra`), all
/// drawn from `dist`.
pub fn inputs(problem: &Problem, dist: Dist, rng: &mut Rng) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let len = |t| problem.required_len(t).expect("extent");
    (
        draw(rng, dist, true, len(Tensor::Q)),
        draw(rng, dist, true, len(Tensor::K)),
        draw(rng, dist, false, len(Tensor::V)),
    )
}

/// A NaN with a payload no computation makes: what "never written" looks like.
pub const POISON: f32 = f32::from_bits(0x7fc0_dead);

pub fn poisoned(n: usize) -> Vec<f32> {
    vec![POISON; n]
}

pub fn is_poison(x: f32) -> bool {
    x.to_bits() == POISON.to_bits()
}

// ---- the float64 reference -------------------------------------------------------------------

/// Element offset of (b, h, i, d) of `tensor` at the problem's strides.
pub fn offset(problem: &Problem, tensor: Tensor, b: usize, h: usize, i: usize, d: usize) -> usize {
    let s = problem.strides(tensor).expect("strides");
    b * s.batch + h * s.head + i * s.token + d
}

/// The scale the library uses: the problem's, or 1/sqrt(D) rounded to float32 as the C API does.
pub fn scale_of(problem: &Problem) -> f64 {
    match problem.scale() {
        Some(s) if s > 0.0 => f64::from(s),
        _ => f64::from((1.0 / (problem.head_dim() as f64).sqrt()) as f32),
    }
}

/// The key/value head query head `h` reads (grouped-query heads).
pub fn kv_head(problem: &Problem, h: usize) -> usize {
    h / (problem.heads() / problem.kv_heads())
}

/// Which keys a query row attends, and with what additive bias: `None` for a key left out,
/// `Some(bias)` for an attended one. Arguments (b, h, i, j): batch, query head, query row, key.
pub type Attends<'a> = &'a dyn Fn(usize, usize, usize, usize) -> Option<f64>;

/// One query row of the reference, in float64: out row i of (b, h) into `out` (D values), and
/// its lse. Keys with `attends(b, j)` false are left out; with none left, out is 0 and lse -inf.
pub fn reference_row(
    problem: &Problem,
    qkv: (&[f32], &[f32], &[f32]),
    (b, h, i): (usize, usize, usize),
    attends: &dyn Fn(usize, usize) -> bool,
    out: &mut [f64],
) -> f64 {
    reference_row_with(problem, qkv, (b, h, i), &|b, _, _, j| attends(b, j).then_some(0.0), out)
}

/// [`reference_row`] under a general mask: `attends(b, h, i, j)` says whether key j is attended
/// and its additive bias (added to the scaled score). k and v are read at key/value head
/// `kv_head(h)`.
pub fn reference_row_with(
    problem: &Problem,
    (q, k, v): (&[f32], &[f32], &[f32]),
    (b, h, i): (usize, usize, usize),
    attends: Attends,
    out: &mut [f64],
) -> f64 {
    let d_len = problem.head_dim();
    let scale = scale_of(problem);
    let hk = kv_head(problem, h);
    let qi = &q[offset(problem, Tensor::Q, b, h, i, 0)..][..d_len];
    let keys: Vec<(usize, f64)> =
        (0..problem.seq_kv()).filter_map(|j| attends(b, h, i, j).map(|bias| (j, bias))).collect();
    out.iter_mut().for_each(|o| *o = 0.0);
    if keys.is_empty() {
        return f64::NEG_INFINITY;
    }
    let scores: Vec<f64> = keys
        .iter()
        .map(|&(j, bias)| {
            let kj = &k[offset(problem, Tensor::K, b, hk, j, 0)..][..d_len];
            scale * qi.iter().zip(kj).map(|(&a, &c)| f64::from(a) * f64::from(c)).sum::<f64>() + bias
        })
        .collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for (&(j, _), &s) in keys.iter().zip(&scores) {
        let p = (s - max).exp();
        sum += p;
        let vj = &v[offset(problem, Tensor::V, b, hk, j, 0)..][..d_len];
        for (o, &x) in out.iter_mut().zip(vj) {
            *o += p * f64::from(x);
        }
    }
    out.iter_mut().for_each(|o| *o /= sum);
    max + sum.ln()
}

/// The whole reference: out dense `[B, H, Sq, D]` and lse `[B, H, Sq]`, in float64.
pub fn reference(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    attends: &dyn Fn(usize, usize) -> bool,
) -> (Vec<f64>, Vec<f64>) {
    reference_with(problem, q, k, v, &|b, _, _, j| attends(b, j).then_some(0.0))
}

/// [`reference`] under a general mask (see [`Attends`]).
pub fn reference_with(problem: &Problem, q: &[f32], k: &[f32], v: &[f32], attends: Attends) -> (Vec<f64>, Vec<f64>) {
    let (bn, hn, sq, dn) = (problem.batch(), problem.heads(), problem.seq_q(), problem.head_dim());
    let mut out = vec![0.0; bn * hn * sq * dn];
    let mut lse = vec![0.0; bn * hn * sq];
    for b in 0..bn {
        for h in 0..hn {
            for i in 0..sq {
                let row = ((b * hn + h) * sq + i) * dn;
                lse[(b * hn + h) * sq + i] =
                    reference_row_with(problem, (q, k, v), (b, h, i), attends, &mut out[row..row + dn]);
            }
        }
    }
    (out, lse)
}

pub fn attends_all(_: usize, _: usize) -> bool {
    true
}

// ---- metrics and the gate --------------------------------------------------------------------

/// Errors of an output against the reference (docs/DESIGN.md §2).
#[derive(Clone, Copy, Debug, Default)]
pub struct Metrics {
    pub rel_l2: f64,
    pub max_abs: f64,
    pub cos: f64,
    pub max_ref: f64,
    pub not_finite: usize,
}

impl Metrics {
    pub fn of(got: impl IntoIterator<Item = f32>, want: impl IntoIterator<Item = f64>) -> Metrics {
        let (mut diff2, mut ref2, mut got2, mut dot) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let mut m = Metrics::default();
        for (g, w) in got.into_iter().zip(want) {
            let g = f64::from(g);
            if !g.is_finite() {
                m.not_finite += 1;
                continue;
            }
            diff2 += (g - w) * (g - w);
            ref2 += w * w;
            got2 += g * g;
            dot += g * w;
            m.max_abs = m.max_abs.max((g - w).abs());
            m.max_ref = m.max_ref.max(w.abs());
        }
        m.rel_l2 = if ref2 > 0.0 { (diff2 / ref2).sqrt() } else { diff2.sqrt() };
        m.cos = match (ref2 > 0.0, got2 > 0.0) {
            (true, true) => dot / (ref2.sqrt() * got2.sqrt()),
            (false, false) => 1.0,
            _ => 0.0,
        };
        m
    }

    /// The f32 gate of docs/DESIGN.md §2 (rel_l2, max_abs relative to max(1, max|ref|), cosine),
    /// and every element finite; the numbers mirror `JATTN_GATE_F32_*` of kit/metrics.h.
    pub fn passes_f32(&self) -> bool {
        self.not_finite == 0
            && self.rel_l2 <= 2e-6
            && self.max_abs <= 1e-5 * self.max_ref.max(1.0)
            && self.cos >= 0.99999
    }

    /// The backward's gate (kit/metrics.h, `jattn_metrics_pass_backward`): rel_l2 <= 5e-6,
    /// max_abs <= 2e-5 · max(1, max|ref|), cos >= 0.99999, every element finite; a reference that
    /// is all zero (a gradient that vanishes exactly) has no direction, and max_abs alone gates it.
    pub fn passes_backward(&self) -> bool {
        if self.not_finite > 0 {
            return false;
        }
        let abs = self.max_abs <= 2e-5 * self.max_ref.max(1.0);
        if self.max_ref == 0.0 {
            return abs;
        }
        self.rel_l2 <= 5e-6 && abs && self.cos >= 0.99999
    }

    /// The backward's gate, or each metric within `k` times the floor's `f` (1 - cos and max_abs
    /// within k^2 times), as kit/metrics.c's `jattn_metrics_pass_backward_floor` (k = 3, the float32
    /// floor) and tests/test_backward.c (k = 4, the float32-logit floor).
    pub fn within_floor(&self, f: &Metrics, k: f64) -> bool {
        if self.passes_backward() {
            return true;
        }
        if self.not_finite > 0 || self.rel_l2.is_nan() {
            return false;
        }
        let rel = self.max_ref == 0.0 || self.rel_l2 <= 5e-6 || self.rel_l2 <= k * f.rel_l2;
        let cos = self.max_ref == 0.0 || self.cos >= 0.99999 || 1.0 - self.cos <= k * k * (1.0 - f.cos) + 1e-12;
        let abs = self.max_abs <= 2e-5 * self.max_ref.max(1.0) || self.max_abs <= k * k * f.max_abs;
        rel && cos && abs
    }

    /// Each metric of the larger error of two (the float32 floor: the larger of its two evaluations).
    pub fn larger(self, b: Metrics) -> Metrics {
        Metrics {
            rel_l2: self.rel_l2.max(b.rel_l2),
            max_abs: self.max_abs.max(b.max_abs),
            cos: self.cos.min(b.cos),
            ..self
        }
    }
}

/// What a float64 reference backward models: nothing (the exact gradients); each logit rounded to
/// float32 once (the float32-logit floor of docs/DESIGN.md §2); or that and the out and lse a
/// backward is handed (float32, out through the problem's strides, lse [B, H, Sq]): the weights
/// exp(logit - lse) and dO.O from that out, the rest float64, with the logits rounded (true) or exact
/// (false): the two evaluations of the float32 floor of kit/metrics.h.
#[derive(Clone, Copy)]
pub enum Floor<'a> {
    None,
    Logits,
    Inputs(&'a [f32], &'a [f32], bool),
}

impl<'a> Floor<'a> {
    /// Whether the logits are rounded to float32 once.
    pub fn rounds_logits(self) -> bool {
        match self {
            Floor::None => false,
            Floor::Logits => true,
            Floor::Inputs(_, _, round) => round,
        }
    }

    /// The (out, lse) the backward is handed, where modelled.
    pub fn given(self) -> Option<(&'a [f32], &'a [f32])> {
        match self {
            Floor::Inputs(out, lse, _) => Some((out, lse)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rel_l2 {:.2e} max_abs {:.2e} (max|ref| {:.3}) cos {:.7}{}",
            self.rel_l2,
            self.max_abs,
            self.max_ref,
            self.cos,
            if self.not_finite > 0 { format!(" NOT FINITE {}", self.not_finite) } else { String::new() }
        )
    }
}

/// The output at its strides, gathered in the reference's dense order.
pub fn gather_out(problem: &Problem, out: &[f32]) -> Vec<f32> {
    let mut dense = Vec::with_capacity(problem.batch() * problem.heads() * problem.seq_q() * problem.head_dim());
    for b in 0..problem.batch() {
        for h in 0..problem.heads() {
            for i in 0..problem.seq_q() {
                let at = offset(problem, Tensor::Out, b, h, i, 0);
                dense.extend_from_slice(&out[at..at + problem.head_dim()]);
            }
        }
    }
    dense
}

/// The lse gate: |lse − ref| <= 1e-5 · max(1, |ref|), and -inf exactly where the reference is.
pub fn lse_passes(got: &[f32], want: &[f64]) -> Result<(), String> {
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w == f64::NEG_INFINITY {
            g == f32::NEG_INFINITY
        } else {
            (f64::from(g) - w).abs() <= 1e-5 * w.abs().max(1.0)
        };
        if !ok {
            return Err(format!("lse[{n}] = {g}, reference {w}"));
        }
    }
    Ok(())
}

/// Every element of `buf` that no tensor element of `problem`'s out addresses is still poison
/// (the call wrote only inside its output).
pub fn only_out_written(problem: &Problem, buf: &[f32]) -> bool {
    let mut addressed = vec![false; buf.len()];
    for b in 0..problem.batch() {
        for h in 0..problem.heads() {
            for i in 0..problem.seq_q() {
                let at = offset(problem, Tensor::Out, b, h, i, 0);
                addressed[at..at + problem.head_dim()].iter_mut().for_each(|a| *a = true);
            }
        }
    }
    buf.iter().zip(&addressed).all(|(&x, &a)| a || is_poison(x))
}

// ---- masks: owned arrays, the jattn::Mask over them, and the rule written from jattn.h --------

/// How a [`MaskModel`]'s key bias is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasKind {
    Shared,
    PerBatch,
    PerHead,
    PerBatchAndHead,
}

/// A mask with its arrays owned: [`MaskModel::mask`] lends them to a `jattn::Mask`, and
/// [`MaskModel::attends`] says which keys a row attends by the rule of jattn.h, written here
/// independently of the library (the test's oracle).
#[derive(Clone, Debug, Default)]
pub struct MaskModel {
    pub kv_len: Option<Vec<i64>>,
    /// Boolean key mask: bytes and rows (1 or batch), rows back to back.
    pub key_mask: Option<(Vec<u8>, usize)>,
    pub causal: Causal,
    /// Block offsets (q, kv).
    pub blocks: Option<(Vec<i64>, Vec<i64>)>,
    /// Segment offsets (q, kv), num_segments, and whether there is one row per batch.
    pub segments: Option<(Vec<i64>, Vec<i64>, usize, bool)>,
    pub bias: Option<(Vec<f32>, BiasKind)>,
}

impl MaskModel {
    pub fn mask(&self) -> Mask<'_> {
        let mut kp = KeyPadding::none();
        if let Some(l) = &self.kv_len {
            kp = kp.with_lengths(l);
        }
        if let Some((m, rows)) = &self.key_mask {
            kp = kp.with_mask(m, *rows);
        }
        let mut mask = Mask::none().with_padding(kp).with_causal(self.causal);
        if let Some((q, kv)) = &self.blocks {
            mask = mask.with_blocks(Blocks::new(q, kv));
        }
        if let Some((q, kv, n, per_batch)) = &self.segments {
            mask = mask.with_segments(if *per_batch { Segments::per_batch(q, kv, *n) } else { Segments::new(q, kv) });
        }
        if let Some((values, kind)) = &self.bias {
            mask = mask.with_key_bias(match kind {
                BiasKind::Shared => KeyBias::shared(values),
                BiasKind::PerBatch => KeyBias::per_batch(values),
                BiasKind::PerHead => KeyBias::per_head(values),
                BiasKind::PerBatchAndHead => KeyBias::per_batch_and_head(values),
            });
        }
        mask
    }

    /// The bias of key j for (b, h).
    pub fn bias(&self, p: &Problem, b: usize, h: usize, j: usize) -> f64 {
        let Some((values, kind)) = &self.bias else { return 0.0 };
        let skv = p.seq_kv();
        let at = match kind {
            BiasKind::Shared => j,
            BiasKind::PerBatch => b * skv + j,
            BiasKind::PerHead => h * skv + j,
            BiasKind::PerBatchAndHead => (b * p.heads() + h) * skv + j,
        };
        f64::from(values[at])
    }

    /// Whether query row i of (b, h) attends key j (jattn.h: inside every window that is set,
    /// attended by the key padding, bias not -inf), and its bias.
    pub fn attends(&self, p: &Problem, b: usize, h: usize, i: usize, j: usize) -> Option<f64> {
        let (i, j) = (i as i64, j as i64);
        // the segment's own positions and lengths (without segments: the whole sequences)
        let (mut t, mut u, mut lq, mut lk) = (i, j, p.seq_q() as i64, p.seq_kv() as i64);
        if let Some((cq, ck, n, per_batch)) = &self.segments {
            let row = if *per_batch { b * (n + 1) } else { 0 };
            let (cq, ck) = (&cq[row..row + n + 1], &ck[row..row + n + 1]);
            let s = (0..*n).find(|&s| cq[s] <= i && i < cq[s + 1])?; // past the last: no key
            if !(ck[s] <= j && j < ck[s + 1]) {
                return None;
            }
            (t, u, lq, lk) = (i - cq[s], j - ck[s], cq[s + 1] - cq[s], ck[s + 1] - ck[s]);
        }
        let causal_ok = match self.causal {
            Causal::TopLeft => u <= t,
            Causal::BottomRight => u <= t + lk - lq,
            _ => true,
        };
        if !causal_ok {
            return None;
        }
        if let Some((bq, bk)) = &self.blocks {
            let a = (0..bq.len() - 1).find(|&a| bq[a] <= i && i < bq[a + 1])?;
            if j >= bk[a + 1] {
                return None;
            }
        }
        if let Some(l) = &self.kv_len {
            if j >= l[b] {
                return None;
            }
        }
        if let Some((m, rows)) = &self.key_mask {
            if m[if *rows == 1 { j as usize } else { b * p.seq_kv() + j as usize }] == 0 {
                return None;
            }
        }
        let bias = self.bias(p, b, h, j as usize);
        (bias != f64::NEG_INFINITY).then_some(bias)
    }
}

/// `n + 1` non-decreasing offsets from 0 to `total` (cut points drawn at random; blocks may be
/// empty).
pub fn random_offsets(rng: &mut Rng, n: usize, total: usize) -> Vec<i64> {
    let mut cuts: Vec<i64> = (0..n.saturating_sub(1)).map(|_| rng.range(0, total) as i64).collect();
    cuts.sort_unstable();
    let mut o = vec![0];
    o.extend(cuts);
    o.push(total as i64);
    o
}

/// A random key bias of `kind` for `p`: normal values, about one key in six -inf.
pub fn random_bias(rng: &mut Rng, p: &Problem, kind: BiasKind) -> (Vec<f32>, BiasKind) {
    let rows = match kind {
        BiasKind::Shared => 1,
        BiasKind::PerBatch => p.batch(),
        BiasKind::PerHead => p.heads(),
        BiasKind::PerBatchAndHead => p.batch() * p.heads(),
    };
    let values = (0..rows * p.seq_kv())
        .map(|_| if rng.range(0, 5) == 0 { f32::NEG_INFINITY } else { rng.normal() as f32 })
        .collect();
    (values, kind)
}

/// Float64 gradients (the backward tests' reference) under a mask (`MaskModel::default()`: none), dense `[B, H(kv), S, D]`: (dq, dk, dv), dk and dv of a
/// key/value head summed over its group; `floor` says which float32 roundings to model (common's
/// `Floor`: a logit is scale · q.k plus its key bias, rounded as one number).
pub fn reference_backward(
    p: &Problem,
    (q, k, v, dout): (&[f32], &[f32], &[f32], &[f32]),
    model: &MaskModel,
    floor: Floor,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (round_logits, given) = (floor.rounds_logits(), floor.given());
    let (bn, hn, hkn, sq, skv, dn) = (p.batch(), p.heads(), p.kv_heads(), p.seq_q(), p.seq_kv(), p.head_dim());
    let scale = scale_of(p);
    let (mut dq, mut dk, mut dv) =
        (vec![0.0; bn * hn * sq * dn], vec![0.0; bn * hkn * skv * dn], vec![0.0; bn * hkn * skv * dn]);
    let x = |t: &[f32], tensor, b, h, i, d| f64::from(t[offset(p, tensor, b, h, i, d)]);
    for b in 0..bn {
        for h in 0..hn {
            let hk = kv_head(p, h);
            for i in 0..sq {
                let keys: Vec<(usize, f64)> =
                    (0..skv).filter_map(|j| model.attends(p, b, h, i, j).map(|bias| (j, bias))).collect();
                if keys.is_empty() {
                    continue;
                }
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&(j, bias)| {
                        let s = scale
                            * (0..dn).map(|d| x(q, Tensor::Q, b, h, i, d) * x(k, Tensor::K, b, hk, j, d)).sum::<f64>()
                            + bias;
                        if round_logits { f64::from(s as f32) } else { s }
                    })
                    .collect();
                let pr: Vec<f64> = match given {
                    Some((_, lse)) => {
                        let l = f64::from(lse[(b * hn + h) * sq + i]);
                        s.iter().map(|v| (v - l).exp()).collect()
                    }
                    None => {
                        let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        e.iter().map(|v| v / sum).collect()
                    }
                };
                let o: Vec<f64> = match given {
                    Some((out, _)) => (0..dn).map(|d| x(out, Tensor::Out, b, h, i, d)).collect(),
                    None => (0..dn)
                        .map(|d| keys.iter().zip(&pr).map(|(&(j, _), pj)| pj * x(v, Tensor::V, b, hk, j, d)).sum())
                        .collect(),
                };
                let g = |d| x(dout, Tensor::Out, b, h, i, d);
                let dl: f64 = (0..dn).map(|d| g(d) * o[d]).sum();
                for (&(j, _), pj) in keys.iter().zip(&pr) {
                    let dp: f64 = (0..dn).map(|d| g(d) * x(v, Tensor::V, b, hk, j, d)).sum();
                    let ds = pj * (dp - dl) * scale;
                    for d in 0..dn {
                        dq[((b * hn + h) * sq + i) * dn + d] += ds * x(k, Tensor::K, b, hk, j, d);
                        dk[((b * hkn + hk) * skv + j) * dn + d] += ds * x(q, Tensor::Q, b, h, i, d);
                        dv[((b * hkn + hk) * skv + j) * dn + d] += pj * g(d);
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

/// A gradient at its tensor's strides, gathered dense.
pub fn gather_grad(p: &Problem, t: Tensor, grad: &[f32]) -> Vec<f32> {
    let mut dense = Vec::new();
    for b in 0..p.batch() {
        for h in 0..p.tensor_heads(t) {
            for i in 0..p.seq(t) {
                let at = offset(p, t, b, h, i, 0);
                dense.extend_from_slice(&grad[at..at + p.head_dim()]);
            }
        }
    }
    dense
}
