//! The int8 activation formats, quantized once per GEMV/GEMM and carved out of caller
//! scratch:
//!
//! - [`ActFormat::Q8`] (the 32-element weight types): blocks of 32 × i8 with an f32 scale, the
//!   block sum and the scaled block sum (what Q4_1/Q5_1-style weights with a minimum need);
//! - [`ActFormat::Q8K`] (the K-quants; ggml's `block_q8_K` plays this part there): super-blocks
//!   of 256 × i8 with an f32 scale and the 16 sums of each run of 16 values.
//!
//! Both use rml's one rule, on every ISA: per block, `amax = max |x|` (on the bit patterns, so
//! NaN and ±infinity are caught), `d = amax / 127`, `q = clamp(round_ties_away(x / d), -127,
//! 127)`; an all-zero block gives `d = 0` and zeros. (ggml's own Q8_K quantizer uses
//! `-127 / max` and `nearest_int`; rml keeps its rule so that every ISA gives the same bytes.)

use super::{non_finite, row_blocks, ActFormat, QK, QK_K};
use crate::error::{Error, Result};
use crate::tensor::DType;

/// Fills activation blocks by the rule of the module docs: the kernels' quantizers
/// (`crate::kernels::Kernels` implements it with its tier's bodies, which give the same
/// bytes on every tier). This module defines the format; the code that fills it fast lives
/// with the kernels, so the formats do not depend on them.
pub trait BlockQuantizer {
    /// Quantizes `nb` blocks of `fmt` ([`ActFormat::block_elems`] floats each, consecutive
    /// at `x`): block `b`'s values at `qs + b * qs_stride`, its scale at `d + b`. Returns
    /// `false` if a block holds NaN or ±infinity (the output is then partly written).
    ///
    /// # Safety
    ///
    /// `x` holds `nb` blocks of floats; `qs + b * qs_stride` has room for a block's values
    /// and `d + b` for a scale, for each `b < nb`; the outputs do not overlap the input.
    unsafe fn quantize_blocks(
        &self,
        fmt: ActFormat,
        x: *const f32,
        nb: usize,
        qs: *mut i8,
        qs_stride: usize,
        d: *mut f32,
    ) -> bool;
}

/// Bytes per block of each format: values, f32 scale, f32 scaled sum, i32 sums.
const fn block_bytes(fmt: ActFormat) -> usize {
    match fmt {
        ActFormat::Q8 => QK + 4 + 4 + 4,
        ActFormat::Q8K => QK_K + 4 + 16 * 4,
    }
}

/// Bytes of scratch that [`Q8Acts::quantize_as`] needs for `n` activation rows of `k`
/// elements in `fmt`, with 64 bytes of alignment slack.
pub const fn q8_acts_bytes_as(fmt: ActFormat, k: usize, n: usize) -> usize {
    n * k.div_ceil(fmt.block_elems()) * block_bytes(fmt) + 64
}

/// Bytes of scratch for `n` activation rows of `k` elements in BOTH formats (what
/// [`crate::ops::gemm_fused`] with plain int8 activations may need when its matrices mix
/// 32-element types and K-quants; the default int8 mode needs more, see
/// [`crate::ops::scratch_bytes`]):
/// [`q8_acts_bytes_as`] of [`ActFormat::Q8`], plus that of [`ActFormat::Q8K`] when `k` is a
/// multiple of 256.
pub const fn q8_acts_bytes(k: usize, n: usize) -> usize {
    let q8 = q8_acts_bytes_as(ActFormat::Q8, k, n);
    if k % QK_K == 0 && k > 0 {
        q8 + q8_acts_bytes_as(ActFormat::Q8K, k, n)
    } else {
        q8
    }
}

/// Activations quantized for the int8 kernels: `n` rows of `nb` blocks of one
/// [`ActFormat`], carved out of caller scratch (no allocation).
///
/// [`ActFormat::Q8`]: block `b` of row `t` (index `i = t * nb + b`) has values
/// `qs[32 i .. 32 i + 32]`, each in `-127..=127` (never -128: the AVX2 sign trick relies on
/// it), an f32 scale `d[i]`, `sum[i] = Σ qs` and `s[i] = d[i] * sum[i] as f32`.
/// [`ActFormat::Q8K`]: values `qs[256 i .. 256 i + 256]`, scale `d[i]`, and
/// `sum[16 i + j]` = the sum of values `16 j .. 16 j + 16` of the block; `s` is empty.
#[derive(Clone, Copy, Debug)]
pub struct Q8Acts<'a> {
    fmt: ActFormat,
    n: usize,
    nb: usize,
    qs: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
    sum: &'a [i32],
}

type Parts<'a> = (&'a mut [i8], &'a mut [f32], &'a mut [f32], &'a mut [i32]);

/// Splits 64-byte aligned scratch into the [`Q8Acts`] arrays for `m` blocks of `fmt`.
fn carve(scratch: &mut [u8], m: usize, fmt: ActFormat) -> Result<Parts<'_>> {
    let bb = block_bytes(fmt);
    let off = scratch.as_ptr().align_offset(64);
    let need = m.checked_mul(bb).and_then(|b| b.checked_add(off));
    let Some(need) = need.filter(|&need| need <= scratch.len()) else {
        return Err(Error::invalid_argument(format_args!(
            "int8 activations: scratch has {} bytes, {m} blocks need {} (see ops::scratch_bytes)",
            scratch.len(),
            m.saturating_mul(bb).saturating_add(64)
        )));
    };
    let buf = &mut scratch[off..need];
    let (qs, rest) = buf.split_at_mut(m * fmt.block_elems());
    let (d, rest) = rest.split_at_mut(m * 4);
    let s_len = if fmt == ActFormat::Q8 { m * 4 } else { 0 };
    let (s, sum) = rest.split_at_mut(s_len);
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

/// Activations quantized a range of blocks at a time, by several threads: carved out of
/// scratch once ([`Q8Parts::new`]), each thread quantizes the blocks of its own column range
/// ([`Q8Parts::quantize_blocks`]), and [`Q8Parts::finish`] hands out the [`Q8Acts`]. Every
/// block gets the bytes [`Q8Acts::quantize_as`] gives it (the same per-block rule and
/// kernels), so who quantized which block never shows. The decoder quantizes the GLU product
/// this way inside the gate/up loop (`crate::ops::gemm_glu`).
pub(crate) struct Q8Parts<'a> {
    fmt: ActFormat,
    n: usize,
    nb: usize,
    qs: *mut i8,
    d: *mut f32,
    s: *mut f32,
    sum: *mut i32,
    /// The lengths of the four arrays (`finish` rebuilds the slices).
    lens: [usize; 4],
    _scratch: core::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: the raw pointers address scratch borrowed mutably for `'a`; threads write disjoint
// blocks through `quantize_blocks` (its contract), and nothing reads them before `finish`.
unsafe impl Send for Q8Parts<'_> {}
// SAFETY: as above.
unsafe impl Sync for Q8Parts<'_> {}

impl<'a> Q8Parts<'a> {
    /// Carves room for `n` rows of `k` activations in `fmt` out of `scratch`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `k` is not a multiple of the format's block, the
    /// block count overflows, or `scratch` is shorter than [`q8_acts_bytes_as`].
    pub(crate) fn new(fmt: ActFormat, n: usize, k: usize, scratch: &'a mut [u8]) -> Result<Self> {
        let e = fmt.block_elems();
        if k % e != 0 {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: row of {k} elements is not a multiple of the block size {e}"
            )));
        }
        let nb = k / e;
        let m = n.checked_mul(nb).ok_or_else(|| {
            Error::invalid_argument(format_args!("int8 activations: {n} rows of {nb} blocks"))
        })?;
        let (qs, d, s, sum) = carve(scratch, m, fmt)?;
        Ok(Q8Parts {
            fmt,
            n,
            nb,
            lens: [qs.len(), d.len(), s.len(), sum.len()],
            qs: qs.as_mut_ptr(),
            d: d.as_mut_ptr(),
            s: s.as_mut_ptr(),
            sum: sum.as_mut_ptr(),
            _scratch: core::marker::PhantomData,
        })
    }

    /// The block size of the format: column ranges handed to
    /// [`quantize_blocks`](Self::quantize_blocks) start and end on multiples of it.
    pub(crate) fn block_elems(&self) -> usize {
        self.fmt.block_elems()
    }

    /// Quantizes blocks `b0 .. b1` of every row of `x` (`n` rows of `k`, row `t` at
    /// `x + t * k`) with `kern`. Returns `false` if a block holds NaN or ±infinity (its bytes
    /// are then unspecified).
    ///
    /// # Safety
    ///
    /// `x` readable for `n * k` floats; `b0 <= b1 <= nb`; no other call runs on an
    /// overlapping block range at the same time, and [`finish`](Self::finish) comes after
    /// every call.
    pub(crate) unsafe fn quantize_blocks(
        &self,
        kern: &impl BlockQuantizer,
        x: *const f32,
        b0: usize,
        b1: usize,
    ) -> bool {
        let (e, nb, k) = (self.fmt.block_elems(), self.nb, self.nb * self.fmt.block_elems());
        let m = b1 - b0;
        if m == 0 {
            return true;
        }
        let mut ok = true;
        for t in 0..self.n {
            let i = t * nb + b0;
            // SAFETY: blocks `i .. i + m` of the carved arrays (row `t`, blocks `b0 .. b1`)
            // and their inputs are in bounds and written by this call only (caller
            // contract); the table's functions run only on an ISA this CPU has.
            unsafe {
                let (xp, qp, dp) = (x.add(t * k + b0 * e), self.qs.add(i * e), self.d.add(i));
                ok &= kern.quantize_blocks(self.fmt, xp, m, qp, e, dp);
                let qs = core::slice::from_raw_parts(qp.cast_const(), m * e);
                let d = core::slice::from_raw_parts(dp.cast_const(), m);
                match self.fmt {
                    ActFormat::Q8 => finish_sums(
                        qs,
                        d,
                        core::slice::from_raw_parts_mut(self.s.add(i), m),
                        core::slice::from_raw_parts_mut(self.sum.add(i), m),
                    ),
                    ActFormat::Q8K => {
                        let sum = core::slice::from_raw_parts_mut(self.sum.add(16 * i), 16 * m);
                        for (q, sum) in qs.chunks_exact(16).zip(sum) {
                            *sum = q.iter().map(|&v| v as i32).sum();
                        }
                    }
                }
            }
        }
        ok
    }

    /// The activations, once every block has been quantized.
    ///
    /// # Safety
    ///
    /// Every block of every row was written by [`quantize_blocks`](Self::quantize_blocks)
    /// (returning `true`), and those calls happened-before this one.
    pub(crate) unsafe fn finish(self) -> Q8Acts<'a> {
        let [lq, ld, ls, lsum] = self.lens;
        // SAFETY: the four arrays `new` carved (disjoint parts of scratch borrowed for
        // `'a`), initialized by the calls of the contract.
        unsafe {
            Q8Acts {
                fmt: self.fmt,
                n: self.n,
                nb: self.nb,
                qs: core::slice::from_raw_parts(self.qs, lq),
                d: core::slice::from_raw_parts(self.d, ld),
                s: core::slice::from_raw_parts(self.s, ls),
                sum: core::slice::from_raw_parts(self.sum, lsum),
            }
        }
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
        kern: &impl BlockQuantizer,
        x: &[f32],
        n: usize,
        k: usize,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        Self::quantize_as(ActFormat::Q8, kern, x, n, k, scratch)
    }

    /// Quantizes `n` rows of `k` activations into `scratch` in `fmt` ([`ActFormat::Q8`] with the
    /// kernels `kern`; [`ActFormat::Q8K`] with the scalar rule, the same bytes).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `k` is not a multiple of the format's block (32 or
    /// 256), `x.len() != n * k`, `scratch` is shorter than [`q8_acts_bytes_as`], or `x` holds
    /// NaN or ±infinity.
    pub fn quantize_as(
        fmt: ActFormat,
        kern: &impl BlockQuantizer,
        x: &[f32],
        n: usize,
        k: usize,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        if fmt == ActFormat::Q8K {
            return Self::quantize_k(kern, x, n, k, scratch);
        }
        let nb = row_blocks(DType::Q8_0, k)?;
        if Some(x.len()) != n.checked_mul(k) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: x has {} elements, want {n} x {k}",
                x.len()
            )));
        }
        let (qs, d, s, sum) = carve(scratch, n * nb, ActFormat::Q8)?;
        if nb > 0 {
            for ((xr, qr), dr) in
                x.chunks_exact(k).zip(qs.chunks_exact_mut(nb * QK)).zip(d.chunks_exact_mut(nb))
            {
                // SAFETY: `xr` holds `nb * 32` floats, `qr` `nb * 32` bytes written with stride
                // 32, `dr` `nb` scales; the table's functions are only reachable through
                // `Kernels` values whose ISA is available (see `super::table`).
                let ok = unsafe {
                    kern.quantize_blocks(
                        ActFormat::Q8,
                        xr.as_ptr(),
                        nb,
                        qr.as_mut_ptr(),
                        QK,
                        dr.as_mut_ptr(),
                    )
                };
                if !ok {
                    return Err(non_finite(DType::Q8_0, xr).context("int8 activations"));
                }
            }
        }
        finish_sums(qs, d, s, sum);
        Ok(Q8Acts { fmt: ActFormat::Q8, n, nb, qs, d, s, sum })
    }

    /// The [`ActFormat::Q8K`] quantizer (the rule of the module docs over 256 values, with
    /// `kern`'s `quantize_q8k`: the same bytes on every ISA).
    fn quantize_k(
        kern: &impl BlockQuantizer,
        x: &[f32],
        n: usize,
        k: usize,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        if k % QK_K != 0 {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations (Q8_K): row of {k} elements is not a multiple of the \
                 super-block size {QK_K}"
            )));
        }
        let nb = k / QK_K;
        if Some(x.len()) != n.checked_mul(k) {
            return Err(Error::invalid_argument(format_args!(
                "int8 activations: x has {} elements, want {n} x {k}",
                x.len()
            )));
        }
        let (qs, d, s, sum) = carve(scratch, n * nb, ActFormat::Q8K)?;
        if nb > 0 {
            for ((xr, qr), dr) in
                x.chunks_exact(k).zip(qs.chunks_exact_mut(nb * QK_K)).zip(d.chunks_exact_mut(nb))
            {
                // SAFETY: `xr` holds `nb * 256` floats, `qr` `nb * 256` bytes written with
                // stride 256, `dr` `nb` scales; the table's functions are only reachable
                // through `Kernels` values whose ISA is available (see `super::table`).
                let ok = unsafe {
                    kern.quantize_blocks(
                        ActFormat::Q8K,
                        xr.as_ptr(),
                        nb,
                        qr.as_mut_ptr(),
                        QK_K,
                        dr.as_mut_ptr(),
                    )
                };
                if !ok {
                    // Name the first block that holds NaN or ±infinity.
                    let xb = xr
                        .chunks_exact(QK_K)
                        .find(|b| b.iter().any(|v| !v.is_finite()))
                        .unwrap_or(xr);
                    return Err(non_finite(DType::Q8_0, xb).context("int8 activations (Q8_K)"));
                }
            }
        }
        for (q, sum) in qs.chunks_exact(16).zip(sum.iter_mut()) {
            *sum = q.iter().map(|&v| v as i32).sum();
        }
        Ok(Q8Acts { fmt: ActFormat::Q8K, n, nb, qs, d, s, sum })
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
        let (q2, d2, s, sum) = carve(scratch, m, ActFormat::Q8)?;
        q2.copy_from_slice(qs);
        d2.copy_from_slice(d);
        finish_sums(q2, d2, s, sum);
        Ok(Q8Acts { fmt: ActFormat::Q8, n, nb, qs: q2, d: d2, s, sum })
    }

    /// The quantization residuals of chosen blocks, quantized again: for `blocks[j] = t · nb +
    /// b` (block `b` of row `t`), the `E` values `x[t·k + b·E + e] − d·q[e]` (`E` = 32 for
    /// [`ActFormat::Q8`], 256 for [`ActFormat::Q8K`]; `d`, `q` the scale and values of block
    /// `b` of row `t` of `xq`, the quantization of `x`) become row `j` of the result, one block
    /// per row (`nb() == 1`), by the rule of the module docs; row `blocks.len()` is one more
    /// block of zeros (so that a kernel may always be run over two rows). A residual is at most
    /// `d / 2` per value, so its scale is at most `d / 254`: the two passes together carry
    /// about 15 bits.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `x.len() != xq.n() * k`, `k != xq.nb() · E`, a
    /// listed block lies outside `xq`, or `scratch` is shorter than [`q8_acts_bytes_as`]`(fmt, E,
    /// blocks.len() + 1)`.
    pub(crate) fn quantize_residuals(
        kern: &impl BlockQuantizer,
        x: &[f32],
        k: usize,
        xq: &Q8Acts<'_>,
        blocks: &[u32],
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        let fmt = xq.fmt;
        let e = fmt.block_elems();
        if Some(k) != xq.nb.checked_mul(e) || Some(x.len()) != xq.n.checked_mul(k) {
            return Err(Error::invalid_argument(format_args!(
                "int8 residuals: x has {} elements, k = {k}, for {} rows of {} blocks of {e}",
                x.len(),
                xq.n,
                xq.nb
            )));
        }
        let m = blocks.len();
        let (qs, d, s, sum) = carve(scratch, m + 1, fmt)?;
        qs[m * e..].fill(0);
        d[m] = 0.0;
        let mut r = [0f32; QK_K];
        for (j, &i) in blocks.iter().enumerate() {
            let i = i as usize;
            if i >= xq.d.len() {
                return Err(Error::invalid_argument(format_args!(
                    "int8 residuals: block {i} outside {} rows of {} blocks",
                    xq.n, xq.nb
                )));
            }
            let (t, b) = (i / xq.nb, i % xq.nb);
            let (xb, qb, db) = (&x[t * k + b * e..][..e], &xq.qs[i * e..][..e], xq.d[i]);
            for ((r, &xv), &qv) in r.iter_mut().zip(xb).zip(qb) {
                *r = xv - db * qv as f32;
            }
            // SAFETY: `r` holds at least `e` floats (one block of the format), `qs` has room
            // for block `j`'s `e` values and `d` for its scale.
            let ok = unsafe {
                kern.quantize_blocks(fmt, r.as_ptr(), 1, qs[j * e..].as_mut_ptr(), e, &mut d[j])
            };
            if !ok {
                // x was quantized before, so it is finite; x - d·q could still overflow.
                return Err(non_finite(DType::Q8_0, &r[..e]).context("int8 residuals"));
            }
        }
        if fmt == ActFormat::Q8 {
            finish_sums(qs, d, s, sum);
        } else {
            for (q, sum) in qs.chunks_exact(16).zip(sum.iter_mut()) {
                *sum = q.iter().map(|&v| v as i32).sum();
            }
        }
        Ok(Q8Acts { fmt, n: m + 1, nb: 1, qs, d, s, sum })
    }

    /// Activation rows `r` as activations of their own (the same blocks, no copy).
    ///
    /// # Panics
    ///
    /// If `r` does not lie inside `0..self.n()`.
    pub fn rows(&self, r: core::ops::Range<usize>) -> Q8Acts<'a> {
        assert!(r.start <= r.end && r.end <= self.n, "activation rows {r:?} of {}", self.n);
        let (nb, e) = (self.nb, self.fmt.block_elems());
        let sums = if self.fmt == ActFormat::Q8 { 1 } else { 16 };
        let s = if self.fmt == ActFormat::Q8 { &self.s[r.start * nb..r.end * nb] } else { &[][..] };
        Q8Acts {
            fmt: self.fmt,
            n: r.len(),
            nb,
            qs: &self.qs[r.start * nb * e..r.end * nb * e],
            d: &self.d[r.start * nb..r.end * nb],
            s,
            sum: &self.sum[r.start * nb * sums..r.end * nb * sums],
        }
    }

    /// Activation rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Blocks per row (`k / 32` for [`ActFormat::Q8`], `k / 256` for [`ActFormat::Q8K`]).
    pub fn nb(&self) -> usize {
        self.nb
    }

    /// All values, row after row (`n * nb * 32`, or `n * nb * 256`).
    pub fn qs(&self) -> &'a [i8] {
        self.qs
    }

    /// All scales (`n * nb`).
    pub fn d(&self) -> &'a [f32] {
        self.d
    }

    /// All scaled block sums `d * Σ qs` (`n * nb`; empty for [`ActFormat::Q8K`]).
    pub fn s(&self) -> &'a [f32] {
        self.s
    }

    /// All block sums `Σ qs` (`n * nb`), or for [`ActFormat::Q8K`] the sums of each run of
    /// 16 values (`n * nb * 16`).
    pub fn sum(&self) -> &'a [i32] {
        self.sum
    }

    /// The activation format.
    pub fn format(&self) -> ActFormat {
        self.fmt
    }

    /// Activation row `t`.
    ///
    /// # Panics
    ///
    /// If `t >= self.n()`.
    pub fn row(&self, t: usize) -> Q8Row<'a> {
        assert!(t < self.n, "activation row {t} of {}", self.n);
        let nb = self.nb;
        let (e, sums) = match self.fmt {
            ActFormat::Q8 => (QK, 1),
            ActFormat::Q8K => (QK_K, 16),
        };
        let s = if self.fmt == ActFormat::Q8 { &self.s[t * nb..(t + 1) * nb] } else { &[][..] };
        Q8Row {
            qs: &self.qs[t * nb * e..(t + 1) * nb * e],
            d: &self.d[t * nb..(t + 1) * nb],
            s,
            sum: &self.sum[t * nb * sums..(t + 1) * nb * sums],
        }
    }
}

/// One row of [`Q8Acts`]: `nb` blocks' values, scales, scaled sums and sums (laid out as in
/// [`Q8Acts`] for its format).
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    /// Values, 32 per block.
    pub qs: &'a [i8],
    /// f32 scales, one per block.
    pub d: &'a [f32],
    /// Scaled block sums `d * Σ qs`.
    pub s: &'a [f32],
    /// Block sums `Σ qs` (Q8_K: 16 per block).
    pub sum: &'a [i32],
}
