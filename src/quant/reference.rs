//! The scalar reference arithmetic every kernel reproduces: the row dot products of the
//! plain types, the per-block dot of the block types with f32 activations, the Q8
//! activation rounding rule and the fixed int8 accumulation order ([`accumulate8`]). The
//! kernels (`crate::kernels`, the scalar oracle table and every SIMD tier) are built on
//! these; this module depends on no kernel.

use half::{bf16, f16};

use super::{round_ties_away, QK};

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

/// [`quantize_block_q8`]'s rule over a block of any length (`x.len() == qs.len()`): the
/// Q8_K activation blocks of 256 use it.
pub fn quantize_block_any(x: &[f32], qs: &mut [i8]) -> Option<f32> {
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

/// Dot of a little-endian f32 row (`4 * x.len()` bytes, any alignment) with f32 `x`, in
/// [`dot_f32`]'s order.
///
/// # Panics
///
/// If `w.len() != 4 * x.len()`.
pub fn dot_f32_bytes(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), 4 * x.len());
    w.chunks_exact(4).zip(x).map(|(b, &xi)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * xi).sum()
}
