//! Zero-size problems (batch, heads, seq_q or seq_kv 0) have PyTorch's answer on every backend
//! present: nothing to compute with no batch, head or query (every slice may be empty, nothing is
//! written); with no key every out row is +0 and every lse -inf; the backward gives dq = +0 with no
//! key and dk = dv = +0 with no query. With one-call functions, masks, grouped-query heads and
//! plans (whose kernel is "none"). head_dim 0 stays an error.

mod common;

use common::*;
use jattn::{
    Backend, BackwardInputs, Blocks, Causal, Exec, KeyBias, KeyPadding, Layout, Mask, Pass, Plan, Problem, Scratch,
    Segments, Status, Tensor,
};

/// Every backend that can run a small plain problem here (Unavailable ones are skipped).
fn backends() -> Vec<Backend> {
    let p = Problem::flux(1, 1, 2, 2, 8);
    let mut list = vec![Backend::Auto];
    for b in jattn::backends() {
        match jattn::select(&p, &Exec::new().with_backend(b.backend)) {
            Ok(_) => list.push(b.backend),
            Err(e) => note(&format!("SKIP: the {} backend: {e}", b.name)),
        }
    }
    list
}

/// Problems with one dimension (or several) 0, in assorted layouts and head groupings.
fn zero_problems() -> Vec<Problem> {
    let mut list = Vec::new();
    for dims in
        [[0, 3, 5, 7], [2, 0, 5, 7], [2, 3, 0, 7], [2, 3, 5, 0], [0, 0, 0, 0], [2, 3, 0, 0], [1, 1, 1, 0], [0, 4, 5, 7]]
    {
        let p = Problem::flux(dims[0], dims[1], dims[2], dims[3], 16);
        list.push(p);
        list.push(p.with_qkv(Layout::TokenMajor).with_out(Layout::HeadMajor));
        if dims[1] % 2 == 0 && dims[1] > 0 {
            list.push(p.with_kv_heads(dims[1] / 2));
        }
    }
    list.push(Problem::flux(2, 4, 5, 0, 16).with_kv_heads(1));
    list
}

/// The forward's answer: out rows +0 and lse -inf where there is a query but no key; otherwise
/// nothing written.
fn check_forward(p: &Problem, out: &[f32], lse: &[f32]) {
    let no_key = p.seq_kv() == 0;
    let rows_written = if no_key { p.batch() * p.heads() * p.seq_q() } else { 0 };
    let mut zeros = 0;
    for b in 0..p.batch() {
        for h in 0..p.heads() {
            for i in 0..p.seq_q() {
                let at = offset(p, Tensor::Out, b, h, i, 0);
                for &x in &out[at..at + p.head_dim()] {
                    assert!(no_key && x.to_bits() == 0, "{p:?}: out = {x}");
                    zeros += 1;
                }
            }
        }
    }
    assert_eq!(zeros, rows_written * p.head_dim());
    assert!(only_out_written(p, out), "{p:?}: wrote outside out");
    assert!(lse.iter().all(|&x| x == f32::NEG_INFINITY), "{p:?}: lse {lse:?}");
}

#[test]
fn forward_of_every_zero_dimension() {
    for backend in backends() {
        let exec = Exec::new().with_backend(backend);
        let mut ran = 0;
        for p in zero_problems() {
            let (nq, nk, no) = (
                p.required_len(Tensor::Q).unwrap(),
                p.required_len(Tensor::K).unwrap(),
                p.required_len(Tensor::Out).unwrap(),
            );
            let (q, k) = (vec![0.5f32; nq], vec![0.25f32; nk]);
            let mut out = poisoned(no + 2);
            let mut lse = poisoned(p.lse_len().unwrap());
            match jattn::forward(&p, &exec, &q, &k, &k, &mut out, Some(&mut lse)) {
                Ok(()) => {}
                Err(e) if e.status() == Status::Unsupported && p.kv_heads() < p.heads() => {
                    note(&format!("SKIP: {backend}: {e}"));
                    continue;
                }
                Err(e) => panic!("{backend} {p:?}: {e}"),
            }
            check_forward(&p, &out, &lse);
            // Empty slices where a tensor has no element (no allocation needed).
            let empty: &[f32] = &[];
            let (q2, k2) = (if nq == 0 { empty } else { &q[..] }, if nk == 0 { empty } else { &k[..] });
            let mut out2 = if no == 0 { Vec::new() } else { poisoned(no) };
            jattn::forward(&p, &exec, q2, k2, k2, &mut out2, None).unwrap();
            check_forward(&p, &out2, &[]);
            ran += 1;
        }
        println!("forward_of_every_zero_dimension: {backend}: {ran} problems");
    }
    // head_dim 0 is still an error, zero dimensions or not.
    let e = jattn::forward(&Problem::flux(0, 0, 0, 0, 0), &Exec::default(), &[], &[], &[], &mut [], None).unwrap_err();
    assert_eq!((e.status(), e.message()), (Status::InvalidDimension, "head_dim: 0, must be >= 1"));
}

#[test]
fn backward_of_every_zero_dimension() {
    for backend in [Backend::Ref, Backend::Cpu, Backend::Auto] {
        let exec = Exec::new().with_backend(backend);
        for p in zero_problems() {
            if let Err(e) = jattn::select_backward(&p, &exec) {
                assert_eq!(e.status(), Status::Unsupported, "{backend} {p:?}: {e}");
                note(&format!("SKIP: {backend}: {e}"));
                continue;
            }
            let (nq, nk, no, nl) = (
                p.required_len(Tensor::Q).unwrap(),
                p.required_len(Tensor::K).unwrap(),
                p.required_len(Tensor::Out).unwrap(),
                p.lse_len().unwrap(),
            );
            let (q, k, out, dout) = (vec![0.5f32; nq], vec![0.25f32; nk], vec![0.0f32; no], vec![1.0f32; no]);
            let lse = vec![f32::NEG_INFINITY; nl];
            let inputs = BackwardInputs { q: &q, k: &k, v: &k, out: &out, lse: &lse, dout: &dout, dlse: Some(&lse) };
            let (mut dq, mut dk, mut dv) = (poisoned(nq), poisoned(nk), poisoned(nk));
            jattn::backward(&p, &exec, &inputs, None, &mut dq, &mut dk, &mut dv)
                .unwrap_or_else(|e| panic!("{p:?}: {e}"));
            // with no key: dq = +0; with no query: dk = dv = +0; a tensor without element has nothing
            assert!(dq.iter().all(|x| x.to_bits() == 0) || nq == 0, "{backend} {p:?}: dq {dq:?}");
            if p.seq_q() == 0 {
                assert!(dk.iter().chain(&dv).all(|x| x.to_bits() == 0), "{backend} {p:?}: dk/dv");
            }
            if nq > 0 {
                assert_eq!(p.seq_kv(), 0, "a problem with queries here has no key");
            }
        }
    }
}

#[test]
fn masks_and_plans_on_zero_sizes() {
    let reference = Exec::new().with_backend(Backend::Ref);
    let (offsets, bias) = ([0i64, 0, 0], [0.0f32; 0]);
    // Sq = Skv = 0 under every part: blocks of no token, segments of none, an empty bias.
    let p = Problem::flux(2, 2, 0, 0, 8);
    let mask = Mask::none()
        .with_causal(Causal::BottomRight)
        .with_blocks(Blocks::new(&offsets, &offsets))
        .with_segments(Segments::new(&offsets, &offsets))
        .with_key_bias(KeyBias::per_batch_and_head(&bias))
        .with_padding(KeyPadding::lengths(&[0, 0]));
    jattn::forward_masked(&p, &reference, &[], &[], &[], &mask, &mut [], None).unwrap();
    // Batch 0: a per-batch bias and lengths of no row.
    let p = Problem::flux(0, 2, 4, 4, 8);
    let mask = Mask::none().with_key_bias(KeyBias::per_batch(&[])).with_padding(KeyPadding::lengths(&[]));
    jattn::forward_masked(&p, &reference, &[], &[], &[], &mask, &mut [], None).unwrap();
    // Queries but no key, causal: every row 0, lse -inf.
    let p = Problem::flux(1, 2, 3, 0, 8).with_kv_heads(1);
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
    let mut lse = poisoned(p.lse_len().unwrap());
    let causal = Mask::none().with_causal(Causal::TopLeft);
    jattn::forward_masked(&p, &reference, &[0.5; 48], &[], &[], &causal, &mut out, Some(&mut lse)).unwrap();
    check_forward(&p, &out, &lse);
    // A plan of a zero-size problem: no kernel; its runs write the answer.
    for pass in [Pass::Forward, Pass::Backward] {
        let plan = Plan::new(pass, &p, &reference, Some(&causal)).unwrap();
        let sel = plan.selection();
        assert_eq!(sel.backend, Backend::Ref);
        assert!(sel.kernel.starts_with("none"), "{sel}");
        assert_eq!(plan.workspace_size(), 0);
        let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
        let mut lse = poisoned(p.lse_len().unwrap());
        match pass {
            Pass::Forward => {
                plan.forward(Scratch::Alloc, &[0.5; 48], &[], &[], Some(&causal), &mut out, Some(&mut lse)).unwrap();
                check_forward(&p, &out, &lse);
            }
            Pass::Backward => {
                let (z, l) = (vec![0.0f32; 48], vec![f32::NEG_INFINITY; 6]);
                let inputs = BackwardInputs { q: &z, k: &[], v: &[], out: &z, lse: &l, dout: &z, dlse: None };
                let mut dq = poisoned(48);
                plan.backward(Scratch::Alloc, &inputs, Some(&causal), &mut dq, &mut [], &mut []).unwrap();
                assert!(dq.iter().all(|x| x.to_bits() == 0));
            }
        }
    }
}
