//! The scalar oracle: plain-Rust dot products for every weight dtype. Every SIMD kernel is
//! tested against these.

use half::{bf16, f16};

use super::quant::{
    dequantize_block_q4_0, dequantize_block_q4_1, dequantize_block_q8_0, f16_at, round_ties_away,
    Q8Acts, QK,
};

/// `Σ w[i] * x[i]` in order.
///
/// # Panics
///
/// If the lengths differ.
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len());
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

/// Dot of a little-endian bf16 row (`2 * x.len()` bytes) with f32 `x`.
///
/// # Panics
///
/// If `w.len() != 2 * x.len()`.
pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), 2 * x.len());
    w.chunks_exact(2)
        .zip(x)
        .map(|(b, &xi)| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * xi)
        .sum()
}

/// Dot of a little-endian f16 row (`2 * x.len()` bytes) with f32 `x`.
///
/// # Panics
///
/// If `w.len() != 2 * x.len()`.
pub fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), 2 * x.len());
    w.chunks_exact(2)
        .zip(x)
        .map(|(b, &xi)| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * xi)
        .sum()
}

fn dot_blocks(w: &[u8], x: &[f32], block_bytes: usize, dequant: fn(&[u8], &mut [f32])) -> f32 {
    assert_eq!(x.len() % QK, 0);
    assert_eq!(w.len(), x.len() / QK * block_bytes);
    let mut tmp = [0f32; QK];
    let mut sum = 0f32;
    for (blk, xs) in w.chunks_exact(block_bytes).zip(x.chunks_exact(QK)) {
        dequant(blk, &mut tmp);
        sum += dot_f32(&tmp, xs);
    }
    sum
}

/// Dot of a Q8_0 row with f32 `x` (dequantized on the fly).
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32 or `w` is not `x.len() / 32 * 34` bytes.
pub fn dot_q8_0_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks(w, x, 34, dequantize_block_q8_0)
}

/// Dot of a Q4_0 row with f32 `x`.
///
/// # Panics
///
/// As [`dot_q8_0_f32`], with 18-byte blocks.
pub fn dot_q4_0_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks(w, x, 18, dequantize_block_q4_0)
}

/// Dot of a Q4_1 row with f32 `x`.
///
/// # Panics
///
/// As [`dot_q8_0_f32`], with 20-byte blocks.
pub fn dot_q4_1_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks(w, x, 20, dequantize_block_q4_1)
}

/// Quantizes one block of 32 floats to Q8 values with an f32 scale: the definition every
/// SIMD path reproduces byte for byte.
///
/// `amax` is the largest `|x|` (found on the bit patterns with the sign cleared, so NaN and
/// ±infinity are caught), `d = amax / 127`; `d == 0` gives `(0.0, zeros)`; otherwise
/// `q = clamp(round_ties_away(x / d), -127, 127)`. Returns `None` if the block holds NaN or
/// ±infinity.
///
/// # Panics
///
/// If `x.len() != 32` or `qs.len() != 32`.
pub fn quantize_block_q8(x: &[f32], qs: &mut [i8]) -> Option<f32> {
    assert!(x.len() == QK && qs.len() == QK);
    let amax_bits = x.iter().map(|v| v.to_bits() & 0x7FFF_FFFF).max().unwrap_or(0);
    if amax_bits >= 0x7F80_0000 {
        return None;
    }
    let d = f32::from_bits(amax_bits) / 127.0;
    if d == 0.0 {
        qs.fill(0);
        return Some(0.0);
    }
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = round_ties_away(v / d).clamp(-127.0, 127.0) as i8;
    }
    Some(d)
}

/// `Σ w[i] * x[i]` of one Q8_0 weight block (34 bytes) and 32 activation values, exact.
///
/// # Panics
///
/// If `w.len() != 34` or `x.len() != 32`.
pub fn block_dot_q8_0(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == 34 && x.len() == QK);
    w[2..].iter().zip(x).map(|(&a, &b)| a as i8 as i32 * b as i32).sum()
}

/// `Σ (nibble[i] - 8) * x[i]` of one Q4_0 weight block (18 bytes) and 32 activations, exact.
///
/// # Panics
///
/// If `w.len() != 18` or `x.len() != 32`.
pub fn block_dot_q4_0(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == 18 && x.len() == QK);
    let mut s = 0i32;
    for (j, &b) in w[2..].iter().enumerate() {
        s += ((b & 0x0F) as i32 - 8) * x[j] as i32 + ((b >> 4) as i32 - 8) * x[j + 16] as i32;
    }
    s
}

/// `Σ nibble[i] * x[i]` of one Q4_1 weight block (20 bytes) and 32 activations, exact.
///
/// # Panics
///
/// If `w.len() != 20` or `x.len() != 32`.
pub fn block_dot_q4_1(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == 20 && x.len() == QK);
    let mut s = 0i32;
    for (j, &b) in w[4..].iter().enumerate() {
        s += (b & 0x0F) as i32 * x[j] as i32 + (b >> 4) as i32 * x[j + 16] as i32;
    }
    s
}

/// The fixed sum of eight lanes every int8 kernel ends with:
/// `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`.
#[inline(always)]
pub fn hsum8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// The int8 accumulation order, shared by every ISA so that results are bit-identical:
/// block `b`'s f32 term goes into lane `b % 8` (`acc = acc + term`, no fused multiply-add),
/// then [`hsum8`].
#[inline(always)]
pub fn accumulate8(nb: usize, mut term: impl FnMut(usize) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    for b in 0..nb {
        acc[b % 8] += term(b);
    }
    hsum8(&acc)
}

/// Dot of a Q8_0 weight row with one row of int8 activations (`qs`: 32 values per block,
/// `d`: f32 scales): `Σ_b (dw_b * d_b) * isum_b` in the [`accumulate8`] order, `isum_b` from
/// [`block_dot_q8_0`], `dw_b` the block's f16 scale.
///
/// # Panics
///
/// If the lengths disagree (`w`: 34 bytes per block).
pub fn dot_q8_0_q8(w: &[u8], qs: &[i8], d: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * 34 && qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = &w[b * 34..b * 34 + 34];
        (f16_at(blk) * d[b]) * block_dot_q8_0(blk, &qs[b * QK..b * QK + QK]) as f32
    })
}

/// Dot of a Q4_0 weight row with int8 activations, as [`dot_q8_0_q8`] with
/// [`block_dot_q4_0`].
///
/// # Panics
///
/// If the lengths disagree (`w`: 18 bytes per block).
pub fn dot_q4_0_q8(w: &[u8], qs: &[i8], d: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * 18 && qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = &w[b * 18..b * 18 + 18];
        (f16_at(blk) * d[b]) * block_dot_q4_0(blk, &qs[b * QK..b * QK + QK]) as f32
    })
}

/// Dot of a Q4_1 weight row with int8 activations: block term
/// `(dw_b * d_b) * isum_b + mw_b * s_b` ([`block_dot_q4_1`]; `s_b = d_b * Σ qs`, the scaled
/// block sum of [`super::quant::Q8Acts`]), in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree (`w`: 20 bytes per block).
pub fn dot_q4_1_q8(w: &[u8], qs: &[i8], d: &[f32], s: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * 20 && qs.len() == nb * QK && s.len() == nb);
    accumulate8(nb, |b| {
        let blk = &w[b * 20..b * 20 + 20];
        let t = (f16_at(blk) * d[b]) * block_dot_q4_1(blk, &qs[b * QK..b * QK + QK]) as f32;
        t + f16_at(&blk[2..]) * s[b]
    })
}

// ------------------------------------------------------------------ the scalar table entries

/// Builds a scalar f32-activation matmul entry from a row dot product.
macro_rules! matmul_f32_entry {
    ($name:ident, $dot:expr, $welem:ty) => {
        /// Scalar table entry: `y[t * ldy + r] = dot(row r, x[t * k ..])` for `r < rows`,
        /// `t < n`.
        ///
        /// # Safety
        ///
        /// `w` points to `rows` rows of `row_bytes` bytes (aligned for the element type),
        /// `x` to `n * k` floats, `y` to a buffer where every `t * ldy + r` is writable and
        /// not aliased by `w` or `x`; `row_bytes` matches `k` for the dtype.
        pub(crate) unsafe fn $name(
            w: *const u8,
            row_bytes: usize,
            rows: usize,
            k: usize,
            x: *const f32,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            let dot: fn(&[$welem], &[f32]) -> f32 = $dot;
            let per_row = row_bytes / core::mem::size_of::<$welem>();
            for r in 0..rows {
                // SAFETY: row `r` is in bounds and aligned (caller contract).
                let row = unsafe {
                    core::slice::from_raw_parts(w.add(r * row_bytes).cast::<$welem>(), per_row)
                };
                for t in 0..n {
                    // SAFETY: activation row `t` is in bounds (caller contract).
                    let xt = unsafe { core::slice::from_raw_parts(x.add(t * k), k) };
                    // SAFETY: `t * ldy + r` is writable (caller contract).
                    unsafe { y.add(t * ldy + r).write(dot(row, xt)) };
                }
            }
        }
    };
}

matmul_f32_entry!(matmul_f32, dot_f32, f32);
matmul_f32_entry!(matmul_f16, dot_f16, u8);
matmul_f32_entry!(matmul_bf16, dot_bf16, u8);
matmul_f32_entry!(matmul_q8_0, dot_q8_0_f32, u8);
matmul_f32_entry!(matmul_q4_0, dot_q4_0_f32, u8);
matmul_f32_entry!(matmul_q4_1, dot_q4_1_f32, u8);

/// Builds a scalar int8-activation matmul entry.
macro_rules! matmul_q8_entry {
    ($name:ident, |$w:ident, $qs:ident, $d:ident, $s:ident| $dot:expr) => {
        /// Scalar table entry: `y[t * ldy + r] = dot(row r, activation row t)`.
        ///
        /// # Safety
        ///
        /// `w` points to `rows` rows of `row_bytes` bytes, each `xq.nb()` blocks of the
        /// dtype; `xq.n() >= n`; every `y[t * ldy + r]` is writable and not aliased.
        pub(crate) unsafe fn $name(
            w: *const u8,
            row_bytes: usize,
            rows: usize,
            xq: &Q8Acts<'_>,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            let nb = xq.nb();
            for r in 0..rows {
                // SAFETY: row `r` is in bounds (caller contract).
                let $w = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), row_bytes) };
                for t in 0..n {
                    let $qs = &xq.qs()[t * nb * QK..(t + 1) * nb * QK];
                    let $d = &xq.d()[t * nb..(t + 1) * nb];
                    let $s = &xq.s()[t * nb..(t + 1) * nb];
                    let _ = $s;
                    // SAFETY: `t * ldy + r` is writable (caller contract).
                    unsafe { y.add(t * ldy + r).write($dot) };
                }
            }
        }
    };
}

matmul_q8_entry!(matmul_q8_0_q8, |w, qs, d, s| dot_q8_0_q8(w, qs, d));
matmul_q8_entry!(matmul_q4_0_q8, |w, qs, d, s| dot_q4_0_q8(w, qs, d));
matmul_q8_entry!(matmul_q4_1_q8, |w, qs, d, s| dot_q4_1_q8(w, qs, d, s));

/// Scalar table entry: quantizes `nb` blocks of `x` with [`quantize_block_q8`], writing
/// block `b`'s values at `qs + b * qs_stride` and its f32 scale at `d[b]`. Returns `false`
/// (with the output partly written) if a block holds NaN or ±infinity.
///
/// # Safety
///
/// `x` points to `nb * 32` floats, `qs + b * qs_stride` to 32 writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
pub(crate) unsafe fn quantize_q8(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
) -> bool {
    for b in 0..nb {
        // SAFETY: caller contract: block `b` of input and output are in bounds.
        let (xb, qb) = unsafe {
            (
                core::slice::from_raw_parts(x.add(b * QK), QK),
                core::slice::from_raw_parts_mut(qs.add(b * qs_stride), QK),
            )
        };
        match quantize_block_q8(xb, qb) {
            // SAFETY: `d + b` is writable (caller contract).
            Some(s) => unsafe { d.add(b).write(s) },
            None => return false,
        }
    }
    true
}
