//! GEMV speed of every available kernel tier on L2-resident weights, in CPU time (so that the
//! figures hold on a loaded machine): `cargo run --release --features cli --example kernel_isas`.
//!
//! For Q8_0, Q4_0 and Q4_1 matrices of `rows × k` (the SmolLM2 shapes 1536 × 576 and
//! 576 × 1536, about 0.5–1 MiB) it times single-threaded GEMV with f32 and with int8
//! activations and prints GB/s of weights per CPU second and the speed-up over AVX2.

use std::hint::black_box;

use rml::kernels::{quant, table, Isa};
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{DType, InlineExecutor};

fn cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_available()).collect();
    println!("GB/s of weights per CPU second, one thread (speed-up over avx2)");
    print!("{:<22}", "matrix / activations");
    for isa in &isas {
        print!("{:>16}", isa.name());
    }
    println!();
    for (rows, k) in [(1536usize, 576usize), (576, 1536)] {
        let vals: Vec<f32> =
            (0..rows * k).map(|i| ((i * 7919 % 1013) as f32 / 506.0) - 1.0).collect();
        let x: Vec<f32> = (0..k).map(|i| ((i * 31 % 97) as f32 / 48.0) - 1.0).collect();
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
            let rb = dtype.row_bytes(k).unwrap();
            let mut data = vec![0u8; rows * rb];
            for (r, out) in data.chunks_exact_mut(rb).enumerate() {
                let row = &vals[r * k..(r + 1) * k];
                match dtype {
                    DType::Q8_0 => quant::quantize_row_q8_0(row, out),
                    DType::Q4_0 => quant::quantize_row_q4_0(row, out),
                    _ => quant::quantize_row_q4_1(row, out),
                }
                .unwrap();
            }
            let w = Matrix::new(dtype, rows, k, &data).unwrap();
            for act in [Activations::F32, Activations::Int8Plain] {
                print!("{:<22}", format!("{dtype} {rows}x{k} {act:?}"));
                let mut base = 0.0;
                for &isa in &isas {
                    let kern = table(isa).unwrap();
                    let mut y = vec![0f32; rows];
                    let mut s = vec![0u8; scratch_bytes(k, 1, act)];
                    let mut best = f64::INFINITY;
                    for _ in 0..5 {
                        let iters = 200;
                        let c0 = cpu_s();
                        for _ in 0..iters {
                            gemm_with(kern, &InlineExecutor, None, &w, &x, 1, &mut y, act, &mut s)
                                .unwrap();
                            black_box(&y);
                        }
                        best = best.min((cpu_s() - c0) / iters as f64);
                    }
                    let gbs = data.len() as f64 / best / 1e9;
                    if isa == Isa::Avx2 {
                        base = gbs;
                    }
                    let rel =
                        if base > 0.0 { format!("({:.2}x)", gbs / base) } else { String::new() };
                    print!("{:>8.1} {:<7}", gbs, rel);
                }
                println!();
            }
        }
    }
}
