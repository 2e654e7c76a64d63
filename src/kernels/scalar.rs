//! The scalar oracle: plain-Rust dot products for every weight dtype. Every SIMD kernel is
//! tested against these.

use half::{bf16, f16};

use crate::quant::q8::Q8Row;
use crate::quant::{round_ties_away, Q8Acts, QK};

pub use crate::quant::q4_0::{block_dot_q4_0, dot_q4_0_f32, dot_q4_0_q8};
pub use crate::quant::q4_1::{block_dot_q4_1, dot_q4_1_f32, dot_q4_1_q8};
pub use crate::quant::q8_0::{block_dot_q8_0, dot_q8_0_f32, dot_q8_0_q8};

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

/// Dot of a row of `block_bytes`-byte blocks of `QB` elements with f32 `x`: each block
/// dequantized by `dequant`, then [`dot_f32`] per block, the block sums added in order.
///
/// # Panics
///
/// If `x.len()` is not a multiple of `QB` or `w` is not its blocks.
pub fn dot_blocks<const QB: usize>(
    w: &[u8],
    x: &[f32],
    block_bytes: usize,
    dequant: fn(&[u8], &mut [f32]),
) -> f32 {
    assert_eq!(x.len() % QB, 0);
    assert_eq!(w.len(), x.len() / QB * block_bytes);
    let mut tmp = [0f32; QB];
    let mut sum = 0f32;
    for (blk, xs) in w.chunks_exact(block_bytes).zip(x.chunks_exact(QB)) {
        dequant(blk, &mut tmp);
        sum += dot_f32(&tmp, xs);
    }
    sum
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
    quantize_block_any(x, qs)
}

/// [`quantize_block_q8`]'s rule over a block of any length (`x.len() == qs.len()`).
pub(crate) fn quantize_block_any(x: &[f32], qs: &mut [i8]) -> Option<f32> {
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

/// The scalar f32-activation matmul over rows of `u8` blocks, one row dot at a time
/// (the body of every quantized type's scalar entry).
///
/// # Safety
///
/// As [`super::MatmulF32Fn`]: `w` points to `rows` rows of `row_bytes` bytes, `x` to `n * k`
/// floats, every `y[t * ldy + r]` is writable and not aliased; `dot` accepts a row of
/// `row_bytes` bytes with `k` floats.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn rows_f32(
    dot: fn(&[u8], &[f32]) -> f32,
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    for r in 0..rows {
        // SAFETY: row `r` is in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), row_bytes) };
        for t in 0..n {
            // SAFETY: activation row `t` is in bounds (caller contract).
            let xt = unsafe { core::slice::from_raw_parts(x.add(t * k), k) };
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(dot(row, xt)) };
        }
    }
}

/// The scalar int8-activation matmul, one row dot at a time (the body of every quantized
/// type's scalar int8 entry).
///
/// # Safety
///
/// As [`super::MatmulQ8Fn`]: row `r` starts at `w + r * row_bytes` and its first `xq.nb()`
/// blocks of `block_bytes` bytes are readable; `xq.n() >= n`; every `y[t * ldy + r]` is
/// writable and not aliased.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn rows_q8(
    dot: fn(&[u8], &Q8Row<'_>) -> f32,
    block_bytes: usize,
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let used = xq.nb() * block_bytes;
    for r in 0..rows {
        // SAFETY: the row's first `nb` blocks are in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), used) };
        for t in 0..n {
            let xt = xq.row(t);
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(dot(row, &xt)) };
        }
    }
}

/// Defines a quantized type's two scalar table entries, `matmul_f32` and `matmul_q8`, from
/// its row dot products `(fn(&[u8], &[f32]) -> f32, fn(&[u8], &Q8Row) -> f32)`, with the
/// weight bytes per activation block (the module's `BYTES` unless given).
macro_rules! entries {
    ($dot_f32:path, $dot_q8:path) => {
        $crate::kernels::scalar::entries!($dot_f32, $dot_q8, BYTES);
    };
    ($dot_f32:path, $dot_q8:path, $act_block_bytes:expr) => {
        /// Scalar table entry with f32 activations (see [`crate::kernels::MatmulF32Fn`]).
        ///
        /// # Safety
        ///
        /// As [`crate::kernels::MatmulF32Fn`].
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn matmul_f32(
            w: *const u8,
            row_bytes: usize,
            rows: usize,
            k: usize,
            x: *const f32,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            // SAFETY: forwarded caller contract.
            unsafe {
                $crate::kernels::scalar::rows_f32($dot_f32, w, row_bytes, rows, k, x, n, y, ldy)
            }
        }

        /// Scalar table entry with int8 activations (see [`crate::kernels::MatmulQ8Fn`]).
        ///
        /// # Safety
        ///
        /// As [`crate::kernels::MatmulQ8Fn`].
        pub(crate) unsafe fn matmul_q8(
            w: *const u8,
            row_bytes: usize,
            rows: usize,
            xq: &$crate::quant::Q8Acts<'_>,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            // SAFETY: forwarded caller contract.
            unsafe {
                $crate::kernels::scalar::rows_q8(
                    $dot_q8,
                    $act_block_bytes,
                    w,
                    row_bytes,
                    rows,
                    xq,
                    n,
                    y,
                    ldy,
                )
            }
        }
    };
}
pub(crate) use entries;

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
    // SAFETY: forwarded caller contract, blocks of QK values.
    unsafe { quantize_blocks::<QK>(x, nb, qs, qs_stride, d, quantize_block_q8) }
}

/// `nb` blocks of `N` values quantized by `block` (one scale each); false at the first block
/// `block` refuses (a non-finite value).
///
/// # Safety
///
/// `x` points to `nb * N` floats, `qs + b * qs_stride` to `N` writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
#[inline(always)]
unsafe fn quantize_blocks<const N: usize>(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
    block: fn(&[f32], &mut [i8]) -> Option<f32>,
) -> bool {
    for b in 0..nb {
        // SAFETY: caller contract: block `b` of input and output are in bounds.
        let (xb, qb) = unsafe {
            (
                core::slice::from_raw_parts(x.add(b * N), N),
                core::slice::from_raw_parts_mut(qs.add(b * qs_stride), N),
            )
        };
        match block(xb, qb) {
            // SAFETY: `d + b` is writable (caller contract).
            Some(s) => unsafe { d.add(b).write(s) },
            None => return false,
        }
    }
    true
}

/// Scalar table entry: [`quantize_q8`] over blocks of 256 values ([`crate::quant::QK_K`]).
///
/// # Safety
///
/// `x` points to `nb * 256` floats, `qs + b * qs_stride` to 256 writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
pub(crate) unsafe fn quantize_q8k(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
) -> bool {
    // SAFETY: forwarded caller contract, blocks of QK_K values.
    unsafe {
        quantize_blocks::<{ crate::quant::QK_K }>(x, nb, qs, qs_stride, d, quantize_block_any)
    }
}
