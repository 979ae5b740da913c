//! The reusable `Context`: reused across sizes (growing, shrinking, cross-attention, padded and
//! not, on every host backend), it gives what a call without one gives, bit for bit, within the
//! f32 gate; it is `Send` (moved to other threads and used there) and not `Sync`.

mod common;

use common::*;
use jattn::{Backend, Context, Exec, KeyPadding, Problem, Tensor};

#[test]
fn context_reused_across_sizes() {
    let mut rng = rng_for("context_reused_across_sizes");
    let mut ctx = Context::new().unwrap();
    let sizes = [
        (1, 2, 16, 16, 64),
        (2, 4, 300, 300, 128),
        (1, 1, 1, 1, 1),
        (2, 3, 77, 500, 64),
        (1, 2, 33, 33, 256),
        (2, 4, 300, 300, 128),
        (1, 1, 7, 9, 3),
    ];
    for backend in [Backend::Cpu, Backend::Ref, Backend::Auto] {
        let exec = Exec::new().with_backend(backend);
        for (b, h, sq, skv, d) in sizes {
            if backend == Backend::Ref && sq * skv > 10_000 {
                continue; // the reference backend is slow; its small sizes suffice
            }
            let p = Problem::flux(b, h, sq, skv, d);
            let (q, k, v) = inputs(&p, Dist::Normal, &mut rng);
            let n = p.required_len(Tensor::Out).unwrap();
            let (mut with_ctx, mut without) = (poisoned(n), poisoned(n));
            let mut lse = poisoned(p.lse_len().unwrap());
            ctx.forward(&p, &exec, &q, &k, &v, &mut with_ctx, Some(&mut lse)).unwrap();
            jattn::forward(&p, &exec, &q, &k, &v, &mut without, None).unwrap();
            assert!(with_ctx.iter().zip(&without).all(|(a, b)| a.to_bits() == b.to_bits()), "{backend} {p:?}");
            // The reference of the largest sizes is checked on a few rows only, to stay fast.
            if sq * skv <= 40_000 {
                let (want, want_lse) = reference(&p, &q, &k, &v, &attends_all);
                let m = Metrics::of(gather_out(&p, &with_ctx), want);
                assert!(m.passes_f32(), "{backend} {p:?}: {m}");
                lse_passes(&lse, &want_lse).unwrap();
            }
            // Padded calls on the same context (ref: implemented; others may refuse them).
            let lengths: Vec<i64> = (0..b).map(|i| (skv - i % skv) as i64).collect();
            let mut padded = poisoned(n);
            match ctx.forward_padded(&p, &exec, &q, &k, &v, &KeyPadding::lengths(&lengths), &mut padded, None) {
                Ok(()) => {
                    if sq * skv <= 40_000 {
                        let len = &lengths;
                        let (want, _) = reference(&p, &q, &k, &v, &|b, j| (j as i64) < len[b]);
                        let m = Metrics::of(gather_out(&p, &padded), want);
                        assert!(m.passes_f32(), "padded {backend} {p:?}: {m}");
                    }
                }
                Err(e) => assert_eq!(e.status(), jattn::Status::Unsupported, "{e}"),
            }
        }
    }
}

#[test]
fn context_is_send_and_used_on_other_threads() {
    let mut rng = rng_for("context_is_send_and_used_on_other_threads");
    let p = Problem::flux(1, 2, 40, 40, 64);
    let (q, k, v) = inputs(&p, Dist::Uniform, &mut rng);
    let n = p.required_len(Tensor::Out).unwrap();
    let mut expected = poisoned(n);
    jattn::forward(&p, &Exec::default(), &q, &k, &v, &mut expected, None).unwrap();
    // One context moved through three threads in turn; four contexts used at once.
    let mut ctx = Context::new().unwrap();
    for _ in 0..3 {
        let (q, k, v, expected) = (&q, &k, &v, &expected);
        ctx = std::thread::scope(|s| {
            s.spawn(move || {
                let mut out = poisoned(n);
                ctx.forward(&p, &Exec::default(), q, k, v, &mut out, None).unwrap();
                assert_eq!(&out, expected);
                ctx
            })
            .join()
            .unwrap()
        });
    }
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut ctx = Context::new().unwrap();
                let mut out = poisoned(n);
                for _ in 0..3 {
                    ctx.forward(&p, &Exec::new().with_threads(1), &q, &k, &v, &mut out, None).unwrap();
                    assert_eq!(out, expected);
                }
            });
        }
    });
}

// Not Sync: this resolves only when exactly one impl applies, i.e. when Context is not Sync
// (a Sync type would match both impls and fail to compile).
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

#[test]
fn context_is_send_not_sync() {
    fn is_send<T: Send>() {}
    is_send::<Context>();
    <Context as AmbiguousIfSync<_>>::check();
}
