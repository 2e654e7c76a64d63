//! IQ4_NL: ggml's `block_iq4_nl` (`ggml-common.h`): 32 elements, an f16 scale `d` and 16
//! bytes of 4-bit indices (element `j < 16` low nibble of `qs[j]`, element `j + 16` high
//! nibble) into the non-linear codebook [`KVALUES`]; value = `d * KVALUES[index]`. 18 bytes.
//! The int8 path pairs with [`ActFormat::Q8`]. No weight quantizer: ggml's searches scales
//! (not a reference formula).

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK};
use crate::tensor::DType;

/// ggml's `kvalues_iq4nl`: the 16 codebook values.
pub const KVALUES: [i8; 16] =
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// ggml `block_iq4_nl`: f16 scale, 16 bytes of codebook indices. 18 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq4Nl {
    /// Scale, f16 bits.
    pub d: u16,
    /// Packed 4-bit indices.
    pub qs: [u8; QK / 2],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockIq4Nl>();
const _: () = assert!(BYTES == 18);

super::layout::block_layout!(BlockIq4Nl, IQ4_NL, m: -, qh: -);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::IQ4_NL,
    name: "IQ4_NL",
    ggml_id: 20,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: None,
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_iq4_nl_f32),
    matmul_q8: Some(dot_iq4_nl_q8),
};

/// Dequantizes one 18-byte IQ4_NL block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 18` or `out.len() != 32`.
pub fn dequantize_block_iq4_nl(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let d = f16_at(block);
    for (j, &b) in block[2..].iter().enumerate() {
        out[j] = d * KVALUES[(b & 0x0F) as usize] as f32;
        out[j + 16] = d * KVALUES[(b >> 4) as usize] as f32;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_iq4_nl);
}

/// Dot of an IQ4_NL row with f32 `x`.
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32 or `w` is not its blocks.
pub fn dot_iq4_nl_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_iq4_nl)
}

/// Dot of an IQ4_NL weight row with int8 activations: block term
/// `(dw_b * d_b) * Σ KVALUES[q]·x` in the [`accumulate8`] order.
///
/// # Panics
///
/// If the lengths disagree.
pub fn dot_iq4_nl_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(w.len() == nb * BYTES && x.qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        let xs = &x.qs[b * QK..b * QK + QK];
        let mut is = 0i32;
        for (j, &q) in blk[2..].iter().enumerate() {
            is += KVALUES[(q & 0x0F) as usize] as i32 * xs[j] as i32
                + KVALUES[(q >> 4) as usize] as i32 * xs[j + 16] as i32;
        }
        (f16_at(blk) * x.d[b]) * is as f32
    })
}
