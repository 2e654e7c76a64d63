//! Block-quantized formats with ggml's byte layouts (`block_q8_0`, `block_q4_0`,
//! `block_q4_1` in ggml's `ggml-common.h`), so GGUF weights are used in place.

use half::f16;

/// Elements per quantization block.
pub const QK: usize = 32;

/// ggml `block_q8_0`: f16 scale `d`, then 32 × i8 `qs`; value `i` = `d * qs[i]`. 34 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits (little-endian in files).
    pub d: u16,
    /// Quantized values.
    pub qs: [i8; QK],
}

/// ggml `block_q4_0`: f16 scale `d`, then 16 bytes; element `j < 16` is the low nibble of
/// `qs[j]`, element `j + 16` the high nibble; value = `d * (nibble - 8)`. 18 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Packed nibbles.
    pub qs: [u8; QK / 2],
}

/// ggml `block_q4_1`: f16 scale `d`, f16 min `m`, then 16 bytes of nibbles (as Q4_0);
/// value = `d * nibble + m`. 20 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum, f16 bits.
    pub m: u16,
    /// Packed nibbles.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(core::mem::size_of::<BlockQ4_1>() == 20);

/// Reads the little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
pub fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Dequantizes one 34-byte Q8_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 34` or `out.len() != 32`.
pub fn dequantize_block_q8_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 34 && out.len() == QK);
    let d = f16_at(block);
    for (o, &q) in out.iter_mut().zip(&block[2..]) {
        *o = d * (q as i8) as f32;
    }
}

/// Dequantizes one 18-byte Q4_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 18` or `out.len() != 32`.
pub fn dequantize_block_q4_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 18 && out.len() == QK);
    let d = f16_at(block);
    for (j, &b) in block[2..].iter().enumerate() {
        out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((b >> 4) as i32 - 8) as f32;
    }
}

/// Dequantizes one 20-byte Q4_1 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 20` or `out.len() != 32`.
pub fn dequantize_block_q4_1(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 20 && out.len() == QK);
    let d = f16_at(block);
    let m = f16_at(&block[2..]);
    for (j, &b) in block[4..].iter().enumerate() {
        out[j] = d * (b & 0x0F) as f32 + m;
        out[j + 16] = d * (b >> 4) as f32 + m;
    }
}
