//! Q2_K: ggml's `block_q2_K` (`ggml-common.h`): a 256-element super-block of 16 sub-blocks
//! of 16: 16 bytes of scales (low nibble: scale, high nibble: min), 64 bytes of 2-bit values,
//! then f16 `d` and f16 `dmin`. Element `e` is bits `2 ((e % 128) / 32)` of
//! `qs[32 (e / 128) + e % 32]`; value = `(d · sc_j) · q - (dmin · m_j)`, `j = e / 16`.
//! 84 bytes. The int8 path pairs with [`ActFormat::Q8K`].

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK_K};
use crate::tensor::DType;

/// ggml `block_q2_K`. 84 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Sub-block scales (low nibble) and mins (high nibble).
    pub scales: [u8; QK_K / 16],
    /// 2-bit values.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the scales, f16 bits.
    pub d: [u8; 2],
    /// Super-block scale for the mins, f16 bits.
    pub dmin: [u8; 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ2K>();
const _: () = assert!(BYTES == 84);

super::layout::block_layout!(BlockQ2K, Q2_K, QK_K; d: d, m: dmin, qh: -, qs: qs, scales: scales);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q2_K,
    name: "Q2_K",
    ggml_id: 10,
    block_elems: QK_K,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8K),
    matmul_f32: Some(dot_q2_k_f32),
    matmul_q8: Some(dot_q2_k_q8k),
};

/// The 2-bit value of element `e` from the 64 bytes `qs`.
#[inline(always)]
pub(crate) fn q2(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3
}

/// Dequantizes one 84-byte Q2_K super-block into 256 floats.
///
/// # Panics
///
/// If `block.len() != 84` or `out.len() != 256`.
pub fn dequantize_block_q2_k(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK_K);
    let (d, dmin) = (f16_at(&block[80..]), f16_at(&block[82..]));
    let qs = &block[16..80];
    for j in 0..16 {
        let sc = block[j];
        let (dl, ml) = (d * (sc & 0x0F) as f32, dmin * (sc >> 4) as f32);
        for e in 16 * j..16 * j + 16 {
            out[e] = dl * q2(qs, e) as f32 - ml;
        }
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK_K, BYTES, dequantize_block_q2_k);
}

/// Dot of a Q2_K row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256 or `w` is not its blocks.
pub fn dot_q2_k_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK_K>(w, x, BYTES, dequantize_block_q2_k)
}

/// Dot of a Q2_K weight row with Q8_K activations: super-block term
/// `(d · dx) · Σ_j sc_j Σ_{i in j} q_i x_i - (dmin · dx) · Σ_j m_j bsum_j` in the
/// [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q2_k_q8k(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK_K && x.sum.len() == nb * 16);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..(b + 1) * BYTES];
        let xs = &x.qs[b * QK_K..(b + 1) * QK_K];
        let (mut is, mut ms) = (0i32, 0i32);
        for j in 0..16 {
            let mut s = 0i32;
            for e in 16 * j..16 * j + 16 {
                s += q2(&blk[16..80], e) as i32 * xs[e] as i32;
            }
            is += (blk[j] & 0x0F) as i32 * s;
            ms += (blk[j] >> 4) as i32 * x.sum[b * 16 + j];
        }
        (f16_at(&blk[80..]) * x.d[b]) * is as f32 - (f16_at(&blk[82..]) * x.d[b]) * ms as f32
    })
}
