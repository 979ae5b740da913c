//! Masks and grouped-query heads (`forward_masked`, `backward_masked`, `Problem::with_kv_heads`)
//! against the float64 reference of common/mod.rs with the same mask, whose rule (`MaskModel::
//! attends`) is written here from jattn.h: causal top-left and bottom-right (Sq below, equal to
//! and above Skv), block-causal blocks, segments (one row, or one per batch; self and cross;
//! queries past the last segment), the key bias in its four layouts (with -inf keys, and rows
//! with every key -inf), key padding, grouped-query heads (MQA included) in every layout, and all
//! of them at once; the backward of each (the backward's gate, or within 3x the float32 floor of
//! kit/metrics.h where float32 itself stops it). Keys no query attends hold NaN in k and v (they must
//! never be read), outputs are poisoned before each call, and every element is checked.
//!
//! Every case runs on the reference backend (the oracle: it serves every part) and on the cpu
//! backend; a backend that answers `Unsupported` for a part (the cpu backend until it serves
//! masks) has that case skipped with the library's reason printed, so the same test covers it
//! once it does. Also the validation of every mask part: the message names the field, nothing is
//! written, and random hostile masks give an `Err` or a correct answer — never a panic.

mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;

use common::*;
use jattn::{
    Backend, BackwardInputs, Blocks, Causal, Error, Exec, KeyBias, Layout, Mask, Problem, Segments, Status, Strides,
    Tensor,
};

const BACKENDS: [Backend; 2] = [Backend::Ref, Backend::Cpu];

/// Prints a skip once per (backend, reason): the library's reason, and the first case it skips.
fn skip(backend: Backend, what: &str, e: &Error) {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let key = format!("{backend} {}", e.message());
    if SEEN.lock().map(|mut s| s.insert(key)).unwrap_or(true) {
        note(&format!("SKIP: {backend} does not serve this yet, its cases are skipped (first: {what}): {e}"));
    }
}

/// Whether an error means "this backend does not serve it here" (skip) rather than a failure.
/// The reference serves every part: for it, nothing is skipped.
fn skippable(backend: Backend, e: &Error) -> bool {
    backend != Backend::Ref && matches!(e.status(), Status::Unsupported | Status::BackendUnavailable)
}

/// Sets k and v rows that no query of their key/value head attends to NaN: the call must never
/// read them.
fn poison_unattended(p: &Problem, model: &MaskModel, k: &mut [f32], v: &mut [f32]) {
    let group = p.heads() / p.kv_heads();
    for b in 0..p.batch() {
        for hk in 0..p.kv_heads() {
            for j in 0..p.seq_kv() {
                let read = (hk * group..(hk + 1) * group)
                    .any(|h| (0..p.seq_q()).any(|i| model.attends(p, b, h, i, j).is_some()));
                if !read {
                    let (ko, vo) = (offset(p, Tensor::K, b, hk, j, 0), offset(p, Tensor::V, b, hk, j, 0));
                    k[ko..ko + p.head_dim()].fill(f32::NAN);
                    v[vo..vo + p.head_dim()].fill(f32::NAN);
                }
            }
        }
    }
}

/// One forward case on `backend`: the output and lse against the reference with the same mask.
/// @return false when the backend does not serve it (skipped, reason printed).
fn forward_case(label: &str, p: &Problem, backend: Backend, model: &MaskModel, dist: Dist, rng: &mut Rng) -> bool {
    let p = problem_for(*p, dist);
    let (q, mut k, mut v) = inputs(&p, dist, rng);
    poison_unattended(&p, model, &mut k, &mut v);
    let exec = Exec::new().with_backend(backend);
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap() + 3);
    let mut lse = poisoned(p.lse_len().unwrap());
    let mask = model.mask();
    if let Err(e) = jattn::forward_masked(&p, &exec, &q, &k, &v, &mask, &mut out, Some(&mut lse)) {
        assert!(out.iter().chain(&lse).all(|&x| is_poison(x)), "{label}: written by a failing call ({e})");
        if skippable(backend, &e) {
            skip(backend, label, &e);
            return false;
        }
        panic!("{label} on {backend}: {e}");
    }
    let (want, want_lse) = reference_with(&p, &q, &k, &v, &|b, h, i, j| model.attends(&p, b, h, i, j));
    let m = Metrics::of(gather_out(&p, &out), want);
    assert!(m.passes_f32(), "{label} on {backend} ({dist:?}, {p:?}): {m}");
    lse_passes(&lse, &want_lse).unwrap_or_else(|e| panic!("{label} on {backend} ({dist:?}): {e}"));
    assert!(only_out_written(&p, &out), "{label} on {backend}: wrote outside out");
    true
}

/// Runs `case` for every backend and distribution, `reps` draws each; prints what ran.
fn for_each(test: &str, reps: usize, mut case: impl FnMut(Backend, Dist, &mut Rng) -> bool) {
    let mut rng = rng_for(test);
    for backend in BACKENDS {
        let mut ran = 0;
        for r in 0..reps {
            let dist = Dist::ALL[r % Dist::ALL.len()];
            ran += usize::from(case(backend, dist, &mut rng));
        }
        println!("{test}: {backend}: {ran} of {reps} cases ran");
    }
}

#[test]
fn causal_top_left_and_bottom_right() {
    let shapes = [(7, 7), (5, 13), (13, 5), (64, 64), (33, 65), (1, 9), (9, 1)];
    for_each("causal_top_left_and_bottom_right", 4, |backend, dist, rng| {
        let mut ran = true;
        for (sq, skv) in shapes {
            for causal in [Causal::TopLeft, Causal::BottomRight] {
                let p = Problem::flux(2, 3, sq, skv, 16);
                let model = MaskModel { causal, ..MaskModel::default() };
                ran &= forward_case(&format!("causal {causal} Sq {sq} Skv {skv}"), &p, backend, &model, dist, rng);
            }
        }
        ran
    });
}

#[test]
fn block_causal() {
    for_each("block_causal", 8, |backend, dist, rng| {
        let (sq, skv) = (rng.range(1, 40), rng.range(1, 40));
        let n = rng.range(1, 6);
        let cross = rng.range(0, 1) == 1;
        let p = Problem::flux(2, 2, sq, if cross { skv } else { sq }, 8);
        let bq = random_offsets(rng, n, sq);
        let bk = if cross { random_offsets(rng, n, skv) } else { bq.clone() };
        let causal = [Causal::None, Causal::TopLeft, Causal::BottomRight][rng.range(0, 2)];
        let model = MaskModel { blocks: Some((bq, bk)), causal, ..MaskModel::default() };
        forward_case("blocks", &p, backend, &model, dist, rng)
    });
}

#[test]
fn segments_packed_sequences() {
    for_each("segments_packed_sequences", 8, |backend, dist, rng| {
        let (b, n) = (rng.range(1, 3), rng.range(1, 4));
        let cross = rng.range(0, 1) == 1;
        let (sq, skv) = (rng.range(1, 30), rng.range(1, 30));
        let p = Problem::flux(b, 2, sq, if cross { skv } else { sq }, 8);
        let per_batch = rng.range(0, 1) == 1;
        let rows = if per_batch { b } else { 1 };
        let (mut cq, mut ck) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            // the last segment may end before the sequence: those queries attend no key
            let (end_q, end_k) = (rng.range(0, sq), rng.range(0, p.seq_kv()));
            let q_row = random_offsets(rng, n, end_q);
            let k_row = if cross { random_offsets(rng, n, end_k) } else { q_row.clone() };
            cq.extend(q_row);
            ck.extend(k_row);
        }
        let causal = [Causal::None, Causal::TopLeft, Causal::BottomRight][rng.range(0, 2)];
        let model = MaskModel { segments: Some((cq, ck, n, per_batch)), causal, ..MaskModel::default() };
        forward_case(&format!("segments (per batch {per_batch}, cross {cross})"), &p, backend, &model, dist, rng)
    });
}

#[test]
fn key_bias_in_every_layout() {
    let kinds = [BiasKind::Shared, BiasKind::PerBatch, BiasKind::PerHead, BiasKind::PerBatchAndHead];
    for_each("key_bias_in_every_layout", 8, |backend, dist, rng| {
        let mut ran = true;
        for kind in kinds {
            let p = Problem::flux(2, 3, rng.range(1, 20), rng.range(1, 20), 8);
            let mut bias = random_bias(rng, &p, kind);
            if rng.range(0, 2) == 0 {
                // a row with every key -inf: its queries attend nothing (0 and lse -inf)
                let n = p.seq_kv();
                bias.0[..n].fill(f32::NEG_INFINITY);
            }
            let model = MaskModel { bias: Some(bias), ..MaskModel::default() };
            ran &= forward_case(&format!("key bias {kind:?}"), &p, backend, &model, dist, rng);
        }
        ran
    });
}

/// Grouped-query heads in every layout: k and v `[B, Hkv, Skv, D]`, token-major `[B, Skv, Hkv·D]`,
/// padded rows, a fused KV buffer.
#[test]
fn grouped_query_heads() {
    for_each("grouped_query_heads", 4, |backend, dist, rng| {
        let mut ran = true;
        for (heads, kv_heads) in [(4, 1), (4, 2), (4, 4), (6, 3), (6, 2), (3, 0)] {
            let (sq, skv, d) = (rng.range(1, 24), rng.range(1, 24), 16);
            let hkv = if kv_heads == 0 { heads } else { kv_heads };
            let layouts = [
                Layout::HeadMajor,
                Layout::TokenMajor,
                Layout::Strides(Strides::new(hkv * skv * (d + 3), skv * (d + 3), d + 3)),
                Layout::Strides(Strides::new(skv * 2 * hkv * d, d, 2 * hkv * d)), // fused [B, S, 2, Hkv, D]
            ];
            let layout = layouts[rng.range(0, 3)];
            let p = Problem::flux(2, heads, sq, skv, d).with_kv_heads(kv_heads).with_k(layout).with_v(layout);
            let p = if rng.range(0, 1) == 0 { p.with_q(Layout::TokenMajor) } else { p };
            assert_eq!(p.kv_heads(), hkv);
            let label = format!("grouped-query heads {heads}/{hkv} ({layout})");
            ran &= forward_case(&label, &p, backend, &MaskModel::default(), dist, rng);
            let model = MaskModel { causal: Causal::BottomRight, ..MaskModel::default() };
            ran &= forward_case(&format!("{label}, causal"), &p, backend, &model, dist, rng);
        }
        ran
    });
}

/// Every part at once, drawn at random: padding, causal, blocks, segments, bias, heads, layouts.
fn random_model(p: &Problem, rng: &mut Rng) -> MaskModel {
    let mut m = MaskModel::default();
    let (sq, skv) = (p.seq_q(), p.seq_kv());
    if rng.range(0, 2) == 0 {
        m.kv_len = Some((0..p.batch()).map(|_| rng.range(0, skv) as i64).collect());
    }
    if rng.range(0, 2) == 0 {
        let rows = if rng.range(0, 1) == 0 { 1 } else { p.batch() };
        m.key_mask = Some(((0..rows * skv).map(|_| u8::from(rng.range(0, 4) > 0)).collect(), rows));
    }
    m.causal = [Causal::None, Causal::TopLeft, Causal::BottomRight][rng.range(0, 2)];
    if rng.range(0, 2) == 0 {
        let n = rng.range(1, 4);
        m.blocks = Some((random_offsets(rng, n, sq), random_offsets(rng, n, skv)));
    }
    if rng.range(0, 2) == 0 {
        let (n, per_batch) = (rng.range(1, 3), rng.range(0, 1) == 1);
        let rows = if per_batch { p.batch() } else { 1 };
        let (mut cq, mut ck) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let (end_q, end_k) = (rng.range(0, sq), rng.range(0, skv));
            cq.extend(random_offsets(rng, n, end_q));
            ck.extend(random_offsets(rng, n, end_k));
        }
        m.segments = Some((cq, ck, n, per_batch));
    }
    if rng.range(0, 2) == 0 {
        let kind =
            [BiasKind::Shared, BiasKind::PerBatch, BiasKind::PerHead, BiasKind::PerBatchAndHead][rng.range(0, 3)];
        m.bias = Some(random_bias(rng, p, kind));
    }
    m
}

fn random_problem(rng: &mut Rng) -> Problem {
    let (heads, group) = ([1, 2, 4][rng.range(0, 2)], [1, 2][rng.range(0, 1)]);
    let p =
        Problem::flux(rng.range(1, 3), heads * group, rng.range(1, 24), rng.range(1, 24), [8, 16, 33][rng.range(0, 2)]);
    let p = p.with_kv_heads(heads);
    match rng.range(0, 2) {
        0 => p.with_qkv(Layout::TokenMajor),
        1 => p.with_out(Layout::HeadMajor),
        _ => p,
    }
}

#[test]
fn every_part_at_once() {
    for_each("every_part_at_once", 40, |backend, dist, rng| {
        let p = random_problem(rng);
        let model = random_model(&p, rng);
        forward_case("a random mask of every part", &p, backend, &model, dist, rng)
    });
}

#[test]
fn backward_under_every_part() {
    let mut rng = rng_for("backward_under_every_part");
    for backend in BACKENDS {
        let exec = Exec::new().with_backend(backend);
        let mut ran = 0;
        let reps = 24;
        for r in 0..reps {
            let dist = [Dist::Uniform, Dist::Normal][r % 2];
            let p = random_problem(&mut rng);
            let model = random_model(&p, &mut rng);
            let (q, mut k, mut v) = inputs(&p, dist, &mut rng);
            poison_unattended(&p, &model, &mut k, &mut v);
            let dout = draw(&mut rng, dist, false, p.required_len(Tensor::Out).unwrap());
            let mask = model.mask();
            // out and lse from the reference backend's forward (the oracle), for every backend
            let mut out = vec![0.0f32; p.required_len(Tensor::Out).unwrap()];
            let mut lse = vec![0.0f32; p.lse_len().unwrap()];
            let ref_exec = Exec::new().with_backend(Backend::Ref);
            jattn::forward_masked(&p, &ref_exec, &q, &k, &v, &mask, &mut out, Some(&mut lse)).unwrap();
            let (nq, nk) = (p.required_len(Tensor::Q).unwrap(), p.required_len(Tensor::K).unwrap());
            let (mut dq, mut dk, mut dv) = (poisoned(nq), poisoned(nk), poisoned(nk));
            let inputs = BackwardInputs { q: &q, k: &k, v: &v, out: &out, lse: &lse, dout: &dout, dlse: None };
            if let Err(e) = jattn::backward_masked(&p, &exec, &inputs, &mask, &mut dq, &mut dk, &mut dv) {
                assert!(dq.iter().chain(&dk).chain(&dv).all(|&x| is_poison(x)), "written by a failing call: {e}");
                if skippable(backend, &e) {
                    skip(backend, "a masked or grouped-query backward", &e);
                    continue;
                }
                panic!("backward on {backend}: {e} ({p:?})");
            }
            // the gate, or within 3x the float32 floor (kit/metrics.h): where float32 itself stops it, as in a
            // near one-hot row whose dq is a small difference dP - Dl carrying out's rounding
            let tensors = (&q[..], &k[..], &v[..], &dout[..]);
            let want = reference_backward(&p, tensors, &model, Floor::None);
            let rounded = reference_backward(&p, tensors, &model, Floor::Inputs(&out, &lse, true));
            let exact = reference_backward(&p, tensors, &model, Floor::Inputs(&out, &lse, false));
            for (name, t, got, want, rounded, exact) in [
                ("dq", Tensor::Q, &dq, &want.0, &rounded.0, &exact.0),
                ("dk", Tensor::K, &dk, &want.1, &rounded.1, &exact.1),
                ("dv", Tensor::V, &dv, &want.2, &rounded.2, &exact.2),
            ] {
                let m = Metrics::of(gather_grad(&p, t, got), want.iter().copied());
                let floor_of = |f: &[f64]| Metrics::of(f.iter().map(|&x| x as f32), want.iter().copied());
                let f = floor_of(rounded).larger(floor_of(exact));
                assert!(
                    m.within_floor(&f, 3.0),
                    "{name} on {backend} ({dist:?}, {p:?}, {model:?}): {m}; float32 floor {f} (seed {})",
                    base_seed()
                );
            }
            ran += 1;
        }
        println!("backward_under_every_part: {backend}: {ran} of {reps} cases ran");
    }
}

// ---- validation: each mask part refused with a message naming its field ---------------------

/// forward_masked on the reference with poisoned outputs; asserts nothing was written on failure.
fn call(p: &Problem, mask: &Mask<'_>) -> Result<(), Error> {
    let x = vec![0.5f32; p.required_len(Tensor::Q).unwrap().max(p.required_len(Tensor::K).unwrap())];
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
    let mut lse = poisoned(p.lse_len().unwrap());
    let r =
        jattn::forward_masked(p, &Exec::new().with_backend(Backend::Ref), &x, &x, &x, mask, &mut out, Some(&mut lse));
    if let Err(e) = &r {
        assert!(out.iter().chain(&lse).all(|&x| is_poison(x)), "written by a failing call: {e}");
    }
    r
}

fn refused(r: Result<(), Error>, status: Status, message_starts: &str) {
    let e = r.expect_err("the call should have failed");
    assert_eq!(e.status(), status, "{e}");
    assert!(
        e.message().starts_with(message_starts),
        "message {:?} does not start with {message_starts:?}",
        e.message()
    );
    println!("{e}");
}

#[test]
fn mask_validation_names_the_field() {
    let p = Problem::flux(2, 2, 6, 8, 4);
    let m = |mask: Mask<'_>| call(&p, &mask);
    // blocks
    let (q4, kv4, kv3) = ([0i64, 2, 4, 6], [0i64, 3, 5, 8], [0i64, 4, 8]);
    assert!(m(Mask::none().with_blocks(Blocks::new(&q4, &kv4))).is_ok());
    refused(
        m(Mask::none().with_blocks(Blocks::new(&q4, &kv3))),
        Status::InvalidArgument,
        "mask.block_kv: 3 offsets, block_q has 4",
    );
    refused(m(Mask::none().with_blocks(Blocks::new(&[0], &[0]))), Status::InvalidDimension, "mask.num_blocks: 0");
    refused(m(Mask::none().with_blocks(Blocks::new(&[], &[]))), Status::InvalidDimension, "mask.num_blocks: 0");
    refused(m(Mask::none().with_blocks(Blocks::new(&[1, 6], &[0, 8]))), Status::InvalidArgument, "mask.block_q[0]: 1");
    refused(m(Mask::none().with_blocks(Blocks::new(&[0, 6], &[0, 7]))), Status::InvalidArgument, "mask.block_kv[1]: 7");
    refused(
        m(Mask::none().with_blocks(Blocks::new(&[0, 4, 3, 6], &kv4))),
        Status::InvalidArgument,
        "mask.block_q[2]: 3",
    );
    // segments
    let (cq, ck) = ([0i64, 3, 6], [0i64, 4, 8]);
    assert!(m(Mask::none().with_segments(Segments::new(&cq, &ck))).is_ok());
    refused(
        m(Mask::none().with_segments(Segments::new(&cq, &ck[..2]))),
        Status::InvalidArgument,
        "mask.cu_seqlens_kv: 2 offsets, cu_seqlens_q has 3",
    );
    refused(
        m(Mask::none().with_segments(Segments::per_batch(&cq, &ck, 2))),
        Status::InvalidArgument,
        "mask.cu_seqlens_q: a slice of 3 offsets",
    );
    let (cq2, ck2) = ([0i64, 3, 6, 0, 1, 2], [0i64, 4, 8, 0, 9, 9]);
    refused(
        m(Mask::none().with_segments(Segments::per_batch(&cq2, &ck2, 2))),
        Status::InvalidArgument,
        "mask.cu_seqlens_kv[5]: 9, the last offset must be at most 8",
    );
    refused(
        m(Mask::none().with_segments(Segments::new(&[0, 5, 4], &ck))),
        Status::InvalidArgument,
        "mask.cu_seqlens_q[2]: 4 < the offset before it",
    );
    refused(
        m(Mask::none().with_segments(Segments::per_batch(&cq2, &ck2, 0))),
        Status::InvalidDimension,
        "mask.num_segments: 0",
    );
    assert!(m(Mask::none().with_segments(Segments::per_batch(&cq2, &[0, 4, 8, 0, 1, 2], 2))).is_ok());
    assert!(m(Mask::none().with_segments(Segments::per_batch(&cq2, &cq2, 2).with_row_stride(0))).is_ok());
    // key bias: each layout one element short
    let bias = vec![0.0f32; 2 * 2 * 8];
    for (kb, need, shape) in [
        (KeyBias::shared(&bias[..7]), 8, "[Skv] = [8]"),
        (KeyBias::per_batch(&bias[..15]), 16, "[B, Skv] = [2, 8]"),
        (KeyBias::per_head(&bias[..15]), 16, "[H, Skv] = [2, 8]"),
        (KeyBias::per_batch_and_head(&bias[..31]), 32, "[B, H, Skv] = [2, 2, 8]"),
    ] {
        let len = kb.values().len();
        refused(
            m(Mask::none().with_key_bias(kb)),
            Status::InvalidArgument,
            &format!("mask.key_bias: a slice of {len} elements; a bias of {shape} needs {need}"),
        );
    }
    assert!(m(Mask::none().with_key_bias(KeyBias::per_batch_and_head(&bias))).is_ok());
    // padding inside a mask, and causal (never invalid: an enum)
    refused(
        m(Mask::none().with_padding(jattn::KeyPadding::lengths(&[1]))),
        Status::InvalidArgument,
        "key_padding.kv_len: 1 entries, batch is 2",
    );
    refused(
        m(Mask::none().with_padding(jattn::KeyPadding::lengths(&[1, 9]))),
        Status::InvalidArgument,
        "key_padding.kv_len[1]: 9",
    );
    assert!(m(Mask::none().with_causal(Causal::BottomRight)).is_ok());
}

/// Random masks of every part — lengths, offsets and counts wrong or right at random — give `Ok`
/// with the reference's answer (the model reads the same arrays), or an `Err` with nothing
/// written; never a panic.
#[test]
fn hostile_random_masks_never_panic() {
    let mut rng = rng_for("hostile_random_masks_never_panic");
    let (mut ok, mut errs) = (0usize, std::collections::BTreeMap::<String, usize>::new());
    for _ in 0..1500 {
        let p = random_problem(&mut rng);
        let mut model = random_model(&p, &mut rng);
        // break something, or not
        match rng.range(0, 7) {
            0 => {
                if let Some((q, _)) = &mut model.blocks {
                    let at = rng.range(0, q.len() - 1);
                    q[at] += [-1i64, 1, 100][rng.range(0, 2)];
                }
            }
            1 => {
                if let Some((_, kv)) = &mut model.blocks {
                    kv.pop();
                }
            }
            2 => {
                if let Some((q, k, n, per_batch)) = &mut model.segments {
                    let at = rng.range(0, q.len() - 1);
                    if rng.range(0, 1) == 0 {
                        q[at] -= 1
                    } else {
                        k.truncate(at)
                    }
                    if *per_batch {
                        *n = rng.range(0, *n + 1); // the rows' stride follows n: the model reads the same
                    }
                }
            }
            3 => {
                if let Some((values, _)) = &mut model.bias {
                    values.truncate(rng.range(0, values.len()));
                }
            }
            4 => {
                if let Some(l) = &mut model.kv_len {
                    l[0] = [-1, p.seq_kv() as i64 + 1][rng.range(0, 1)];
                }
            }
            _ => {}
        }
        let mask = model.mask();
        let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
        let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
        let exec = Exec::new().with_backend(Backend::Ref);
        match jattn::forward_masked(&p, &exec, &q, &k, &v, &mask, &mut out, None) {
            Ok(()) => {
                ok += 1;
                let (want, _) = reference_with(&p, &q, &k, &v, &|b, h, i, j| model.attends(&p, b, h, i, j));
                let m = Metrics::of(gather_out(&p, &out), want);
                assert!(m.passes_f32(), "{p:?} {model:?}: {m}");
            }
            Err(e) => {
                assert!(out.iter().all(|&x| is_poison(x)), "written by a failing call ({e})");
                *errs.entry(e.name().to_owned()).or_default() += 1;
            }
        }
    }
    println!("hostile masks: {ok} valid and computed, refused: {errs:?}");
    assert!(ok > 300 && !errs.is_empty(), "the draw should reach valid masks and errors");
}
