//! The scalar oracle: plain-Rust dot products for every weight dtype. Every SIMD kernel is
//! tested against these.

use half::{bf16, f16};

use super::quant::{dequantize_block_q4_0, dequantize_block_q4_1, dequantize_block_q8_0, QK};

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
