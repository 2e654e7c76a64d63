//! Q4_0: ggml's `block_q4_0` (`ggml-common.h`): 32 elements, an f16 scale `d` and 16 bytes of
//! nibbles; value = `d * (nibble - 8)`. 18 bytes. The int8 path pairs with [`ActFormat::Q8`]
//! (it uses the block sums for the `- 8`).

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, put_f16, quantize_checks, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

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

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ4_0>();
const _: () = assert!(BYTES == 18);

super::layout::block_layout!(BlockQ4_0, Q4_0, m: -, qh: -);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q4_0,
    name: "Q4_0",
    ggml_id: 2,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q4_0),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q4_0_f32),
    matmul_q8: Some(dot_q8),
};

/// Dequantizes one 18-byte Q4_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 18` or `out.len() != 32`.
pub fn dequantize_block_q4_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let d = f16_at(block);
    for (j, &b) in block[2..].iter().enumerate() {
        out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((b >> 4) as i32 - 8) as f32;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_q4_0);
}

/// Dequantizes a row of Q4_0 blocks into `out`.
///
/// # Errors
///
/// As [`super::dequantize_row_q8_0`], with 18-byte blocks.
pub fn dequantize_row_q4_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    super::dequantize_row_with(DType::Q4_0, bytes, out, dequantize_block_q4_0)
}

/// Quantizes a row of f32 to Q4_0 blocks (18 bytes each) by ggml's reference arithmetic
/// (`quantize_row_q4_0_ref`): `max` = the first element of largest magnitude (with its sign),
/// `d = max / -8`, `id = 1 / d` (0 when `d == 0`), `q = min(15, trunc(x * id + 8.5))`, stored
/// as `f16(d)` and nibbles (element `j` low nibble of byte `j`, element `j + 16` high nibble).
///
/// # Errors
///
/// As [`super::quantize_row_q8_0`], with 18-byte blocks.
pub fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    quantize_checks(DType::Q4_0, x, out)?;
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BYTES)).enumerate() {
        let mut mx = 0f32;
        for &v in xs {
            if v.abs() > mx.abs() {
                mx = v;
            }
        }
        let d = mx / -8.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, d, DType::Q4_0, b, "scale")?;
        let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for j in 0..QK / 2 {
            blk[2 + j] = q(xs[j]) | (q(xs[j + 16]) << 4);
        }
    }
    Ok(())
}

/// Dot of a Q4_0 row with f32 `x`.
///
/// # Panics
///
/// As [`super::q8_0::dot_q8_0_f32`], with 18-byte blocks.
pub fn dot_q4_0_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_q4_0)
}

/// `Σ (nibble[i] - 8) * x[i]` of one Q4_0 weight block (18 bytes) and 32 activations, exact.
///
/// # Panics
///
/// If `w.len() != 18` or `x.len() != 32`.
pub fn block_dot_q4_0(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == BYTES && x.len() == QK);
    let mut s = 0i32;
    for (j, &b) in w[2..].iter().enumerate() {
        s += ((b & 0x0F) as i32 - 8) * x[j] as i32 + ((b >> 4) as i32 - 8) * x[j + 16] as i32;
    }
    s
}

/// Dot of a Q4_0 weight row with int8 activations, as [`super::q8_0::dot_q8_0_q8`] with
/// [`block_dot_q4_0`].
///
/// # Panics
///
/// If the lengths disagree (`w`: 18 bytes per block).
pub fn dot_q4_0_q8(w: &[u8], qs: &[i8], d: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * BYTES && qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        (f16_at(blk) * d[b]) * block_dot_q4_0(blk, &qs[b * QK..b * QK + QK]) as f32
    })
}

fn dot_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    dot_q4_0_q8(w, x.qs, x.d)
}
