//! Best-of-N timings of the kernels against the same peers as `benches/kernels.rs`, for
//! machines shared with other work, where the minimum is steadier than criterion's median.
//!
//! `cargo run --release --example kernels_timing -- [gemm|quant|bandwidth|types|all] [TYPE..]`
//!
//! `types`: the int8 GEMV of every quantized type (or the ones named) on every x86 tier, the
//! shapes of `gemv_types` (the last one larger than the last-level cache), best of several
//! interleaved rounds: µs per tier, then the best tier's time per weight, GB/s of weights,
//! time relative to Q4_1's best tier (run in the same rounds as the type), and a plain read
//! loop over the same bytes (GB/s, and the GEMV's GB/s as a percentage of it: near 100 % is
//! bandwidth-bound). `KT_SHAPES=0,1` times only the shapes of those indices (0 = 576x1536,
//! 1 = 1536x576, 2 = 8192x8192, 3 = past the last-level cache; `KT_DIMS=2048x2048,8192x2048`
//! puts a model's own rows × k in the first of them), `KT_TIERS=avx512` only the
//! tiers of those names, `KT_ACTS=f32` the f32-activation GEMV instead of the int8 one,
//! `KT_ROWS8=1` also each type's row-interleaved layout (`rml::kernels::rows8`, a row `T/r8`)
//! on the tiers that have a kernel for it (the others show `-`), `KT_N=64` products with 64
//! activation rows (a prompt's GEMM) instead of GEMVs (the GB/s columns then count the
//! weights once per product).

use std::hint::black_box;
use std::time::Instant;

use rml::kernels::{self, quant, Isa, Kernels};
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{DType, InlineExecutor};

#[path = "../benches/common/gemv_types.rs"]
mod common;
use common::{int8_tiers, int8_types, read_bytes, shapes, type_weights, values};

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
            let mut s = vec![0u8; scratch_bytes(k, 1, Activations::Int8Plain)];
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
            let i8b = time(best, Activations::Int8Plain, it);
            let f32b = time(best, Activations::F32, it);
            let i8s = time(scalar, Activations::Int8Plain, it / 4 + 3);
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

/// One type's times at one shape.
struct TypeRow {
    dtype: DType,
    /// The matrix is in the row-interleaved layout.
    rows8: bool,
    /// Seconds per GEMV, per tier.
    t: Vec<f64>,
    /// Seconds per read of the weights by [`read_bytes`].
    read: f64,
    /// Seconds per GEMV of Q4_1 on its best tier, measured in the same rounds.
    q41: f64,
    bytes: usize,
}

impl TypeRow {
    /// The fastest tier and its time.
    fn best(&self) -> (usize, f64) {
        self.t
            .iter()
            .copied()
            .enumerate()
            .fold((0, f64::MAX), |a, (i, v)| if v < a.1 { (i, v) } else { a })
    }
}

/// The int8 GEMV's setting at one shape.
struct Gemv {
    x: Vec<f32>,
    y: Vec<f32>,
    s: Vec<u8>,
    iters: usize,
    act: Activations,
    /// Activation rows per product (1: the GEMV; `KT_N`).
    n: usize,
}

impl Gemv {
    /// The fastest of [`Gemv::iters`] GEMVs of `w` with `kern`, in seconds.
    fn time(&mut self, kern: &Kernels, w: &Matrix<'_>) -> f64 {
        let Gemv { x, y, s, iters, act, n } = self;
        if w.is_rows8() && kern.matmul_q8_rows8(w.dtype()).is_none() {
            return f64::MAX;
        }
        best_of(*iters, || {
            gemm_with(kern, &InlineExecutor, None, w, black_box(x), *n, y, *act, s).unwrap()
        })
    }

    /// Three interleaved rounds of every tier on `w`, the read loop over `data` and (with
    /// `q41`) Q4_1's GEMV on one tier, so that all of them see the same machine.
    fn row(
        &mut self,
        tiers: &[&Kernels],
        dtype: DType,
        data: &AlignedBlock,
        w: &Matrix<'_>,
        q41: Option<(&Kernels, &Matrix<'_>)>,
    ) -> TypeRow {
        let mut t = vec![f64::MAX; tiers.len()];
        let (mut read, mut q) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            for (i, kern) in tiers.iter().enumerate() {
                t[i] = t[i].min(self.time(kern, w));
            }
            read = read.min(best_of(self.iters, || {
                black_box(read_bytes(black_box(data.as_slice())));
            }));
            if let Some((kern, w)) = q41 {
                q = q.min(self.time(kern, w));
            }
        }
        let mut row =
            TypeRow { dtype, rows8: w.is_rows8(), t, read, q41: q, bytes: data.as_slice().len() };
        if q41.is_none() {
            row.q41 = row.best().1;
        }
        row
    }
}

fn types(only: &[String]) {
    let mut tiers = int8_tiers();
    // `KT_TIERS=avx512`: only the tiers of those names.
    if let Ok(v) = std::env::var("KT_TIERS") {
        let names: Vec<&str> = v.split(',').map(str::trim).collect();
        tiers.retain(|k| names.contains(&k.isa().to_string().as_str()));
        assert!(!tiers.is_empty(), "KT_TIERS names no tier of this CPU");
    }
    // `KT_ACTS=f32`: the f32-activation GEMV instead of the int8 one.
    let act = match std::env::var("KT_ACTS").as_deref() {
        Ok("f32") => Activations::F32,
        _ => Activations::Int8Plain,
    };
    // `KT_N=64`: products with that many activation rows (a prompt's GEMM) instead of GEMVs.
    let n: usize = std::env::var("KT_N").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    let all = int8_types();
    let picked: Vec<DType> = all
        .iter()
        .copied()
        .filter(|t| {
            t != &DType::Q4_1 && (only.is_empty() || only.iter().any(|o| *o == t.to_string()))
        })
        .collect();
    // The large shape is sized over every type, so that it does not depend on the ones picked.
    let (shapes, llc, found) = shapes(&all);
    println!(
        "last-level cache {} MiB ({}); the largest shape is {}x{}",
        llc >> 20,
        if found { "detected" } else { "not detected, assumed" },
        shapes[3].0,
        shapes[3].1
    );
    // `KT_SHAPES=0,1`: only the shapes of those indices (0 = 576x1536, 1 = 1536x576, 2 =
    // 8192x8192, 3 = the one past the last-level cache).
    let pick_shapes: Option<Vec<usize>> = std::env::var("KT_SHAPES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    for (i, (rows, k)) in shapes.into_iter().enumerate() {
        if pick_shapes.as_ref().is_some_and(|p| !p.contains(&i)) {
            continue;
        }
        let iters = match rows * k {
            _ if i == shapes.len() - 1 => 2,
            n if n > 1 << 22 => 6,
            _ => 300,
        };
        let mut g = Gemv {
            x: values(n * k, 6),
            y: vec![0f32; n * rows],
            s: vec![0u8; scratch_bytes(k, n, Activations::Int8Plain)],
            iters: (iters / n).max(2),
            act,
            n,
        };
        // Q4_1 first; its best tier then runs in every other type's rounds (the ratio of the
        // two comes from the same stretch of time on a shared machine).
        let q41_data = type_weights(DType::Q4_1, rows, k);
        let q41_w = Matrix::new(DType::Q4_1, rows, k, q41_data.as_slice()).unwrap();
        let q41_row = g.row(&tiers, DType::Q4_1, &q41_data, &q41_w, None);
        let q41_kern = tiers[q41_row.best().0];
        let mut rows_out = vec![q41_row];
        for &dtype in &picked {
            if k % dtype.block_size() != 0 {
                continue;
            }
            let data = type_weights(dtype, rows, k);
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            rows_out.push(g.row(&tiers, dtype, &data, &w, Some((q41_kern, &q41_w))));
        }
        if std::env::var("KT_ROWS8").is_ok_and(|v| v == "1") {
            for dtype in std::iter::once(DType::Q4_1).chain(picked.iter().copied()) {
                if !kernels::rows8::supports(dtype) || rows % kernels::rows8::ROWS != 0 {
                    continue;
                }
                let plain = type_weights(dtype, rows, k);
                let mut data = AlignedBlock::try_new(plain.as_slice().len()).unwrap();
                kernels::rows8::pack(dtype, rows, k, plain.as_slice(), data.as_mut_slice())
                    .unwrap();
                let w = Matrix::new_rows8(dtype, rows, k, data.as_slice()).unwrap();
                rows_out.push(g.row(&tiers, dtype, &data, &w, Some((q41_kern, &q41_w))));
            }
        }
        rows_out.sort_by_key(|r| (r.dtype as usize, r.rows8));
        let weights = (rows * k) as f64;
        print!("{rows}x{k} (µs)");
        for kern in &tiers {
            print!(" {:>9}", kern.isa().to_string());
        }
        println!("      best  ns/weight   GB/s  Q4_1 µs  ×Q4_1  read GB/s  % of read");
        for r in &rows_out {
            let (bi, b) = r.best();
            let name = format!("{}{}", r.dtype, if r.rows8 { "/r8" } else { "" });
            print!("{name:>12}");
            for v in &r.t {
                if *v == f64::MAX {
                    print!(" {:>9}", "-");
                } else {
                    print!(" {:9.1}", v * 1e6);
                }
            }
            let gbs = r.bytes as f64 / b / 1e9;
            let read = r.bytes as f64 / r.read / 1e9;
            println!(
                " {:>9} {:10.4} {:6.2} {:8.1} {:6.2} {:10.2} {:9.0}%",
                tiers[bi].isa().to_string(),
                b / weights * 1e9,
                gbs,
                r.q41 * 1e6,
                b / r.q41,
                read,
                100.0 * gbs / read
            );
        }
    }
}

/// `stream`: the int8 GEMVs of a decode step without the rest of it: SmolLM2-135M's seven
/// per-layer matrices (q 576x576, k and v 192x576, o 576x576, gate and up 1536x576, down
/// 576x1536), one after the other, over as many layers as fill three times the last-level
/// cache (so every matrix comes from memory, as in a model larger than the cache), against a
/// plain read loop over the same bytes and one GEMV over the same bytes as one tall matrix.
/// `KT_STREAM_MB=40` sizes the buffer instead. `KT_STREAM_TYPES=Q4_1,Q8_0` picks the types (default Q4_1, Q8_0, Q5_0; types whose block
/// does not divide 576, the K-quants, are skipped: SmolLM2's K-quant files store those
/// matrices in 32-element types).
fn stream() {
    let kern = kernels::table(kernels::best()).unwrap();
    let llc = common::llc_bytes().unwrap_or(32 << 20);
    let names = std::env::var("KT_STREAM_TYPES").unwrap_or_else(|_| "Q4_1,Q8_0,Q5_0".into());
    let mats: [(usize, usize); 7] =
        [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)];
    for dtype in int8_types()
        .into_iter()
        .filter(|t| names.split(',').any(|n| n == t.to_string()) && 576 % t.block_size() == 0)
    {
        // One layer's bytes, each matrix quantized from values, then repeated.
        let parts: Vec<AlignedBlock> =
            mats.iter().map(|&(r, k)| type_weights(dtype, r, k)).collect();
        let layer: usize = parts.iter().map(|p| p.as_slice().len()).sum();
        // `KT_STREAM_MB=40`: that many MiB instead (below the cache: the matrices stay in it).
        let total = std::env::var("KT_STREAM_MB").ok().and_then(|v| v.parse::<usize>().ok());
        let layers = total.map_or(3 * llc, |mb| mb << 20).div_ceil(layer);
        let mut data = AlignedBlock::try_new(layers * layer).unwrap();
        for chunk in data.as_mut_slice().chunks_exact_mut(layer) {
            let mut o = 0;
            for p in &parts {
                chunk[o..o + p.as_slice().len()].copy_from_slice(p.as_slice());
                o += p.as_slice().len();
            }
        }
        let bytes = data.as_slice();
        let mut views = Vec::new();
        let mut o = 0;
        for _ in 0..layers {
            for &(r, k) in &mats {
                let len = r * dtype.row_bytes(k).unwrap();
                views.push(Matrix::new(dtype, r, k, &bytes[o..o + len]).unwrap());
                o += len;
            }
        }
        let (k0, k1) = (values(576, 6), values(1536, 7));
        let mut y = vec![0f32; 1536];
        let mut s = vec![0u8; scratch_bytes(1536, 1, Activations::Int8Plain)];
        let rb = dtype.row_bytes(576).unwrap();
        let tall =
            Matrix::new(dtype, bytes.len() / rb, 576, &bytes[..bytes.len() / rb * rb]).unwrap();
        let mut ty = vec![0f32; tall.rows()];
        let (mut seq, mut one, mut read) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..3 {
            seq = seq.min(best_of(3, || {
                for w in &views {
                    let x = if w.k() == 576 { &k0 } else { &k1 };
                    let y = &mut y[..w.rows()];
                    gemm_with(
                        kern,
                        &InlineExecutor,
                        None,
                        w,
                        black_box(x),
                        1,
                        y,
                        Activations::Int8Plain,
                        &mut s,
                    )
                    .unwrap();
                }
            }));
            one = one.min(best_of(3, || {
                gemm_with(
                    kern,
                    &InlineExecutor,
                    None,
                    &tall,
                    black_box(&k0),
                    1,
                    &mut ty,
                    Activations::Int8Plain,
                    &mut s,
                )
                .unwrap();
            }));
            read = read.min(best_of(3, || {
                black_box(read_bytes(black_box(bytes)));
            }));
        }
        let gb = bytes.len() as f64 / 1e9;
        println!(
            "stream {dtype} ({layers} layers, {} MiB, {}): layer GEMVs {:.2} GB/s, one tall GEMV {:.2} GB/s, \
             read loop {:.2} GB/s; layer GEMVs {:.0}% of the read loop, {:.0}% of the tall GEMV",
            bytes.len() >> 20,
            kern.isa(),
            gb / seq,
            gb / one,
            gb / read,
            100.0 * read / seq,
            100.0 * one / seq
        );
    }
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if what == "stream" {
        stream();
        return;
    }
    if what == "types" {
        // Type names as separate arguments or comma-separated.
        let only: Vec<String> = std::env::args()
            .skip(2)
            .flat_map(|a| a.split(',').map(str::to_owned).collect::<Vec<_>>())
            .collect();
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
