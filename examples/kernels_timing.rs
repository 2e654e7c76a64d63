//! Best-of-N timings of the kernels against the same peers as `benches/kernels.rs`, for
//! machines shared with other work, where the minimum is steadier than criterion's median.
//!
//! `cargo run --release --example kernels_timing -- [gemm|quant|bandwidth|types|all] [TYPE..]`
//!
//! `types`: the int8 GEMV of every quantized type (or the ones named) on every x86 tier, the
//! shapes of `gemv_types`, best of several interleaved rounds, with time per weight relative
//! to Q4_1's best tier.

use std::hint::black_box;
use std::time::Instant;

use rml::kernels::{self, quant, Isa, Kernels};
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{DType, InlineExecutor};

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

/// The fastest of `iters` runs, in seconds.
fn best_of(iters: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..iters {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn f32_matrix(v: &[f32]) -> AlignedBlock {
    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    AlignedBlock::try_from_slice(&bytes).unwrap()
}

fn gemm(best: &Kernels) {
    let shapes = [
        (1, 576, 576),
        (16, 576, 576),
        (64, 576, 576),
        (1, 576, 1536),
        (16, 576, 1536),
        (64, 576, 1536),
        (16, 2048, 2048),
        (64, 2048, 2048),
    ];
    for (n, k, rows) in shapes {
        let wv = values(rows * k, 1);
        let data = f32_matrix(&wv);
        let w = Matrix::new(DType::F32, rows, k, data.as_slice()).unwrap();
        let x = values(n * k, 2);
        let mut y = vec![0f32; n * rows];
        let flops = (2 * n * k * rows) as f64;
        let it = (2e9 / flops).max(25.0) as usize;
        let ours = best_of(it, || {
            gemm_with(
                best,
                &InlineExecutor,
                None,
                &w,
                black_box(&x),
                n,
                &mut y,
                Activations::F32,
                &mut [],
            )
            .unwrap()
        });
        let g = best_of(it, || {
            // SAFETY: the strides describe `x` (n × k), `Wᵀ` (k × rows, column stride k) and
            // `y` (n × rows), all alive for the call.
            unsafe {
                gemm::gemm(
                    n,
                    rows,
                    k,
                    y.as_mut_ptr(),
                    1,
                    rows as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    wv.as_ptr(),
                    k as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        });
        let mm = best_of(it, || {
            // SAFETY: as above.
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    k,
                    rows,
                    1.0,
                    x.as_ptr(),
                    k as isize,
                    1,
                    wv.as_ptr(),
                    1,
                    k as isize,
                    0.0,
                    y.as_mut_ptr(),
                    rows as isize,
                    1,
                )
            }
        });
        println!(
            "gemm f32 {n}x{k}x{rows}: rml-{} {:.1} Gflop/s, gemm {:.1}, matrixmultiply {:.1}; \
             rml vs gemm {:.2}x, vs matrixmultiply {:.2}x",
            best.isa(),
            flops / ours / 1e9,
            flops / g / 1e9,
            flops / mm / 1e9,
            g / ours,
            mm / ours
        );
    }
}

fn quantized(best: &Kernels) {
    let scalar = kernels::table(Isa::Scalar).unwrap();
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        for (rows, k) in [(1536, 576), (576, 1536), (4096, 4096)] {
            let wv = values(rows * k, 5);
            let rb = dtype.row_bytes(k).unwrap();
            let mut bytes = vec![0u8; rows * rb];
            for (src, dst) in wv.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
                match dtype {
                    DType::Q8_0 => quant::quantize_row_q8_0(src, dst).unwrap(),
                    DType::Q4_0 => quant::quantize_row_q4_0(src, dst).unwrap(),
                    _ => quant::quantize_row_q4_1(src, dst).unwrap(),
                }
            }
            let data = AlignedBlock::try_from_slice(&bytes).unwrap();
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            let x = values(k, 6);
            let mut y = vec![0f32; rows];
            let mut s = vec![0u8; scratch_bytes(k, 1, Activations::Int8)];
            let gb = bytes.len() as f64 / 1e9;
            let it = (3e8 / bytes.len() as f64).max(5.0) as usize;
            let mut time = |kern: &Kernels, act, it| {
                best_of(it, || {
                    gemm_with(
                        kern,
                        &InlineExecutor,
                        None,
                        &w,
                        black_box(&x),
                        1,
                        &mut y,
                        act,
                        &mut s,
                    )
                    .unwrap()
                })
            };
            let i8b = time(best, Activations::Int8, it);
            let f32b = time(best, Activations::F32, it);
            let i8s = time(scalar, Activations::Int8, it / 4 + 3);
            let f32s = time(scalar, Activations::F32, it / 8 + 3);
            println!(
                "gemv {dtype} {rows}x{k} (GB/s of weights): int8-{isa} {:.2}, f32-{isa} {:.2}, \
                 int8-scalar {:.2}, f32-scalar {:.2}; int8-{isa} vs int8-scalar {:.2}x, \
                 vs f32-scalar {:.2}x",
                gb / i8b,
                gb / f32b,
                gb / i8s,
                gb / f32s,
                i8s / i8b,
                f32s / i8b,
                isa = best.isa()
            );
        }
    }
}

fn bandwidth(best: &Kernels) {
    let (rows, k) = (16384, 1024); // 64 MiB
    let wv = values(rows * k, 3);
    let data = f32_matrix(&wv);
    let w = Matrix::new(DType::F32, rows, k, data.as_slice()).unwrap();
    let x = values(k, 4);
    let mut y = vec![0f32; rows];
    let gb = (rows * k * 4) as f64 / 1e9;
    for _ in 0..3 {
        let ours = best_of(15, || {
            gemm_with(
                best,
                &InlineExecutor,
                None,
                &w,
                black_box(&x),
                1,
                &mut y,
                Activations::F32,
                &mut [],
            )
            .unwrap()
        });
        let read = best_of(15, || {
            let mut acc = [0f32; 16];
            for c in black_box(&wv).chunks_exact(16) {
                for i in 0..16 {
                    acc[i] += c[i];
                }
            }
            black_box(acc);
        });
        println!(
            "gemv f32 64 MiB: rml-{} {:.2} GB/s, read loop {:.2} GB/s, ratio {:.3}",
            best.isa(),
            gb / ours,
            gb / read,
            read / ours
        );
    }
}

/// The weights of `gemv_types` (`benches/kernels.rs`): quantized values where the type has a
/// quantizer, else random bytes with small f16 scales.
fn type_weights(dtype: DType, rows: usize, k: usize) -> AlignedBlock {
    let info = rml::quant::info(dtype);
    let rb = dtype.row_bytes(k).unwrap();
    let mut bytes = vec![0u8; rows * rb];
    if let Some(q) = info.quantize {
        let wv = values(rows * k, 5);
        for (src, dst) in wv.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
            q(src, dst).unwrap();
        }
    } else {
        let mut s = 0x1234_5678u32;
        for b in bytes.iter_mut() {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            *b = s as u8;
        }
        let offsets: &[usize] = match dtype {
            DType::IQ4_NL => &[0],
            DType::Q2_K => &[80, 82],
            DType::Q3_K => &[108],
            DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[],
        };
        let h = half::f16::from_f32(0.01).to_le_bytes();
        for blk in bytes.chunks_exact_mut(info.block_bytes) {
            for &o in offsets {
                blk[o..o + 2].copy_from_slice(&h);
            }
        }
    }
    AlignedBlock::try_from_slice(&bytes).unwrap()
}

fn types(only: &[String]) {
    let tiers: Vec<&Kernels> = [Isa::Avx2, Isa::AvxVnni, Isa::Avx512]
        .into_iter()
        .filter_map(|isa| kernels::table(isa).ok())
        .collect();
    let tiers =
        if tiers.is_empty() { vec![kernels::table(kernels::best()).unwrap()] } else { tiers };
    let all: Vec<DType> =
        rml::quant::TYPES.iter().filter(|t| t.act.is_some()).map(|t| t.dtype).collect();
    let picked: Vec<DType> = all
        .iter()
        .copied()
        .filter(|t| {
            t == &DType::Q4_1 || only.is_empty() || only.iter().any(|o| *o == t.to_string())
        })
        .collect();
    for (rows, k) in [(576, 1536), (1536, 576), (8192, 8192)] {
        let x = values(k, 6);
        let mut y = vec![0f32; rows];
        let mut s = vec![0u8; scratch_bytes(k, 1, Activations::Int8)];
        let iters = if rows * k > 1 << 22 { 6 } else { 300 };
        let mut rows_out = Vec::new();
        for &dtype in &picked {
            if k % dtype.block_size() != 0 {
                continue;
            }
            let data = type_weights(dtype, rows, k);
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            let mut t = vec![f64::MAX; tiers.len()];
            for _ in 0..3 {
                for (i, kern) in tiers.iter().enumerate() {
                    t[i] = t[i].min(best_of(iters, || {
                        gemm_with(
                            kern,
                            &InlineExecutor,
                            None,
                            &w,
                            black_box(&x),
                            1,
                            &mut y,
                            Activations::Int8,
                            &mut s,
                        )
                        .unwrap()
                    }));
                }
            }
            rows_out.push((dtype, t));
        }
        let q41 = rows_out
            .iter()
            .find(|(d, _)| *d == DType::Q4_1)
            .map(|(_, t)| t.iter().copied().fold(f64::MAX, f64::min))
            .unwrap();
        print!("{rows}x{k} (µs)");
        for kern in &tiers {
            print!(" {:>9}", kern.isa().to_string());
        }
        println!("  best ×Q4_1");
        for (dtype, t) in &rows_out {
            let (bi, b) =
                t.iter()
                    .copied()
                    .enumerate()
                    .fold((0, f64::MAX), |a, (i, v)| if v < a.1 { (i, v) } else { a });
            print!("{:>12}", dtype.to_string());
            for v in t {
                print!(" {:9.1}", v * 1e6);
            }
            println!("  {:>9} {:.2}", tiers[bi].isa().to_string(), b / q41);
        }
    }
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if what == "types" {
        let only: Vec<String> = std::env::args().skip(2).collect();
        types(&only);
        return;
    }
    let best = kernels::table(kernels::best()).unwrap();
    if what == "all" || what == "gemm" {
        gemm(best);
    }
    if what == "all" || what == "quant" {
        quantized(best);
    }
    if what == "all" || what == "bandwidth" {
        bandwidth(best);
    }
}
