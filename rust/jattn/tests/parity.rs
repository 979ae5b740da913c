//! Parity of `jattn::forward` against the float64 reference written in Rust (tests/common), on
//! fresh random inputs of the four distributions, gated by the f32 contract on every case:
//! the origin shapes, head_dim 1..256, odd sizes, batch > 1, cross-attention, and six layouts
//! (head-major, token-major, mixed, padded strides, a fused QKV view), on the cpu and ref
//! backends and on the best one present. Outputs are poisoned before each call; every element
//! is checked as written, and nothing outside out and lse.

mod common;

use common::*;
use jattn::{Backend, Exec, Layout, Problem, Strides, Tensor};

/// How q, k, v and out are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// q, k, v head-major, out token-major: the FLUX call.
    Flux,
    /// Everything head-major.
    HeadMajor,
    /// Everything token-major ([B, S, H, D], flash-attention's layout).
    TokenMajor,
    /// q token-major, k and v head-major, out head-major.
    Mixed,
    /// Explicit strides with gaps between rows, heads and batches.
    Padded,
    /// q, k, v views into one fused projection [B, S, 3, H, D]; out token-major.
    FusedQkv,
}

const VARIANTS: [Variant; 6] =
    [Variant::Flux, Variant::HeadMajor, Variant::TokenMajor, Variant::Mixed, Variant::Padded, Variant::FusedQkv];

/// Head-major strides with `gap` extra elements after each row, head and batch.
fn padded(h: usize, s: usize, d: usize, gap: usize) -> Layout {
    let token = d + gap;
    let head = s * token + gap + 2;
    Layout::Strides(Strides::new(h * head + gap + 5, head, token))
}

fn problem(shape: (usize, usize, usize, usize, usize), variant: Variant) -> Option<Problem> {
    let (b, h, sq, skv, d) = shape;
    let p = Problem::flux(b, h, sq, skv, d);
    Some(match variant {
        Variant::Flux => p,
        Variant::HeadMajor => p.with_out(Layout::HeadMajor),
        Variant::TokenMajor => p.with_qkv(Layout::TokenMajor),
        Variant::Mixed => p.with_q(Layout::TokenMajor).with_out(Layout::HeadMajor),
        Variant::Padded => p
            .with_q(padded(h, sq, d, 3))
            .with_k(padded(h, skv, d, 1))
            .with_v(padded(h, skv, d, 2))
            .with_out(padded(h, sq, d, 4)),
        Variant::FusedQkv if sq == skv => p.with_qkv(Layout::Strides(Strides::new(3 * sq * h * d, d, 3 * h * d))),
        Variant::FusedQkv => return None,
    })
}

/// One call against the reference; returns its metrics. Panics with the case on failure.
fn check(label: &str, problem: Problem, variant: Variant, exec: &Exec, dist: Dist, rng: &mut Rng) -> Metrics {
    let problem = problem_for(problem, dist);
    let label = format!("{label} {problem:?} {variant:?} {dist:?} {:?}", exec.backend());
    let hd = problem.heads() * problem.head_dim();
    let fused;
    let separate;
    let (q, k, v): (&[f32], &[f32], &[f32]) = if variant == Variant::FusedQkv {
        fused = draw(rng, dist, true, 3 * problem.batch() * problem.seq_q() * hd);
        (&fused, &fused[hd..], &fused[2 * hd..])
    } else {
        separate = inputs(&problem, dist, rng);
        (&separate.0, &separate.1, &separate.2)
    };
    let out_len = problem.required_len(Tensor::Out).unwrap();
    let lse_len = problem.lse_len().unwrap();
    let mut out = poisoned(out_len + 3);
    let mut lse = poisoned(lse_len + 2);
    if let Err(e) = jattn::forward(&problem, exec, q, k, v, &mut out, Some(&mut lse)) {
        panic!("{label}: {e}");
    }
    let (want, want_lse) = reference(&problem, q, k, v, &attends_all);
    let m = Metrics::of(gather_out(&problem, &out), want);
    assert!(m.passes_f32(), "{label}: over the f32 gate: {m}");
    if let Err(e) = lse_passes(&lse[..lse_len], &want_lse) {
        panic!("{label}: {e}");
    }
    assert!(only_out_written(&problem, &out), "{label}: an element outside out was written");
    assert!(lse[lse_len..].iter().all(|&x| is_poison(x)), "{label}: written past lse");
    m
}

/// Runs every (shape, variant, dist) on `backend`; prints the worst case.
fn run(test: &str, shapes: &[(usize, usize, usize, usize, usize)], backend: Backend, dists: &[Dist]) {
    let mut rng = rng_for(test);
    let exec = Exec::new().with_backend(backend);
    let (mut n, mut worst) = (0, Metrics::default());
    for &shape in shapes {
        for variant in VARIANTS {
            let Some(p) = problem(shape, variant) else { continue };
            for &dist in dists {
                let m = check(test, p, variant, &exec, dist, &mut rng);
                if m.rel_l2 > worst.rel_l2 {
                    worst = m;
                }
                n += 1;
            }
        }
    }
    println!("{test}: {n} cases on {backend}, all within the f32 gate; worst {worst}");
}

const ORIGIN: [(usize, usize, usize, usize, usize); 4] =
    [(1, 2, 8, 8, 128), (1, 2, 40, 40, 128), (1, 1, 50, 50, 128), (1, 1, 64, 64, 128)];

fn head_dims() -> Vec<(usize, usize, usize, usize, usize)> {
    [1, 2, 3, 5, 8, 16, 31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 160, 200, 255, 256]
        .into_iter()
        .map(|d| (1, 2, 19, 19, d))
        .chain([(1, 1, 9, 13, 1), (1, 1, 13, 9, 256)])
        .collect()
}

const ODD: [(usize, usize, usize, usize, usize); 9] = [
    (1, 1, 1, 1, 64),
    (1, 2, 7, 7, 64),
    (1, 1, 33, 33, 72),
    (1, 1, 65, 65, 64),
    (1, 1, 127, 127, 32),
    (1, 1, 129, 129, 16),
    (1, 1, 7, 129, 32),
    (1, 1, 129, 7, 32),
    (1, 3, 1000, 1, 8),
];

const BATCHED: [(usize, usize, usize, usize, usize); 3] = [(3, 2, 17, 23, 64), (2, 3, 33, 33, 128), (4, 1, 5, 5, 7)];

const CROSS: [(usize, usize, usize, usize, usize); 4] =
    [(2, 2, 77, 5, 64), (1, 2, 5, 300, 128), (1, 4, 1, 77, 64), (2, 1, 40, 97, 96)];

#[test]
fn cpu_origin_shapes() {
    run("cpu_origin_shapes", &ORIGIN, Backend::Cpu, &Dist::ALL);
}

#[test]
fn cpu_head_dims_1_to_256() {
    run("cpu_head_dims_1_to_256", &head_dims(), Backend::Cpu, &Dist::ALL);
}

#[test]
fn cpu_odd_sizes() {
    run("cpu_odd_sizes", &ODD, Backend::Cpu, &Dist::ALL);
}

#[test]
fn cpu_batch_above_1() {
    run("cpu_batch_above_1", &BATCHED, Backend::Cpu, &Dist::ALL);
}

#[test]
fn cpu_cross_attention() {
    run("cpu_cross_attention", &CROSS, Backend::Cpu, &Dist::ALL);
}

#[test]
fn ref_backend_every_shape() {
    let shapes: Vec<_> =
        ORIGIN.iter().chain(&head_dims()).chain(&BATCHED).chain(&CROSS).chain(&ODD[..6]).copied().collect();
    run("ref_backend_every_shape", &shapes, Backend::Ref, &[Dist::Normal, Dist::Large]);
}

#[test]
fn best_backend_present() {
    let shapes: Vec<_> = ORIGIN.iter().chain(&BATCHED).chain(&CROSS).copied().collect();
    let sel = jattn::select(&Problem::flux(1, 2, 8, 8, 128), &Exec::default()).unwrap();
    println!("best backend present: {sel}");
    run("best_backend_present", &shapes, Backend::Auto, &[Dist::Normal, Dist::Peaky]);
}

/// Without lse, the output is the same, bit for bit.
#[test]
fn lse_is_optional() {
    let mut rng = rng_for("lse_is_optional");
    let p = Problem::flux(2, 3, 33, 47, 64);
    let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
    let n = p.required_len(Tensor::Out).unwrap();
    let (mut with, mut without) = (poisoned(n), poisoned(n));
    let mut lse = poisoned(p.lse_len().unwrap());
    let exec = Exec::new().with_backend(Backend::Cpu);
    jattn::forward(&p, &exec, &q, &k, &v, &mut with, Some(&mut lse)).unwrap();
    jattn::forward(&p, &exec, &q, &k, &v, &mut without, None).unwrap();
    assert!(with.iter().zip(&without).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// The cpu backend's output is bitwise the same for any thread count (jattn's contract).
#[test]
fn cpu_threads_are_deterministic() {
    let mut rng = rng_for("cpu_threads_are_deterministic");
    let p = Problem::flux(1, 4, 130, 70, 64);
    let (q, k, v) = inputs(&p, Dist::Peaky, &mut rng);
    let n = p.required_len(Tensor::Out).unwrap();
    let outs: Vec<Vec<f32>> = [1, 2, 3]
        .into_iter()
        .map(|t| {
            let mut out = poisoned(n);
            jattn::forward(&p, &Exec::new().with_backend(Backend::Cpu).with_threads(t), &q, &k, &v, &mut out, None)
                .unwrap();
            out
        })
        .collect();
    for o in &outs[1..] {
        assert!(o.iter().zip(&outs[0]).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
