//! GEMV / GEMM results are bit-identical for every schedule and for 1, 2, 3, 5 and 8 threads
//! (rows are split across the pool, never K, and each output is computed by one chunk with
//! a fixed order of operations), on every kernel table the host runs.
#![cfg(feature = "std")]

use half::f16;
use rml::exec::ThreadPool;
use rml::kernels::{table, Isa};
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{DType, InlineExecutor, Schedule};

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// Weights of `dtype`, `rows × k`, from deterministic values.
fn weights(dtype: DType, rows: usize, k: usize) -> AlignedBlock {
    let v = values(rows * k, 11);
    let rb = dtype.row_bytes(k).unwrap();
    let mut bytes = vec![0u8; rows * rb];
    for (src, dst) in v.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
        match dtype {
            DType::F32 => {
                dst.copy_from_slice(&src.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<_>>())
            }
            DType::F16 => dst.copy_from_slice(
                &src.iter().flat_map(|&f| f16::from_f32(f).to_le_bytes()).collect::<Vec<_>>(),
            ),
            DType::Q8_0 => rml::kernels::quant::quantize_row_q8_0(src, dst).unwrap(),
            DType::Q4_0 => rml::kernels::quant::quantize_row_q4_0(src, dst).unwrap(),
            DType::Q4_1 => rml::kernels::quant::quantize_row_q4_1(src, dst).unwrap(),
            DType::Q5_0 => rml::quant::quantize_row_q5_0(src, dst).unwrap(),
            // K-quants (no weight quantizer): bytes from the values, sane f16 scales at
            // ggml's offsets.
            DType::Q4_K | DType::Q6_K => {
                for (d, v) in dst.iter_mut().zip(src.iter().cycle()) {
                    *d = (v * 1000.0) as i32 as u8;
                }
                let bb = dtype.block_bytes();
                let offsets: &[usize] = if dtype == DType::Q4_K { &[0, 2] } else { &[208] };
                for blk in dst.chunks_exact_mut(bb) {
                    for &o in offsets {
                        blk[o..o + 2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
                    }
                }
            }
            _ => unreachable!(),
        }
    }
    AlignedBlock::try_from_slice(&bytes).unwrap()
}

#[test]
fn every_schedule_and_thread_count_gives_identical_bits() {
    // Rows above the parallel thresholds (64 f32, 32 quantized) and not multiples of any
    // tile or chunk size; K with a ragged tail for the unblocked dtypes; n = 1 (GEMV) and 5.
    let cases = [
        (DType::F32, 203, 77, Activations::F32),
        (DType::F32, 130, 800, Activations::F32), // K blocking (K > 768)
        (DType::F16, 97, 45, Activations::F32),
        (DType::Q8_0, 75, 96, Activations::F32),
        (DType::Q4_1, 75, 96, Activations::F32),
        (DType::Q8_0, 75, 288, Activations::Int8Plain),
        (DType::Q4_0, 41, 64, Activations::Int8Plain),
        (DType::Q4_1, 133, 288, Activations::Int8Plain),
        (DType::Q5_0, 75, 96, Activations::Int8Plain),
        (DType::Q4_K, 75, 512, Activations::F32),
        (DType::Q4_K, 75, 512, Activations::Int8Plain),
        (DType::Q6_K, 41, 256, Activations::Int8Plain),
        // Int8 with outlier correction (the inputs carry massive channels, below).
        (DType::Q4_1, 133, 288, Activations::Int8),
        (DType::Q8_0, 75, 96, Activations::Int8),
        (DType::Q4_K, 75, 512, Activations::Int8),
    ];
    let pools: Vec<ThreadPool> = [1, 2, 3, 5, 8].into_iter().map(ThreadPool::new).collect();
    let mut schedules: Vec<Option<Schedule>> = Schedule::ALL.into_iter().map(Some).collect();
    schedules.extend([None, Some(Schedule::Grain(7)), Some(Schedule::Grain(1000))]);
    let mut checked = 0;
    for isa in Isa::ALL {
        let Ok(kern) = table(isa) else {
            // Straight to stderr (libtest captures `println!`): a skip must show.
            use std::io::Write;
            let how = match isa {
                Isa::Neon | Isa::NeonDotprod => {
                    "run them on aarch64 with `cargo test --features std --target \
                     aarch64-unknown-linux-gnu --test kernels_threads` (qemu-aarch64 runner, see \
                     .ci/run)"
                }
                Isa::ArmDsp => "they run inside the features/mcu firmware under qemu-system-arm",
                _ => "run them on an x86_64 CPU with that extension",
            };
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {isa} thread checks: not available on this CPU; {how}"
            );
            continue;
        };
        for &(dtype, rows, k, act) in &cases {
            let data = weights(dtype, rows, k);
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            for n in [1, 5] {
                let mut x = values(n * k, 5 + n as u32);
                // A massive channel per row (every 7th row two), as LLM residual streams
                // have: outlier blocks for Activations::Int8.
                for t in 0..n {
                    x[t * k + (t * 37) % k] = 50.0;
                    if t % 7 == 0 {
                        x[t * k + (t * 91 + 200) % k] = -40.0;
                    }
                }
                let mut scratch = vec![0u8; scratch_bytes(k, n, act)];
                let mut want = vec![0f32; n * rows];
                gemm_with(kern, &InlineExecutor, None, &w, &x, n, &mut want, act, &mut scratch)
                    .unwrap();
                for pool in &pools {
                    for &schedule in &schedules {
                        let mut y = vec![f32::NAN; n * rows];
                        gemm_with(kern, pool, schedule, &w, &x, n, &mut y, act, &mut scratch)
                            .unwrap();
                        let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{isa} {dtype} {rows}x{k} n={n} {act:?}: {} threads, {schedule:?} \
                             differs from inline",
                            rml::Executor::threads(pool)
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    println!("{checked} runs bit-identical to the inline result");
}
