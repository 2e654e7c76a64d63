//! Outlier blocks of int8 activations: what [`super::Activations::Int8`] adds to plain
//! Q8 activations ([`super::Activations::Int8Plain`], ggml's scheme).
//!
//! LLM activations carry a few channels of far larger magnitude than the rest (the "massive
//! activations" of the residual stream, which RMSNorm keeps). A block of 32 (or a super-block
//! of 256) that holds one gets a scale set by that one value, so its other values are
//! quantized coarsely: in SmolLM2 that block quantization error is most of int8's logit error.
//!
//! The correction: a block of row `t` is an *outlier block* when its largest |value| exceeds
//! [`OUTLIER_RATIO`] times the RMS of the row. For each one, the residual `x_b − d·q_b` (at most
//! `d/2` per value) is quantized again by the same rule, and `W[:, b] · residual` (the int8
//! kernel of the weight type over the one column block `b`, a strided view of the same weight
//! rows) is added to the output. Rows are still split only across output rows, every output
//! is computed by the same kernel calls in the same order (blocks in ascending order after the
//! main product), so results stay bit-identical for every schedule, thread count and ISA.
//!
//! Cost: the flags need one pass over the input (`Σ x²` per row); the correction reads one
//! block of `nb` per outlier block and weight row, as a column of strided blocks that the
//! kernels decode and transpose 16 rows at a time. Real models' normalized inputs have few
//! outlier blocks per row, mostly at a few fixed column blocks; how many, and what the
//! correction costs in speed, are in `docs/perf/notes-ops-decoder.md`.
//! The worst case is bounded by the rule: with blocks of 32 fewer than half a row's blocks can
//! be outliers; with super-blocks of 256 (K-quants) every block can be (one large value in a
//! row of 256 flags it), which runs the product about twice.

use crate::error::{Error, Result};
use crate::kernels::{Kernels, MatmulQ8Fn};
use crate::quant::{q8_acts_bytes_as, ActFormat, Q8Acts};

/// A block is an outlier block when its largest |value| exceeds this many times the RMS of
/// its activation row (so a row has fewer than `k / 64` values that large; for blocks of 32,
/// fewer than half its blocks are outliers).
///
/// Chosen by teacher-forced top-1 agreement with f32 activations on the SmolLM2 agreement
/// prompts among 2, 6, 8 and 10 (docs/perf/2026-12-02-int8-accuracy.md).
pub const OUTLIER_RATIO: f32 = 8.0;

/// How the correction reads column block `b` of a weight row: the kernel and the byte offset
/// it starts at.
#[derive(Clone, Copy)]
pub(crate) struct Columns {
    /// The kernels of even and odd column blocks (the same one for plain layouts).
    f: [MatmulQ8Fn; 2],
    /// Bytes per column block, or per pair of them (`pairs`).
    bytes: usize,
    /// A pair layout ([`crate::DType::Q5_0x2`]): column block `b` is half `b % 2` of pair
    /// `b / 2`, read by `f[b % 2]` at the pair.
    pairs: bool,
    /// Whether a lone residual runs as two activation rows ([`pads_residuals`]).
    pad: bool,
}

/// Whether the correction runs a lone residual as two activation rows (the next entry or
/// the zero row at the end, its outputs unused) on `isa`'s plain layouts: on the AVX-512
/// tiers, whose transposed multi-row tiles need no horizontal sum per weight row (for one
/// block per row most of the single-row GEMV's work). The other tiers take two activation
/// rows one weight row at a time, with a horizontal sum per output, so the second row only
/// doubles the work: they run one (AVX2, `RML_KERNELS=avx2` decode of Gemma 3 270M, int8:
/// about 5 % faster, `docs/perf/2026-12-07-session4-stream.md`). Every output has the same
/// bits either way.
fn pads_residuals(isa: crate::kernels::Isa) -> bool {
    use crate::kernels::Isa;
    matches!(isa, Isa::Avx512 | Isa::Avx512Gfni)
}

impl Columns {
    /// The column reads of `dtype`'s weights with activation blocks of `fmt` in `kern`.
    ///
    /// # Errors
    ///
    /// As [`Kernels::matmul_q8`]; [`crate::Code::InvalidArgument`] if a block of `fmt` is not
    /// whole blocks of `dtype`.
    pub(crate) fn of(kern: &Kernels, dtype: crate::DType, fmt: ActFormat) -> Result<Self> {
        Ok(match kern.matmul_q8_halves(dtype) {
            Some(f) => Columns {
                f,
                bytes: dtype.block_bytes(),
                pairs: true,
                pad: pads_residuals(kern.isa()),
            },
            None => {
                let f = kern.matmul_q8(dtype)?;
                let bytes = dtype.row_bytes(fmt.block_elems())?;
                Columns { f: [f, f], bytes, pairs: false, pad: pads_residuals(kern.isa()) }
            }
        })
    }

    /// The column reads of a row-interleaved matrix of `dtype` ([`crate::kernels::rows8`])
    /// by its kernel `f`: column block `b` of a group is its group-block `b`, `8 ·` bytes
    /// per block from the next (an activation block of the interleaved types is one of their
    /// blocks: 32 values, or a super-block of 256 for Q4_K). A lone residual runs as one activation row: the layout's kernels
    /// keep 8 weight rows in the lanes of a vector whatever the activation rows, so a
    /// second one only adds its dots.
    pub(crate) fn rows8(f: MatmulQ8Fn, dtype: crate::DType) -> Self {
        Columns {
            f: [f, f],
            bytes: crate::kernels::rows8::ROWS * dtype.block_bytes(),
            pairs: false,
            pad: false,
        }
    }

    /// The kernel that reads column block `b` and its byte offset in a row (in a group of
    /// rows for the interleaved layout).
    fn at(&self, b: usize) -> (MatmulQ8Fn, usize) {
        if self.pairs {
            (self.f[b % 2], b / 2 * self.bytes)
        } else {
            (self.f[0], b * self.bytes)
        }
    }
}

/// f32 outputs one correction kernel call writes at most (a stack buffer).
const TMP: usize = 1024;
/// Activation rows one correction kernel call takes at most.
const MAX_ACT_ROWS: usize = 64;

/// Bytes of scratch [`Outliers::find`] needs for `n` rows of `k` activations in `fmt`, for
/// the worst case of every block an outlier: the per-row thresholds, the block list and the
/// requantized residuals ([`q8_acts_bytes_as`]), with alignment slack.
pub(crate) const fn outlier_bytes(fmt: ActFormat, k: usize, n: usize) -> usize {
    let e = fmt.block_elems();
    let nb = k / e;
    let m = n * nb;
    (n + nb + 1 + m) * 4 + 4 + q8_acts_bytes_as(fmt, e, m + 1)
}

/// The outlier blocks of one quantized input and their requantized residuals.
pub(crate) struct Outliers<'a> {
    /// Entries of column block `b`: `starts[b] .. starts[b + 1]` (`nb + 1` values).
    starts: &'a [u32],
    /// The activation row of each entry, ascending within a column block.
    rows: &'a [u32],
    /// Entry `j`'s residual as row `j` (one block) of int8 activations, and a last row of
    /// zeros.
    res: Q8Acts<'a>,
}

impl<'a> Outliers<'a> {
    /// Finds the outlier blocks of `xq` (the quantization of `x`, `xq.n()` rows of `k`) and
    /// quantizes their residuals, in `scratch` ([`outlier_bytes`] of `xq`'s format).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `scratch` is too short or the shapes disagree.
    pub(crate) fn find(
        kern: &Kernels,
        x: &[f32],
        k: usize,
        xq: &Q8Acts<'_>,
        scratch: &'a mut [u8],
    ) -> Result<Self> {
        let (n, nb, fmt) = (xq.n(), xq.nb(), xq.format());
        let need = outlier_bytes(fmt, k, n);
        if scratch.len() < need || Some(k) != nb.checked_mul(fmt.block_elems()) || x.len() != n * k
        {
            return Err(Error::invalid_argument(format_args!(
                "int8 outlier blocks: scratch part has {} bytes (need {need}), k = {k}, {} \
                 inputs for {n} rows of {nb} blocks (size scratch with ops::scratch_bytes for \
                 Activations::Int8)",
                scratch.len(),
                x.len()
            )));
        }
        if u32::try_from(n * nb).is_err() {
            return Err(Error::invalid_argument(format_args!(
                "int8 outlier blocks: {n} rows of {nb} blocks exceed the u32 block index"
            )));
        }
        let off = scratch.as_ptr().align_offset(4);
        let words = n + nb + 1 + n * nb;
        let (head, tail) = scratch.split_at_mut(off + words * 4);
        let words: &mut [u32] = crate::tensor::cast_slice_mut(&mut head[off..]);
        let (lim, rest) = words.split_at_mut(n);
        let (starts, rows) = rest.split_at_mut(nb + 1);
        // The outlier test `amax > RATIO · rms` as `(127 d)² > RATIO² · Σx² / k`, where
        // `d = amax / 127` is the block's scale: one pass over each row, no square root.
        let d = xq.d();
        starts.fill(0);
        for (t, xr) in x.chunks_exact(k.max(1)).take(n).enumerate() {
            let ss = super::dot(xr, xr);
            let l = OUTLIER_RATIO * OUTLIER_RATIO * (ss / k as f32);
            lim[t] = l.to_bits();
            for (b, &db) in d[t * nb..(t + 1) * nb].iter().enumerate() {
                let a = 127.0 * db;
                starts[b + 1] += u32::from(a * a > l);
            }
        }
        for b in 0..nb {
            starts[b + 1] += starts[b];
        }
        // Place each entry at its column block's next free slot (rows ascending), as the flat
        // block index `t * nb + b` that the residual quantizer takes, then as its row `t`.
        let m = starts[nb] as usize;
        for t in 0..n {
            let l = f32::from_bits(lim[t]);
            for b in 0..nb {
                let a = 127.0 * d[t * nb + b];
                if a * a > l {
                    // `starts[b]` serves as block b's cursor; restored below.
                    let j = starts[b] as usize;
                    rows[j] = (t * nb + b) as u32;
                    starts[b] += 1;
                }
            }
        }
        // Restore the starts (each cursor advanced by its block's count).
        for b in (1..=nb).rev() {
            starts[b] = starts[b - 1];
        }
        starts[0] = 0;
        let rows = &mut rows[..m];
        let res = Q8Acts::quantize_residuals(kern, x, k, xq, rows, tail)?;
        for r in rows.iter_mut() {
            *r /= nb as u32;
        }
        Ok(Outliers { starts, rows, res })
    }

    /// Whether no block is an outlier.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds the correction of rows `0 .. rows` of one weight matrix to `y`: for every outlier
    /// block `(t, b)`, `y[t · ldy + r] += W[r, block b] · residual(t, b)`, blocks in ascending
    /// order.
    ///
    /// # Safety
    ///
    /// `cols` holds int8 kernels of an available table for the weight type, whose column
    /// blocks match the activation format ([`Columns::of`]); `w` points at `rows` weight rows
    /// of `rb` bytes each holding the column blocks of the input; `y + t · ldy + r` is
    /// writable for every activation row `t` and `r < rows`, and nothing else accesses it.
    pub(crate) unsafe fn apply(
        &self,
        cols: Columns,
        w: *const u8,
        rb: usize,
        rows: usize,
        y: *mut f32,
        ldy: usize,
    ) {
        let mut tmp = [0f32; TMP];
        for (b, win) in self.starts.windows(2).enumerate() {
            let (g0, g1) = (win[0] as usize, win[1] as usize);
            let (f, off) = cols.at(b);
            let mut a0 = g0;
            while a0 < g1 {
                let a1 = (a0 + MAX_ACT_ROWS).min(g1);
                // A lone residual runs as two activation rows where that is faster
                // (`cols.pad`, [`pads_residuals`]).
                let na = if cols.pad { (a1 - a0).max(2) } else { a1 - a0 };
                let acts = self.res.rows(a0..a0 + na);
                // Weight rows per call: a multiple of 16 (the AVX-512 tile), `na * rt <= TMP`.
                let rt = (TMP / na) / 16 * 16;
                let mut s0 = 0;
                while s0 < rows {
                    let s1 = (s0 + rt).min(rows);
                    let nr = s1 - s0;
                    // SAFETY: rows `s0 .. s1` of the matrix are readable (caller), column
                    // block `b` is what `f` reads at `off` inside each row (`Columns::at`);
                    // `acts` holds `na` rows of one block of the matching format; `tmp` takes
                    // `na * nr <= TMP` outputs.
                    unsafe { f(w.add(s0 * rb + off), rb, nr, &acts, na, tmp.as_mut_ptr(), nr) };
                    for (j, &t) in self.rows[a0..a1].iter().enumerate() {
                        // SAFETY: outputs `t * ldy + s0 .. t * ldy + s1` are this caller's
                        // (`t` is an activation row, `s1 <= rows`), and no other reference to
                        // them lives while this one does.
                        let yr = unsafe {
                            core::slice::from_raw_parts_mut(y.add(t as usize * ldy + s0), nr)
                        };
                        for (yv, &c) in yr.iter_mut().zip(&tmp[j * nr..(j + 1) * nr]) {
                            *yv += c;
                        }
                    }
                    s0 = s1;
                }
                a0 = a1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Rows of values in [-1, 1), massive channels at chosen places.
    fn input(n: usize, k: usize, massive: &[(usize, usize, f32)]) -> Vec<f32> {
        let mut x: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
        for &(t, i, v) in massive {
            x[t * k + i] = v;
        }
        x
    }

    #[test]
    fn finds_outlier_blocks_by_column_then_row_and_requantizes_their_residuals() {
        let kern = crate::kernels::table(crate::kernels::Isa::Scalar).unwrap();
        let (n, k) = (3, 256);
        // Row 0: block 2; row 1: none (a mild 3.0 is not 8 RMS); row 2: blocks 2 and 0.
        let x = input(n, k, &[(0, 70, 60.0), (1, 5, 3.0), (2, 64, -50.0), (2, 3, 45.0)]);
        let mut s = vec![0u8; q8_acts_bytes_as(ActFormat::Q8, k, n)];
        let xq = Q8Acts::quantize_as(ActFormat::Q8, kern, &x, n, k, &mut s).unwrap();
        let mut so = vec![0u8; outlier_bytes(ActFormat::Q8, k, n)];
        let o = Outliers::find(kern, &x, k, &xq, &mut so).unwrap();
        assert_eq!(o.starts, &[0, 1, 1, 3, 3, 3, 3, 3, 3]);
        assert_eq!(o.rows, &[2, 0, 2]);
        assert_eq!(o.res.n(), 4); // three residuals and the zero row
        assert_eq!(o.res.d()[3], 0.0);
        // Each residual block restores its block of x to within half its own step.
        for (j, (&t, b)) in o.rows.iter().zip([0usize, 2, 2]).enumerate() {
            let i = t as usize * 8 + b;
            let (d, d2) = (xq.d()[i], o.res.d()[j]);
            assert!(d2 > 0.0 && d2 <= d / 254.0 * 1.0001, "residual scale {d2} vs {d}");
            for e in 0..32 {
                let back = d * xq.qs()[i * 32 + e] as f32 + d2 * o.res.qs()[j * 32 + e] as f32;
                let want = x[t as usize * k + b * 32 + e];
                assert!((back - want).abs() <= d2 * 0.5001, "({t}, {b}) value {e}");
            }
        }
    }

    #[test]
    fn no_outliers_and_short_scratch() {
        let kern = crate::kernels::table(crate::kernels::Isa::Scalar).unwrap();
        let (n, k) = (2, 64);
        let x = input(n, k, &[]);
        let mut s = vec![0u8; q8_acts_bytes_as(ActFormat::Q8, k, n)];
        let xq = Q8Acts::quantize_as(ActFormat::Q8, kern, &x, n, k, &mut s).unwrap();
        let mut so = vec![0u8; outlier_bytes(ActFormat::Q8, k, n)];
        assert!(Outliers::find(kern, &x, k, &xq, &mut so).unwrap().is_empty());
        let mut short = vec![0u8; outlier_bytes(ActFormat::Q8, k, n) - 1];
        let e = Outliers::find(kern, &x, k, &xq, &mut short).err().unwrap();
        assert_eq!(e.code(), crate::Code::InvalidArgument);
        // An all-zero row (RMS 0) has no outliers either.
        let z = vec![0f32; k];
        let zq = Q8Acts::quantize_as(ActFormat::Q8, kern, &z, 1, k, &mut s).unwrap();
        assert!(Outliers::find(kern, &z, k, &zq, &mut so).unwrap().is_empty());
    }

    #[test]
    fn super_blocks_of_256() {
        let kern = crate::kernels::table(crate::kernels::Isa::Scalar).unwrap();
        let (n, k) = (2, 512);
        let x = input(n, k, &[(1, 300, -90.0)]);
        let mut s = vec![0u8; q8_acts_bytes_as(ActFormat::Q8K, k, n)];
        let xq = Q8Acts::quantize_as(ActFormat::Q8K, kern, &x, n, k, &mut s).unwrap();
        let mut so = vec![0u8; outlier_bytes(ActFormat::Q8K, k, n)];
        let o = Outliers::find(kern, &x, k, &xq, &mut so).unwrap();
        assert_eq!((o.starts, o.rows), (&[0u32, 0, 1][..], &[1u32][..]));
        assert_eq!(o.res.format(), ActFormat::Q8K);
        // The Q8_K sums of 16 match the residual values.
        let sum: i32 = o.res.qs()[..16].iter().map(|&v| v as i32).sum();
        assert_eq!(o.res.sum()[0], sum);
    }
}
