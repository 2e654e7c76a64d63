//! Q6_K: ggml's `block_q6_K` (`ggml-common.h`): a 256-element super-block of 16 sub-blocks of
//! 16 with int8 scales: 128 bytes `ql` of low nibbles, 64 bytes `qh` of high 2-bit pairs, 16
//! i8 `scales`, then an f16 `d`. In each half `h` of 128 elements, element `e` takes nibble
//! `e / 64` of `ql[64 h + e % 64]` and bits `2 (e / 32)` of `qh[32 h + e % 32]`;
//! value = `(d · sc_{e/16}) · (q - 32)`. 210 bytes. The int8 path pairs with
//! [`ActFormat::Q8K`].

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK_K};
use crate::tensor::DType;

/// ggml `block_q6_K`. 210 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low 4 bits.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale, f16 bits.
    pub d: [u8; 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ6K>();
const _: () = assert!(BYTES == 210);

super::layout::block_layout!(BlockQ6K, Q6_K, QK_K; d: d, m: -, qh: qh, qs: ql, scales: scales);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q6_K,
    name: "Q6_K",
    ggml_id: 14,
    block_elems: QK_K,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8K),
    matmul_f32: Some(dot_q6_k_f32),
    matmul_q8: Some(dot_q6_k_q8k),
};

/// The 256 signed values `q - 32` (-32..=31) of a Q6_K block, in element order.
#[inline(always)]
fn values(block: &[u8]) -> [i8; QK_K] {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let mut q = [0i8; QK_K];
    for h in 0..2 {
        for e in 0..128 {
            let lo = (ql[64 * h + e % 64] >> (4 * (e / 64))) & 0x0F;
            let hi = (qh[32 * h + e % 32] >> (2 * (e / 32))) & 3;
            q[128 * h + e] = (lo | (hi << 4)) as i8 - 32;
        }
    }
    q
}

/// Dequantizes one 210-byte Q6_K super-block into 256 floats.
///
/// # Panics
///
/// If `block.len() != 210` or `out.len() != 256`.
pub fn dequantize_block_q6_k(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK_K);
    let d = f16_at(&block[208..]);
    let q = values(block);
    for j in 0..16 {
        let dl = d * (block[192 + j] as i8) as f32;
        for l in 0..16 {
            out[16 * j + l] = dl * q[16 * j + l] as f32;
        }
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK_K, BYTES, dequantize_block_q6_k);
}

/// Dot of a Q6_K row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256 or `w` is not its blocks.
pub fn dot_q6_k_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK_K>(w, x, BYTES, dequantize_block_q6_k)
}

/// Dot of a Q6_K weight row with Q8_K activations: super-block term
/// `(d · dx) · Σ_j sc_j · Σ_{i in j} (q_i - 32) x_i` in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q6_k_q8k(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK_K);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..(b + 1) * BYTES];
        let q = values(blk);
        let xs = &x.qs[b * QK_K..(b + 1) * QK_K];
        let mut is = 0i32;
        for j in 0..16 {
            let mut s = 0i32;
            for l in 16 * j..16 * j + 16 {
                s += q[l] as i32 * xs[l] as i32;
            }
            is += (blk[192 + j] as i8) as i32 * s;
        }
        (f16_at(&blk[208..]) * x.d[b]) * is as f32
    })
}
