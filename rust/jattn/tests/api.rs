//! The small parts of the API: version, select, names, layouts and extents (checked against the
//! C helpers), and the FLUX call of the README.

mod common;

use common::*;
use jattn::{Backend, Exec, Layout, Precision, Problem, Strides, Tensor, sys};

#[test]
fn version_is_the_linked_library() {
    assert_eq!(jattn::version(), "0.4.0");
    assert_eq!(jattn::version_number(), sys::JATTN_VERSION_NUMBER);
    assert_eq!(jattn::version_number(), 400);
}

#[test]
fn select_names_backend_and_kernel() {
    let p = Problem::flux(1, 24, 1536, 1536, 128);
    let cpu = jattn::select(&p, &Exec::new().with_backend(Backend::Cpu).with_threads(1)).unwrap();
    assert_eq!((cpu.backend, cpu.threads), (Backend::Cpu, 1));
    assert!(cpu.kernel.starts_with("cpu_flash_f32_"), "{cpu}");
    assert!(["avx512", "avx2", "neon", "generic"].contains(&cpu.isa), "{cpu}");
    let r = jattn::select(&p, &Exec::new().with_backend(Backend::Ref)).unwrap();
    assert_eq!((r.backend, r.kernel, r.isa), (Backend::Ref, "ref_attention_f64_rowwise", "scalar"));
    let best = jattn::select(&p, &Exec::default()).unwrap();
    assert_ne!(best.backend, Backend::Auto);
    println!("best: {best}; cpu: {cpu}");
}

#[test]
fn backends_are_the_librarys() {
    let listed = jattn::backends();
    // SAFETY: no arguments.
    let count = usize::try_from(unsafe { sys::jattn_backend_info_count() }).unwrap();
    assert_eq!(listed.len(), count, "a backend of the library has no Backend variant: {listed:?}");
    assert_eq!(count, usize::try_from(sys::JATTN_BACKEND_COUNT - 1).unwrap());
    for (rank, b) in listed.iter().enumerate() {
        assert_eq!(b.auto_rank, rank, "{b:?}");
        assert_ne!(b.backend, Backend::Auto);
        assert_eq!(b.name, b.backend.name());
        assert_eq!(b.name.parse::<Backend>().unwrap(), b.backend);
        assert_eq!(Backend::from_code(b.backend.code()), Some(b.backend));
        assert_eq!((b.backend.info(), b.backend.is_gpu()), (Some(*b), b.is_gpu));
        assert!(listed[..rank].iter().all(|other| other.backend != b.backend), "{b:?} twice");
    }
    assert_eq!(
        (Backend::Auto.info(), Backend::Auto.name(), "auto".parse::<Backend>().unwrap()),
        (None, "auto", Backend::Auto)
    );
    let err = "gpu".parse::<Backend>().unwrap_err();
    assert!(listed.iter().all(|b| err.message().contains(b.name)), "{err}");
    assert_eq!(Backend::from_code(sys::JATTN_BACKEND_COUNT), None);
    // Auto on host memory picks a listed backend
    let best = jattn::select(&Problem::flux(1, 2, 64, 64, 32), &Exec::default()).unwrap();
    assert!(listed.iter().any(|b| b.backend == best.backend), "{best}");
    assert_eq!((Precision::F32.code(), Precision::Tf32.code()), (sys::JATTN_PRECISION_F32, sys::JATTN_PRECISION_TF32));
    assert_eq!(Exec::default(), Exec::new());
    assert_eq!(Tensor::ALL.map(|t| t.to_string()), ["q", "k", "v", "out"]);
}

#[test]
fn layouts_match_the_c_helpers() {
    let mut rng = rng_for("layouts_match_the_c_helpers");
    for _ in 0..200 {
        let (h, s, d) = (rng.range(1, 64), rng.range(1, 5000), rng.range(1, 512));
        // SAFETY: plain value functions.
        let (hm, tm) = unsafe {
            (
                sys::jattn_strides_head_major(h as i64, s as i64, d as i64),
                sys::jattn_strides_token_major(h as i64, s as i64, d as i64),
            )
        };
        let as_c =
            |st: Strides| sys::jattn_strides { batch: st.batch as i64, head: st.head as i64, token: st.token as i64 };
        assert_eq!(as_c(Layout::HeadMajor.strides(h, s, d).unwrap()), hm);
        assert_eq!(as_c(Layout::TokenMajor.strides(h, s, d).unwrap()), tm);
        // Problem::flux is jattn_problem_flux.
        let (b, skv) = (rng.range(1, 4), rng.range(1, 5000));
        let p = Problem::flux(b, h, s, skv, d);
        // SAFETY: a plain value function.
        let c = unsafe { sys::jattn_problem_flux(b as i64, h as i64, s as i64, skv as i64, d as i64) };
        let st = |t| as_c(p.strides(t).unwrap());
        assert_eq!((st(Tensor::Q), st(Tensor::K), st(Tensor::V), st(Tensor::Out)), (c.q, c.k, c.v, c.out));
        assert_eq!(p.required_len(Tensor::Q).unwrap(), b * h * s * d);
        assert_eq!(p.required_len(Tensor::Out).unwrap(), b * h * s * d);
        assert_eq!(p.required_len(Tensor::K).unwrap(), b * h * skv * d);
        assert_eq!(p.lse_len().unwrap(), b * h * s);
    }
    assert_eq!(Strides::head_major(usize::MAX, 2, 1), None);
    assert_eq!(Strides::token_major(2, usize::MAX, 2), None);
    let p = Problem::flux(2, 3, 0, 5, 8);
    assert_eq!(p.required_len(Tensor::Q).unwrap(), 0); // a 0 dimension addresses nothing
    assert_eq!(p.seq(Tensor::V), 5);
    assert_eq!(p.layout(Tensor::Out), Layout::TokenMajor);
    assert_eq!(p.with_scale(0.5).scale(), Some(0.5));
}

/// The README's Rust example, with random inputs and the reference on a few rows.
#[test]
fn readme_flux_call() {
    let mut rng = rng_for("readme_flux_call");
    let problem = Problem::flux(1, 24, 1536, 1536, 128);
    let n = problem.required_len(Tensor::Q).unwrap();
    let (q, k, v) = (
        draw(&mut rng, Dist::Normal, true, n),
        draw(&mut rng, Dist::Normal, true, n),
        draw(&mut rng, Dist::Normal, false, n),
    );
    let mut out = vec![0.0f32; problem.required_len(Tensor::Out).unwrap()];
    let sel = jattn::select(&problem, &Exec::default()).unwrap();
    jattn::forward(&problem, &Exec::default(), &q, &k, &v, &mut out, None).unwrap();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut row = vec![0.0; 128];
    for h in [0, 11, 23] {
        for i in [0, 511, 512, 1535] {
            reference_row(&problem, (&q, &k, &v), (0, h, i), &attends_all, &mut row);
            let at = offset(&problem, Tensor::Out, 0, h, i, 0);
            got.extend_from_slice(&out[at..at + 128]);
            want.extend_from_slice(&row);
        }
    }
    let m = Metrics::of(got, want);
    println!("FLUX (1, 24, 1536, 128) on {sel}: {m} (12 rows)");
    assert!(m.passes_f32(), "{m}");
}
