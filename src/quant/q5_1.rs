//! Q5_1: ggml's `block_q5_1` (`ggml-common.h`): 32 elements, an f16 scale `d`, an f16 minimum
//! `m`, 4 bytes of fifth bits and 16 bytes of nibbles (as Q5_0); value = `d * q + m`.
//! 24 bytes. The int8 path pairs with [`ActFormat::Q8`] and its scaled block sums (for `m`).

use super::q5_0::{block_dot_q5, pack_q5, q5_values};
use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, put_f16, quantize_checks, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

/// ggml `block_q5_1`: f16 scale, f16 minimum, 32 high bits, 16 bytes of nibbles. 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum, f16 bits.
    pub m: u16,
    /// Fifth bits, little-endian u32 (bit `j` = element `j`).
    pub qh: [u8; 4],
    /// Low nibbles.
    pub qs: [u8; QK / 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ5_1>();
const _: () = assert!(BYTES == 24);

super::layout::block_layout!(BlockQ5_1, Q5_1, m: m, qh: qh);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q5_1,
    name: "Q5_1",
    ggml_id: 7,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q5_1),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q5_1_f32),
    matmul_q8: Some(dot_q5_1_q8),
};

/// Dequantizes one 24-byte Q5_1 block into 32 floats (`d * q + m`, as ggml).
///
/// # Panics
///
/// If `block.len() != 24` or `out.len() != 32`.
pub fn dequantize_block_q5_1(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let (d, m) = (f16_at(block), f16_at(&block[2..]));
    let q = q5_values(&block[4..8], &block[8..]);
    for (o, &v) in out.iter_mut().zip(&q) {
        *o = d * v as f32 + m;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_q5_1);
}

/// Quantizes a row of f32 to Q5_1 blocks (24 bytes each) by ggml's reference arithmetic
/// (`quantize_row_q5_1_ref`): `d = (max - min) / 31`, `id = 1 / d` (0 when `d == 0`),
/// `q = min(31, trunc((x - min) * id + 0.5))`.
///
/// # Errors
///
/// As [`super::quantize_row_q8_0`], with 24-byte blocks; [`crate::Code::OutOfRange`] also
/// when `min` does not fit in f16.
pub fn quantize_row_q5_1(x: &[f32], out: &mut [u8]) -> Result<()> {
    quantize_checks(DType::Q5_1, x, out)?;
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BYTES)).enumerate() {
        let mn = xs.iter().copied().fold(f32::MAX, |a, v| if v < a { v } else { a });
        let mx = xs.iter().copied().fold(-f32::MAX, |a, v| if v > a { v } else { a });
        let d = (mx - mn) / 31.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, d, DType::Q5_1, b, "scale")?;
        put_f16(&mut blk[2..], mn, DType::Q5_1, b, "minimum")?;
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(xs) {
            *q = (((v - mn) * id + 0.5) as i32).clamp(0, 31) as u8;
        }
        pack_q5(&q, &mut blk[4..]);
    }
    Ok(())
}

/// Dot of a Q5_1 row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32 or `w` is not its blocks.
pub fn dot_q5_1_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_q5_1)
}

/// Dot of a Q5_1 weight row with int8 activations: block term
/// `(dw_b * d_b) * Σ q·x + mw_b * s_b` (`s_b` the scaled block sum) in the [`accumulate8`]
/// order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q5_1_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK && x.s.len() == nb);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        let is = block_dot_q5(&blk[4..8], &blk[8..], &x.qs[b * QK..b * QK + QK]);
        (f16_at(blk) * x.d[b]) * is as f32 + f16_at(&blk[2..]) * x.s[b]
    })
}
