//! Q8_0: ggml's `block_q8_0` (`ggml-common.h`): 32 elements, an f16 scale `d` and 32 × i8;
//! value `i` = `d * qs[i]`. 34 bytes. The int8 path pairs with [`ActFormat::Q8`].

use super::q8::Q8Row;
use super::reference::{accumulate8, dot_blocks};
use super::{f16_at, ActFormat, TypeInfo, QK};
use crate::error::Result;
use crate::tensor::DType;

/// ggml `block_q8_0`: f16 scale `d`, then 32 × i8 `qs`; value `i` = `d * qs[i]`. 34 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits (little-endian in files).
    pub d: u16,
    /// Quantized values.
    pub qs: [i8; QK],
}

/// Bytes per block.
pub const BYTES: usize = core::mem::size_of::<BlockQ8_0>();
const _: () = assert!(BYTES == 34);

super::layout::block_layout!(BlockQ8_0, Q8_0, m: -, qh: -);

/// The table row.
pub(super) const INFO: TypeInfo = TypeInfo {
    dtype: DType::Q8_0,
    name: "Q8_0",
    ggml_id: 8,
    block_elems: QK,
    block_bytes: BYTES,
    dequantize: Some(dequantize_blocks),
    quantize: Some(quantize_row_q8_0),
    act: Some(ActFormat::Q8),
    matmul_f32: Some(dot_q8_0_f32),
    matmul_q8: Some(dot_q8),
};

/// Dequantizes one 34-byte Q8_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 34` or `out.len() != 32`.
pub fn dequantize_block_q8_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == BYTES && out.len() == QK);
    let d = f16_at(block);
    for (o, &q) in out.iter_mut().zip(&block[2..]) {
        *o = d * (q as i8) as f32;
    }
}

fn dequantize_blocks(bytes: &[u8], out: &mut [f32]) {
    super::blocks_with(bytes, out, QK, BYTES, dequantize_block_q8_0);
}

/// Dequantizes a row of Q8_0 blocks into `out` (`out.len() / 32` blocks).
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `out.len()` is not a multiple of 32 or `bytes` is not
/// `out.len() / 32 * 34` bytes.
pub fn dequantize_row_q8_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    super::dequantize_row_with(DType::Q8_0, bytes, out, dequantize_block_q8_0)
}

/// Quantizes a row of f32 to Q8_0 blocks (34 bytes each) by ggml's reference arithmetic
/// (`quantize_row_q8_0_ref`, the bytes llama-quantize and the `gguf` package write): per block
/// of 32, `amax = max |x|`, `d = amax / 127`, `id = 1 / d` (0 when `d == 0`),
/// `q = roundf(x * id)`; the block stores `f16(d)` (round to nearest even) and `q`.
///
/// (The int8 activation path quantizes with its own rule, `round(x / d)`; see
/// [`super::Q8Acts`] and [`crate::kernels::Kernels::quantize_row_q8_0`].)
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `x.len()` is not a multiple of 32, if `out` is not
/// `x.len() / 32 * 34` bytes, or if `x` holds NaN or ±infinity; [`crate::Code::OutOfRange`]
/// if a block's scale does not fit in f16 (`amax / 127 >= 65520`). On error `out` may be
/// partly written.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    super::quantize_checks(DType::Q8_0, x, out)?;
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BYTES)).enumerate() {
        let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        super::put_f16(blk, d, DType::Q8_0, b, "scale")?;
        for (q, &v) in blk[2..].iter_mut().zip(xs) {
            *q = super::round_ties_away(v * id) as i8 as u8;
        }
    }
    Ok(())
}

/// Dot of a Q8_0 row with f32 `x` (dequantized on the fly).
///
/// # Panics
///
/// If `x.len()` is not a multiple of 32 or `w` is not `x.len() / 32 * 34` bytes.
pub fn dot_q8_0_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_blocks::<QK>(w, x, BYTES, dequantize_block_q8_0)
}

/// `Σ w[i] * x[i]` of one Q8_0 weight block (34 bytes) and 32 activation values, exact.
///
/// # Panics
///
/// If `w.len() != 34` or `x.len() != 32`.
pub fn block_dot_q8_0(w: &[u8], x: &[i8]) -> i32 {
    assert!(w.len() == BYTES && x.len() == QK);
    w[2..].iter().zip(x).map(|(&a, &b)| a as i8 as i32 * b as i32).sum()
}

/// Dot of a Q8_0 weight row with one row of int8 activations (`qs`: 32 values per block,
/// `d`: f32 scales): `Σ_b (dw_b * d_b) * isum_b` in the [`accumulate8`] order, `isum_b` from
/// [`block_dot_q8_0`], `dw_b` the block's f16 scale.
///
/// # Panics
///
/// If the lengths disagree (`w`: 34 bytes per block).
pub fn dot_q8_0_q8(w: &[u8], qs: &[i8], d: &[f32]) -> f32 {
    let nb = d.len();
    assert!(w.len() == nb * BYTES && qs.len() == nb * QK);
    accumulate8(nb, |b| {
        let blk = &w[b * BYTES..b * BYTES + BYTES];
        (f16_at(blk) * d[b]) * block_dot_q8_0(blk, &qs[b * QK..b * QK + QK]) as f32
    })
}

fn dot_q8(w: &[u8], x: &Q8Row<'_>) -> f32 {
    dot_q8_0_q8(w, x.qs, x.d)
}

/// Writes the f16 scales of a row's 34-byte Q8_0 blocks from per-block f32 scales `d`
/// (the values are already in place).
pub(crate) fn store_q8_0_scales(d: &[f32], out: &mut [u8], first_block: usize) -> Result<()> {
    for (i, (&s, blk)) in d.iter().zip(out.chunks_exact_mut(BYTES)).enumerate() {
        super::put_f16(blk, s, DType::Q8_0, first_block + i, "scale")?;
    }
    Ok(())
}
