//! Q4_1: ggml's `block_q4_1` (`ggml-common.h`): 32 elements, an f16 scale `d`, an f16 minimum
//! `m` and 16 bytes of nibbles; value = `d * nibble + m`. 20 bytes. The int8 path pairs with
//! [`ActFormat::Q8`] and needs its scaled block sums (for `m`).

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, put_f16, quantize_checks, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

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

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ4_1>();
const _: () = assert!(BYTES == 20);

super::layout::block_layout!(BlockQ4_1, Q4_1, m: m, qh: -);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q4_1,
    name: "Q4_1",
    ggml_id: 3,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q4_1),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q4_1_f32),
    matmul_q8: Some(dot_q8),
};

/// Dequantizes one 20-byte Q4_1 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 20` or `out.len() != 32`.
pub fn dequantize_block_q4_1(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let d = f16_at(block);
    let m = f16_at(&block[2..]);
    for (j, &b) in block[4..].iter().enumerate() {
        out[j] = d * (b & 0x0F) as f32 + m;
        out[j + 16] = d * (b >> 4) as f32 + m;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_q4_1);
}

/// Dequantizes a row of Q4_1 blocks into `out`.
///
/// # Errors
///
/// As [`super::dequantize_row_q8_0`], with 20-byte blocks.
pub fn dequantize_row_q4_1(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    super::dequantize_row_with(DType::Q4_1, bytes, out, dequantize_block_q4_1)
}

/// Quantizes a row of f32 to Q4_1 blocks (20 bytes each) by ggml's reference arithmetic
/// (`quantize_row_q4_1_ref`): `d = (max - min) / 15`, `id = 1 / d` (0 when `d == 0`),
/// `q = min(15, trunc((x - min) * id + 0.5))`, stored as `f16(d)`, `f16(min)` and nibbles as
/// Q4_0.
///
/// # Errors
///
/// As [`super::quantize_row_q8_0`], with 20-byte blocks; [`crate::Code::OutOfRange`] also
/// when `min` does not fit in f16.
pub fn quantize_row_q4_1(x: &[f32], out: &mut [u8]) -> Result<()> {
    quantize_checks(DType::Q4_1, x, out)?;
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BYTES)).enumerate() {
        let mn = xs.iter().copied().fold(f32::MAX, |a, v| if v < a { v } else { a });
        let mx = xs.iter().copied().fold(-f32::MAX, |a, v| if v > a { v } else { a });
        let d = (mx - mn) / 15.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, d, DType::Q4_1, b, "scale")?;
        put_f16(&mut blk[2..], mn, DType::Q4_1, b, "minimum")?;
        let q = |v: f32| (((v - mn) * id + 0.5) as i32).clamp(0, 15) as u8;
        for j in 0..QK / 2 {
            blk[4 + j] = q(xs[j]) | (q(xs[j + 16]) << 4);
        }
    }
    Ok(())
}

/// Dot of a Q4_1 row with f32 `x`.
///
/// # Panics
///
/// As [`super::q8_0::dot_q8_0_f32`], with 20-byte blocks.
pub fn dot_q4_1_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_q4_1)
}

/// `Σ nibble[i] * x[i]` of one Q4_1 weight block (20 bytes) and 32 activations, exact.
///
/// # Panics
///
/// If `w.len() != 20` or `x.len() != 32`.
pub fn block_dot_q4_1(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == BYTES && x.len() == QK);
    let mut s = 0i32;
    for (j, &b) in w[4..].iter().enumerate() {
        s += (b & 0x0F) as i32 * x[j] as i32 + (b >> 4) as i32 * x[j + 16] as i32;
    }
    s
}

/// Dot of a Q4_1 weight row with int8 activations: block term
/// `(dw_b * d_b) * isum_b + mw_b * s_b` ([`block_dot_q4_1`]; `s_b = d_b * Σ qs`, the scaled
/// block sum of [`super::Q8Acts`]), in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree (`w`: 20 bytes per block).
pub fn dot_q4_1_q8(w: &[u8], qs: &[i8], d: &[f32], s: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * BYTES && qs.len() == nb * QK && s.len() == nb);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        let t = (f16_at(blk) * d[b]) * block_dot_q4_1(blk, &qs[b * QK..b * QK + QK]) as f32;
        t + f16_at(&blk[2..]) * s[b]
    })
}

fn dot_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    dot_q4_1_q8(w, x.qs, x.d, x.s)
}
