//! Block-quantized formats with ggml's byte layouts (`block_q8_0`, `block_q4_0`,
//! `block_q4_1` in ggml's `ggml-common.h`), so GGUF weights are used in place.

use half::f16;

use crate::error::{Error, Result};
use crate::tensor::DType;

/// Elements per quantization block.
pub const QK: usize = 32;

/// ggml `block_q8_0`: f16 scale `d`, then 32 × i8 `qs`; value `i` = `d * qs[i]`. 34 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits (little-endian in files).
    pub d: u16,
    /// Quantized values.
    pub qs: [i8; QK],
}

/// ggml `block_q4_0`: f16 scale `d`, then 16 bytes; element `j < 16` is the low nibble of
/// `qs[j]`, element `j + 16` the high nibble; value = `d * (nibble - 8)`. 18 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Packed nibbles.
    pub qs: [u8; QK / 2],
}

/// ggml `block_q4_1`: f16 scale `d`, f16 min `m`, then 16 bytes of nibbles (as Q4_0);
/// value = `d * nibble + m`. 20 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum, f16 bits.
    pub m: u16,
    /// Packed nibbles.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(core::mem::size_of::<BlockQ4_1>() == 20);

/// Reads the little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
pub fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Dequantizes one 34-byte Q8_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 34` or `out.len() != 32`.
pub fn dequantize_block_q8_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 34 && out.len() == QK);
    let d = f16_at(block);
    for (o, &q) in out.iter_mut().zip(&block[2..]) {
        *o = d * (q as i8) as f32;
    }
}

/// Dequantizes one 18-byte Q4_0 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 18` or `out.len() != 32`.
pub fn dequantize_block_q4_0(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 18 && out.len() == QK);
    let d = f16_at(block);
    for (j, &b) in block[2..].iter().enumerate() {
        out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((b >> 4) as i32 - 8) as f32;
    }
}

/// Dequantizes one 20-byte Q4_1 block into 32 floats.
///
/// # Panics
///
/// If `block.len() != 20` or `out.len() != 32`.
pub fn dequantize_block_q4_1(block: &[u8], out: &mut [f32]) {
    assert!(block.len() == 20 && out.len() == QK);
    let d = f16_at(block);
    let m = f16_at(&block[2..]);
    for (j, &b) in block[4..].iter().enumerate() {
        out[j] = d * (b & 0x0F) as f32 + m;
        out[j + 16] = d * (b >> 4) as f32 + m;
    }
}

/// Rounds to the nearest integer, ties away from zero (C's `roundf`): the one rounding rule
/// every quantizer in rml uses, on every ISA.
#[inline(always)]
pub fn round_ties_away(v: f32) -> f32 {
    libm::roundf(v)
}

/// Number of 32-element blocks in a row of `len` elements of `dtype`.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] naming the block size if `len % 32 != 0`.
pub(crate) fn row_blocks(dtype: DType, len: usize) -> Result<usize> {
    if len % QK != 0 {
        return Err(Error::invalid_argument(format_args!(
            "{dtype}: row of {len} elements is not a multiple of the block size {QK}"
        )));
    }
    Ok(len / QK)
}

/// Checks that `bytes` holds exactly `nb` blocks of `dtype`.
fn check_bytes(dtype: DType, nb: usize, bytes: usize, what: &str) -> Result<()> {
    let want = nb * dtype.block_bytes();
    if bytes != want {
        return Err(Error::invalid_argument(format_args!(
            "{dtype}: {what} has {bytes} bytes, {nb} blocks need {want}"
        )));
    }
    Ok(())
}

/// Stores `v` as little-endian f16 bits at `out[0..2]`.
///
/// # Errors
///
/// [`crate::Code::OutOfRange`] if `v` rounds to an infinite f16 (`|v| >= 65520`).
fn put_f16(out: &mut [u8], v: f32, dtype: DType, block: usize, what: &str) -> Result<()> {
    let h = f16::from_f32(v);
    if h.is_infinite() {
        return Err(Error::out_of_range(format_args!(
            "{dtype} block {block}: {what} {v} does not fit in f16"
        )));
    }
    out[..2].copy_from_slice(&h.to_bits().to_le_bytes());
    Ok(())
}

/// The error for a row holding NaN or ±infinity.
#[cold]
pub(crate) fn non_finite(dtype: DType, x: &[f32]) -> Error {
    let i = x.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Error::invalid_argument(format_args!(
        "{dtype}: cannot quantize non-finite input (element {i} is {})",
        x.get(i).copied().unwrap_or(f32::NAN)
    ))
}

/// Quantizes a row of f32 to Q8_0 blocks (34 bytes each) with the active kernels (the
/// scalar, AVX2 and NEON paths give identical bytes).
///
/// Per block of 32: `amax = max |x|`, `d = amax / 127` (in f32), and
/// `q = clamp(round(x / d), -127, 127)` with `x / d` an IEEE division by that f32 `d` and
/// [`round_ties_away`]; the block stores `f16(d)` (round to nearest even) and `q`. A block with
/// `d == 0` (all zeros, or subnormals too small to scale) stores `d = 0` and zeros. The
/// quantized values are computed against the f32 `d`, not the f16-rounded one (as ggml does).
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `x.len()` is not a multiple of 32, if `out` is not
/// `x.len() / 32 * 34` bytes, or if `x` holds NaN or ±infinity; [`crate::Code::OutOfRange`]
/// if a block's scale does not fit in f16 (`amax / 127 >= 65520`). On error `out` may be
/// partly written.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    super::active()?.quantize_row_q8_0(x, out)
}

/// Quantizes a row of f32 to Q4_0 blocks (18 bytes each); scalar (conversion and tests).
///
/// Per block: `mx` = the first element of largest magnitude (with its sign),
/// `d = mx / -8`, `q = clamp(round(x / d) + 8, 0, 15)` ([`round_ties_away`], division by the
/// f32 `d`), stored as `f16(d)` and nibbles (element `j` low nibble of byte `j`, element
/// `j + 16` high nibble). `d == 0` gives nibbles 8 (value 0).
///
/// # Errors
///
/// As [`quantize_row_q8_0`], with 18-byte blocks.
pub fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    let nb = row_blocks(DType::Q4_0, x.len())?;
    check_bytes(DType::Q4_0, nb, out.len(), "output")?;
    if x.iter().any(|v| !v.is_finite()) {
        return Err(non_finite(DType::Q4_0, x));
    }
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(18)).enumerate() {
        let mut mx = 0f32;
        for &v in xs {
            if v.abs() > mx.abs() {
                mx = v;
            }
        }
        let d = mx / -8.0;
        put_f16(blk, d, DType::Q4_0, b, "scale")?;
        let q = |v: f32| -> u8 {
            if d == 0.0 {
                8
            } else {
                (round_ties_away(v / d) + 8.0).clamp(0.0, 15.0) as u8
            }
        };
        for j in 0..QK / 2 {
            blk[2 + j] = q(xs[j]) | (q(xs[j + 16]) << 4);
        }
    }
    Ok(())
}

/// Quantizes a row of f32 to Q4_1 blocks (20 bytes each); scalar (conversion and tests).
///
/// Per block: `m = min x`, `d = (max x - m) / 15`, `q = clamp(round((x - m) / d), 0, 15)`
/// ([`round_ties_away`], f32 arithmetic), stored as `f16(d)`, `f16(m)` and nibbles as Q4_0.
/// `d == 0` gives nibbles 0 (value `m`).
///
/// # Errors
///
/// As [`quantize_row_q8_0`], with 20-byte blocks; [`crate::Code::OutOfRange`] also when `m`
/// does not fit in f16.
pub fn quantize_row_q4_1(x: &[f32], out: &mut [u8]) -> Result<()> {
    let nb = row_blocks(DType::Q4_1, x.len())?;
    check_bytes(DType::Q4_1, nb, out.len(), "output")?;
    if x.iter().any(|v| !v.is_finite()) {
        return Err(non_finite(DType::Q4_1, x));
    }
    for (b, (xs, blk)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(20)).enumerate() {
        let mn = xs.iter().copied().fold(f32::INFINITY, f32::min);
        let mx = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (mx - mn) / 15.0;
        put_f16(blk, d, DType::Q4_1, b, "scale")?;
        put_f16(&mut blk[2..], mn, DType::Q4_1, b, "minimum")?;
        let q = |v: f32| -> u8 {
            if d == 0.0 {
                0
            } else {
                round_ties_away((v - mn) / d).clamp(0.0, 15.0) as u8
            }
        };
        for j in 0..QK / 2 {
            blk[4 + j] = q(xs[j]) | (q(xs[j + 16]) << 4);
        }
    }
    Ok(())
}

/// Writes the 34-byte Q8_0 blocks of a row from per-block f32 scales `d` and values `qs`
/// (32 per block), storing `f16(d)`.
pub(crate) fn store_q8_0_scales(d: &[f32], out: &mut [u8], first_block: usize) -> Result<()> {
    for (i, (&s, blk)) in d.iter().zip(out.chunks_exact_mut(34)).enumerate() {
        put_f16(blk, s, DType::Q8_0, first_block + i, "scale")?;
    }
    Ok(())
}

fn dequantize_row(
    dtype: DType,
    bytes: &[u8],
    out: &mut [f32],
    block: fn(&[u8], &mut [f32]),
) -> Result<()> {
    let nb = row_blocks(dtype, out.len())?;
    check_bytes(dtype, nb, bytes.len(), "input")?;
    for (blk, o) in bytes.chunks_exact(dtype.block_bytes()).zip(out.chunks_exact_mut(QK)) {
        block(blk, o);
    }
    Ok(())
}

/// Dequantizes a row of Q8_0 blocks into `out` (`out.len() / 32` blocks).
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `out.len()` is not a multiple of 32 or `bytes` is not
/// `out.len() / 32 * 34` bytes.
pub fn dequantize_row_q8_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    dequantize_row(DType::Q8_0, bytes, out, dequantize_block_q8_0)
}

/// Dequantizes a row of Q4_0 blocks into `out`.
///
/// # Errors
///
/// As [`dequantize_row_q8_0`], with 18-byte blocks.
pub fn dequantize_row_q4_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    dequantize_row(DType::Q4_0, bytes, out, dequantize_block_q4_0)
}

/// Dequantizes a row of Q4_1 blocks into `out`.
///
/// # Errors
///
/// As [`dequantize_row_q8_0`], with 20-byte blocks.
pub fn dequantize_row_q4_1(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    dequantize_row(DType::Q4_1, bytes, out, dequantize_block_q4_1)
}

/// Bytes of scratch that [`Q8Acts`] needs for `n` activation rows of `k` elements: per
/// 32-element block 32 bytes of values, an f32 scale, an f32 scaled sum and an i32 sum
/// (44 bytes), plus 64 bytes of alignment slack.
pub const fn q8_acts_bytes(k: usize, n: usize) -> usize {
    n * k.div_ceil(QK) * 44 + 64
}

/// Activations quantized to Q8 for the int8 kernels: `n` rows of `nb` blocks, carved out of
/// caller scratch (no allocation).
///
/// Block `b` of row `t` (index `i = t * nb + b`) has values `qs[32 i .. 32 i + 32]`, each in
/// `-127..=127` (never -128: the AVX2 sign trick relies on it), an f32 scale `d[i]`,
/// `sum[i] = Σ qs` and `s[i] = d[i] * sum[i] as f32`. The values are those of
/// [`quantize_row_q8_0`] (same rule, same bytes); the scale stays f32 instead of f16.
#[derive(Clone, Copy, Debug)]
pub struct Q8Acts<'a> {
    n: usize,
    nb: usize,
    qs: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
    sum: &'a [i32],
}

type Parts<'a> = (&'a mut [i8], &'a mut [f32], &'a mut [f32], &'a mut [i32]);

/// Splits 64-byte aligned scratch into the [`Q8Acts`] arrays for `m` blocks.
fn carve(scratch: &mut [u8], m: usize) -> Result<Parts<'_>> {
    let off = scratch.as_ptr().align_offset(64);
    let need = m.checked_mul(44).and_then(|b| b.checked_add(off));
    let Some(need) = need.filter(|&need| need <= scratch.len()) else {
        return Err(Error::invalid_argument(format_args!(
            "int8 activations: scratch has {} bytes, {m} blocks need {} (see ops::scratch_bytes)",
            scratch.len(),
            m.saturating_mul(44).saturating_add(64)
        )));
    };
    let buf = &mut scratch[off..need];
    let (qs, rest) = buf.split_at_mut(m * 32);
    let (d, rest) = rest.split_at_mut(m * 4);
    let (s, sum) = rest.split_at_mut(m * 4);
    Ok((
        crate::tensor::cast_slice_mut(qs),
        crate::tensor::cast_slice_mut(d),
        crate::tensor::cast_slice_mut(s),
        crate::tensor::cast_slice_mut(sum),
    ))
}

/// Fills `sum` and `s` from `qs` and `d`.
fn finish_sums(qs: &[i8], d: &[f32], s: &mut [f32], sum: &mut [i32]) {
    for (((q, &d), s), sum) in qs.chunks_exact(QK).zip(d).zip(s.iter_mut()).zip(sum.iter_mut()) {
        let t: i32 = q.iter().map(|&v| v as i32).sum();
        *sum = t;
        *s = d * t as f32;
    }
}

impl<'a> Q8Acts<'a> {
    /// Quantizes `n` rows of `k` activations (`x.len() == n * k`) into `scratch` with the
    /// kernels `kern` (the bytes are the same on every ISA).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `k` is not a multiple of 32, `x.len() != n * k`,
    /// `scratch` is shorter than [`q8_acts_bytes`]`(k, n)`, or `x` holds NaN or ±infinity.
    pub fn quantize(
        kern: &super::Kernels,
        x: &[f32],
        n: usize,
        k: usize,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        let nb = row_blocks(DType::Q8_0, k)?;
        if Some(x.len()) != n.checked_mul(k) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: x has {} elements, want {n} x {k}",
                x.len()
            )));
        }
        let (qs, d, s, sum) = carve(scratch, n * nb)?;
        if nb > 0 {
            for ((xr, qr), dr) in
                x.chunks_exact(k).zip(qs.chunks_exact_mut(nb * QK)).zip(d.chunks_exact_mut(nb))
            {
                // SAFETY: `xr` holds `nb * 32` floats, `qr` `nb * 32` bytes written with stride
                // 32, `dr` `nb` scales; the table's functions are only reachable through
                // `Kernels` values whose ISA is available (see `super::table`).
                let ok = unsafe {
                    (kern.quantize_q8)(xr.as_ptr(), nb, qr.as_mut_ptr(), QK, dr.as_mut_ptr())
                };
                if !ok {
                    return Err(non_finite(DType::Q8_0, xr).context("int8 activations"));
                }
            }
        }
        finish_sums(qs, d, s, sum);
        Ok(Q8Acts { n, nb, qs, d, s, sum })
    }

    /// Builds activations from already quantized blocks (tests, callers with their own
    /// quantizer): `qs` holds `n * nb * 32` values, `d` `n * nb` finite scales.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if the lengths disagree, a value is -128, a scale is
    /// not finite, or `scratch` is shorter than [`q8_acts_bytes`]`(32 * nb, n)`.
    pub fn from_blocks(
        qs: &[i8],
        d: &[f32],
        n: usize,
        nb: usize,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        let m = n.saturating_mul(nb);
        if d.len() != m || qs.len() != m.saturating_mul(QK) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: {n} rows of {nb} blocks need {} values and {m} scales, \
                 got {} and {}",
                m.saturating_mul(QK),
                qs.len(),
                d.len()
            )));
        }
        if let Some(i) = qs.iter().position(|&v| v == i8::MIN) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: value {i} is -128; activations are in -127..=127"
            )));
        }
        if let Some(i) = d.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: scale {i} is {}",
                d[i]
            )));
        }
        let (q2, d2, s, sum) = carve(scratch, m)?;
        q2.copy_from_slice(qs);
        d2.copy_from_slice(d);
        finish_sums(q2, d2, s, sum);
        Ok(Q8Acts { n, nb, qs: q2, d: d2, s, sum })
    }

    /// Activation rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Blocks per row (`k / 32`).
    pub fn nb(&self) -> usize {
        self.nb
    }

    /// All values, row after row (`n * nb * 32`).
    pub fn qs(&self) -> &'a [i8] {
        self.qs
    }

    /// All scales (`n * nb`).
    pub fn d(&self) -> &'a [f32] {
        self.d
    }

    /// All scaled block sums `d * Σ qs` (`n * nb`).
    pub fn s(&self) -> &'a [f32] {
        self.s
    }

    /// All block sums `Σ qs` (`n * nb`).
    pub fn sum(&self) -> &'a [i32] {
        self.sum
    }
}
