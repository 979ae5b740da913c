//! Key padding (`forward_padded` with `KeyPadding`) against the float64 reference with the same
//! padding: key lengths, u8 and bool masks of one row or of batch rows (back to back or
//! strided), both together, rows with no key left (0 and lse -inf), NaN and Inf in the keys left
//! out, and every padding slice too short or out of range.
//!
//! Every host backend is checked the same way where it implements key padding; one that does
//! not yet answers `Unsupported`, and its checks are skipped with a message saying so (as they
//! are for the cuda backend on a machine without a GPU).

mod common;

use common::*;
use jattn::{Backend, Exec, KeyPadding, Layout, Problem, Status, Tensor};

/// A random padding case: lengths and/or a mask, as the draw says.
struct Padding {
    lengths: Option<Vec<i64>>,
    mask: Option<(Vec<u8>, usize, usize)>, // bytes, rows, row stride
}

impl Padding {
    fn draw(p: &Problem, rng: &mut Rng, with_lengths: bool, mask_rows: Option<usize>, row_gap: usize) -> Padding {
        let skv = p.seq_kv();
        let lengths = with_lengths.then(|| (0..p.batch()).map(|_| rng.range(0, skv) as i64).collect());
        let mask = mask_rows.map(|rows| {
            let stride = skv + row_gap;
            // ~70% of keys attended, each by a nonzero byte of any value; the gap bytes between
            // rows are random too, and the reference never reads them.
            let bytes = (0..(rows - 1) * stride + skv)
                .map(|_| u8::from(rng.range(0, 9) < 7) * rng.range(1, 255) as u8)
                .collect();
            (bytes, rows, stride)
        });
        Padding { lengths, mask }
    }

    fn attends(&self, b: usize, j: usize) -> bool {
        let by_len = self.lengths.as_ref().is_none_or(|l| (j as i64) < l[b]);
        let by_mask =
            self.mask.as_ref().is_none_or(|(m, rows, stride)| m[if *rows == 1 { j } else { b * stride + j }] != 0);
        by_len && by_mask
    }

    fn key_padding(&self) -> KeyPadding<'_> {
        let mut kp = KeyPadding::none();
        if let Some(l) = &self.lengths {
            kp = kp.with_lengths(l);
        }
        if let Some((m, rows, stride)) = &self.mask {
            kp = kp.with_mask(m, *rows).with_mask_row_stride(*stride);
        }
        kp
    }
}

/// Whether `backend` implements key padding; prints the skip when it does not.
fn supports_padding(backend: Backend) -> bool {
    let p = Problem::flux(1, 1, 2, 3, 4);
    let x = vec![0.5f32; p.required_len(Tensor::Q).unwrap().max(p.required_len(Tensor::K).unwrap())];
    let mut out = vec![0.0f32; p.required_len(Tensor::Out).unwrap()];
    let exec = Exec::new().with_backend(backend);
    match jattn::forward_padded(&p, &exec, &x, &x, &x, &KeyPadding::lengths(&[2]), &mut out, None) {
        Ok(()) => true,
        Err(e) if e.status() == Status::Unsupported => {
            note(&format!(
                "SKIP: the {backend} backend does not implement key padding yet ({e}): its padded checks are skipped"
            ));
            false
        }
        Err(e) if e.status() == Status::BackendUnavailable => {
            note(&format!("SKIP: no {backend} backend here ({e})"));
            false
        }
        Err(e) => panic!("probing key padding on {backend}: {e}"),
    }
}

fn check(label: &str, p: &Problem, exec: &Exec, pad: &Padding, dist: Dist, rng: &mut Rng) {
    let p = problem_for(*p, dist);
    let (q, mut k, mut v) = inputs(&p, dist, rng);
    // Keys left out hold NaN and Inf: they must not affect any output.
    for b in 0..p.batch() {
        for h in 0..p.heads() {
            for j in (0..p.seq_kv()).filter(|&j| !pad.attends(b, j)) {
                let (ko, vo) = (offset(&p, Tensor::K, b, h, j, 0), offset(&p, Tensor::V, b, h, j, 0));
                k[ko] = f32::NAN;
                v[vo] = f32::INFINITY;
            }
        }
    }
    let out_len = p.required_len(Tensor::Out).unwrap();
    let lse_len = p.lse_len().unwrap();
    let mut out = poisoned(out_len);
    let mut lse = poisoned(lse_len);
    if let Err(e) = jattn::forward_padded(&p, exec, &q, &k, &v, &pad.key_padding(), &mut out, Some(&mut lse)) {
        panic!("{label} {p:?} {dist:?}: {e}");
    }
    let (want, want_lse) = reference(&p, &q, &k, &v, &|b, j| pad.attends(b, j));
    let m = Metrics::of(gather_out(&p, &out), want.iter().copied());
    assert!(m.passes_f32(), "{label} {p:?} {dist:?}: over the f32 gate: {m}");
    if let Err(e) = lse_passes(&lse, &want_lse) {
        panic!("{label} {p:?} {dist:?}: {e}");
    }
    // Rows with no key left: exactly +0.0.
    for (g, w) in gather_out(&p, &out).iter().zip(&want) {
        if *w == 0.0 {
            assert_eq!(g.to_bits(), 0, "{label}: a row with no key is not +0.0");
        }
    }
}

fn run(test: &str, backend: Backend) {
    if !supports_padding(backend) {
        return;
    }
    let mut rng = rng_for(test);
    let exec = Exec::new().with_backend(backend);
    let shapes = [(1, 2, 9, 16, 64), (3, 2, 17, 33, 128), (2, 3, 5, 77, 32), (4, 1, 33, 7, 1), (2, 2, 40, 129, 256)];
    let mut n = 0;
    for (b, h, sq, skv, d) in shapes {
        for layout in [None, Some(Layout::TokenMajor)] {
            let mut p = Problem::flux(b, h, sq, skv, d);
            if let Some(l) = layout {
                p = p.with_qkv(l).with_out(Layout::HeadMajor);
            }
            let cases = [
                (true, None, 0),
                (false, Some(1), 0),
                (false, Some(b), 0),
                (false, Some(b), 5),
                (true, Some(1), 0),
                (true, Some(b), 3),
            ];
            for (with_lengths, rows, gap) in cases {
                for dist in [Dist::Normal, Dist::Peaky, Dist::Large] {
                    let pad = Padding::draw(&p, &mut rng, with_lengths, rows, gap);
                    check(test, &p, &exec, &pad, dist, &mut rng);
                    n += 1;
                }
            }
        }
    }
    println!("{test}: {n} padded cases on {backend} within the f32 gate");
}

#[test]
fn ref_padding_against_the_reference() {
    run("ref_padding_against_the_reference", Backend::Ref);
}

#[test]
fn cpu_padding_against_the_reference() {
    run("cpu_padding_against_the_reference", Backend::Cpu);
}

/// The cuda backend on host slices (it copies them and the padding to the device).
#[test]
fn cuda_padding_against_the_reference() {
    run("cuda_padding_against_the_reference", Backend::Cuda);
}

/// Lengths of 0 and a mask of zeros: every out row 0, every lse -inf.
#[test]
fn rows_with_no_key_left() {
    for backend in [Backend::Ref, Backend::Cpu, Backend::Cuda] {
        if !supports_padding(backend) {
            continue;
        }
        let p = Problem::flux(2, 2, 3, 5, 8);
        let x = vec![1.5f32; p.required_len(Tensor::K).unwrap().max(p.required_len(Tensor::Q).unwrap())];
        let exec = Exec::new().with_backend(backend);
        let zeros = [false; 5];
        for pad in [
            KeyPadding::lengths(&[0, 0]),
            KeyPadding::mask(&zeros, 1),
            KeyPadding::lengths(&[5, 5]).with_mask(&zeros, 1),
        ] {
            let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
            let mut lse = poisoned(p.lse_len().unwrap());
            jattn::forward_padded(&p, &exec, &x, &x, &x, &pad, &mut out, Some(&mut lse)).unwrap();
            assert!(out.iter().all(|x| x.to_bits() == 0), "{backend}: {out:?}");
            assert!(lse.iter().all(|&x| x == f32::NEG_INFINITY));
        }
    }
}

/// Full lengths and an all-ones mask give forward's output, bit for bit.
#[test]
fn padding_that_leaves_every_key_is_forward() {
    let mut rng = rng_for("padding_that_leaves_every_key_is_forward");
    let p = Problem::flux(2, 2, 9, 13, 32);
    let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
    let n = p.required_len(Tensor::Out).unwrap();
    let exec = Exec::new().with_backend(Backend::Ref);
    let mut plain = poisoned(n);
    jattn::forward(&p, &exec, &q, &k, &v, &mut plain, None).unwrap();
    let ones = vec![true; 2 * 13];
    for pad in [
        KeyPadding::none(),
        KeyPadding::lengths(&[13, 13]),
        KeyPadding::mask(&ones, 2),
        KeyPadding::mask(&ones[..13], 1),
    ] {
        let mut out = poisoned(n);
        jattn::forward_padded(&p, &exec, &q, &k, &v, &pad, &mut out, None).unwrap();
        assert!(out.iter().zip(&plain).all(|(a, b)| a.to_bits() == b.to_bits()), "{pad:?}");
    }
}

#[test]
fn padding_errors() {
    let p = Problem::flux(3, 2, 4, 6, 8);
    let x = vec![0.5f32; p.required_len(Tensor::K).unwrap().max(p.required_len(Tensor::Q).unwrap())];
    let exec = Exec::new().with_backend(Backend::Ref);
    let call = |pad: KeyPadding<'_>| {
        let mut out = poisoned(p.required_len(Tensor::Out).unwrap());
        let r = jattn::forward_padded(&p, &exec, &x, &x, &x, &pad, &mut out, None);
        if r.is_err() {
            assert!(out.iter().all(|&x| is_poison(x)), "written by a failing call");
        }
        r.map_err(|e| (e.status(), e.message().to_owned()))
    };
    let mask = [1u8; 3 * 6 + 10];
    let cases: [(KeyPadding<'_>, Status, &str); 9] = [
        (KeyPadding::lengths(&[6, 6]), Status::InvalidArgument, "key_padding.kv_len: 2 entries, batch is 3"),
        (
            KeyPadding::lengths(&[6, 7, 6]),
            Status::InvalidArgument,
            "key_padding.kv_len[1]: 7, must be in [0, seq_kv = 6]",
        ),
        (KeyPadding::lengths(&[6, -1, 6]), Status::InvalidArgument, "key_padding.kv_len[1]: -1"),
        (KeyPadding::mask(&mask[..5], 1), Status::InvalidArgument, "key_padding.mask: a slice of 5 elements"),
        (KeyPadding::mask(&mask[..17], 3), Status::InvalidArgument, "key_padding.mask: a slice of 17 elements"),
        (KeyPadding::mask(&mask[..18], 3).with_mask_row_stride(7), Status::InvalidArgument, "need 20"),
        (KeyPadding::mask(&mask, 2), Status::InvalidDimension, "key_padding.mask_batch: 2, must be 1"),
        (KeyPadding::mask(&mask, 0), Status::InvalidDimension, "key_padding.mask_batch: 0"),
        (KeyPadding::mask(&mask, 3).with_mask_row_stride(5), Status::SelfOverlap, "key_padding.mask_batch_stride"),
    ];
    for (pad, status, needle) in cases {
        let (s, m) = call(pad).expect_err("should fail");
        assert_eq!(s, status, "{m}");
        assert!(m.contains(needle), "{m:?} lacks {needle:?}");
        println!("{m}");
    }
    // A row stride is accepted where it fits, and a longer slice than needed is fine.
    assert!(call(KeyPadding::mask(&mask[..20], 3).with_mask_row_stride(7)).is_ok());
    assert!(call(KeyPadding::mask(&mask, 3)).is_ok());
    assert!(call(KeyPadding::mask(&mask, 1).with_lengths(&[1, 2, 3, 4])).is_ok());
    // The row stride without a mask does nothing.
    assert!(call(KeyPadding::lengths(&[1, 2, 3]).with_mask_row_stride(1)).is_ok());
}
