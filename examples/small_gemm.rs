//! Best-of timings of one int8 product with 1 to 8 activation rows: what a decode step of a
//! batch of that many sequences costs per weight matrix, against the single-row GEMV.
//!
//! ```text
//! cargo run --release --features std --example small_gemm -- [TYPE:ROWSxK ..]
//! ```
//!
//! Each argument is a matrix: its weight type and shape, e.g. `Q8_0:49152x576` (SmolLM2's
//! tied output head), `Q4_1:1536x576`. Without arguments: SmolLM2's head (Q8_0) and two of its
//! Q4_1 layer matrices; Gemma 3 270M's head (Q8_0, 178 MB), a Q5_0 up projection and a Q6_K
//! down projection (its Q4_K_M file's types). Threads: `$RML_NUM_THREADS` (default 1); `SG_NS=1,2,4` picks the activation row
//! counts (default 1 to 8), `SG_ROUNDS` (default 5) the rounds; the kernels are
//! [`rml::kernels::active`]'s (`RML_KERNELS` picks a tier). Activations: int8 without the
//! outlier correction (the kernel alone).
//!
//! Every row count runs once per round, interleaved, and the best round counts (steadier on a
//! machine shared with other work). Printed per matrix and row count: milliseconds per
//! product, the ratio to one row, and milliseconds per activation row.

use core::hint::black_box;
use std::time::Instant;

use rml::exec::ThreadPool;
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::DType;

#[path = "../benches/common/gemv_types.rs"]
mod common;
use common::{type_weights, values};

/// Parses `TYPE:ROWSxK`.
fn parse(s: &str) -> (DType, usize, usize) {
    let (t, shape) = s.split_once(':').expect("TYPE:ROWSxK");
    let dtype = rml::quant::TYPES
        .iter()
        .map(|i| i.dtype)
        .find(|d| d.to_string().eq_ignore_ascii_case(t))
        .unwrap_or_else(|| panic!("{t}: not a weight type"));
    let (r, k) = shape.split_once('x').expect("ROWSxK");
    (dtype, r.parse().expect("ROWS: a number"), k.parse().expect("K: a number"))
}

fn main() -> rml::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let defaults = [
        "Q8_0:49152x576",
        "Q4_1:1536x576",
        "Q4_1:576x1536",
        "Q8_0:262144x640",
        "Q5_0:2048x640",
        "Q6_K:640x2048",
    ];
    let mats: Vec<(DType, usize, usize)> = if args.is_empty() {
        defaults.iter().map(|s| parse(s)).collect()
    } else {
        args.iter().map(|s| parse(s)).collect()
    };
    let env_num = |k: &str, d: usize| {
        std::env::var(k).ok().map_or(d, |v| v.parse().unwrap_or_else(|_| panic!("{k}: a number")))
    };
    let threads = env_num("RML_NUM_THREADS", 1);
    let rounds = env_num("SG_ROUNDS", 5).max(1);
    let ns: Vec<usize> = std::env::var("SG_NS").map_or((1..=8).collect(), |v| {
        v.split(',').map(|s| s.trim().parse().expect("SG_NS: numbers")).collect()
    });
    let kern = rml::kernels::active()?;
    let pool = ThreadPool::new(threads);
    let nmax = ns.iter().copied().max().unwrap_or(1);
    println!("# kernels {}, {threads} threads, best of {rounds} rounds", kern.isa());
    for (dtype, rows, k) in mats {
        let data = type_weights(dtype, rows, k);
        let w = Matrix::new(dtype, rows, k, data.as_slice())?;
        let x = values(nmax * k, 2);
        let mut y = vec![0f32; nmax * rows];
        let act = Activations::Int8Plain;
        let mut scratch = AlignedBlock::try_new(scratch_bytes(k, nmax, act))?;
        let mut best = vec![f64::MAX; ns.len()];
        // Repeats per timing: about 20 ms of work at one row.
        let reps = (20e6 / (rows * k) as f64).ceil().max(1.0) as usize;
        for _ in 0..rounds {
            for (i, &n) in ns.iter().enumerate() {
                let t = Instant::now();
                for _ in 0..reps {
                    gemm_with(
                        kern,
                        &pool,
                        None,
                        &w,
                        black_box(&x[..n * k]),
                        n,
                        &mut y[..n * rows],
                        act,
                        scratch.as_mut_slice(),
                    )?;
                }
                best[i] = best[i].min(t.elapsed().as_secs_f64() / reps as f64);
            }
        }
        println!(
            "{dtype} {rows}x{k} ({:.1} MB)",
            (rows * dtype.row_bytes(k).unwrap()) as f64 / 1e6
        );
        let one = ns.iter().position(|&n| n == 1).map(|i| best[i]);
        println!("{:>4} {:>9} {:>7} {:>9}", "n", "ms", "vs 1", "ms/row");
        for (i, &n) in ns.iter().enumerate() {
            let ratio = one.map_or(String::from("-"), |o| format!("{:.2}x", best[i] / o));
            println!("{n:>4} {:>9.3} {ratio:>7} {:>9.3}", best[i] * 1e3, best[i] * 1e3 / n as f64);
        }
    }
    Ok(())
}
