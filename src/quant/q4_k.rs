//! Q4_K: ggml's `block_q4_K` (`ggml-common.h`): a 256-element super-block of 8 sub-blocks of
//! 32, an f16 super-scale `d`, an f16 super-min `dmin`, 12 bytes of packed 6-bit sub-block
//! scales and mins (ggml's `get_scale_min_k4`: [`scale_min_k4`]) and 128 bytes of nibbles
//! (sub-block `j` uses the low nibbles of bytes `32 (j / 2) ..` when `j` is even, the high
//! ones when odd); value = `(d · sc_j) · q - (dmin · m_j)`. 144 bytes. The int8 path pairs
//! with [`ActFormat::Q8K`].

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK_K};
use crate::tensor::DType;

/// ggml `block_q4_K`. 144 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-block scale for the sub-block scales, f16 bits.
    pub d: u16,
    /// Super-block scale for the sub-block mins, f16 bits.
    pub dmin: u16,
    /// 8 scales and 8 mins, 6 bits each, packed.
    pub scales: [u8; 12],
    /// 4-bit values.
    pub qs: [u8; QK_K / 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ4K>();
const _: () = assert!(BYTES == 144);

super::layout::block_layout!(BlockQ4K, Q4_K, QK_K; d: d, m: dmin, qh: -, qs: qs, scales: scales);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q4_K,
    name: "Q4_K",
    ggml_id: 12,
    block_elems: QK_K,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8K),
    matmul_f32: Some(dot_q4_k_f32),
    matmul_q8: Some(dot_q4_k_q8k),
};

/// The 8 sub-block scales (bytes `0..8`) and 8 mins (bytes `8..16`), each 6 bits, of a
/// Q4_K/Q5_K super-block from its 12 packed bytes (ggml's `get_scale_min_k4` for every `j` at
/// once): sub-block `j < 4` takes the low 6 bits of bytes `j` (scale) and `j + 4` (min);
/// `j >= 4` the nibbles of byte `j + 4` with the top two bits of bytes `j - 4` (scale) and `j`
/// (min) above them. Word-parallel (three little-endian u32), so the scalar oracle and the
/// SIMD kernels share one unpacking.
///
/// # Panics
///
/// If `s.len() < 12`.
#[inline(always)]
pub fn scales_mins_k4(s: &[u8]) -> [u8; 16] {
    let word = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let (a, b, c) = (word(0), word(4), word(8));
    const LOW6: u32 = 0x3F3F_3F3F;
    const NIB: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x3030_3030;
    let words =
        [a & LOW6, (c & NIB) | ((a >> 2) & TOP2), b & LOW6, ((c >> 4) & NIB) | ((b >> 2) & TOP2)];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Scale and min of sub-block `j < 8` from the 12 packed bytes (ggml's `get_scale_min_k4`):
/// entry `j` of [`scales_mins_k4`].
///
/// # Panics
///
/// If `j >= 8` or `s.len() < 12`.
#[inline(always)]
pub fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    let sm = scales_mins_k4(s);
    (sm[j], sm[8 + j])
}

/// The 256 unsigned 4-bit values of a Q4_K/Q5_K `qs` (128 bytes), in element order.
#[inline(always)]
pub(crate) fn nibbles_k(qs: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for c in 0..4 {
        for l in 0..32 {
            let b = qs[32 * c + l];
            q[64 * c + l] = b & 0x0F;
            q[64 * c + 32 + l] = b >> 4;
        }
    }
    q
}

/// Dequantizes one 144-byte Q4_K super-block into 256 floats.
///
/// # Panics
///
/// If `block.len() != 144` or `out.len() != 256`.
pub fn dequantize_block_q4_k(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK_K);
    let (d, dmin) = (f16_at(block), f16_at(&block[2..]));
    let q = nibbles_k(&block[16..]);
    let sm = scales_mins_k4(&block[4..16]);
    for j in 0..8 {
        let (dl, ml) = (d * sm[j] as f32, dmin * sm[8 + j] as f32);
        for l in 0..32 {
            out[32 * j + l] = dl * q[32 * j + l] as f32 - ml;
        }
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK_K, BYTES, dequantize_block_q4_k);
}

/// Dot of a Q4_K row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 256 or `w` is not its blocks.
pub fn dot_q4_k_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK_K>(w, x, BYTES, dequantize_block_q4_k)
}

/// The exact integer parts of a Q4_K/Q5_K super-block against Q8_K activations:
/// `(Σ_j sc_j · Σ_{i in j} q_i x_i, Σ_j m_j · (bsum_2j + bsum_2j+1))`.
#[inline(always)]
pub(crate) fn isums_k(scales: &[u8], q: &[u8; QK_K], x: &[i8], bsums: &[i32]) -> (i32, i32) {
    let (mut is, mut ms) = (0i32, 0i32);
    let sm = scales_mins_k4(scales);
    for j in 0..8 {
        let (sc, m) = (sm[j], sm[8 + j]);
        let mut s = 0i32;
        for l in 32 * j..32 * j + 32 {
            s += q[l] as i32 * x[l] as i32;
        }
        is += sc as i32 * s;
        ms += m as i32 * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    (is, ms)
}

/// Dot of a Q4_K weight row with Q8_K activations: super-block term
/// `(d · dx) · isum - (dmin · dx) · msum` (`isum = Σ_j sc_j Σ_{i in j} q_i x_i`, `msum = Σ_j m_j (bsum_2j + bsum_2j+1)`) in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_q4_k_q8k(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK_K && x.sum.len() == nb * 16);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..(b + 1) * BYTES];
        let q = nibbles_k(&blk[16..]);
        let xs = &x.qs[b * QK_K..(b + 1) * QK_K];
        let (is, ms) = isums_k(&blk[4..16], &q, xs, &x.sum[b * 16..b * 16 + 16]);
        (f16_at(blk) * x.d[b]) * is as f32 - (f16_at(&blk[2..]) * x.d[b]) * ms as f32
    })
}
