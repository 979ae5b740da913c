//! `jattn::backward` against float64 gradients (common's `reference_backward`: own softmax, own out and lse from
//! the same float32 inputs), gated by the backward's contract on every gradient: rel_l2 <= 5e-6,
//! max_abs <= 2e-5 · max(1, max|ref|), cos >= 0.99999, or within 3x the float32 floor where float32
//! itself stops it (kit/metrics.h, `JATTN_BWD_FLOOR_TIMES`: the gradients of a float64 backward handed
//! the forward's out and lse each rounded to float32 once, the larger of two such evaluations, its logits
//! rounded to float32 once and exact). Also the slice checks (a short slice is an error and nothing is
//! written) and key padding (masked keys get dk = dv = +0).

mod common;

use common::*;
use jattn::{Backend, BackwardInputs, Exec, KeyPadding, Problem, Status, Tensor};

/// One backward against the reference; panics with the case on failure.
fn check(
    label: &str,
    p: Problem,
    exec: &Exec,
    dist: Dist,
    rng: &mut Rng,
    padding: Option<&KeyPadding<'_>>,
    model: &MaskModel,
) {
    let p = problem_for(p, dist);
    let (q, k, v) = inputs(&p, dist, rng);
    let dout = draw(rng, Dist::Normal, false, p.required_len(Tensor::Out).unwrap());
    let mut out = vec![0.0f32; p.required_len(Tensor::Out).unwrap()];
    let mut lse = vec![0.0f32; p.lse_len().unwrap()];
    let fwd = Exec::default().with_backend(Backend::Ref);
    match padding {
        Some(kp) => jattn::forward_padded(&p, &fwd, &q, &k, &v, kp, &mut out, Some(&mut lse)),
        None => jattn::forward(&p, &fwd, &q, &k, &v, &mut out, Some(&mut lse)),
    }
    .unwrap_or_else(|e| panic!("{label}: forward: {e}"));
    let mut dq = poisoned(p.required_len(Tensor::Q).unwrap());
    let mut dk = poisoned(p.required_len(Tensor::K).unwrap());
    let mut dv = poisoned(p.required_len(Tensor::V).unwrap());
    let inputs = BackwardInputs { q: &q, k: &k, v: &v, out: &out, lse: &lse, dout: &dout, dlse: None };
    jattn::backward(&p, exec, &inputs, padding, &mut dq, &mut dk, &mut dv)
        .unwrap_or_else(|e| panic!("{label}: backward: {e}"));
    let tensors = (&q[..], &k[..], &v[..], &dout[..]);
    let (rq, rk, rv) = reference_backward(&p, tensors, model, Floor::None);
    let (lq, lk, lv) = reference_backward(&p, tensors, model, Floor::Logits);
    let (fq, fk, fv) = reference_backward(&p, tensors, model, Floor::Inputs(&out, &lse, true));
    let (eq, ek, ev) = reference_backward(&p, tensors, model, Floor::Inputs(&out, &lse, false));
    for (name, t, got, want, logit_floor, floor, floor_exact) in [
        ("dq", Tensor::Q, &dq, &rq, &lq, &fq, &eq),
        ("dk", Tensor::K, &dk, &rk, &lk, &fk, &ek),
        ("dv", Tensor::V, &dv, &rv, &lv, &fv, &ev),
    ] {
        let m = Metrics::of(gather_grad(&p, t, got), want.iter().copied());
        let lf = Metrics::of(logit_floor.iter().map(|&x| x as f32), want.iter().copied());
        let f = Metrics::of(floor.iter().map(|&x| x as f32), want.iter().copied())
            .larger(Metrics::of(floor_exact.iter().map(|&x| x as f32), want.iter().copied()));
        assert!(
            m.within_floor(&lf, 4.0) || m.within_floor(&f, 3.0),
            "{label} {dist:?} {name}: {m}; float32-logit floor {lf}; float32 floor {f} (seed {})",
            base_seed()
        );
    }
}

#[test]
fn backward_matches_float64_gradients() {
    let mut rng = rng_for("backward_matches_float64_gradients");
    for backend in [Backend::Cpu, Backend::Ref] {
        let exec = Exec::default().with_backend(backend);
        for shape in
            [(1, 2, 8, 8, 128), (1, 2, 40, 40, 128), (2, 3, 33, 65, 64), (1, 1, 100, 77, 16), (1, 2, 70, 50, 80)]
        {
            for dist in Dist::ALL {
                let (b, h, sq, skv, d) = shape;
                let label = format!("{backend:?} {shape:?}");
                check(&label, Problem::flux(b, h, sq, skv, d), &exec, dist, &mut rng, None, &MaskModel::default());
            }
        }
    }
}

#[test]
fn backward_with_key_padding() {
    let mut rng = rng_for("backward_with_key_padding");
    let lengths = [40i64, 0];
    let padding = KeyPadding::lengths(&lengths);
    let exec = Exec::default().with_backend(Backend::Cpu);
    let model = MaskModel { kv_len: Some(lengths.to_vec()), ..MaskModel::default() };
    check("cpu kv_len", Problem::flux(2, 2, 30, 50, 64), &exec, Dist::Normal, &mut rng, Some(&padding), &model);
}

#[test]
fn short_slices_are_errors_and_nothing_is_written() {
    let p = Problem::flux(1, 2, 16, 16, 32);
    let n = p.required_len(Tensor::Q).unwrap();
    let x = vec![0.25f32; n];
    let lse = vec![0.0f32; p.lse_len().unwrap()];
    let (mut dq, mut dk, mut dv) = (poisoned(n), poisoned(n), poisoned(n - 1));
    let inputs = BackwardInputs { q: &x, k: &x, v: &x, out: &x, lse: &lse, dout: &x, dlse: None };
    let err = jattn::backward(&p, &Exec::default(), &inputs, None, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("dv"), "{}", err.message());
    assert!(dq.iter().chain(&dk).all(|&g| is_poison(g)));
    let short = &lse[1..];
    let inputs = BackwardInputs { lse: short, ..inputs };
    let mut dv = poisoned(n);
    let err = jattn::backward(&p, &Exec::default(), &inputs, None, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert!(err.message().contains("lse"), "{}", err.message());
    let sel = jattn::select_backward(&p, &Exec::default().with_backend(Backend::Cpu)).unwrap();
    assert!(sel.kernel.contains("bwd"), "{}", sel.kernel);
}
