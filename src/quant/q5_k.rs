//! Q5_K: ggml's `block_q5_K` (`ggml-common.h`): as Q4_K (f16 `d`, f16 `dmin`, 12 bytes of
//! packed 6-bit scales and mins, 8 sub-blocks of 32) plus 32 bytes `qh` of fifth bits (element
//! `e` of sub-block `j` takes bit `j` of `qh[e % 32]`) before the 128 bytes of nibbles;
//! value = `(d · sc_j) · q - (dmin · m_j)` with `q` in 0..=31. 176 bytes. The int8 path pairs
//! with [`ActFormat::Q8K`].

use super::q4_k::{isums_k, nibbles_k, scales_mins_k4};
use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK_K};
use crate::tensor::DType;

/// ggml `block_q5_K`. 176 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-block scale for the sub-block scales, f16 bits.
    pub d: u16,
    /// Super-block scale for the sub-block mins, f16 bits.
    pub dmin: u16,
    /// 8 scales and 8 mins, 6 bits each, packed (as Q4_K).
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits.
    pub qs: [u8; QK_K / 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ5K>();
const _: () = assert!(BYTES == 176);

super::layout::block_layout!(BlockQ5K, Q5_K, QK_K; d: d, m: dmin, qh: qh, qs: qs, scales: scales);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q5_K,
    name: "Q5_K",
    ggml_id: 13,
    block_elems: QK_K,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8K),
    matmul_f32: Some(dot_q5_k_f32),
    matmul_q8: Some(dot_q5_k_q8k),
};

/// The 256 unsigned 5-bit values of a Q5_K block, in element order.
#[inline(always)]
fn values(block: &[u8]) -> [u8; QK_K] {
    let mut q = nibbles_k(&block[48..]);
    let qh = &block[16..48];
    for (e, v) in q.iter_mut().enumerate() {
        *v |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
    }
    q
}

/// Dequantizes one 176-byte Q5_K super-block into 256 floats.
///
/// # Panics
///
/// If `block.len() != 176` or `out.len() != 256`.
pub fn dequantize_block_q5_k(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK_K);
    let (d, dmin) = (f16_at(block), f16_at(&block[2..]));
    let q = values(block);
    let sm = scales_mins_k4(&block[4..16]);
    for j in 0..8 {
        let (dl, ml) = (d * sm[j] as f32, dmin * sm[8 + j] as f32);
        for l in 0..32 {
            out[32 * j + l] = dl * q[32 * j + l] as f32 - ml;
        }
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK_K, BYTES, dequantize_block_q5_k);
}

/// Dot of a Q5_K row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256 or `w` is not its blocks.
pub fn dot_q5_k_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK_K>(w, x, BYTES, dequantize_block_q5_k)
}

/// Dot of a Q5_K weight row with Q8_K activations, as Q4_K's
/// ([`super::q4_k::dot_q4_k_q8k`]) with 5-bit values.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q5_k_q8k(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK_K && x.sum.len() == nb * 16);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..(b + 1) * BYTES];
        let q = values(blk);
        let xs = &x.qs[b * QK_K..(b + 1) * QK_K];
        let (is, ms) = isums_k(&blk[4..16], &q, xs, &x.sum[b * 16..b * 16 + 16]);
        (f16_at(blk) * x.d[b]) * is as f32 - (f16_at(&blk[2..]) * x.d[b]) * ms as f32
    })
}
