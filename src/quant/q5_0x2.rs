//! Q5_0x2: two consecutive [`super::q5_0`] blocks of a row (elements `64 j .. 64 j + 64`)
//! repacked into one 44-byte block, so that the AVX-512 int8 kernel decodes the 64 values with
//! one 256-bit broadcast load, one nibble split and one mask load (plain Q5_0 needs two
//! 16-byte loads joined by a `vinserti64x4` and its two `qh` words joined into a mask through
//! a general register: both on port 5, the port the rest of the kernel saturates).
//!
//! Layout (`b0`, `b1`: the two Q5_0 blocks, `q_e` the 5-bit value of element `e`):
//!
//! | bytes | holds |
//! |---|---|
//! | 0..2, 2..4 | `b0.d`, `b1.d` (f16) |
//! | 4..12 | little-endian u64: bit `e` the fifth bit of `b0`'s element `e`, bit `32 + e` of `b1`'s |
//! | 12..44 | byte `e` (`e < 32`): low nibble `b0`'s element `e`, high nibble `b1`'s element `e` |
//!
//! Values, rounding and the block terms are Q5_0's. With int8 activations every product
//! (scalar and SIMD, every table) returns the bits of the same product over the Q5_0 bytes, so
//! a model runs the same with its Q5_0 matrices repacked or not. With f32 activations only
//! the scalar entries exist (every table falls back to them, slowly): they give the scalar
//! oracle's Q5_0 bits, not those of a table's SIMD f32 Q5_0 kernel (a different summation
//! order, within rounding). So loading repacks only for int8 activations and only where the
//! active kernels have the SIMD int8 body ([`repack`] at load;
//! `crate::model::DecoderOptions`'s `repack_weights`). This is rml's load-time layout: it is
//! never read from or written to files, and rows must be whole pairs (`k % 64 == 0`).
//!
//! A column block of 32 (the outlier correction's reads, the transposed prefill tiles) is
//! half `b % 2` of pair `b / 2`: the column-block kernels
//! ([`crate::kernels::Kernels::matmul_q8_halves`]) read one such half of each row.

use super::q5_0::{self, dequantize_block_q5_0, dot_q5_0_q8};
use super::q8::Q8Row;
use super::reference::{accumulate8, dot_f32};
use super::{quantize_checks, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

/// Bytes per pair (64 elements).
pub const BYTES: usize = 2 * q5_0::BYTES;
/// Bytes per 32 elements (as Q5_0): a column block's stride in a row.
pub const HALF_BYTES: usize = q5_0::BYTES;
/// Byte offset of the two f16 scales (half `h`'s at `D_OFFSET + 2 h`).
pub const D_OFFSET: usize = 0;
/// Byte offset of the fifth bits: a little-endian u64, half `h`'s u32 at `QH_OFFSET + 4 h`.
pub const QH_OFFSET: usize = 4;
/// Byte offset of the 32 quant bytes (half 0 in the low nibbles, half 1 in the high).
pub const QS_OFFSET: usize = 12;
const _: () = assert!(QS_OFFSET + QK == BYTES);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q5_0x2,
    name: "Q5_0x2",
    ggml_id: super::NOT_IN_FILES,
    block_elems: 2 * QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q5_0x2),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q5_0x2_f32),
    matmul_q8: Some(dot_q5_0x2_q8),
};

/// Repacks one pair of Q5_0 blocks (`src`: 44 bytes, block `2 j` then `2 j + 1`) into `dst`
/// (44 bytes, the layout above).
///
/// # Panics
///
/// If either slice is not 44 bytes long.
pub fn repack_pair(src: &[u8], dst: &mut [u8]) {
    assert!(src.len() == BYTES && dst.len() == BYTES);
    let (b0, b1) = src.split_at(q5_0::BYTES);
    dst[0..2].copy_from_slice(&b0[0..2]);
    dst[2..4].copy_from_slice(&b1[0..2]);
    dst[4..8].copy_from_slice(&b0[2..6]);
    dst[8..12].copy_from_slice(&b1[2..6]);
    for e in 0..QK {
        dst[12 + e] = nibble(&b0[6..], e) | nibble(&b1[6..], e) << 4;
    }
}

/// Element `e`'s low four bits in Q5_0's `qs` (element `e < 16` the low nibble of byte `e`,
/// `e + 16` its high nibble).
#[inline(always)]
fn nibble(qs: &[u8], e: usize) -> u8 {
    if e < QK / 2 {
        qs[e] & 0x0F
    } else {
        qs[e - QK / 2] >> 4
    }
}

/// Half `h` (0 or 1) of the 44-byte pair `pair` as the plain 22-byte Q5_0 block it came from.
///
/// # Panics
///
/// If `pair` is not 44 bytes long or `h > 1`.
pub fn half_block(pair: &[u8], h: usize) -> [u8; q5_0::BYTES] {
    assert!(pair.len() == BYTES && h < 2);
    let mut b = [0u8; q5_0::BYTES];
    b[0..2].copy_from_slice(&pair[2 * h..2 * h + 2]);
    b[2..6].copy_from_slice(&pair[4 + 4 * h..8 + 4 * h]);
    let q = |e: usize| (pair[12 + e] >> (4 * h)) & 0x0F;
    for j in 0..QK / 2 {
        b[6 + j] = q(j) | q(j + QK / 2) << 4;
    }
    b
}

/// Repacks a row (or whole rows) of Q5_0 blocks, an even number of them, into Q5_0x2 pairs:
/// `dst` gets the same number of bytes.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `src.len()` is not a whole number of pairs of Q5_0
/// blocks or `dst.len() != src.len()`.
pub fn repack(src: &[u8], dst: &mut [u8]) -> Result<()> {
    if src.len() % BYTES != 0 || dst.len() != src.len() {
        return Err(crate::error::Error::invalid_argument(format_args!(
            "Q5_0x2 repack: {} bytes of Q5_0 into {} bytes (need equal lengths, whole pairs of \
             {BYTES} bytes)",
            src.len(),
            dst.len()
        )));
    }
    for (s, d) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(BYTES)) {
        repack_pair(s, d);
    }
    Ok(())
}

/// Dequantizes one 44-byte pair into 64 floats (Q5_0's `d * (q - 16)` for both halves).
///
/// # Panics
///
/// If `pair.len() != 44` or `out.len() != 64`.
pub fn dequantize_pair(pair: &[u8], out: &mut [f32]) {
    assert!(pair.len() == BYTES && out.len() == 2 * QK);
    for (h, o) in out.chunks_exact_mut(QK).enumerate() {
        dequantize_block_q5_0(&half_block(pair, h), o);
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, 2 * QK, BYTES, dequantize_pair);
}

/// Quantizes a row of f32 (a multiple of 64 long) by Q5_0's rule ([`q5_0::quantize_row_q5_0`])
/// and repacks it into pairs.
///
/// # Errors
///
/// As [`q5_0::quantize_row_q5_0`], with 44-byte blocks of 64.
pub fn quantize_row_q5_0x2(x: &[f32], out: &mut [u8]) -> Result<()> {
    quantize_checks(DType::Q5_0x2, x, out)?;
    let mut plain = [0u8; BYTES];
    for (xs, o) in x.chunks_exact(2 * QK).zip(out.chunks_exact_mut(BYTES)) {
        q5_0::quantize_row_q5_0(xs, &mut plain)?;
        repack_pair(&plain, o);
    }
    Ok(())
}

/// Dot of a Q5_0x2 row with f32 `x`: Q5_0's [`q5_0::dot_q5_0_f32`] bits (blocks of 32 in
/// order, each dequantized and dotted, the block dots summed in order).
///
/// # Panics
///
/// If `x.len()` is not a multiple of 64 or `w` is not its pairs.
pub fn dot_q5_0x2_f32(w: &[u8], x: &[f32]) -> f32 {
    assert!(x.len() % (2 * QK) == 0 && w.len() == x.len() / (2 * QK) * BYTES);
    let mut tmp = [0f32; QK];
    let mut sum = 0f32;
    for (pair, xs) in w.chunks_exact(BYTES).zip(x.chunks_exact(2 * QK)) {
        for (h, xh) in xs.chunks_exact(QK).enumerate() {
            dequantize_block_q5_0(&half_block(pair, h), &mut tmp);
            sum += dot_f32(&tmp, xh);
        }
    }
    sum
}

/// Dot of a Q5_0x2 row with one row of int8 activations (blocks of 32): Q5_0's
/// [`q5_0::dot_q5_0_q8`] bits, block `b` being half `b % 2` of pair `b / 2`.
///
/// # Panics
///
/// If the lengths disagree (an odd number of activation blocks included).
pub fn dot_q5_0x2_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    let nb = x.d.len();
    assert!(nb % 2 == 0 && w.len() == nb / 2 * BYTES && x.qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = half_block(&w[b / 2 * BYTES..(b / 2 + 1) * BYTES], b % 2);
        let one = Q8Row {
            qs: &x.qs[b * QK..(b + 1) * QK],
            d: &x.d[b..b + 1],
            s: if x.s.is_empty() { x.s } else { &x.s[b..b + 1] },
            sum: &x.sum[b..b + 1],
        };
        // One block: `accumulate8` of one term is the term itself (`0 + t`, then the sum of
        // that lane with seven zeros), exact.
        dot_q5_0_q8(&blk, &one)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// `n` values in [-1, 1], spread over the row (so each block has its own scale).
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    #[test]
    fn repack_round_trips_and_dequantizes_as_q5_0() {
        let x = values(256, 3);
        let mut plain = vec![0u8; 4 * BYTES];
        q5_0::quantize_row_q5_0(&x, &mut plain).unwrap();
        let mut packed = vec![0u8; plain.len()];
        repack(&plain, &mut packed).unwrap();
        let mut direct = vec![0u8; plain.len()];
        quantize_row_q5_0x2(&x, &mut direct).unwrap();
        assert_eq!(packed, direct);
        for (j, pair) in packed.chunks_exact(BYTES).enumerate() {
            for h in 0..2 {
                let b = 2 * j + h;
                assert_eq!(&half_block(pair, h)[..], &plain[b * 22..(b + 1) * 22], "block {b}");
            }
        }
        let (mut a, mut b) = (vec![0f32; 256], vec![0f32; 256]);
        super::super::dequantize(DType::Q5_0, &plain, &mut a).unwrap();
        super::super::dequantize(DType::Q5_0x2, &packed, &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(q5_0::dot_q5_0_f32(&plain, &x).to_bits(), dot_q5_0x2_f32(&packed, &x).to_bits());
    }

    #[test]
    fn bad_lengths_are_errors_and_no_file_names_it() {
        let mut out = [0u8; 44];
        assert!(repack(&[0u8; 22], &mut out[..22]).is_err());
        assert!(repack(&[0u8; 44], &mut out[..43]).is_err());
        assert!(quantize_row_q5_0x2(&[0.0; 32], &mut out[..22]).is_err());
        assert_eq!(super::super::quantized_from_name("Q5_0x2"), None);
        assert_eq!(super::super::from_ggml_id(super::super::NOT_IN_FILES), None);
        assert!(!alloc::format!("{}", super::super::quantized_names()).contains("Q5_0x2"));
    }
}
