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

super::layout::block_layout!(BlockQ8_0, Q8_0, QK; d: d, m: -, qh: -, qs: qs, scales: -);

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

/// Copies whole blocks of a 32-element type whose values are `d · n` for a small integer `n`
/// (Q4_0: `q - 8`, Q5_0: `q - 16`, IQ4_NL: [`super::iq4_nl::KVALUES`]`[q]`; Q8_0 itself)
/// into Q8_0 blocks holding the same values exactly: the f16 `d` copied, `n` stored as i8.
/// Every element dequantizes to the same f32 as in `src` (ggml's `block_q4_0`, `block_q5_0`,
/// `block_iq4_nl` layouts), so any product of the copy equals the original's up to the
/// summation order of the kernel that runs it. The f32-activation kernels of some tiers run
/// Q8_0 faster than these types ([`crate::kernels::Kernels::f32_via_q8_0`]).
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] for any other `dtype`; [`crate::Code::InvalidArgument`]
/// if `src` is not whole blocks of `dtype` or `out` is not 34 bytes per block of it.
pub fn widen_to_q8_0(dtype: DType, src: &[u8], out: &mut [u8]) -> Result<()> {
    use super::{iq4_nl, q4_0, q5_0};
    let bb = match dtype {
        DType::Q4_0 => q4_0::BYTES,
        DType::Q5_0 => q5_0::BYTES,
        DType::IQ4_NL => iq4_nl::BYTES,
        DType::Q8_0 => BYTES,
        _ => {
            return Err(crate::error::Error::unimplemented(format_args!(
                "widening {dtype:?} to Q8_0: only Q4_0, Q5_0, IQ4_NL and Q8_0 hold d · (i8)"
            )))
        }
    };
    let nb = src.len() / bb;
    if src.len() % bb != 0 || out.len() != nb * BYTES {
        return Err(crate::error::Error::invalid_argument(format_args!(
            "widening {dtype:?} to Q8_0: {} source bytes (blocks of {bb}) and {} output bytes \
             (expected {} for {nb} blocks)",
            src.len(),
            out.len(),
            nb.saturating_mul(BYTES)
        )));
    }
    use super::iq4_nl::BlockIq4Nl;
    use super::q4_0::BlockQ4_0;
    use super::q5_0::BlockQ5_0;
    use super::BlockLayout;
    // Every one of these layouts has its f16 `d` first and its quants after it.
    const _: () = assert!(
        BlockQ4_0::D_OFFSET == 0
            && BlockQ5_0::D_OFFSET == 0
            && BlockIq4Nl::D_OFFSET == 0
            && BlockQ8_0::D_OFFSET == 0
    );
    let nibbles = |qs: &[u8], q: &mut [u8], map: &dyn Fn(u8) -> i8| {
        for (j, &b) in qs[..QK / 2].iter().enumerate() {
            q[j] = map(b & 0x0F) as u8;
            q[j + QK / 2] = map(b >> 4) as u8;
        }
    };
    for (blk, o) in src.chunks_exact(bb).zip(out.chunks_exact_mut(BYTES)) {
        o[..2].copy_from_slice(&blk[..2]);
        let q = &mut o[BlockQ8_0::QS_OFFSET..];
        match dtype {
            DType::Q4_0 => nibbles(&blk[BlockQ4_0::QS_OFFSET..], q, &|n| n as i8 - 8),
            DType::IQ4_NL => {
                nibbles(&blk[BlockIq4Nl::QS_OFFSET..], q, &|n| iq4_nl::KVALUES[n as usize])
            }
            DType::Q5_0 => {
                let (qh, qs) = (&blk[BlockQ5_0::QH_OFFSET..], &blk[BlockQ5_0::QS_OFFSET..]);
                for (o, v) in q.iter_mut().zip(q5_0::q5_values(qh, qs)) {
                    *o = (v as i8 - 16) as u8;
                }
            }
            _ => q.copy_from_slice(&blk[BlockQ8_0::QS_OFFSET..]),
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// Random bytes with a sane f16 scale at the start of each block.
    fn blocks(n: usize, bytes: usize, seed: u64) -> alloc::vec::Vec<u8> {
        let mut s = seed;
        let mut out = alloc::vec![0u8; n * bytes];
        for (i, b) in out.iter_mut().enumerate() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            *b = if i % bytes == 1 { 0x2C | (s >> 60) as u8 & 1 } else { (s >> 33) as u8 };
        }
        out
    }

    #[test]
    fn widening_keeps_every_value() {
        type Deq = fn(&[u8], &mut [f32]);
        let types: [(DType, usize, Deq); 4] = [
            (DType::Q4_0, super::super::q4_0::BYTES, super::super::q4_0::dequantize_block_q4_0),
            (DType::Q5_0, super::super::q5_0::BYTES, super::super::q5_0::dequantize_block_q5_0),
            (
                DType::IQ4_NL,
                super::super::iq4_nl::BYTES,
                super::super::iq4_nl::dequantize_block_iq4_nl,
            ),
            (DType::Q8_0, BYTES, dequantize_block_q8_0),
        ];
        for (dt, bb, deq) in types {
            let src = blocks(7, bb, dt as u64 + 1);
            let mut out = alloc::vec![0u8; 7 * BYTES];
            widen_to_q8_0(dt, &src, &mut out).unwrap();
            let (mut a, mut b) = ([0f32; QK], [0f32; QK]);
            for (s, o) in src.chunks_exact(bb).zip(out.chunks_exact(BYTES)) {
                deq(s, &mut a);
                dequantize_block_q8_0(o, &mut b);
                assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits), "{dt:?}");
            }
        }
    }

    #[test]
    fn widening_rejects_other_types_and_sizes() {
        let mut out = [0u8; 2 * BYTES];
        let e = widen_to_q8_0(DType::Q4_1, &[0u8; 40], &mut out).unwrap_err();
        assert_eq!(e.code(), crate::Code::Unimplemented);
        let e = widen_to_q8_0(DType::Q5_0, &[0u8; 23], &mut out).unwrap_err();
        assert_eq!(e.code(), crate::Code::InvalidArgument);
        let e = widen_to_q8_0(DType::Q5_0, &[0u8; 22], &mut out).unwrap_err();
        assert_eq!(e.code(), crate::Code::InvalidArgument);
        assert!(e.to_string().contains("expected 34"), "{e}");
    }
}
