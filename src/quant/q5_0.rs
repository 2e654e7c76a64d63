//! Q5_0: ggml's `block_q5_0` (`ggml-common.h`): 32 elements, an f16 scale `d`, 4 bytes `qh`
//! holding the fifth bit of each element (bit `j` of the little-endian u32 is element `j`'s)
//! and 16 bytes of low nibbles (element `j < 16` low nibble of `qs[j]`, element `j + 16` its
//! high nibble); value = `d * (q - 16)`. 22 bytes. The int8 path pairs with
//! [`ActFormat::Q8`] (block sums for the `- 16`).

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, put_f16, quantize_checks, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

/// ggml `block_q5_0`: f16 scale, 32 high bits, 16 bytes of nibbles. 22 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Fifth bits, little-endian u32 (bit `j` = element `j`).
    pub qh: [u8; 4],
    /// Low nibbles.
    pub qs: [u8; QK / 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ5_0>();
const _: () = assert!(BYTES == 22);

super::layout::block_layout!(BlockQ5_0, Q5_0, m: -, qh: qh);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q5_0,
    name: "Q5_0",
    ggml_id: 6,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q5_0),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q5_0_f32),
    matmul_q8: Some(dot_q5_0_q8),
};

/// The 32 unsigned 5-bit values (0..=31) of a Q5 block's `qh` (4 bytes) and `qs` (16 bytes).
#[inline(always)]
pub(crate) fn q5_values(qh: &[u8], qs: &[u8]) -> [u8; QK] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0F) | ((((h >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((h >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

/// Packs 32 values 0..=31 into `qh` (4 bytes) and `qs` (16 bytes), ggml's layout.
pub(crate) fn pack_q5(q: &[u8; QK], out: &mut [u8]) {
    let mut h = 0u32;
    for (j, &v) in q.iter().enumerate() {
        h |= ((v as u32 >> 4) & 1) << j;
    }
    out[..4].copy_from_slice(&h.to_le_bytes());
    for j in 0..QK / 2 {
        out[4 + j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

/// Dequantizes one 22-byte Q5_0 block into 32 floats (`d * (q - 16)`, as ggml).
///
/// # Panics
///
/// If `block.len() != 22` or `out.len() != 32`.
pub fn dequantize_block_q5_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let d = f16_at(block);
    let q = q5_values(&block[2..6], &block[6..]);
    for (o, &v) in out.iter_mut().zip(&q) {
        *o = d * (v as i32 - 16) as f32;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_q5_0);
}

/// Quantizes a row of f32 to Q5_0 blocks (22 bytes each) by ggml's reference arithmetic
/// (`quantize_row_q5_0_ref`): `max` = the first element of largest magnitude (with its sign),
/// `d = max / -16`, `id = 1 / d` (0 when `d == 0`), `q = min(31, trunc(x * id + 16.5))`.
///
/// # Errors
///
/// As [`super::quantize_row_q8_0`], with 22-byte blocks.
pub fn quantize_row_q5_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    quantize_checks(DType::Q5_0, x, out)?;
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BYTES)).enumerate() {
        let mut mx = 0f32;
        for &v in xs {
            if v.abs() > mx.abs() {
                mx = v;
            }
        }
        let d = mx / -16.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, d, DType::Q5_0, b, "scale")?;
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(xs) {
            *q = ((v * id + 16.5) as i32).clamp(0, 31) as u8;
        }
        pack_q5(&q, &mut blk[2..]);
    }
    Ok(())
}

/// Dot of a Q5_0 row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32 or `w` is not its blocks.
pub fn dot_q5_0_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_q5_0)
}

/// `Σ q[i] * x[i]` (unsigned 5-bit `q`) of one Q5_0/Q5_1-layout block (`qh`, `qs`), exact.
#[inline(always)]
pub(crate) fn block_dot_q5(qh: &[u8], qs: &[u8], x: &[i8]) -> i32 {
    let q = q5_values(qh, qs);
    q.iter().zip(x).map(|(&a, &b)| a as i32 * b as i32).sum()
}

/// Dot of a Q5_0 weight row with one row of int8 activations: block term
/// `(dw_b * d_b) * (Σ q·x - 16 · Σ x)` in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q5_0_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK && x.sum.len() == nb);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        let is = block_dot_q5(&blk[2..6], &blk[6..], &x.qs[b * QK..b * QK + QK]) - 16 * x.sum[b];
        (f16_at(blk) * x.d[b]) * is as f32
    })
}
