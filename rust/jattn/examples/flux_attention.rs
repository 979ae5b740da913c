//! FLUX.2 DiT attention through jattn from Rust: the shape (1, 24, 1536, 128) — 512 text +
//! 1024 image tokens at 512x512 — on the best backend present, with the backend, kernel, time,
//! GFLOP/s and parity against a float64 reference written in Rust.
//!
//!     cargo run --release --example flux_attention [-- --seq 4608 --backend cpu --threads 1 --runs 5]
//!
//! q, k, v are head-major [H, S, D] standard-normal draws (the seed is printed;
//! `JATTN_TEST_SEED=<n>` replays it), out is token-major [S, H*D], as the FLUX call has them.
//! Time: the median of `--runs` calls after one warm-up, on one reused Context; FLOPs per call
//! = 4·B·H·Sq·Skv·D. Parity: the reference in float64 of every 97th query row of every head
//! (all rows of a full reference take minutes in Rust), gated by the f32 contract.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use common::{Dist, Metrics, attends_all, draw, offset, reference_row, rng_for};
use jattn::{Backend, Context, Exec, Problem, Tensor};

struct Args {
    seq: usize,
    backend: Backend,
    threads: usize,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { seq: 1536, backend: Backend::Auto, threads: 0, runs: 5 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--seq" => args.seq = number(value()?)?,
            "--threads" => args.threads = number(value()?)?,
            "--runs" => args.runs = number(value()?)?.max(1),
            "--backend" => {
                args.backend = value()?.parse::<Backend>().map_err(|e| format!("--backend: {}", e.message()))?;
            }
            _ => return Err(format!("unknown argument {flag:?} (--seq N, --backend NAME, --threads N, --runs N)")),
        }
    }
    Ok(args)
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let (b, h, s, d) = (1, 24, args.seq, 128);
    let problem = Problem::flux(b, h, s, s, d);
    let exec = Exec::new().with_backend(args.backend).with_threads(args.threads);
    let sel = jattn::select(&problem, &exec)?;
    println!(
        "jattn {} — FLUX.2 attention (B, H, S, D) = ({b}, {h}, {s}, {d}), q/k/v head-major, out token-major",
        jattn::version()
    );
    println!("backend {}  kernel {}  isa {}  threads {}", sel.backend, sel.kernel, sel.isa, sel.threads);

    let mut rng = rng_for("flux_attention");
    let n = problem.required_len(Tensor::Q)?;
    let q = draw(&mut rng, Dist::Normal, true, n);
    let k = draw(&mut rng, Dist::Normal, true, n);
    let v = draw(&mut rng, Dist::Normal, false, n);
    let mut out = vec![f32::NAN; problem.required_len(Tensor::Out)?];

    let mut ctx = Context::new()?;
    ctx.forward(&problem, &exec, &q, &k, &v, &mut out, None)?; // warm-up: buffers, threads, caches
    let mut times: Vec<f64> = (0..args.runs)
        .map(|_| {
            let t = Instant::now();
            ctx.forward(&problem, &exec, &q, &k, &v, &mut out, None).map(|()| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let flops = 4.0 * (b * h * s * s * d) as f64;
    println!(
        "time {:.2} ms (median of {}; min {:.2}, max {:.2})  {:.1} GFLOP/s  ({:.1} GFLOP per call)",
        median * 1e3,
        times.len(),
        times[0] * 1e3,
        times[times.len() - 1] * 1e3,
        flops / median / 1e9,
        flops / 1e9
    );

    if sel.backend.is_gpu() {
        println!(
            "(host slices: on the GPU that time includes copying q, k, v to it and out back; forward_device takes device pointers)"
        );
    }

    let t = Instant::now();
    let (mut got, mut want, mut rows) = (Vec::new(), Vec::new(), 0);
    let mut row = vec![0.0f64; d];
    for head in 0..h {
        for i in (0..s).step_by(97) {
            reference_row(&problem, (&q, &k, &v), (0, head, i), &attends_all, &mut row);
            let at = offset(&problem, Tensor::Out, 0, head, i, 0);
            got.extend_from_slice(&out[at..at + d]);
            want.extend_from_slice(&row);
            rows += 1;
        }
    }
    let m = Metrics::of(got, want);
    let pass = m.passes_f32();
    println!(
        "parity vs float64 reference (every 97th query row of every head: {rows} rows, {:.1} s): rel_l2 {:.2e}  max_abs {:.2e}  cos {:.8}  {}",
        t.elapsed().as_secs_f64(),
        m.rel_l2,
        m.max_abs,
        m.cos,
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(pass)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("flux_attention: {e}");
            ExitCode::from(2)
        }
    }
}
