//! The kernel conformance suite: every kernel table the host runs (scalar, AVX2, AVX-VNNI,
//! AVX-512; NEON and NEON + SDOT under qemu) against the scalar oracle of `rml::kernels::scalar`.
//! The Cortex-M `arm-dsp` tier has no std host: the MCU firmware (features/mcu) runs its
//! conformance check (bit-identical int8 GEMV against scalar) under qemu-system-arm.
//!
//! - f32 activations (f32 / f16 / bf16 / Q8_0 / Q4_0 / Q4_1 weights): within the rounding
//!   error bound `4 · (k + 2) · ε · Σ|w · x|` of the oracle, and GEMM rows bit-identical to
//!   GEMV calls on the same ISA.
//! - int8 activations: bit-identical to the oracle (exact i32 block sums, same f32 order).
//! - Q8 quantization: identical bytes on every path, ties away from zero, zeros, non-finite.
//! - The newer types (Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K): random blocks (random bits with sane
//!   f16 scales), rows 0..=21, activation rows 1..=9, K up to 4 super-blocks; f32 activations
//!   within the same bound of the scalar table, int8 activations bit-identical to it (whose
//!   own arithmetic `tests/quant_vectors.rs` checks against a float64 dot), also at the
//!   extremes of their integer ranges.
//! - The gated activations (SwiGLU, GeGLU with tanh): the portable loop's bits on every tier.
//! - Coverage: every quantized type has its own f32 and int8 body (not the scalar entry) on
//!   every x86 and aarch64 tier, so the checks above exercise SIMD code for each ISA × type ×
//!   mode.
//!
//! An ISA the host lacks is skipped with a printed message. `RML_EXPECT_ISAS=neon,...` makes
//! a missing ISA a failure instead (CI sets it under qemu so a skip cannot pass silently).
//! `PROPTEST_CASES` sets the number of cases (default 128).

use std::sync::atomic::{AtomicBool, Ordering};

use half::{bf16, f16};
use proptest::prelude::*;
use rml::kernels::quant::{
    dequantize_row_q4_0, dequantize_row_q4_1, dequantize_row_q8_0, q8_acts_bytes, q8_acts_bytes_as,
    ActFormat, Q8Acts, QK,
};
use rml::kernels::{scalar, table, Isa, Kernels};
use rml::mem::AlignedBlock;
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::{Code, DType, InlineExecutor};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// How to run the ISAs this host lacks (as .ci/run does).
pub const HOW_TO_RUN: &str = "To run the aarch64 NEON and SDOT (neon-dotprod) kernels on x86_64: \
    install the rustup target aarch64-unknown-linux-gnu, qemu-aarch64 and aarch64-linux-gnu-gcc \
    (../shared/toolchain/setup.sh), then `RML_EXPECT_ISAS=scalar,neon,neon-dotprod cargo test \
    --features std --target aarch64-unknown-linux-gnu --test kernels_conformance` (runner: \
    qemu-aarch64 -cpu max, .cargo/config.toml); on an aarch64 host they run in plain `cargo test`";

/// The table of `isa`, or `None` after printing why it is skipped.
fn kernels(isa: Isa) -> Option<&'static Kernels> {
    match table(isa) {
        Ok(k) => Some(k),
        Err(e) => {
            let expected = std::env::var("RML_EXPECT_ISAS").unwrap_or_default();
            assert!(
                !expected.split(',').any(|n| n.trim() == isa.name()),
                "RML_EXPECT_ISAS lists {isa} but it is unavailable: {e}"
            );
            static SAID: [AtomicBool; Isa::ALL.len()] =
                [const { AtomicBool::new(false) }; Isa::ALL.len()];
            let i = Isa::ALL.iter().position(|&x| x == isa).unwrap();
            if !SAID[i].swap(true, Ordering::Relaxed) {
                // Straight to the process's stderr: libtest captures `println!`, and a skip
                // must show in a plain `cargo test`.
                use std::io::Write;
                let how = if isa.name().starts_with("neon") {
                    HOW_TO_RUN
                } else {
                    "It runs on a CPU that has it (CI requires it there with RML_EXPECT_ISAS)"
                };
                let _ = writeln!(std::io::stderr(), "SKIPPED {isa} conformance: {e}. {how}");
            }
            None
        }
    }
}

/// SplitMix64: a small deterministic generator, so proptest shrinks on (shape, seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), with an exact zero now and then.
    fn f(&mut self) -> f32 {
        let v = self.next();
        if v % 17 == 0 {
            0.0
        } else {
            ((v >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }
}

/// `rows × k` weights of `dtype` as raw bytes (quantized blocks with arbitrary values,
/// -128 included) and their exact f32 values (for the error bound).
fn weights(dtype: DType, rows: usize, k: usize, rng: &mut Rng) -> (AlignedBlock, Vec<f32>) {
    let mut bytes = Vec::new();
    let n = rows * k;
    match dtype {
        DType::F32 => (0..n).for_each(|_| bytes.extend(rng.f().to_le_bytes())),
        DType::F16 => (0..n).for_each(|_| bytes.extend(f16::from_f32(rng.f()).to_le_bytes())),
        DType::BF16 => (0..n).for_each(|_| bytes.extend(bf16::from_f32(rng.f()).to_le_bytes())),
        dt if NEW_TYPES.contains(&dt) => {
            let info = rml::quant::info(dt);
            for _ in 0..n / info.block_elems {
                let start = bytes.len();
                (0..info.block_bytes).for_each(|_| bytes.push(rng.next() as u8));
                for &o in f16_fields(dt) {
                    let h = f16::from_f32(rng.f() * 0.05).to_le_bytes();
                    bytes[start + o..start + o + 2].copy_from_slice(&h);
                }
            }
        }
        _ => {
            for _ in 0..n / QK {
                bytes.extend(f16::from_f32(rng.f() * 0.05).to_le_bytes());
                if dtype == DType::Q4_1 {
                    bytes.extend(f16::from_f32(rng.f() * 0.1).to_le_bytes());
                }
                let q = if dtype == DType::Q8_0 { 32 } else { 16 };
                (0..q).for_each(|_| bytes.push(rng.next() as u8));
            }
        }
    }
    let mut vals = vec![0f32; n];
    let rb = dtype.row_bytes(k).unwrap();
    for r in 0..rows {
        let (row, out) = (&bytes[r * rb..(r + 1) * rb], &mut vals[r * k..(r + 1) * k]);
        match dtype {
            DType::F32 => {
                for (o, b) in out.iter_mut().zip(row.chunks_exact(4)) {
                    *o = f32::from_le_bytes(b.try_into().unwrap());
                }
            }
            DType::F16 | DType::BF16 => {
                for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                    let h = u16::from_le_bytes([b[0], b[1]]);
                    *o = if dtype == DType::F16 {
                        f16::from_bits(h).to_f32()
                    } else {
                        bf16::from_bits(h).to_f32()
                    };
                }
            }
            DType::Q8_0 => dequantize_row_q8_0(row, out).unwrap(),
            DType::Q4_0 => dequantize_row_q4_0(row, out).unwrap(),
            DType::Q4_1 => dequantize_row_q4_1(row, out).unwrap(),
            dt => rml::quant::dequantize(dt, row, out).unwrap(),
        }
    }
    (AlignedBlock::try_from_slice(&bytes).unwrap(), vals)
}

/// The types added after Q8_0/Q4_0/Q4_1, checked against the scalar table.
const NEW_TYPES: [DType; 9] = [
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4_NL,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q5_0x2,
];

/// The K-quants (super-blocks of 256).
const K_QUANTS: [DType; 5] = [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];

/// Byte offsets of the f16 fields in one block of a new type (ggml's layouts).
fn f16_fields(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q5_0 | DType::IQ4_NL => &[0],
        DType::Q5_1 | DType::Q4_K | DType::Q5_K | DType::Q5_0x2 => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => unreachable!(),
    }
}

/// The oracle's dot product of a weight row with f32 activations.
fn oracle_f32(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    match dtype {
        DType::F32 => {
            let w: Vec<f32> =
                row.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            scalar::dot_f32(&w, x)
        }
        DType::F16 => scalar::dot_f16(row, x),
        DType::BF16 => scalar::dot_bf16(row, x),
        DType::Q8_0 => scalar::dot_q8_0_f32(row, x),
        DType::Q4_0 => scalar::dot_q4_0_f32(row, x),
        DType::Q4_1 => scalar::dot_q4_1_f32(row, x),
        dt => {
            let m = Matrix::new(dt, 1, x.len(), row).unwrap();
            run(table(Isa::Scalar).unwrap(), &m, x, 1, Activations::F32).unwrap()[0]
        }
    }
}

/// The oracle's dot product of a weight row with int8 activation row `t`.
fn oracle_q8(dtype: DType, row: &[u8], xq: &Q8Acts<'_>, t: usize) -> f32 {
    let nb = xq.nb();
    let (qs, d, s) = (
        &xq.qs()[t * nb * QK..(t + 1) * nb * QK],
        &xq.d()[t * nb..(t + 1) * nb],
        &xq.s()[t * nb..(t + 1) * nb],
    );
    match dtype {
        DType::Q8_0 => scalar::dot_q8_0_q8(row, qs, d),
        DType::Q4_0 => scalar::dot_q4_0_q8(row, qs, d),
        DType::Q4_1 => scalar::dot_q4_1_q8(row, qs, d, s),
        _ => unreachable!(),
    }
}

/// A random problem: `rows × k` weights, `n × k` activations.
#[derive(Debug, Clone)]
struct Case {
    rows: usize,
    k: usize,
    n: usize,
    seed: u64,
}

/// As [`case`] for quantized types with `block`-element blocks: K up to 4 blocks of 256 (or
/// 9 of 32), activation rows 1..=9.
fn case_blocks(block: usize) -> impl Strategy<Value = Case> {
    let max = if block == 256 { 4 } else { 9 };
    (0usize..=21, 0usize..=max, 1usize..=9, any::<u64>()).prop_map(move |(rows, b, n, seed)| Case {
        rows,
        k: b * block,
        n,
        seed,
    })
}

/// Rows and `n` deliberately not multiples of the register blocks (8 / 4 rows, 3 acts),
/// zero rows included; `k` any length for the unblocked dtypes (ragged tails) and a
/// multiple of 32 for the quantized ones.
fn case(quantized: bool) -> impl Strategy<Value = Case> {
    let k =
        if quantized { (0usize..=9).prop_map(|b| b * 32).boxed() } else { (0usize..=150).boxed() };
    (0usize..=21, k, 1usize..=7, any::<u64>()).prop_map(|(rows, k, n, seed)| Case {
        rows,
        k,
        n,
        seed,
    })
}

fn run(
    kern: &Kernels,
    w: &Matrix<'_>,
    x: &[f32],
    n: usize,
    act: Activations,
) -> Result<Vec<f32>, rml::Error> {
    let mut y = vec![f32::NAN; n * w.rows()];
    let mut scratch = vec![0u8; scratch_bytes(w.k(), n, act)];
    gemm_with(kern, &InlineExecutor, None, w, x, n, &mut y, act, &mut scratch)?;
    Ok(y)
}

/// f32 activations: every output within the rounding bound of the oracle, and GEMM rows
/// bit-identical to GEMV on the same ISA.
fn check_f32(kern: &Kernels, dtype: DType, c: &Case) -> Result<(), TestCaseError> {
    let mut rng = Rng(c.seed);
    let (data, wv) = weights(dtype, c.rows, c.k, &mut rng);
    let x: Vec<f32> = (0..c.n * c.k).map(|_| rng.f()).collect();
    let w = Matrix::new(dtype, c.rows, c.k, data.as_slice()).unwrap();
    let y = run(kern, &w, &x, c.n, Activations::F32).unwrap();
    for t in 0..c.n {
        let xt = &x[t * c.k..(t + 1) * c.k];
        let y1 = run(kern, &w, xt, 1, Activations::F32).unwrap();
        for r in 0..c.rows {
            let got = y[t * c.rows + r];
            let want = oracle_f32(dtype, w.row(r), xt);
            let mag: f32 =
                wv[r * c.k..(r + 1) * c.k].iter().zip(xt).map(|(a, b)| (a * b).abs()).sum();
            let tol = 4.0 * (c.k as f32 + 2.0) * f32::EPSILON * mag + f32::MIN_POSITIVE;
            prop_assert!(
                (got - want).abs() <= tol,
                "{} {dtype} r={r} t={t}: got {got}, oracle {want}, tol {tol}",
                kern.isa()
            );
            prop_assert_eq!(got.to_bits(), y1[r].to_bits(), "GEMM row differs from GEMV");
        }
    }
    Ok(())
}

/// int8 activations: activations quantized to the same bytes as the scalar quantizer, and
/// every output bit-identical to the oracle.
fn check_int8(kern: &Kernels, dtype: DType, c: &Case) -> Result<(), TestCaseError> {
    let mut rng = Rng(c.seed);
    let (data, _) = weights(dtype, c.rows, c.k, &mut rng);
    let x: Vec<f32> = (0..c.n * c.k).map(|_| rng.f() * 3.0).collect();
    let w = Matrix::new(dtype, c.rows, c.k, data.as_slice()).unwrap();
    let y = run(kern, &w, &x, c.n, Activations::Int8Plain).unwrap();
    if NEW_TYPES.contains(&dtype) {
        // The scalar table is the oracle (its arithmetic: tests/quant_vectors.rs).
        let want = run(table(Isa::Scalar).unwrap(), &w, &x, c.n, Activations::Int8Plain).unwrap();
        prop_assert_eq!(
            bits(&y),
            bits(&want),
            "{} {}: int8 differs from scalar",
            kern.isa(),
            dtype
        );
        return Ok(());
    }

    let mut s1 = vec![0u8; q8_acts_bytes(c.k, c.n)];
    let mut s2 = vec![0u8; q8_acts_bytes(c.k, c.n)];
    let mine = Q8Acts::quantize(kern, &x, c.n, c.k, &mut s1).unwrap();
    let oracle = Q8Acts::quantize(table(Isa::Scalar).unwrap(), &x, c.n, c.k, &mut s2).unwrap();
    prop_assert_eq!(mine.qs(), oracle.qs());
    prop_assert_eq!(bits(mine.d()), bits(oracle.d()));
    prop_assert_eq!(bits(mine.s()), bits(oracle.s()));
    prop_assert_eq!(mine.sum(), oracle.sum());
    for t in 0..c.n {
        for r in 0..c.rows {
            let got = y[t * c.rows + r];
            let want = oracle_q8(dtype, w.row(r), &oracle, t);
            prop_assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{} {} r={} t={}: got {}, oracle {}",
                kern.isa(),
                dtype,
                r,
                t,
                got,
                want
            );
        }
    }
    Ok(())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Q8_0 quantization of random rows (with exact ties planted): identical bytes to the scalar
/// table.
fn check_quantize(kern: &Kernels, blocks: usize, seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let mut x: Vec<f32> = (0..blocks * QK).map(|_| rng.f() * 10.0).collect();
    for b in x.chunks_exact_mut(QK) {
        if rng.next() % 2 == 0 {
            // amax 127 → d = 1 exactly, so halves are exact ties.
            b[0] = 127.0;
            for v in &mut b[1..8] {
                *v = (rng.next() % 254) as f32 / 2.0 - 63.5;
            }
        }
        if rng.next() % 5 == 0 {
            b.fill(0.0);
        }
    }
    let mut a = vec![0u8; blocks * 34];
    let mut o = vec![0u8; blocks * 34];
    kern.quantize_row_q8_0(&x, &mut a).unwrap();
    table(Isa::Scalar).unwrap().quantize_row_q8_0(&x, &mut o).unwrap();
    prop_assert_eq!(a, o);
    // The Q8_K activations (blocks of 256) of the same values, as rows of 256 · ⌈blocks / 8⌉
    // (zero-padded): the same bytes, scales and per-16 sums as the scalar table's.
    let k = (blocks * QK).div_ceil(256) * 256;
    if k > 0 {
        x.resize(k, 0.0);
        let (mut s1, mut s2) = (vec![0u8; q8_acts_bytes_as(ActFormat::Q8K, k, 1)], vec![]);
        s2.resize(s1.len(), 0);
        let fmt = ActFormat::Q8K;
        let mine = Q8Acts::quantize_as(fmt, kern, &x, 1, k, &mut s1).unwrap();
        let oracle =
            Q8Acts::quantize_as(fmt, table(Isa::Scalar).unwrap(), &x, 1, k, &mut s2).unwrap();
        prop_assert_eq!(mine.qs(), oracle.qs());
        prop_assert_eq!(bits(mine.d()), bits(oracle.d()));
        prop_assert_eq!(mine.sum(), oracle.sum());
    }
    Ok(())
}

/// Shapes past the K blocking (K > 768) and past one group of activation rows (48), with
/// ragged K tails: same checks as the proptest cases.
fn long_k(kern: &Kernels) {
    let cases = [
        (DType::F32, Case { rows: 9, k: 1003, n: 50, seed: 1 }),
        (DType::F32, Case { rows: 4, k: 800, n: 7, seed: 2 }),
        (DType::F16, Case { rows: 6, k: 777, n: 5, seed: 3 }),
        (DType::BF16, Case { rows: 5, k: 1030, n: 4, seed: 4 }),
        (DType::Q8_0, Case { rows: 7, k: 1056, n: 49, seed: 5 }),
        (DType::Q4_0, Case { rows: 4, k: 800, n: 3, seed: 6 }),
        (DType::Q4_1, Case { rows: 5, k: 1024, n: 6, seed: 7 }),
        (DType::Q5_0, Case { rows: 9, k: 1056, n: 49, seed: 8 }),
        (DType::Q4_K, Case { rows: 9, k: 1536, n: 49, seed: 9 }),
        (DType::Q6_K, Case { rows: 5, k: 2048, n: 9, seed: 10 }),
        // Long rows with tails (blocks past a group of eight, super-blocks past four).
        (DType::Q5_1, Case { rows: 6, k: 1120, n: 3, seed: 11 }),
        (DType::Q8_0, Case { rows: 5, k: 4160, n: 2, seed: 12 }),
        (DType::Q4_1, Case { rows: 6, k: 4128, n: 2, seed: 13 }),
        (DType::Q3_K, Case { rows: 5, k: 2304, n: 3, seed: 14 }),
        (DType::Q5_K, Case { rows: 5, k: 2304, n: 3, seed: 15 }),
    ];
    for (dtype, c) in &cases {
        check_f32(kern, *dtype, c).unwrap();
        if dtype.is_quantized() {
            check_int8(kern, *dtype, c).unwrap();
        }
    }
}

/// The 32-element types' int8 GEMM past 16 weight rows (the AVX-512 `16 × N` tile, with
/// remainder rows and activation rows for the smaller tiles): K of one block up to three
/// groups of eight with partial last groups, `n` from 2 to 37; every output the oracle's bits.
fn rows_of_sixteen(kern: &Kernels) {
    let shapes = [
        (16, 1, 4),
        (37, 13, 17),
        (48, 7, 9),
        (33, 24, 12),
        (21, 8, 8),
        (32, 17, 5),
        (19, 9, 3),
        (32, 3, 2),
        (35, 10, 37),
    ];
    let types = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL];
    for (i, &(rows, blocks, n)) in shapes.iter().enumerate() {
        for dtype in types {
            check_int8(kern, dtype, &Case { rows, k: blocks * QK, n, seed: 100 + i as u64 })
                .unwrap();
        }
    }
}

/// Every activation row count of a decode batch, 1 to 9 (each of 2 to 8 one tile over the
/// weights, 9 two), on every int8 type: 37 weight rows (two groups of 16 for the AVX-512
/// `16 × N` tile, five left for the one-row tiles), K of 12 blocks (a partial last group of
/// eight; whole pairs for Q5_0x2) or 2 super-blocks; every output the oracle's bits.
fn every_batch_size(kern: &Kernels) {
    let types = rml::quant::TYPES.iter().filter(|t| t.act.is_some()).map(|t| t.dtype);
    for dtype in types {
        let k = if K_QUANTS.contains(&dtype) { 2 * 256 } else { 12 * QK };
        for n in 1..=9 {
            let case = Case { rows: 37, k, n, seed: 300 + n as u64 };
            check_int8(kern, dtype, &case).unwrap_or_else(|e| panic!("{dtype} n={n}: {e}"));
        }
    }
}

/// Exact ties round away from zero, the same on every path.
fn quantize_ties(kern: &Kernels) {
    let mut x = [0f32; QK];
    x[0] = 127.0; // d = 1
    let ties = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 0.49999997, -0.49999997, 3.4999998];
    x[1..1 + ties.len()].copy_from_slice(&ties);
    let mut out = [0u8; 34];
    kern.quantize_row_q8_0(&x, &mut out).unwrap();
    assert_eq!(u16::from_le_bytes([out[0], out[1]]), f16::from_f32(1.0).to_bits());
    let q: Vec<i8> = out[2..].iter().map(|&b| b as i8).collect();
    assert_eq!(q[0], 127);
    assert_eq!(&q[1..12], &[1, -1, 2, -2, 3, -3, 127, -127, 0, 0, 3], "{}", kern.isa());
    assert!(q[12..].iter().all(|&v| v == 0));
}

/// All-zero weights, activations and blocks: exactly 0.0, no NaN, `d = 0`.
fn zeros(kern: &Kernels) {
    let (rows, k, n) = (13, 96, 3);
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_1] {
        let rb = dtype.row_bytes(k).unwrap();
        let mut bytes = vec![0u8; rows * rb];
        if dtype == DType::Q4_1 {
            bytes.clear();
            // d = 1, m = 0, all nibbles 0: every weight is exactly zero.
            for _ in 0..rows * k / QK {
                bytes.extend(f16::from_f32(1.0).to_le_bytes());
                bytes.extend([0u8; 18]);
            }
        }
        let data = AlignedBlock::try_from_slice(&bytes).unwrap();
        let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
        let x: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
        for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
            let y = run(kern, &w, &x, n, act).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{} {dtype} {act:?}: {y:?}", kern.isa());
        }
    }
    // Zero activations with random Q8_0 weights through the int8 path: d_x = 0, output 0.
    let mut rng = Rng(7);
    let (data, _) = weights(DType::Q8_0, 9, 64, &mut rng);
    let w = Matrix::new(DType::Q8_0, 9, 64, data.as_slice()).unwrap();
    let y = run(kern, &w, &[0.0; 128], 2, Activations::Int8Plain).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
    let mut out = [0xFFu8; 34];
    kern.quantize_row_q8_0(&[0.0; QK], &mut out).unwrap();
    assert_eq!(out, [0u8; 34]);
}

/// Non-finite input is an error, never a plausible block; bad lengths name the block size.
fn errors(kern: &Kernels) {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = [1.0f32; 64];
        x[40] = bad;
        let e = kern.quantize_row_q8_0(&x, &mut [0u8; 68]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        let data = AlignedBlock::try_from_slice(&[0u8; 34 * 2]).unwrap();
        let w = Matrix::new(DType::Q8_0, 1, 64, data.as_slice()).unwrap();
        let e = run(kern, &w, &x, 1, Activations::Int8Plain).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    }
    let e = kern.quantize_row_q8_0(&[1.0; 33], &mut [0u8; 34]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("block size 32"), "{e}");
    // A scale beyond f16.
    let e = kern.quantize_row_q8_0(&[1e7; 32], &mut [0u8; 34]).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
}

/// The extremes of int8: weights of -128 / +127 and activations of ±127 (the activation
/// quantizer's range) give the exact i32 sums: no `maddubs` saturation, no overflow when
/// negating -128.
fn int8_extremes(kern: &Kernels) {
    let one = f16::from_f32(1.0).to_le_bytes();
    let mut rng = Rng(99);
    // Weight blocks: all -128, all +127, alternating, random.
    let patterns: [&dyn Fn(usize) -> i8; 4] =
        [&|_| -128, &|_| 127, &|i| if i % 2 == 0 { -128 } else { 127 }, &|i| {
            (i as i8).wrapping_mul(37)
        }];
    // Activation blocks: all -127, all +127, alternating signs.
    let acts: [&dyn Fn(usize) -> i8; 3] =
        [&|_| -127, &|_| 127, &|i| if i % 3 == 0 { -127 } else { 127 }];
    let nb = 11; // a full group of 8 blocks and a partial one
    for wp in patterns {
        for ap in acts {
            let mut bytes = Vec::new();
            let mut wq = Vec::new();
            for b in 0..nb {
                bytes.extend(one);
                for i in 0..QK {
                    let v = if b % 2 == 0 { wp(i) } else { wp(i + b) };
                    bytes.push(v as u8);
                    wq.push(v);
                }
            }
            let qs: Vec<i8> = (0..nb * QK).map(|i| ap(i + (rng.next() % 2) as usize)).collect();
            let d = vec![1.0f32; nb];
            let mut scratch = vec![0u8; q8_acts_bytes(nb * QK, 1)];
            let xq = Q8Acts::from_blocks(&qs, &d, 1, nb, &mut scratch).unwrap();
            let f = kern.matmul_q8(DType::Q8_0).unwrap();
            let mut y = [0f32; 1];
            // SAFETY: one row of `nb` Q8_0 blocks, one activation row, one output.
            unsafe { f(bytes.as_ptr(), bytes.len(), 1, &xq, 1, y.as_mut_ptr(), 1) };
            // With d = 1 everywhere the result is the sum of the exact block sums, all of
            // which (|s| <= 32 · 128 · 127 < 2^24) and their lane sums here are exact in f32.
            let exact: i64 = wq.iter().zip(&qs).map(|(&a, &b)| a as i64 * b as i64).sum();
            assert_eq!(y[0] as i64, exact, "{}: Q8_0 extremes", kern.isa());
            for b in 0..nb {
                let s =
                    scalar::block_dot_q8_0(&bytes[b * 34..b * 34 + 34], &qs[b * QK..b * QK + QK]);
                let e: i32 = (0..QK).map(|i| wq[b * QK + i] as i32 * qs[b * QK + i] as i32).sum();
                assert_eq!(s, e);
            }
        }
    }
    // Q4_0 / Q4_1: nibbles 0 and 15 (weights -8 / +7 and 0 / 15) against ±127.
    for dtype in [DType::Q4_0, DType::Q4_1] {
        for nib in [0x00u8, 0xFF, 0x0F, 0xF0] {
            let mut bytes = Vec::new();
            for _ in 0..nb {
                bytes.extend(one);
                if dtype == DType::Q4_1 {
                    bytes.extend(f16::from_f32(0.0).to_le_bytes());
                }
                bytes.extend([nib; 16]);
            }
            for ap in acts {
                let qs: Vec<i8> = (0..nb * QK).map(ap).collect();
                let d = vec![1.0f32; nb];
                let mut scratch = vec![0u8; q8_acts_bytes(nb * QK, 1)];
                let xq = Q8Acts::from_blocks(&qs, &d, 1, nb, &mut scratch).unwrap();
                let f = kern.matmul_q8(dtype).unwrap();
                let mut y = [0f32; 1];
                // SAFETY: one row of `nb` blocks, one activation row, one output.
                unsafe { f(bytes.as_ptr(), bytes.len(), 1, &xq, 1, y.as_mut_ptr(), 1) };
                let off = if dtype == DType::Q4_0 { 8 } else { 0 };
                let exact: i64 = (0..nb * QK)
                    .map(|i| {
                        let j = i % QK;
                        let v = if j < 16 { nib & 0x0F } else { nib >> 4 };
                        (v as i64 - off) * qs[i] as i64
                    })
                    .sum();
                assert_eq!(y[0] as i64, exact, "{}: {dtype} extremes nib {nib:#x}", kern.isa());
            }
        }
    }
    // -128 is not a valid activation value.
    let e = Q8Acts::from_blocks(&[-128; 32], &[1.0], 1, 1, &mut [0u8; 200]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // The activation quantizer never produces -128, even for subnormal blocks where
    // `x / d` exceeds 127.
    let mut x = [0f32; QK];
    x[0] = -f32::from_bits(190);
    x[1] = f32::from_bits(190);
    let mut s = vec![0u8; q8_acts_bytes(QK, 1)];
    let xq = Q8Acts::quantize(kern, &x, 1, QK, &mut s).unwrap();
    assert_eq!(&xq.qs()[..2], &[-127, 127]);
}

/// The int8 GEMV from 64 rows, where the AVX-512 tiers read the rows as several streams side
/// by side (rows `j, j + q, ..`; `GEMV_STREAM_MIN_ROWS` in the x86 kernels): row counts
/// around multiples of four and eight, K with partial groups of blocks (and super-blocks), in
/// every int8 type, plain and with outlier correction; every output the oracle's bits. Also
/// two activation rows over the same matrices (GEMM rows equal to the GEMV's).
fn gemv_streams(kern: &Kernels) {
    let rows_k32 = [(64, 1), (67, 9), (131, 3), (200, 17), (259, 2)];
    let rows_k256 = [(64, 1), (70, 3), (133, 2), (257, 5)];
    for dtype in rml::quant::TYPES.iter().filter(|t| t.act.is_some()).map(|t| t.dtype) {
        let shapes: &[(usize, usize)] =
            if dtype.block_size() == 256 { &rows_k256 } else { &rows_k32 };
        for (i, &(rows, blocks)) in shapes.iter().enumerate() {
            let k = blocks * dtype.block_size();
            let c = Case { rows, k, n: 1, seed: 300 + i as u64 };
            check_int8(kern, dtype, &c).unwrap();
            check_outliers(kern, dtype, &c).unwrap();
            check_outliers(kern, dtype, &Case { n: 2, ..c }).unwrap();
        }
    }
}

/// The f32-activation GEMV from 64 rows, where the AVX2 tier reads the rows as four streams
/// side by side (rows `j, j + q, ..`; the GEMV's partial last groups of eight units and the
/// leftover rows), for every weight format with f32 activations, the unblocked ones with a
/// ragged K tail: every output within the oracle's bound, and two activation rows (the GEMM
/// tiles) bit-identical to the GEMV.
fn f32_gemv_streams(kern: &Kernels) {
    let shapes: [(usize, usize); 4] = [(64, 1), (67, 9), (131, 3), (259, 17)];
    let mut dtypes = vec![DType::F32, DType::F16, DType::BF16];
    dtypes.extend(
        [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL]
            .iter()
            .chain(&K_QUANTS),
    );
    for dtype in dtypes {
        for (i, &(rows, units)) in shapes.iter().enumerate() {
            let k = match dtype.block_size() {
                1 => units * 32 + 5,
                b => units.div_ceil(b / 32) * b,
            };
            check_f32(kern, dtype, &Case { rows, k, n: 2, seed: 400 + i as u64 }).unwrap();
        }
    }
}

/// Rows and activation rows for the outlier-block correction: up to 40 weight rows (the
/// 16-row tiles and their remainders) and 1..=9 activation rows of `1..=max` blocks.
fn case_outliers(block: usize) -> impl Strategy<Value = Case> {
    let max = if block == 256 { 3 } else { 12 };
    (0usize..=40, 1usize..=max, 1usize..=9, any::<u64>()).prop_map(move |(rows, b, n, seed)| Case {
        rows,
        k: b * block,
        n,
        seed,
    })
}

/// int8 activations with outlier-block correction ([`Activations::Int8`]) on inputs with one
/// massive channel per activation row (as LLM residual streams have) and every other block
/// exactly representable in int8: every output
/// bit-identical to the scalar table's, GEMM rows bit-identical to GEMV, and (where the
/// channel is an outlier by the rule, K >= 128, and over 16 outputs or more) the summed error against f32 activations at
/// most a quarter of plain int8's.
fn check_outliers(kern: &Kernels, dtype: DType, c: &Case) -> Result<(), TestCaseError> {
    let mut rng = Rng(c.seed);
    let (data, _) = weights(dtype, c.rows, c.k, &mut rng);
    // Values q / 127 with a ±1 in every run of 32: every block is exactly representable
    // (scale 1/127), so plain int8's error is the massive channel's block alone.
    let mut x: Vec<f32> =
        (0..c.n * c.k).map(|_| ((rng.next() % 255) as i32 - 127) as f32 / 127.0).collect();
    for g in 0..x.len() / 32 {
        let i = g * 32 + (rng.next() % 32) as usize;
        x[i] = if rng.next() % 2 == 0 { 1.0 } else { -1.0 };
    }
    for t in 0..c.n {
        let i = (rng.next() % c.k as u64) as usize;
        x[t * c.k + i] = if rng.next() % 2 == 0 { 60.0 } else { -45.0 };
    }
    let w = Matrix::new(dtype, c.rows, c.k, data.as_slice()).unwrap();
    let scalar = table(Isa::Scalar).unwrap();
    let y = run(kern, &w, &x, c.n, Activations::Int8).unwrap();
    let want = run(scalar, &w, &x, c.n, Activations::Int8).unwrap();
    prop_assert_eq!(
        bits(&y),
        bits(&want),
        "{} {}: corrected int8 differs from scalar",
        kern.isa(),
        dtype
    );
    for t in 0..c.n {
        let y1 = run(kern, &w, &x[t * c.k..(t + 1) * c.k], 1, Activations::Int8).unwrap();
        prop_assert_eq!(
            bits(&y[t * c.rows..(t + 1) * c.rows]),
            bits(&y1),
            "GEMM row differs from GEMV"
        );
    }
    // (Over at least 16 outputs: one output's plain error can be small by chance.)
    if c.k >= 128 && c.rows * c.n >= 16 {
        let exact = run(scalar, &w, &x, c.n, Activations::F32).unwrap();
        let plain = run(kern, &w, &x, c.n, Activations::Int8Plain).unwrap();
        let err = |v: &[f32]| v.iter().zip(&exact).map(|(a, b)| (a - b).abs() as f64).sum::<f64>();
        let (e_corr, e_plain) = (err(&y), err(&plain));
        prop_assert!(
            e_corr <= 0.25 * e_plain,
            "{} {dtype}: corrected error {e_corr} vs plain {e_plain}",
            kern.isa()
        );
    }
    Ok(())
}

/// Q5_0x2 is Q5_0 repacked: the same weights as Q5_0 bytes and repacked
/// ([`rml::quant::q5_0x2::repack`]) give the same bits on this table with int8 activations
/// (plain and corrected: the column-block kernels of the outlier correction), for one and
/// several activation rows; and the scalar f32 oracle's bits too.
fn check_pairs_as_q5_0(kern: &Kernels, c: &Case) -> Result<(), TestCaseError> {
    let mut rng = Rng(c.seed ^ 0x5eed);
    let (plain, _) = weights(DType::Q5_0, c.rows, c.k, &mut rng);
    let mut packed = vec![0u8; plain.as_slice().len()];
    rml::quant::q5_0x2::repack(plain.as_slice(), &mut packed).unwrap();
    let packed = AlignedBlock::try_from_slice(&packed).unwrap();
    let wp = Matrix::new(DType::Q5_0, c.rows, c.k, plain.as_slice()).unwrap();
    let wx = Matrix::new(DType::Q5_0x2, c.rows, c.k, packed.as_slice()).unwrap();
    // A massive channel per row, so that the correction runs.
    let mut x: Vec<f32> = (0..c.n * c.k).map(|_| rng.f()).collect();
    for t in 0..c.n {
        if c.k > 0 {
            x[t * c.k + (rng.next() % c.k as u64) as usize] = 50.0;
        }
    }
    for act in [Activations::Int8Plain, Activations::Int8] {
        let a = run(kern, &wp, &x, c.n, act).unwrap();
        let b = run(kern, &wx, &x, c.n, act).unwrap();
        prop_assert_eq!(bits(&a), bits(&b), "{} {:?}: Q5_0x2 differs from Q5_0", kern.isa(), act);
    }
    let scalar = table(Isa::Scalar).unwrap();
    let a = run(scalar, &wp, &x, c.n, Activations::F32).unwrap();
    let b = run(scalar, &wx, &x, c.n, Activations::F32).unwrap();
    prop_assert_eq!(bits(&a), bits(&b), "scalar f32: Q5_0x2 differs from Q5_0");
    Ok(())
}

/// As [`case_blocks`] for the row-interleaved layout: whole groups of 8 rows (0 to 72: the
/// GEMV's four streams of groups from 4 groups on, and the groups left over; Q4_K's GEMV reads
/// them in order), 0 to 9 blocks of 32 (`rows8_int8` makes them super-blocks of 256 for
/// Q4_K), 1 to 33 activation rows (the 8-row tile of Q4_0, Q4_1 and Q8_0, the 4-row tile, its
/// 1- to 3-row tail).
fn case_rows8() -> impl Strategy<Value = Case> {
    (0usize..=9, 0usize..=9, 1usize..=33, any::<u64>()).prop_map(|(g, b, n, seed)| Case {
        rows: 8 * g,
        k: 32 * b,
        n,
        seed,
    })
}

/// The row-interleaved layout ([`rml::kernels::rows8`]) of a table that has a kernel for
/// it: the same bits as the scalar table on the plain rows with int8 activations, plain
/// and corrected (a massive channel per activation row: the correction's column reads),
/// inline and on a pool of 3 threads (chunks of whole groups), the GEMV of the first and
/// last activation rows alone too; `dequantize_row` of the
/// packed matrix gives the plain row's values; f32 activations are an error.
fn check_rows8(kern: &Kernels, dtype: DType, c: &Case) -> Result<(), TestCaseError> {
    let Some(_) = kern.matmul_q8_rows8(dtype) else { return Ok(()) };
    let mut rng = Rng(c.seed ^ 0x8080);
    let (plain, _) = weights(dtype, c.rows, c.k, &mut rng);
    let mut packed = vec![0u8; plain.as_slice().len()];
    rml::kernels::rows8::pack(dtype, c.rows, c.k, plain.as_slice(), &mut packed).unwrap();
    let wp = Matrix::new(dtype, c.rows, c.k, plain.as_slice()).unwrap();
    let wx = Matrix::new_rows8(dtype, c.rows, c.k, &packed).unwrap();
    let mut x: Vec<f32> = (0..c.n * c.k).map(|_| rng.f() * 3.0).collect();
    for t in 0..c.n {
        if c.k > 0 && t % 2 == 0 {
            x[t * c.k + (rng.next() % c.k as u64) as usize] = 50.0;
        }
    }
    let scalar = table(Isa::Scalar).unwrap();
    let pool = rml::exec::ThreadPool::new(3);
    for act in [Activations::Int8Plain, Activations::Int8] {
        let want = run(scalar, &wp, &x, c.n, act).unwrap();
        let got = run(kern, &wx, &x, c.n, act).unwrap();
        prop_assert_eq!(
            bits(&got),
            bits(&want),
            "{} {} {:?}: rows8 differs",
            kern.isa(),
            dtype,
            act
        );
        let mut y = vec![f32::NAN; c.n * c.rows];
        let mut scratch = vec![0u8; scratch_bytes(c.k, c.n, act)];
        gemm_with(
            kern,
            &pool,
            Some(rml::Schedule::Fixed8),
            &wx,
            &x,
            c.n,
            &mut y,
            act,
            &mut scratch,
        )
        .unwrap();
        prop_assert_eq!(
            bits(&y),
            bits(&want),
            "{} {}: rows8 on 3 threads differs",
            kern.isa(),
            dtype
        );
        for t in [0, c.n - 1] {
            let y1 = run(kern, &wx, &x[t * c.k..(t + 1) * c.k], 1, act).unwrap();
            let w1 = &want[t * c.rows..(t + 1) * c.rows];
            prop_assert_eq!(bits(&y1), bits(w1), "{} {}: rows8 GEMV differs", kern.isa(), dtype);
        }
    }
    let (mut a, mut b) = (vec![0f32; c.k], vec![0f32; c.k]);
    for r in 0..c.rows {
        rml::ops::dequantize_row(&wp, r, &mut a);
        rml::ops::dequantize_row(&wx, r, &mut b);
        prop_assert_eq!(bits(&a), bits(&b), "dequantize_row {}", r);
    }
    if c.rows > 0 {
        let e = run(kern, &wx, &x, c.n, Activations::F32).unwrap_err();
        prop_assert_eq!(e.code(), Code::Unimplemented);
    }
    Ok(())
}

/// Only whole groups of 8 rows of the interleaved types make a row-interleaved matrix.
#[test]
fn rows8_shapes() {
    let rb = DType::Q4_1.row_bytes(64).unwrap();
    let data = vec![0u8; 12 * rb];
    let e = Matrix::new_rows8(DType::Q4_1, 12, 64, &data).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(Matrix::new_rows8(DType::Q4_1, 8, 64, &data[..8 * rb]).unwrap().is_rows8());
    let e = Matrix::new_rows8(DType::Q5_1, 8, 32, &[0u8; 8 * 24]).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
}

/// The row-interleaved kernels at the extremes of int8 (as [`int8_extremes`]): weight bytes
/// of Q4_0, Q4_1, Q5_0, Q8_0 and Q4_K all 0x00, 0xFF, 0x80 (Q8_0's -128), 0x7F or alternating
/// 0x80 / 0x7F, against activations of ±127, through every prompt path (the GEMV, the 8-row
/// tile, the 4-row tile, the 1- to 3-row tails; 11 blocks: a whole and a partial group of 8
/// blocks, super-blocks for Q4_K): the scalar table's bits on the plain rows, so an i16 sum that saturates or
/// wraps (e.g. Q8_0's chunks added before widening) or a wrong `w + 128` offset fails.
fn rows8_extremes(kern: &Kernels) {
    let scalar = table(Isa::Scalar).unwrap();
    let (rows, nb) = (32, 11);
    let one = f16::from_f32(1.0).to_le_bytes();
    let zero = f16::from_f32(0.0).to_le_bytes();
    let bodies: [&dyn Fn(usize) -> u8; 5] =
        [&|_| 0x00, &|_| 0xFF, &|_| 0x80, &|_| 0x7F, &|i| if i % 2 == 0 { 0x80 } else { 0x7F }];
    // ±1.0 per block quantize to ±127 (scale 1 / 127).
    let acts: [&dyn Fn(usize) -> f32; 3] =
        [&|_| -1.0, &|_| 1.0, &|i| if i % 3 == 0 { -1.0 } else { 1.0 }];
    for dtype in rml::kernels::rows8::TYPES {
        if kern.matmul_q8_rows8(dtype).is_none() {
            continue;
        }
        let k = nb * dtype.block_size();
        // Q4_1's minimum 0; Q4_K's `dmin` 1 (its scales and minimums are body bytes: 0x00,
        // 0xFF (63 each), ..), so its minimums' sum meets the extremes too.
        let head = if matches!(dtype, DType::Q4_1 | DType::Q4_K) { 4 } else { 2 };
        for body in bodies {
            let mut plain = Vec::new();
            for _ in 0..rows * nb {
                plain.extend(one);
                if dtype == DType::Q4_1 {
                    plain.extend(zero);
                }
                if dtype == DType::Q4_K {
                    plain.extend(one);
                }
                plain.extend((0..dtype.block_bytes() - head).map(body));
            }
            let mut packed = vec![0u8; plain.len()];
            rml::kernels::rows8::pack(dtype, rows, k, &plain, &mut packed).unwrap();
            let wp = Matrix::new(dtype, rows, k, &plain).unwrap();
            let wx = Matrix::new_rows8(dtype, rows, k, &packed).unwrap();
            for ap in acts {
                for n in [1, 2, 3, 4, 7, 8, 13, 16, 19] {
                    let x: Vec<f32> = (0..n * k).map(ap).collect();
                    let want = run(scalar, &wp, &x, n, Activations::Int8Plain).unwrap();
                    let got = run(kern, &wx, &x, n, Activations::Int8Plain).unwrap();
                    assert_eq!(bits(&got), bits(&want), "{} {dtype} n={n}", kern.isa());
                }
            }
        }
    }
}

/// The newer types at the extremes of their integer ranges: every weight byte all-ones,
/// all-zeros or alternating (largest unsigned values, Q3_K's scale -32 and high bits, Q6_K's
/// 63) against activations of ±127: the int8 path must give the scalar table's bits (no
/// `maddubs` saturation, no overflow); rows straddle the four-row groups.
fn new_type_extremes(kern: &Kernels) {
    let scalar = table(Isa::Scalar).unwrap();
    for dtype in NEW_TYPES {
        let info = rml::quant::info(dtype);
        let (rows, k) = (5, if info.block_elems == 256 { 512 } else { 9 * info.block_elems });
        for fill in [0xFFu8, 0x00, 0xAA, 0x55, 0x0F, 0xF0] {
            let mut bytes = vec![fill; rows * dtype.row_bytes(k).unwrap()];
            for blk in bytes.chunks_exact_mut(info.block_bytes) {
                for &o in f16_fields(dtype) {
                    blk[o..o + 2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
                }
            }
            let data = AlignedBlock::try_from_slice(&bytes).unwrap();
            let w = Matrix::new(dtype, rows, k, data.as_slice()).unwrap();
            let acts: [&dyn Fn(usize) -> f32; 3] =
                [&|_| 1.0, &|_| -1.0, &|i| if i % 3 == 0 { -1.0 } else { 1.0 }];
            for a in acts {
                let x: Vec<f32> = (0..2 * k).map(a).collect();
                let got = run(kern, &w, &x, 2, Activations::Int8Plain).unwrap();
                let want = run(scalar, &w, &x, 2, Activations::Int8Plain).unwrap();
                assert_eq!(bits(&got), bits(&want), "{} {dtype} fill {fill:#x}", kern.isa());
            }
        }
    }
}

/// The gated activations (`swiglu_on`, `geglu_tanh_on`): the portable loop's bits on every
/// ISA, for lengths around the vector widths (tails of every size) and for every kind of
/// input: random values over ±100, ±0, the overflow and underflow edges of `exp`,
/// subnormals, infinities and NaN.
fn gated_activations(kern: &Kernels) {
    let mut rng = Rng(7);
    let special = [
        0.0f32,
        -0.0,
        88.72,
        -88.72,
        89.0,
        -104.0,
        -87.3,
        1e-40,
        -1e-40,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    for len in (0..=70).chain([1536, 1537]) {
        let gate: Vec<f32> = (0..len)
            .map(|i| if i % 5 == 0 { special[i / 5 % special.len()] } else { rng.f() * 100.0 })
            .collect();
        let up: Vec<f32> = (0..len).map(|_| rng.f() * 4.0).collect();
        for gelu in [false, true] {
            let (mut want, mut got) = (gate.clone(), gate.clone());
            if gelu {
                rml::ops::geglu_tanh(&mut want, &up);
                rml::ops::geglu_tanh_on(kern, &mut got, &up);
            } else {
                rml::ops::swiglu(&mut want, &up);
                rml::ops::swiglu_on(kern, &mut got, &up);
            }
            assert_eq!(bits(&got), bits(&want), "{} gelu={gelu} len={len}", kern.isa());
        }
    }
}

/// The kernel tables of every ISA this host runs, in [`Isa::ALL`] order (the others are
/// skipped with a message, or fail under `RML_EXPECT_ISAS`). Each test below runs its case on
/// every table: one proptest per check rather than one per ISA × check keeps this crate's
/// build short (each `proptest!` test is its own instantiation of the runner).
fn tables() -> impl Iterator<Item = &'static Kernels> {
    Isa::ALL.into_iter().filter_map(kernels)
}

/// Runs `check` on every table of [`tables`]; a failure (a returned error or a panic) names
/// the ISA it happened on.
fn each(
    mut check: impl FnMut(&'static Kernels) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    /// Names the ISA on stderr when a check panics (a failed `assert!`).
    struct Naming(Isa);
    impl Drop for Naming {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("(the failure above is on the {} kernels)", self.0);
            }
        }
    }
    for k in tables() {
        let _naming = Naming(k.isa());
        check(k).map_err(|e| match e {
            TestCaseError::Fail(why) => TestCaseError::fail(format!("{} kernels: {why}", k.isa())),
            other => other,
        })?;
    }
    Ok(())
}

/// [`each`] for checks that panic on failure.
fn every(check: fn(&'static Kernels)) {
    each(|k| {
        check(k);
        Ok(())
    })
    .unwrap();
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn f32_weights(c in case(false)) {
        each(|k| check_f32(k, DType::F32, &c))?;
    }

    #[test]
    fn f16_weights(c in case(false)) {
        each(|k| check_f32(k, DType::F16, &c))?;
    }

    #[test]
    fn bf16_weights(c in case(false)) {
        each(|k| check_f32(k, DType::BF16, &c))?;
    }

    #[test]
    fn quantized_weights_f32_acts(c in case(true)) {
        each(|k| {
            for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
                check_f32(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn quantized_weights_int8_acts(c in case(true)) {
        each(|k| {
            for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
                check_int8(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn types_32_f32_acts(c in case_blocks(32)) {
        each(|k| {
            for dtype in [DType::Q5_0, DType::Q5_1, DType::IQ4_NL] {
                check_f32(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn types_32_int8_acts(c in case_blocks(32)) {
        each(|k| {
            for dtype in [DType::Q5_0, DType::Q5_1, DType::IQ4_NL] {
                check_int8(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn k_quants_f32_acts(c in case_blocks(256)) {
        each(|k| {
            for dtype in &K_QUANTS {
                check_f32(k, *dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn k_quants_int8_acts(c in case_blocks(256)) {
        each(|k| {
            for dtype in &K_QUANTS {
                check_int8(k, *dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn outlier_correction_32(c in case_outliers(32)) {
        each(|k| {
            for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL] {
                check_outliers(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn pairs_64(c in case_blocks(64)) {
        each(|k| {
            check_f32(k, DType::Q5_0x2, &c)?;
            check_int8(k, DType::Q5_0x2, &c)?;
            check_pairs_as_q5_0(k, &c)
        })?;
    }

    #[test]
    fn outlier_correction_pairs(c in case_outliers(64)) {
        each(|k| check_outliers(k, DType::Q5_0x2, &c))?;
    }

    #[test]
    fn outlier_correction_k_quants(c in case_outliers(256)) {
        each(|k| {
            for dtype in &K_QUANTS {
                check_outliers(k, *dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn rows8_int8(c in case_rows8()) {
        each(|k| {
            for dtype in rml::kernels::rows8::TYPES {
                // The case's blocks of 32 as blocks of the type (super-blocks of 256 for
                // Q4_K: at most 9, 2304 values).
                let c = Case { k: c.k / QK * dtype.block_size(), ..c };
                check_rows8(k, dtype, &c)?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn quantize_q8_0_bytes(blocks in 0usize..=70, seed in any::<u64>()) {
        each(|k| check_quantize(k, blocks, seed))?;
    }
}

#[test]
fn long_k_and_many_activation_rows() {
    every(long_k);
}

#[test]
fn int8_rows_of_sixteen() {
    every(rows_of_sixteen);
}

#[test]
fn int8_every_batch_size() {
    every(every_batch_size);
}

#[test]
fn int8_gemv_streams() {
    every(gemv_streams);
}

#[test]
fn f32_acts_gemv_streams() {
    every(f32_gemv_streams);
}

#[test]
fn q8_0_ties_round_away() {
    every(quantize_ties);
}

#[test]
fn all_zero_gives_exact_zero() {
    every(zeros);
}

#[test]
fn non_finite_and_bad_lengths_are_errors() {
    every(errors);
}

#[test]
fn int8_extremes_are_exact() {
    every(int8_extremes);
}

#[test]
fn rows8_extremes_are_exact() {
    every(rows8_extremes);
}

#[test]
fn gated_activations_match_portable() {
    every(gated_activations);
}

#[test]
fn new_types_int8_extremes_match_scalar() {
    every(new_type_extremes);
}

/// Every SIMD tier the host has (x86: AVX2, AVX-VNNI, AVX-512, AVX-512 + GFNI; aarch64: NEON,
/// NEON + SDOT) overrides both entries of every quantized type (so each ISA × type ×
/// activation mode above runs SIMD code, not the scalar fallback), the tiers built on a parent
/// (the VNNI tiers on AVX2, SDOT on NEON) have int8 bodies of their own (not the parent's), and
/// the GFNI tier has its own int8 bodies for the types whose nibbles it splits. The load-time
/// pair layout (Q5_0x2) has int8 bodies (product and column halves) on the AVX-512 tiers only.
#[test]
fn simd_tiers_have_a_body_for_every_type_and_mode() {
    let scalar = table(Isa::Scalar).unwrap();
    let tiers = [
        (Isa::Avx2, None),
        (Isa::AvxVnni, Some(Isa::Avx2)),
        (Isa::Avx512, Some(Isa::Avx2)),
        (Isa::Avx512Gfni, Some(Isa::Avx2)),
        (Isa::Neon, None),
        (Isa::NeonDotprod, Some(Isa::Neon)),
    ];
    for (isa, parent) in tiers {
        let Some(k) = kernels(isa) else { continue };
        let parent = parent.and_then(kernels);
        for t in rml::quant::TYPES.iter().filter(|t| t.act.is_some()) {
            if t.ggml_id == rml::quant::NOT_IN_FILES {
                // A load-time layout (Q5_0x2): an int8 body on the AVX-512 tiers, which the
                // loader repacks for (`has_simd_q8`), and none elsewhere.
                let repacks = matches!(isa, Isa::Avx512 | Isa::Avx512Gfni);
                assert_eq!(k.has_simd_q8(t.dtype), repacks, "{isa} {}", t.name);
                assert!(k.matmul_q8_halves(t.dtype).is_some(), "{isa} {}", t.name);
                if repacks {
                    let (h, sh) = (k.matmul_q8_halves(t.dtype), scalar.matmul_q8_halves(t.dtype));
                    assert_ne!(h.unwrap()[1] as usize, sh.unwrap()[1] as usize, "{isa} {}", t.name);
                }
                continue;
            }
            let f32_entry = k.matmul_f32(t.dtype).unwrap() as usize;
            assert_ne!(f32_entry, scalar.matmul_f32(t.dtype).unwrap() as usize, "{isa} {}", t.name);
            let int8_entry = k.matmul_q8(t.dtype).unwrap() as usize;
            assert_ne!(int8_entry, scalar.matmul_q8(t.dtype).unwrap() as usize, "{isa} {}", t.name);
            if let Some(p) = parent {
                let parent_entry = p.matmul_q8(t.dtype).unwrap() as usize;
                assert_ne!(int8_entry, parent_entry, "{isa} {}: {}'s int8 body", t.name, p.isa());
            }
        }
    }
    if let (Some(g), Some(a)) = (kernels(Isa::Avx512Gfni), kernels(Isa::Avx512)) {
        let nibble_types = [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::IQ4_NL,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q5_0x2,
        ];
        for t in nibble_types {
            let (g, a) = (g.matmul_q8(t).unwrap() as usize, a.matmul_q8(t).unwrap() as usize);
            assert_ne!(g, a, "avx512-gfni {t}: AVX-512's int8 body");
        }
    }
}

/// f32 weights: the AVX-512 tier's GEMM (two outputs per 512-bit register, activation rows
/// packed in pairs) gives AVX2's bits for every output: odd and short K tails, odd and
/// partial groups of activation rows, leftover weight rows, several panels of weight rows, K
/// blocks, K past the packed kernel's limit (AVX2's body) and the GEMV.
#[test]
fn f32_weights_avx512_gives_avx2_bits() {
    let (Some(a2), Some(a5)) = (kernels(Isa::Avx2), kernels(Isa::Avx512)) else {
        return;
    };
    let shapes = [
        (1, 1, 2),
        (5, 0, 3),
        (3, 7, 3),
        (4, 8, 8),
        (5, 9, 9),
        (7, 33, 17),
        (9, 384, 16),
        (13, 385, 23),
        (6, 2048, 5),
        (6, 2049, 5),
        (17, 100, 1),
        // Panels of rows (K 384: 256 rows each) and K blocks with parked accumulators (K past
        // 512: 64-row panels, the K tail in the last block), with leftover rows.
        (300, 384, 10),
        (143, 1536, 11),
        (70, 513, 9),
    ];
    for (i, &(rows, k, n)) in shapes.iter().enumerate() {
        let mut rng = Rng(900 + i as u64);
        let (data, _) = weights(DType::F32, rows, k, &mut rng);
        let x: Vec<f32> = (0..n * k).map(|_| rng.f()).collect();
        let w = Matrix::new(DType::F32, rows, k, data.as_slice()).unwrap();
        let want = run(a2, &w, &x, n, Activations::F32).unwrap();
        let got = run(a5, &w, &x, n, Activations::F32).unwrap();
        assert_eq!(bits(&got), bits(&want), "rows {rows} k {k} n {n}");
    }
}
