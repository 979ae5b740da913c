//! Plans (`Plan`): the selection a plan names is what the simple calls select and what its runs
//! compute (bitwise the one-call function's output on the selected backend), for the forward and
//! the backward, with and without a mask; a run whose mask differs in structure, or of the other
//! pass, is refused with a message naming it and nothing written; mask arrays may change between
//! runs; one plan runs from several threads at once (Send + Sync) with each kind of scratch; the
//! caller's workspace and the plan's alignment are checked.

mod common;

use common::*;
use jattn::{
    Backend, BackwardInputs, Blocks, Causal, Context, Exec, KeyBias, KeyPadding, Layout, Mask, Pass, Plan, Problem,
    Scratch, Segments, Status, Tensor,
};

fn assert_send_sync<T: Send + Sync>() {}

fn host_backends() -> Vec<Backend> {
    let p = Problem::flux(1, 1, 2, 2, 8);
    [Backend::Auto, Backend::Ref, Backend::Cpu]
        .into_iter()
        .filter(|&b| jattn::select(&p, &Exec::new().with_backend(b)).is_ok())
        .collect()
}

#[test]
fn selection_is_what_select_names_and_what_runs() {
    assert_send_sync::<Plan>();
    let mut rng = rng_for("selection_is_what_select_names_and_what_runs");
    for backend in host_backends() {
        let exec = Exec::new().with_backend(backend).with_threads(2);
        let p = Problem::flux(2, 3, 37, 29, 32).with_out(Layout::HeadMajor);
        let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
        // forward: the plan's selection is select()'s, and its run is forward()'s, bit for bit
        let plan = Plan::new(Pass::Forward, &p, &exec, None).unwrap();
        assert_eq!((plan.pass(), plan.problem()), (Pass::Forward, &p));
        assert_eq!(plan.selection(), jattn::select(&p, &exec).unwrap(), "{backend}");
        let (mut a, mut b) = (poisoned(p.required_len(Tensor::Out).unwrap()), vec![0.0; 0]);
        let (mut la, mut lb) = (poisoned(p.lse_len().unwrap()), poisoned(p.lse_len().unwrap()));
        plan.forward(Scratch::Alloc, &q, &k, &v, None, &mut a, Some(&mut la)).unwrap();
        b.resize(a.len(), 0.0);
        let ran_on = Exec::new().with_backend(plan.selection().backend).with_threads(2);
        jattn::forward(&p, &ran_on, &q, &k, &v, &mut b, Some(&mut lb)).unwrap();
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{backend}: plan and forward differ");
        assert!(la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()));
        // backward: select_backward's selection, backward()'s gradients
        let plan = Plan::new(Pass::Backward, &p, &exec, None).unwrap();
        assert_eq!(plan.selection(), jattn::select_backward(&p, &exec).unwrap(), "{backend}");
        let dout = draw(&mut rng, Dist::Normal, false, a.len());
        let inputs = BackwardInputs { q: &q, k: &k, v: &v, out: &a, lse: &la, dout: &dout, dlse: None };
        let n = [p.required_len(Tensor::Q).unwrap(), p.required_len(Tensor::K).unwrap()];
        let mut g1 = [poisoned(n[0]), poisoned(n[1]), poisoned(n[1])];
        let mut g2 = g1.clone();
        let [dq, dk, dv] = &mut g1;
        plan.backward(Scratch::Alloc, &inputs, None, dq, dk, dv).unwrap();
        let [dq2, dk2, dv2] = &mut g2;
        jattn::backward(&p, &ran_on, &inputs, None, dq2, dk2, dv2).unwrap();
        for (x, y) in g1.iter().zip(&g2) {
            assert!(x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits()), "{backend}: backward differs");
        }
        println!("{backend}: forward {}, backward {}", jattn::select(&p, &exec).unwrap(), plan.selection());
    }
}

/// A masked plan on Auto names a backend that serves the mask (the reference, while the cpu
/// backend does not), and its runs are that backend's forward_masked, bit for bit.
#[test]
fn masked_plan_runs_what_it_names() {
    let mut rng = rng_for("masked_plan_runs_what_it_names");
    let p = Problem::flux(2, 4, 21, 21, 16).with_kv_heads(2);
    let (q, k, v) = inputs(&p, Dist::Uniform, &mut rng);
    let frames = [0i64, 7, 14, 21];
    let bias = random_bias(&mut rng, &p, BiasKind::PerBatch).0;
    let mask = Mask::none()
        .with_causal(Causal::TopLeft)
        .with_blocks(Blocks::new(&frames, &frames))
        .with_key_bias(KeyBias::per_batch(&bias));
    for pass in [Pass::Forward, Pass::Backward] {
        let plan = Plan::new(pass, &p, &Exec::default(), Some(&mask)).unwrap();
        let sel = plan.selection();
        println!("auto, masked {pass}: {sel}");
        let on = Exec::new().with_backend(sel.backend);
        let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
        let mut lse = poisoned(p.lse_len().unwrap());
        jattn::forward_masked(&p, &on, &q, &k, &v, &mask, &mut out, Some(&mut lse)).unwrap();
        if pass == Pass::Forward {
            let mut got = poisoned(out.len());
            plan.forward(Scratch::Alloc, &q, &k, &v, Some(&mask), &mut got, None).unwrap();
            assert!(got.iter().zip(&out).all(|(x, y)| x.to_bits() == y.to_bits()));
        } else {
            let dout = draw(&mut rng, Dist::Uniform, false, out.len());
            let inputs = BackwardInputs { q: &q, k: &k, v: &v, out: &out, lse: &lse, dout: &dout, dlse: None };
            let (nq, nk) = (p.required_len(Tensor::Q).unwrap(), p.required_len(Tensor::K).unwrap());
            let (mut a, mut b) =
                ([poisoned(nq), poisoned(nk), poisoned(nk)], [poisoned(nq), poisoned(nk), poisoned(nk)]);
            let [dq, dk, dv] = &mut a;
            plan.backward(Scratch::Alloc, &inputs, Some(&mask), dq, dk, dv).unwrap();
            let [dq, dk, dv] = &mut b;
            jattn::backward_masked(&p, &on, &inputs, &mask, dq, dk, dv).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits())));
        }
    }
    // The cpu backend, asked for this mask: served, or refused naming the part.
    match Plan::new(Pass::Forward, &p, &Exec::new().with_backend(Backend::Cpu), Some(&mask)) {
        Ok(plan) => println!("cpu serves the mask: {}", plan.selection()),
        Err(e) => {
            assert_eq!(e.status(), Status::Unsupported, "{e}");
            assert!(e.message().starts_with("mask: the cpu backend does not serve"), "{e}");
            note(&format!("the cpu backend refuses the mask: {e}"));
        }
    }
}

/// The mask's arrays change from run to run; its structure may not.
#[test]
fn runs_take_new_arrays_and_refuse_another_structure() {
    let mut rng = rng_for("runs_take_new_arrays_and_refuse_another_structure");
    let p = Problem::flux(2, 2, 12, 12, 8);
    let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
    let exec = Exec::new().with_backend(Backend::Ref);
    let (b1, b2) = ([0i64, 4, 12], [0i64, 9, 12]);
    let made_for = Mask::none().with_blocks(Blocks::new(&b1, &b1));
    let plan = Plan::new(Pass::Forward, &p, &exec, Some(&made_for)).unwrap();
    for offsets in [&b1, &b2] {
        let mask = Mask::none().with_blocks(Blocks::new(offsets, offsets));
        let (mut got, mut want) = (poisoned(p.required_len(Tensor::Out).unwrap()), vec![0.0; 0]);
        plan.forward(Scratch::Alloc, &q, &k, &v, Some(&mask), &mut got, None).unwrap();
        want.resize(got.len(), 0.0);
        jattn::forward_masked(&p, &exec, &q, &k, &v, &mask, &mut want, None).unwrap();
        assert!(got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    // Another structure: each refused, naming the part, nothing written.
    let b3 = [0i64, 4, 8, 12];
    let bias = vec![0.0f32; 2 * 12];
    let lengths = [3i64, 12];
    let others: [(Option<Mask<'_>>, &str); 5] = [
        (None, "mask.block_q / num_blocks"),
        (Some(Mask::none().with_blocks(Blocks::new(&b3, &b3))), "mask.block_q / num_blocks"),
        (Some(made_for.with_causal(Causal::BottomRight)), "mask.causal"),
        (Some(made_for.with_key_bias(KeyBias::per_batch(&bias))), "mask.key_bias"),
        (Some(made_for.with_padding(KeyPadding::lengths(&lengths))), "key_padding.kv_len"),
    ];
    for (mask, part) in others {
        let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
        let e = plan.forward(Scratch::Alloc, &q, &k, &v, mask.as_ref(), &mut out, None).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        assert_eq!(e.message(), format!("{part}: the mask's structure differs from the plan's (its {part})"));
        assert!(out.iter().all(|&x| is_poison(x)));
    }
    // Segments of one row vs one row per batch, and a bias of another layout: other structures too.
    let cu = [0i64, 6, 12];
    let cu2 = [0i64, 6, 12, 0, 3, 12];
    let plan = Plan::new(Pass::Forward, &p, &exec, Some(&Mask::none().with_segments(Segments::new(&cu, &cu)))).unwrap();
    let per_batch = Mask::none().with_segments(Segments::per_batch(&cu2, &cu2, 2));
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
    let e = plan.forward(Scratch::Alloc, &q, &k, &v, Some(&per_batch), &mut out, None).unwrap_err();
    assert!(e.message().starts_with("mask.cu_seqlens_q / num_segments: the mask's structure differs"), "{e}");
    let plan =
        Plan::new(Pass::Forward, &p, &exec, Some(&Mask::none().with_key_bias(KeyBias::per_batch(&bias)))).unwrap();
    let shared = Mask::none().with_key_bias(KeyBias::shared(&bias));
    let e = plan.forward(Scratch::Alloc, &q, &k, &v, Some(&shared), &mut out, None).unwrap_err();
    assert!(e.message().starts_with("mask.key_bias: the mask's structure differs"), "{e}");
    assert!(out.iter().all(|&x| is_poison(x)));
}

#[test]
fn a_run_of_the_other_pass_is_refused() {
    let p = Problem::flux(1, 2, 8, 8, 8);
    let exec = Exec::new().with_backend(Backend::Ref);
    let n = p.required_len(Tensor::Q).unwrap();
    let (x, lse) = (vec![0.5f32; n], vec![0.0f32; p.lse_len().unwrap()]);
    let forward = Plan::new(Pass::Forward, &p, &exec, None).unwrap();
    let backward = Plan::new(Pass::Backward, &p, &exec, None).unwrap();
    let inputs = BackwardInputs { q: &x, k: &x, v: &x, out: &x, lse: &lse, dout: &x, dlse: None };
    let (mut dq, mut dk, mut dv) = (poisoned(n), poisoned(n), poisoned(n));
    let e = forward.backward(Scratch::Alloc, &inputs, None, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert_eq!((e.status(), e.message()), (Status::InvalidArgument, "plan: made for the forward, run as the backward"));
    assert!(dq.iter().chain(&dk).chain(&dv).all(|&x| is_poison(x)));
    let mut out = poisoned(n);
    let e = backward.forward(Scratch::Alloc, &x, &x, &x, None, &mut out, None).unwrap_err();
    assert_eq!((e.status(), e.message()), (Status::InvalidArgument, "plan: made for the backward, run as the forward"));
    assert!(out.iter().all(|&x| is_poison(x)));
    assert_eq!(
        (Pass::Forward.to_string(), Pass::Backward.code()),
        ("forward".to_owned(), jattn::sys::JATTN_PASS_BACKWARD)
    );
}

/// One plan, several threads at once, each with its own scratch: the same bits everywhere.
#[test]
fn one_plan_many_threads() {
    let mut rng = rng_for("one_plan_many_threads");
    let p = Problem::flux(2, 4, 40, 40, 32).with_kv_heads(4);
    let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
    for backend in host_backends() {
        let exec = Exec::new().with_backend(backend).with_threads(1);
        let plan = Plan::new(Pass::Forward, &p, &exec, None).unwrap();
        let n = p.required_len(Tensor::Out).unwrap();
        let mut want = poisoned(n);
        plan.forward(Scratch::Alloc, &q, &k, &v, None, &mut want, None).unwrap();
        let results: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|t| {
                    let (plan, q, k, v) = (&plan, &q, &k, &v);
                    s.spawn(move || {
                        let mut ctx = Context::new().unwrap();
                        let mut ws = vec![0u8; plan.workspace_size()];
                        let mut out = poisoned(n);
                        for _ in 0..5 {
                            let scratch = match t % 3 {
                                0 => Scratch::Alloc,
                                1 => Scratch::Context(&mut ctx),
                                _ => Scratch::Workspace(&mut ws),
                            };
                            plan.forward(scratch, q, k, v, None, &mut out, None).unwrap();
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for out in &results {
            assert!(out.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()), "{backend}: a thread differs");
        }
        // A plan moves to another thread and is dropped there.
        std::thread::spawn(move || drop(plan)).join().unwrap();
        println!("{backend}: 6 threads x 5 runs, bitwise equal");
    }
}

#[test]
fn workspace_and_alignment() {
    let p = Problem::flux(1, 2, 16, 16, 8);
    let exec = Exec::new().with_backend(Backend::Ref).with_threads(2);
    let plan = Plan::new(Pass::Forward, &p, &exec, None).unwrap();
    let need = plan.workspace_size();
    assert!(need > 0, "the reference keeps a row buffer per thread");
    let n = p.required_len(Tensor::Q).unwrap();
    let x = vec![0.5f32; n + 1];
    let mut out = poisoned(n + 1);
    // A caller workspace of the size reported works at any alignment (the size includes what
    // aligning inside it may take: 63 bytes); 64 bytes less is refused at every alignment.
    let mut ws = vec![0u8; need + 64];
    for shift in 0..64 {
        plan.forward(Scratch::Workspace(&mut ws[shift..shift + need]), &x, &x, &x, None, &mut out, None).unwrap();
    }
    let mut small = vec![0u8; need - 64];
    let e = plan.forward(Scratch::Workspace(&mut small), &x, &x, &x, None, &mut out, None).unwrap_err();
    assert_eq!(e.status(), Status::WorkspaceTooSmall, "{e}");
    assert!(e.message().starts_with("workspace_bytes: "), "{e}");
    // A plan takes any f32 slice by default (views at any offset) ...
    let (aligned, off) = if x.as_ptr().align_offset(16) == 0 { (&x[..n], &x[1..]) } else { (&x[1..], &x[..n]) };
    plan.forward(Scratch::Alloc, off, aligned, aligned, None, &mut out[..n], None).unwrap();
    assert_eq!((exec.alignment(), exec.with_alignment(16).alignment()), (0, 16));
    // ... and one made for 16-byte aligned slices refuses a less aligned one, naming it.
    let wide = Plan::new(Pass::Forward, &p, &exec.with_alignment(16), None).unwrap();
    wide.forward(Scratch::Alloc, aligned, aligned, aligned, None, &mut out[..n], None).unwrap();
    let e = wide.forward(Scratch::Alloc, off, aligned, aligned, None, &mut out[..n], None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert!(e.message().starts_with("q: pointer") && e.message().contains("exec.alignment"), "{e}");
    // An alignment that is no power of two >= 4 is refused when the plan is made.
    for bad in [2, 3, 24] {
        let e = Plan::new(Pass::Forward, &p, &exec.with_alignment(bad), None).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().starts_with(&format!("exec.alignment: {bad}, must be")), "{e}");
    }
}

#[test]
fn plan_creation_and_run_errors_name_the_field() {
    let exec = Exec::new().with_backend(Backend::Ref);
    let e = Plan::new(Pass::Forward, &Problem::flux(1, 2, 4, 4, 0), &exec, None).unwrap_err();
    assert_eq!((e.status(), e.message()), (Status::InvalidDimension, "head_dim: 0, must be >= 1"));
    let e = Plan::new(Pass::Backward, &Problem::flux(1, 3, 4, 4, 8).with_kv_heads(2), &exec, None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidDimension);
    assert!(e.message().starts_with("kv_heads: 2 does not divide heads (3)"), "{e}");
    let bias = [0.0f32; 3];
    let short = Mask::none().with_key_bias(KeyBias::shared(&bias));
    let e = Plan::new(Pass::Forward, &Problem::flux(1, 2, 4, 4, 8), &exec, Some(&short)).unwrap_err();
    assert!(e.message().starts_with("mask.key_bias: a slice of 3 elements"), "{e}");
    // A run's slices: each too short by one is refused, naming it.
    let p = Problem::flux(1, 2, 4, 4, 8);
    let plan = Plan::new(Pass::Forward, &p, &exec, None).unwrap();
    let n = p.required_len(Tensor::Q).unwrap();
    let (x, short) = (vec![0.5f32; n], vec![0.5f32; n - 1]);
    let mut out = poisoned(n);
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let t = |j| if i == j { &short[..] } else { &x[..] };
        let e = plan.forward(Scratch::Alloc, t(0), t(1), t(2), None, &mut out, None).unwrap_err();
        assert!(e.message().starts_with(&format!("{name}: a slice of {} elements", n - 1)), "{e}");
    }
    let e = plan.forward(Scratch::Alloc, &x, &x, &x, None, &mut out[..n - 1], None).unwrap_err();
    assert!(e.message().starts_with("out: a slice of"), "{e}");
    let mut lse = poisoned(7);
    let e = plan.forward(Scratch::Alloc, &x, &x, &x, None, &mut out, Some(&mut lse)).unwrap_err();
    assert!(e.message().starts_with("lse: a slice of 7 elements"), "{e}");
    assert!(out.iter().chain(&lse).all(|&v| is_poison(v)));
    println!("{plan:?}");
}
