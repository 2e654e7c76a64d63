//! Q3_K: ggml's `block_q3_K` (`ggml-common.h`): a 256-element super-block of 16 sub-blocks
//! of 16: 32 bytes `hmask` (element `e`'s high bit is bit `e / 32` of `hmask[e % 32]`), 64
//! bytes of low 2-bit values (as Q2_K), 12 bytes of packed 6-bit scales (sub-block `i`: the
//! nibble `i / 8` of byte `i % 8`, with bits `2 (i / 4)` of byte `8 + i % 4` above it; stored
//! `+ 32`), then an f16 `d`; `q = low - 4` when the high bit is clear, `low` when set;
//! value = `(d · (sc_j - 32)) · q`. 110 bytes. The int8 path pairs with [`ActFormat::Q8K`].

use super::q2_k::q2;
use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK_K};
use crate::tensor::DType;

/// ggml `block_q3_K`. 110 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits.
    pub qs: [u8; QK_K / 4],
    /// 16 scales, 6 bits each, packed.
    pub scales: [u8; 12],
    /// Super-block scale, f16 bits.
    pub d: [u8; 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ3K>();
const _: () = assert!(BYTES == 110);

super::layout::block_layout!(BlockQ3K, Q3_K, QK_K; d: d, m: -, qh: hmask, qs: qs, scales: scales);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q3_K,
    name: "Q3_K",
    ggml_id: 11,
    block_elems: QK_K,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8K),
    matmul_f32: Some(dot_q3_k_f32),
    matmul_q8: Some(dot_q3_k_q8k),
};

/// The 16 signed sub-block scales (-32..=31) from the 12 packed bytes: sub-block `i` has the
/// nibble `i / 8` of byte `i % 8` as its low 4 bits and bits `2 (i / 4)` of byte `8 + i % 4`
/// above them, stored `+ 32`. Word-parallel (three little-endian u32); the scalar oracle and
/// the SIMD kernels share it.
///
/// # Panics
///
/// If `s.len() < 12`.
#[inline(always)]
pub fn scales_q3(s: &[u8]) -> [i8; 16] {
    let word = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let (a, b, c) = (word(0), word(4), word(8));
    const NIB: u32 = 0x0F0F_0F0F;
    const TWO: u32 = 0x0303_0303;
    let words = [
        (a & NIB) | ((c & TWO) << 4),
        (b & NIB) | (((c >> 2) & TWO) << 4),
        ((a >> 4) & NIB) | (((c >> 4) & TWO) << 4),
        ((b >> 4) & NIB) | (((c >> 6) & TWO) << 4),
    ];
    let mut out = [0i8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        for (o, v) in o.iter_mut().zip(w.to_le_bytes()) {
            *o = v as i8 - 32;
        }
    }
    out
}

/// The 256 signed values (-4..=3) of a Q3_K block, in element order.
#[inline(always)]
fn values(block: &[u8]) -> [i8; QK_K] {
    let (hm, qs) = (&block[..32], &block[32..96]);
    let mut q = [0i8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let high = (hm[e % 32] >> (e / 32)) & 1;
        *v = q2(qs, e) as i8 - if high == 1 { 0 } else { 4 };
    }
    q
}

/// Dequantizes one 110-byte Q3_K super-block into 256 floats.
///
/// # Panics
///
/// If `block.len() != 110` or `out.len() != 256`.
pub fn dequantize_block_q3_k(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK_K);
    let d = f16_at(&block[108..]);
    let sc = scales_q3(&block[96..108]);
    let q = values(block);
    for j in 0..16 {
        let dl = d * sc[j] as f32;
        for e in 16 * j..16 * j + 16 {
            out[e] = dl * q[e] as f32;
        }
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK_K, BYTES, dequantize_block_q3_k);
}

/// Dot of a Q3_K row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256 or `w` is not its blocks.
pub fn dot_q3_k_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK_K>(w, x, BYTES, dequantize_block_q3_k)
}

/// Dot of a Q3_K weight row with Q8_K activations: super-block term
/// `(d · dx) · Σ_j sc_j Σ_{i in j} q_i x_i` in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q3_k_q8k(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK_K);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..(b + 1) * BYTES];
        let xs = &x.qs[b * QK_K..(b + 1) * QK_K];
        let (sc, q) = (scales_q3(&blk[96..108]), values(blk));
        let mut is = 0i32;
        for j in 0..16 {
            let mut s = 0i32;
            for e in 16 * j..16 * j + 16 {
                s += q[e] as i32 * xs[e] as i32;
            }
            is += sc[j] as i32 * s;
        }
        (f16_at(&blk[108..]) * x.d[b]) * is as f32
    })
}
