//! The row-interleaved layout of some weight types ([`TYPES`]): a kernel-owned copy of a
//! matrix made at load ([`pack`]) for the tiers whose int8 kernels read it
//! ([`super::Kernels::matmul_q8_rows8`]; today AVX2 and AVX-VNNI), so that a SIMD lane holds
//! one weight row and a block's dot product over 8 rows needs no horizontal reduction.
//!
//! A matrix of `rows` (a multiple of [`ROWS`]) × `k` is stored as `rows / 8` groups of 8
//! consecutive rows, each group `8 · row_bytes` bytes (so the matrix keeps its size, and rows
//! `8 j ..` start at byte `8 j · row_bytes` as in the plain layout). Inside a group, block `b`
//! of the 8 rows is one *group-block* of `8 · block_bytes` bytes at `b · 8 · block_bytes`:
//! each field of the block (the f16 scale, the f16 minimum of Q4_1, the quants) is stored
//! for the 8 rows together, in units (2 bytes for f16 fields, 4 bytes of quants), unit `u`
//! of row `i` at `8 · field_offset + (8 u + i) · unit`. So the 8 rows' scales are 16
//! contiguous bytes (one `vcvtph2ps`), and 4 bytes of quants of each row fill a 32-byte
//! register, row `i` in lane `i`.
//!
//! Types: Q4_0, Q4_1, Q5_0, Q8_0 and Q4_K ([`TYPES`]); a Q4_K group-block is 8 rows of one
//! super-block of 256 (1152 bytes: the 8 `d` at 0, the 8 `dmin` at 16, the packed 6-bit
//! scales and mins at 32 as three 32-byte units, then the 32 units of nibbles). Q5_0's fifth
//! bits are also permuted within each row's 32-bit word: element `4 c + j`'s bit (chunk `c`'s low nibbles) at bit
//! `8 j + 4 + c`, element `16 + 4 c + j`'s at `8 j + c`, so that one shift and one AND put a
//! chunk's fifth bits at bit 4 of the bytes they belong to. The layout is not a [`DType`] row format:
//! [`crate::ops::Matrix::new_rows8`] wraps such bytes, and only the int8 product (and
//! [`crate::ops::dequantize_row`], by [`unpack_row`]) reads them. Bits: every output is the
//! plain layout's (the kernels keep the oracle's order per row).

use crate::error::{Error, Result};
use crate::tensor::DType;

/// Rows per interleaved group.
pub const ROWS: usize = 8;

/// The types with an interleaved layout (the ones [`supports`] accepts).
pub const TYPES: [DType; 5] = [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K];

/// The largest block of the [`TYPES`] (Q4_K's 144 bytes): a stack buffer that holds any one.
pub(crate) const MAX_BLOCK_BYTES: usize = {
    let mut m = 0;
    let mut i = 0;
    while i < TYPES.len() {
        if TYPES[i].block_bytes() > m {
            m = TYPES[i].block_bytes();
        }
        i += 1;
    }
    m
};

/// The fields of one block of `dtype`: `(offset, bytes, unit)`.
fn fields(dtype: DType) -> Option<&'static [(usize, usize, usize)]> {
    Some(match dtype {
        DType::Q4_0 => &[(0, 2, 2), (2, 16, 4)],
        DType::Q4_1 => &[(0, 2, 2), (2, 2, 2), (4, 16, 4)],
        DType::Q5_0 => &[(0, 2, 2), (QH, 4, 4), (6, 16, 4)],
        DType::Q8_0 => &[(0, 2, 2), (2, 32, 4)],
        DType::Q4_K => &[(0, 2, 2), (2, 2, 2), (4, 12, 4), (16, 128, 4)],
        _ => return None,
    })
}

/// Byte offset of Q5_0's fifth bits (a little-endian u32, bit `j` for element `j`).
const QH: usize = 2;

/// Q5_0's fifth bits as the interleaved layout stores them: for quant chunk `c` (bytes
/// `4 c .. 4 c + 4`, elements `4 c + j` in the low nibbles and `16 + 4 c + j` in the high
/// ones), element `4 c + j`'s bit at `8 j + 4 + c` and element `16 + 4 c + j`'s at
/// `8 j + c`, so that shifting the word right by `c` (left by `4 - c`) puts chunk `c`'s
/// bits at bit 4 of the bytes they belong to.
fn qh_pack(qh: u32) -> u32 {
    let mut out = 0;
    for c in 0..4 {
        for j in 0..4 {
            out |= (qh >> (4 * c + j) & 1) << (8 * j + 4 + c);
            out |= (qh >> (16 + 4 * c + j) & 1) << (8 * j + c);
        }
    }
    out
}

/// The inverse of [`qh_pack`].
fn qh_unpack(w: u32) -> u32 {
    let mut out = 0;
    for c in 0..4 {
        for j in 0..4 {
            out |= (w >> (8 * j + 4 + c) & 1) << (4 * c + j);
            out |= (w >> (8 * j + c) & 1) << (16 + 4 * c + j);
        }
    }
    out
}

/// A unit of field `off` of `dtype` as stored (`pack`: plain to interleaved, else back).
fn transform(dtype: DType, off: usize, unit: &mut [u8], pack: bool) {
    if dtype == DType::Q5_0 && off == QH {
        let v = u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]);
        let v = if pack { qh_pack(v) } else { qh_unpack(v) };
        unit.copy_from_slice(&v.to_le_bytes());
    }
}

/// Whether `dtype` has an interleaved layout.
pub fn supports(dtype: DType) -> bool {
    fields(dtype).is_some()
}

/// Checks a `rows × k` matrix of `dtype` in `len` bytes for the layout; its row bytes.
fn check(dtype: DType, rows: usize, k: usize, len: usize) -> Result<usize> {
    if !supports(dtype) {
        return Err(Error::unimplemented(format_args!("{dtype} has no row-interleaved layout")));
    }
    let rb = dtype.row_bytes(k)?;
    if rows % ROWS != 0 || rows.checked_mul(rb) != Some(len) {
        return Err(Error::invalid_argument(format_args!(
            "row-interleaved {dtype} matrix {rows}x{k}: rows must be a multiple of {ROWS} and \
             the data {rows} rows of {rb} bytes, got {len} bytes"
        )));
    }
    Ok(rb)
}

/// Copies a plain `rows × k` matrix of `dtype` (`src`, row-major) into the interleaved
/// layout (`dst`, the same size).
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] if `dtype` has no interleaved layout ([`supports`]);
/// [`crate::Code::InvalidArgument`] if `rows` is not a multiple of [`ROWS`], `k` not of the
/// block size, or `src` / `dst` are not `rows` rows long.
pub fn pack(dtype: DType, rows: usize, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let rb = check(dtype, rows, k, src.len())?;
    check(dtype, rows, k, dst.len())?;
    if rb == 0 {
        return Ok(());
    }
    let (bb, f) = (dtype.block_bytes(), fields(dtype).unwrap_or(&[]));
    for (sg, dg) in src.chunks_exact(ROWS * rb).zip(dst.chunks_exact_mut(ROWS * rb)) {
        for (b, db) in dg.chunks_exact_mut(ROWS * bb).enumerate() {
            for &(off, len, unit) in f {
                for u in 0..len / unit {
                    for i in 0..ROWS {
                        let s = i * rb + b * bb + off + u * unit;
                        let d = ROWS * off + (ROWS * u + i) * unit;
                        db[d..d + unit].copy_from_slice(&sg[s..s + unit]);
                        transform(dtype, off, &mut db[d..d + unit], true);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Row `r` of an interleaved `rows × k` matrix of `dtype` (`data`) in the plain layout, into
/// `out` (one row's bytes).
///
/// # Errors
///
/// As [`pack`]; also [`crate::Code::InvalidArgument`] if `r >= rows` or `out` is not one
/// row long.
pub fn unpack_row(
    dtype: DType,
    rows: usize,
    k: usize,
    data: &[u8],
    r: usize,
    out: &mut [u8],
) -> Result<()> {
    let rb = check(dtype, rows, k, data.len())?;
    if r >= rows || out.len() != rb {
        return Err(Error::invalid_argument(format_args!(
            "row-interleaved {dtype}: row {r} of {rows} into {} bytes (need {rb})",
            out.len()
        )));
    }
    for (b, ob) in out.chunks_exact_mut(dtype.block_bytes()).enumerate() {
        unpack_block(dtype, rb, data, r, b, ob);
    }
    Ok(())
}

/// Block `b` of row `r` of an interleaved matrix of `dtype` (`rb` bytes per row, `data`)
/// in the plain layout, into `out` (one block's bytes). Nothing is written for a `dtype`
/// without the layout.
///
/// # Panics
///
/// If row `r`'s group or block `b` is outside `data`, or `out` is not one block long.
pub(crate) fn unpack_block(
    dtype: DType,
    rb: usize,
    data: &[u8],
    r: usize,
    b: usize,
    out: &mut [u8],
) {
    let (bb, f) = (dtype.block_bytes(), fields(dtype).unwrap_or(&[]));
    assert_eq!(out.len(), bb, "unpack_block: out must hold one block");
    let (g, i) = (&data[r / ROWS * ROWS * rb..][..ROWS * rb], r % ROWS);
    let gb = &g[b * ROWS * bb..(b + 1) * ROWS * bb];
    for &(off, len, unit) in f {
        for u in 0..len / unit {
            let d = ROWS * off + (ROWS * u + i) * unit;
            let o = &mut out[off + u * unit..off + (u + 1) * unit];
            o.copy_from_slice(&gb[d..d + unit]);
            transform(dtype, off, o, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn pack_then_unpack_gives_every_row_back() {
        for dtype in TYPES {
            let k = 3 * dtype.block_size();
            let rows = 16;
            let rb = dtype.row_bytes(k).unwrap();
            let src: Vec<u8> = (0..rows * rb).map(|i| (i * 7 + i / 13) as u8).collect();
            let mut dst = vec![0u8; src.len()];
            pack(dtype, rows, k, &src, &mut dst).unwrap();
            assert_ne!(src, dst);
            // Row 3's scale is bytes 6..8 of the first group-block.
            assert_eq!(dst[6..8], src[3 * rb..3 * rb + 2]);
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                unpack_row(dtype, rows, k, &dst, r, &mut row).unwrap();
                assert_eq!(row, src[r * rb..(r + 1) * rb], "{dtype} row {r}");
            }
        }
    }

    #[test]
    fn fifth_bits_round_trip() {
        for v in [0u32, 1, 0x8000_0000, 0xDEAD_BEEF, 0x0001_0000, u32::MAX] {
            assert_eq!(qh_unpack(qh_pack(v)), v);
            assert_eq!(qh_pack(v).count_ones(), v.count_ones());
        }
        // Element 5 (chunk 1, j = 1, low nibble) lands at bit 8 + 4 + 1; element 21 (chunk
        // 1, j = 1, high nibble) at bit 8 + 1.
        assert_eq!(qh_pack(1 << 5), 1 << 13);
        assert_eq!(qh_pack(1 << 21), 1 << 9);
    }

    #[test]
    fn bad_shapes_and_types_are_errors() {
        let rb = DType::Q4_0.row_bytes(32).unwrap();
        let src = vec![0u8; 12 * rb];
        let mut dst = vec![0u8; 12 * rb];
        let e = pack(DType::Q4_0, 12, 32, &src, &mut dst).unwrap_err();
        assert_eq!(e.code(), crate::Code::InvalidArgument);
        let e = pack(DType::Q5_1, 8, 32, &src[..8 * 24], &mut dst[..8 * 24]).unwrap_err();
        assert_eq!(e.code(), crate::Code::Unimplemented);
        let mut row = vec![0u8; rb];
        let e = unpack_row(DType::Q4_0, 8, 32, &src[..8 * rb], 8, &mut row).unwrap_err();
        assert_eq!(e.code(), crate::Code::InvalidArgument);
    }
}
