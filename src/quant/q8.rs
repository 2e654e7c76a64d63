//! The int8 activation format ([`ActFormat::Q8`]): activations quantized once per GEMV/GEMM
//! to blocks of 32 × i8 with an f32 scale, the block sum and the scaled block sum (what
//! Q4_1-style weights with a minimum need), carved out of caller scratch.

use super::{non_finite, row_blocks, ActFormat, QK};
use crate::error::{Error, Result};
use crate::tensor::DType;

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
/// [`super::quantize_row_q8_0`] (same rule, same bytes); the scale stays f32 instead of f16.
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
        kern: &crate::kernels::Kernels,
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

    /// The activation format ([`ActFormat::Q8`]).
    pub fn format(&self) -> ActFormat {
        ActFormat::Q8
    }

    /// Activation row `t`.
    ///
    /// # Panics
    ///
    /// If `t >= self.n()`.
    pub fn row(&self, t: usize) -> Q8Row<'a> {
        assert!(t < self.n, "activation row {t} of {}", self.n);
        let nb = self.nb;
        Q8Row {
            qs: &self.qs[t * nb * QK..(t + 1) * nb * QK],
            d: &self.d[t * nb..(t + 1) * nb],
            s: &self.s[t * nb..(t + 1) * nb],
            sum: &self.sum[t * nb..(t + 1) * nb],
        }
    }
}

/// One row of [`Q8Acts`]: `nb` blocks' values, scales, scaled sums and sums.
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    /// Values, 32 per block.
    pub qs: &'a [i8],
    /// f32 scales, one per block.
    pub d: &'a [f32],
    /// Scaled block sums `d * Σ qs`.
    pub s: &'a [f32],
    /// Block sums `Σ qs`.
    pub sum: &'a [i32],
}
