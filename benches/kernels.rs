//! Kernel benchmarks, single-threaded, each against a peer in the same group:
//!
//! - `gemm_f32/<n>x<k>x<rows>`: `Y[n × rows] = X[n × k] · Wᵀ` with rml's best ISA vs the
//!   `gemm` and `matrixmultiply` crates (throughput in flops, `2 n k rows`).
//! - `gemv_bandwidth`: f32 GEMV over a 64 MiB matrix (larger than the last-level cache) vs a
//!   plain loop that reads the same bytes (throughput in bytes of weights).
//! - `gemv_quant/<dtype>`: Q8_0 / Q4_1 GEMV, int8 activations vs f32 activations vs the scalar
//!   table (throughput in bytes of weights).
//!
//! - `gemv_types/<rows>x<k>`: int8 GEMV of every quantized type on every x86 tier the CPU has
//!   (AVX2, AVX-VNNI, AVX-512; elsewhere the best ISA) on SmolLM2's shapes (576 × 1536,
//!   1536 × 576; the K-quants only where `k` is whole super-blocks), on a 8192 × 8192 matrix
//!   and on a `rows × 8192` one of at least twice the last-level cache in every type (the
//!   cache read from sysfs, 1 GiB if unknown; printed at the start), with Q4_1 in the same
//!   group (throughput in weights, whose inverse is the time per weight, and in bytes of
//!   weights); past the cache also a plain read loop over each type's bytes (`read-loop/<type>`,
//!   the bandwidth roof). Setup in `benches/common/gemv_types.rs`, shared with
//!   `examples/kernels_timing.rs`.
//!
//! `cargo bench --bench kernels -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use rml::kernels::{self, quant, Isa, Kernels};
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{DType, InlineExecutor};

#[path = "common/gemv_types.rs"]
mod common;
use common::{int8_tiers, int8_types, read_bytes, shapes, type_weights, values};

fn f32_bytes(v: &[f32]) -> AlignedBlock {
    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    AlignedBlock::try_from_slice(&bytes).unwrap()
}

fn best() -> &'static Kernels {
    kernels::table(kernels::best()).unwrap()
}

#[allow(clippy::too_many_arguments)]
fn rml_gemm(
    kern: &Kernels,
    w: &Matrix<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    act: Activations,
    s: &mut [u8],
) {
    gemm_with(kern, &InlineExecutor, None, w, x, n, y, act, s).unwrap();
}

fn gemm_f32(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_f32");
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
    let kern = best();
    for (n, k, rows) in shapes {
        let wv = values(rows * k, 1);
        let data = f32_bytes(&wv);
        let w = Matrix::new(DType::F32, rows, k, data.as_slice()).unwrap();
        let x = values(n * k, 2);
        let mut y = vec![0f32; n * rows];
        let id = format!("{n}x{k}x{rows}");
        g.throughput(Throughput::Elements((2 * n * k * rows) as u64));
        g.bench_function(BenchmarkId::new(format!("rml-{}", kern.isa()), &id), |b| {
            b.iter(|| rml_gemm(kern, &w, black_box(&x), n, &mut y, Activations::F32, &mut []))
        });
        let reference = y.clone();
        // Y (n × rows, row-major) = X (n × k, row-major) · Wᵀ (k × rows: element (i, j) is
        // W[j][i], so stride 1 down a column and k across).
        g.bench_function(BenchmarkId::new("gemm", &id), |b| {
            b.iter(|| {
                // SAFETY: every stride describes the buffers above, which outlive the call.
                unsafe {
                    gemm::gemm(
                        n,
                        rows,
                        k,
                        y.as_mut_ptr(),
                        1,
                        rows as isize,
                        false,
                        black_box(x.as_ptr()),
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
            })
        });
        check_close(&reference, &y, "gemm");
        g.bench_function(BenchmarkId::new("matrixmultiply", &id), |b| {
            b.iter(|| {
                // SAFETY: as above.
                unsafe {
                    matrixmultiply::sgemm(
                        n,
                        k,
                        rows,
                        1.0,
                        black_box(x.as_ptr()),
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
            })
        });
        check_close(&reference, &y, "matrixmultiply");
    }
    g.finish();
}

/// The peers must compute the same product (so the comparison is fair).
fn check_close(a: &[f32], b: &[f32], what: &str) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-3 * (1.0 + x.abs()), "{what} disagrees: {x} vs {y}");
    }
}

fn gemv_bandwidth(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemv_bandwidth");
    let (rows, k) = (16384, 1024); // 64 MiB of f32 weights
    let wv = values(rows * k, 3);
    let data = f32_bytes(&wv);
    let w = Matrix::new(DType::F32, rows, k, data.as_slice()).unwrap();
    let x = values(k, 4);
    let mut y = vec![0f32; rows];
    g.throughput(Throughput::Bytes((rows * k * 4) as u64));
    g.sample_size(20);
    let kern = best();
    g.bench_function(format!("rml-gemv-{}", kern.isa()), |b| {
        b.iter(|| rml_gemm(kern, &w, black_box(&x), 1, &mut y, Activations::F32, &mut []))
    });
    g.bench_function("read-loop", |b| b.iter(|| read_all(black_box(&wv))));
    g.finish();
}

/// Reads every float once with 16 independent sums (vectorised by the compiler).
fn read_all(v: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for c in v.chunks_exact(16) {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum()
}

fn gemv_quant(c: &mut Criterion) {
    let shapes = [(1536, 576), (4096, 4096)];
    let best = best();
    let scalar = kernels::table(Isa::Scalar).unwrap();
    for dtype in [DType::Q8_0, DType::Q4_1] {
        let mut g = c.benchmark_group(format!("gemv_quant/{dtype}"));
        for (rows, k) in shapes {
            let wv = values(rows * k, 5);
            let rb = dtype.row_bytes(k).unwrap();
            let mut bytes = vec![0u8; rows * rb];
            for (src, dst) in wv.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
                match dtype {
                    DType::Q8_0 => quant::quantize_row_q8_0(src, dst).unwrap(),
                    _ => quant::quantize_row_q4_1(src, dst).unwrap(),
                }
            }
            let data = AlignedBlock::try_from_slice(&bytes).unwrap();
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            let x = values(k, 6);
            let mut y = vec![0f32; rows];
            let mut s = vec![0u8; scratch_bytes(k, 1, Activations::Int8Plain)];
            let id = format!("{rows}x{k}");
            g.throughput(Throughput::Bytes(bytes.len() as u64));
            if rows * k > 1 << 22 {
                g.sample_size(20);
            }
            for (name, kern, act) in [
                (format!("int8-{}", best.isa()), best, Activations::Int8Plain),
                (format!("f32-{}", best.isa()), best, Activations::F32),
                ("int8-scalar".into(), scalar, Activations::Int8Plain),
                ("f32-scalar".into(), scalar, Activations::F32),
            ] {
                g.bench_function(BenchmarkId::new(name, &id), |b| {
                    b.iter(|| rml_gemm(kern, &w, black_box(&x), 1, &mut y, act, &mut s))
                });
            }
        }
        g.finish();
    }
}

fn gemv_types(c: &mut Criterion) {
    let tiers = int8_tiers();
    let types = int8_types();
    let (shapes, llc, found) = shapes(&types);
    eprintln!(
        "gemv_types: last-level cache {} MiB ({}); the largest shape is {}x{}",
        llc >> 20,
        if found { "detected" } else { "not detected, assumed" },
        shapes[3].0,
        shapes[3].1
    );
    for (i, (rows, k)) in shapes.into_iter().enumerate() {
        let big = i == shapes.len() - 1;
        let mut g = c.benchmark_group(format!("gemv_types/{rows}x{k}"));
        if big {
            // Past the last-level cache: a few iterations of a fraction of a second each.
            g.sample_size(10).warm_up_time(Duration::from_secs(1));
            g.measurement_time(Duration::from_secs(2)).sampling_mode(SamplingMode::Flat);
        } else if rows * k > 1 << 22 {
            g.sample_size(10);
        }
        let x = values(k, 6);
        let mut y = vec![0f32; rows];
        let mut s = vec![0u8; scratch_bytes(k, 1, Activations::Int8Plain)];
        for &dtype in &types {
            if k % dtype.block_size() != 0 {
                continue;
            }
            let data = type_weights(dtype, rows, k);
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            let bytes = data.as_slice().len() as u64;
            g.throughput(Throughput::ElementsAndBytes { elements: (rows * k) as u64, bytes });
            for &kern in &tiers {
                g.bench_function(BenchmarkId::new(format!("int8-{}", kern.isa()), dtype), |b| {
                    b.iter(|| {
                        rml_gemm(kern, &w, black_box(&x), 1, &mut y, Activations::Int8Plain, &mut s)
                    })
                });
            }
            if big {
                // The bandwidth roof: the same bytes by a plain read loop.
                g.bench_function(BenchmarkId::new("read-loop", dtype), |b| {
                    b.iter(|| read_bytes(black_box(data.as_slice())))
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, gemm_f32, gemv_bandwidth, gemv_quant, gemv_types);
criterion_main!(benches);
