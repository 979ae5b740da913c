//! Every error path of the safe API: slices too short for their strides (each tensor, lse,
//! explicit strides, padded views), invalid dimensions, scale, overlapping strides, numbers
//! that do not fit the C types, backend limits, the device path's checks, and random hostile
//! problems that must give an `Err` — never a panic, never a write — unless they are valid.
//! There is no NULL path to test on the host: a slice is never NULL.

mod common;

use common::*;
use jattn::{Backend, DeviceTensors, Error, Exec, Layout, Precision, Problem, Status, Strides, Tensor};

fn cpu() -> Exec {
    Exec::new().with_backend(Backend::Cpu)
}

/// `forward` on buffers of the required lengths (with `short` elements fewer for one tensor:
/// 0 = q .. 3 = out, 4 = lse); asserts that nothing was written when it fails.
fn call(p: &Problem, exec: &Exec, short: Option<(usize, usize)>) -> Result<(), Error> {
    let len = |t: Tensor, i: usize| {
        let n = p.required_len(t).unwrap_or(0).min(1 << 16); // huge problems fail before any read
        match short {
            Some((which, by)) if which == i => n.saturating_sub(by),
            _ => n,
        }
    };
    let q = vec![0.5f32; len(Tensor::Q, 0)];
    let k = vec![0.25f32; len(Tensor::K, 1)];
    let v = vec![1.0f32; len(Tensor::V, 2)];
    let mut out = poisoned(len(Tensor::Out, 3));
    let lse_n = p.lse_len().unwrap_or(0).min(1 << 16);
    let mut lse = poisoned(match short {
        Some((4, by)) => lse_n.saturating_sub(by),
        _ => lse_n,
    });
    let r = jattn::forward(p, exec, &q, &k, &v, &mut out, Some(&mut lse));
    if r.is_err() {
        assert!(out.iter().chain(&lse).all(|&x| is_poison(x)), "an output was written by a failing call: {r:?}");
    }
    r
}

fn expect(r: Result<(), Error>, status: Status, needle: &str) -> Error {
    let e = r.expect_err("the call should have failed");
    assert_eq!(e.status(), status, "{e}");
    assert!(e.message().contains(needle), "message {:?} lacks {needle:?}", e.message());
    e
}

#[test]
fn every_slice_too_short_by_one() {
    let p = Problem::flux(2, 3, 17, 9, 64);
    assert!(call(&p, &cpu(), None).is_ok());
    for (i, name) in ["q", "k", "v", "out", "lse"].into_iter().enumerate() {
        let e = expect(call(&p, &cpu(), Some((i, 1))), Status::InvalidArgument, name);
        assert!(e.message().starts_with(&format!("{name}: a slice of ")), "{e}");
        println!("{e}");
    }
}

#[test]
fn slices_too_short_for_explicit_strides() {
    // Rows padded to 80 floats: a dense-length slice is too short for every tensor.
    let pad = Layout::Strides(Strides::new(2 * 13 * 80, 13 * 80, 80));
    let p = Problem::flux(2, 2, 13, 13, 64).with_qkv(pad).with_out(pad);
    let dense = 2 * 2 * 13 * 64;
    let (b, h, s, d) = (2, 2, 13, 64);
    let span = 1 + (b - 1) * (h * s * 80) + (h - 1) * (s * 80) + (s - 1) * 80 + (d - 1);
    assert_eq!(p.required_len(Tensor::Q).unwrap(), span);
    let q = vec![0.0f32; dense];
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
    let e = jattn::forward(&p, &cpu(), &q, &q, &q, &mut out, None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().starts_with("q: a slice of 3328 elements"), "{e}");
    assert!(out.iter().all(|&x| is_poison(x)));
    // A fused QKV view: v starts 2·H·D into the buffer and may end exactly at its end, not before.
    let (h, s, d) = (2, 5, 8);
    let p = Problem::flux(1, h, s, s, d).with_qkv(Layout::Strides(Strides::new(3 * s * h * d, d, 3 * h * d)));
    let qkv = vec![0.1f32; 3 * s * h * d];
    let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
    jattn::forward(&p, &cpu(), &qkv, &qkv[h * d..], &qkv[2 * h * d..], &mut out, None).unwrap();
    let e = jattn::forward(&p, &cpu(), &qkv, &qkv[h * d..], &qkv[2 * h * d + 1..], &mut out, None).unwrap_err();
    assert!(e.message().starts_with("v: a slice of"), "{e}");
}

#[test]
fn empty_slices_are_refused_before_c() {
    let p = Problem::flux(1, 1, 1, 1, 1);
    let mut out = [];
    let e = jattn::forward(&p, &cpu(), &[], &[], &[], &mut out, None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}"); // not NullPointer: no NULL reaches C
}

#[test]
fn invalid_dimensions() {
    // head_dim 0 (batch, heads, seq_q and seq_kv may be 0: tests/zero_size.rs).
    let p = Problem::flux(2, 3, 5, 7, 0);
    let e = expect(call(&p, &cpu(), None), Status::InvalidDimension, "head_dim");
    assert_eq!(e.message(), "head_dim: 0, must be >= 1");
    assert_eq!(e.name(), "JATTN_ERROR_INVALID_DIMENSION");
    assert_eq!(e.to_string(), "JATTN_ERROR_INVALID_DIMENSION: head_dim: 0, must be >= 1");
    assert_eq!(jattn::select(&p, &cpu()).unwrap_err(), e);
    // Key/value heads that do not divide the heads, or more of them than heads.
    for kv_heads in [2, 4, 5] {
        let p = Problem::flux(1, 3, 5, 7, 16).with_kv_heads(kv_heads);
        let e = expect(call(&p, &Exec::new().with_backend(Backend::Ref), None), Status::InvalidDimension, "kv_heads");
        assert!(e.message().starts_with(&format!("kv_heads: {kv_heads} does not divide heads (3)")), "{e}");
        assert_eq!(jattn::select(&p, &cpu()).unwrap_err(), e);
    }
    // A kv_heads beyond int64.
    let p = Problem::flux(1, 3, 5, 7, 16).with_kv_heads(usize::MAX);
    expect(call(&p, &cpu(), None), Status::Overflow, "kv_heads");
}

#[test]
fn invalid_scale() {
    for scale in [f32::NAN, -1.0, f32::INFINITY, f32::NEG_INFINITY] {
        let p = Problem::flux(1, 2, 4, 4, 8).with_scale(scale);
        expect(call(&p, &cpu(), None), Status::InvalidScale, "scale");
    }
    // 0 is the default scale, and a tiny positive one is the caller's.
    assert!(call(&Problem::flux(1, 2, 4, 4, 8).with_scale(0.0), &cpu(), None).is_ok());
    assert!(call(&Problem::flux(1, 2, 4, 4, 8).with_scale(1e-30), &cpu(), None).is_ok());
}

#[test]
fn overlapping_strides() {
    // Token stride smaller than head_dim: rows overlap.
    let p = Problem::flux(1, 2, 4, 4, 8).with_k(Layout::Strides(Strides::new(64, 32, 4)));
    expect(call(&p, &cpu(), None), Status::SelfOverlap, "k.token");
    // Stride 0 over an extent > 1, on the output: refused, nothing written.
    let p = Problem::flux(1, 2, 4, 4, 8).with_out(Layout::Strides(Strides::new(0, 8, 0)));
    expect(call(&p, &cpu(), None), Status::SelfOverlap, "out");
}

#[test]
fn numbers_that_do_not_fit() {
    // A dimension beyond int64.
    let p = Problem::flux(usize::MAX, 1, 1, 1, 1);
    let e = expect(call(&p, &cpu(), None), Status::Overflow, "batch");
    assert!(e.message().contains("does not fit in int64"), "{e}");
    // Contiguous strides beyond usize.
    let p = Problem::flux(1, usize::MAX / 2, 4, 4, 8);
    expect(call(&p, &cpu(), None), Status::Overflow, "q");
    assert_eq!(p.required_len(Tensor::Q).unwrap_err().status(), Status::Overflow);
    // An explicit stride beyond int64.
    let p = Problem::flux(2, 1, 1, 1, 1).with_v(Layout::Strides(Strides::new(usize::MAX, 1, 1)));
    expect(call(&p, &cpu(), None), Status::Overflow, "v.batch");
    // Dimensions that fit, whose element count overflows int64: the C library's check.
    let p = Problem::flux(1 << 40, 1 << 40, 1, 1, 1);
    expect(call(&p, &cpu(), None), Status::Overflow, "overflow int64");
    // lse of B·H·Sq beyond usize.
    assert_eq!(Problem::flux(usize::MAX, 2, 1, 1, 1).lse_len().unwrap_err().status(), Status::Overflow);
    // Threads beyond an int.
    let exec = cpu().with_threads(usize::MAX);
    expect(call(&Problem::flux(1, 1, 1, 1, 1), &exec, None), Status::InvalidArgument, "exec.threads");
}

#[test]
fn backend_limits() {
    let p = Problem::flux(1, 2, 4, 4, 8);
    expect(call(&p, &cpu().with_precision(Precision::Tf32), None), Status::Unsupported, "precision");
    expect(call(&Problem::flux(1, 1, 2, 2, 2048), &cpu(), None), Status::Unsupported, "head_dim");
    let cuda = Exec::new().with_backend(Backend::Cuda);
    match jattn::select(&p, &cuda) {
        Ok(sel) => println!("a GPU is present: {sel}"),
        Err(e) => {
            assert_eq!(e.status(), Status::BackendUnavailable, "{e}");
            expect(call(&p, &cuda, None), Status::BackendUnavailable, "");
            println!("no GPU: {e}");
        }
    }
}

#[test]
fn device_path_checks() {
    let p = Problem::flux(1, 2, 4, 4, 8);
    let null = DeviceTensors::new(std::ptr::null(), std::ptr::null(), std::ptr::null(), std::ptr::null_mut());
    // SAFETY: every call below is refused by the library before it reads any pointer: an
    // invalid problem, a host backend, NULL pointers (or no device at all).
    unsafe {
        let bad = Problem::flux(1, 2, 4, 4, 0);
        let e = jattn::forward_device(&bad, &Exec::default(), &null, std::ptr::null_mut(), None, None).unwrap_err();
        assert_eq!((e.status(), e.message()), (Status::InvalidDimension, "head_dim: 0, must be >= 1"));
        let e = jattn::forward_device(
            &Problem::flux(usize::MAX, 1, 1, 1, 1),
            &Exec::default(),
            &null,
            std::ptr::null_mut(),
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(e.status(), Status::Overflow);
        let e = jattn::forward_device(&p, &cpu(), &null, std::ptr::null_mut(), None, None).unwrap_err();
        assert_eq!(e.status(), Status::Unsupported, "{e}");
        assert!(e.message().contains("host memory only"), "{e}");
        let cuda = Exec::new().with_backend(Backend::Cuda);
        let e = jattn::forward_device(&p, &cuda, &null, std::ptr::null_mut(), None, None).unwrap_err();
        assert!(matches!(e.status(), Status::BackendUnavailable | Status::NullPointer), "{e}");
        let mut ctx = jattn::Context::new().unwrap();
        let e = ctx.forward_device(&bad, &cuda, &null, std::ptr::null_mut(), None, None).unwrap_err();
        assert_eq!(e.status(), Status::InvalidDimension);
    }
    assert_eq!(jattn::select_device(&p, &cpu()).unwrap_err().status(), Status::Unsupported);
    assert_eq!(
        jattn::device_workspace_size(&Problem::flux(1, 1, 1, 1, 0), &Exec::default()).unwrap_err().status(),
        Status::InvalidDimension
    );
}

#[test]
fn status_numbers_and_names_are_the_c_ones() {
    use jattn::sys;
    let c = [
        sys::JATTN_ERROR_NULL_POINTER,
        sys::JATTN_ERROR_INVALID_DIMENSION,
        sys::JATTN_ERROR_OVERFLOW,
        sys::JATTN_ERROR_INVALID_STRIDE,
        sys::JATTN_ERROR_SELF_OVERLAP,
        sys::JATTN_ERROR_ALIASING,
        sys::JATTN_ERROR_INVALID_SCALE,
        sys::JATTN_ERROR_INVALID_ARGUMENT,
        sys::JATTN_ERROR_UNSUPPORTED,
        sys::JATTN_ERROR_BACKEND_UNAVAILABLE,
        sys::JATTN_ERROR_WORKSPACE_TOO_SMALL,
        sys::JATTN_ERROR_OUT_OF_MEMORY,
        sys::JATTN_ERROR_CUDA,
        sys::JATTN_ERROR_TRANSPORT,
    ];
    assert_eq!(Status::ALL.len() + 1, sys::JATTN_STATUS_COUNT as usize);
    for (s, code) in Status::ALL.into_iter().zip(c) {
        assert_eq!(s.code(), code);
        assert_eq!(Status::from_code(code), Some(s));
        assert!(s.name().starts_with("JATTN_ERROR_"), "{}", s.name());
    }
    assert_eq!(Status::Aliasing.name(), "JATTN_ERROR_ALIASING");
    assert_eq!(Status::Aliasing.to_string(), "JATTN_ERROR_ALIASING");
    assert_eq!((Status::from_code(0), Status::from_code(99)), (None, None));
    assert_eq!(Status::Unknown.name(), "JATTN_STATUS_UNKNOWN");
    // Error is a std::error::Error.
    let e: Box<dyn std::error::Error> = Box::new(call(&Problem::flux(1, 1, 1, 1, 0), &cpu(), None).unwrap_err());
    assert!(e.to_string().starts_with("JATTN_ERROR_INVALID_DIMENSION: head_dim"));
}

/// Random problems — dimensions 0..=9 or huge, strides of every kind (gaps, 0, overlapping),
/// slice lengths around the extent — must give Ok only when every slice is long enough, and
/// otherwise an Err with nothing written. Never a panic.
#[test]
fn hostile_random_problems_never_panic() {
    let mut rng = rng_for("hostile_random_problems_never_panic");
    let (mut ok, mut errs) = (0usize, std::collections::BTreeMap::<String, usize>::new());
    let exec = Exec::new().with_backend(Backend::Ref).with_threads(1);
    for _ in 0..3000 {
        let mut dim = || match rng.range(0, 40) {
            0 => 0,
            1 => usize::MAX - rng.range(0, 2),
            2 => 1 << rng.range(31, 63),
            _ => rng.range(1, 5),
        };
        let (b, h, sq, skv, d) = (dim(), dim(), dim(), dim(), dim());
        let layout = |rng: &mut Rng| match rng.range(0, 11) {
            0 | 1 => Layout::TokenMajor,
            2 | 3 => Layout::Strides(Strides::new(rng.range(0, 200), rng.range(0, 60), rng.range(0, 12))),
            4 => Layout::Strides(Strides::new(usize::MAX >> rng.range(0, 3), rng.range(0, 9), rng.range(0, 9))),
            _ => Layout::HeadMajor,
        };
        let mut p = Problem::flux(b, h, sq, skv, d).with_q(layout(&mut rng)).with_k(layout(&mut rng));
        p = p.with_v(layout(&mut rng)).with_out(layout(&mut rng));
        if rng.range(0, 10) == 0 {
            p = p.with_scale([f32::NAN, -0.5, 0.0, 2.0][rng.range(0, 3)]);
        }
        // Slice lengths: the extent (capped, small), one less, or random.
        let len = |t: Option<Tensor>, rng: &mut Rng| {
            let need = match t {
                Some(t) => p.required_len(t).unwrap_or(usize::MAX),
                None => p.lse_len().unwrap_or(usize::MAX),
            };
            let need = need.min(4096);
            match rng.range(0, 5) {
                0 => need.saturating_sub(1),
                1 => rng.range(0, 64),
                _ => need,
            }
        };
        let q = vec![0.5f32; len(Some(Tensor::Q), &mut rng)];
        let k = vec![0.5f32; len(Some(Tensor::K), &mut rng)];
        let v = vec![0.5f32; len(Some(Tensor::V), &mut rng)];
        let mut out = poisoned(len(Some(Tensor::Out), &mut rng));
        let mut lse = poisoned(len(None, &mut rng));
        let with_lse = rng.range(0, 1) == 1;
        let r = jattn::forward(&p, &exec, &q, &k, &v, &mut out, if with_lse { Some(&mut lse) } else { None });
        match r {
            Ok(()) => {
                ok += 1;
                for (t, n) in
                    [(Tensor::Q, q.len()), (Tensor::K, k.len()), (Tensor::V, v.len()), (Tensor::Out, out.len())]
                {
                    assert!(n >= p.required_len(t).unwrap(), "{p:?}: Ok with {t} of {n} elements");
                }
            }
            Err(e) => {
                assert!(out.iter().chain(&lse).all(|&x| is_poison(x)), "{p:?}: written by a failing call ({e})");
                *errs.entry(e.name().to_owned()).or_default() += 1;
            }
        }
    }
    println!("hostile problems: {ok} valid and computed, refused: {errs:?}");
    assert!(ok > 150 && errs.len() >= 5, "the draw should reach valid calls and many kinds of error");
}
