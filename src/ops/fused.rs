//! Products of several matrices with one input in one parallel loop: [`gemm_fused`] (q/k/v),
//! [`gemm_glu`] (gate/up with the GLU applied, and optionally quantized, inside the loop) and
//! [`gemm_q8`] (a product from activations already quantized). Every output is the same bits as
//! the separate [`gemm`](super::gemm) calls.

use core::ops::Range;

use super::activation::glu_with;
use super::matmul::{int8_rows, split_int8, Activations, Matrix, SyncPtr};
use super::outliers::{Columns, Outliers};
use super::{PAR_ROWS_F32, PAR_ROWS_QUANT};
use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::kernels::{self, Kernels};
use crate::quant::{ActFormat, Q8Acts};
use crate::tensor::DType;

/// The kernel one matrix of [`gemm_fused`] uses (int8: with which activation format).
#[derive(Clone, Copy)]
enum RowKernel {
    F32(kernels::MatmulF32Fn),
    Q8(kernels::MatmulQ8Fn, ActFormat),
}

/// Several matrices that read the same input, as one parallel loop:
/// `Y_i[n × rows_i] = X[n × k] · W_iᵀ` for each `W_i = w[i]`, `Y_i = y[i]`.
///
/// The decoder runs the q/k/v projections together (and the gate/up projections with
/// `gemm_glu`, the same idea): one dispatch instead of three, and with int8 activations the
/// input is quantized (and its outlier blocks found) once per activation format. Rows of all
/// matrices are numbered in order and split across `exec` like one matrix's rows (the
/// parallel threshold is [`PAR_ROWS_QUANT`] if every matrix is quantized, else
/// [`PAR_ROWS_F32`]); every output is computed by the same kernel call as in [`gemm`](super::gemm), so the
/// results are bit-identical to separate [`gemm`](super::gemm) calls. `scratch` as for [`gemm`](super::gemm).
///
/// # Errors
///
/// As [`gemm`](super::gemm); also [`crate::Code::InvalidArgument`] if the matrices' `k` differ.
#[allow(clippy::too_many_arguments)]
pub fn gemm_fused<const N: usize>(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: [&Matrix<'_>; N],
    x: &[f32],
    n: usize,
    y: [&mut [f32]; N],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    let Some(first) = w.first() else { return Ok(()) };
    let k = first.k;
    let mut offsets = [0usize; N];
    let mut total = 0usize;
    // Chunks of whole interleaved groups when a matrix is row-interleaved: each matrix's
    // rows then start on a multiple of 8 of the numbering (gaps skipped by the body).
    let unit = w.iter().map(|m| m.row_unit()).max().unwrap_or(1);
    for i in 0..N {
        let (rows, ki) = (w[i].rows, w[i].k);
        if ki != k || Some(x.len()) != n.checked_mul(k) || Some(y[i].len()) != n.checked_mul(rows) {
            return Err(Error::invalid_argument(format_args!(
                "gemm_fused: matrix {i} is {rows}x{ki} (first has k = {k}), n = {n}: x has {}, \
                 y has {}",
                x.len(),
                y[i].len()
            )));
        }
        offsets[i] = total;
        total += rows.next_multiple_of(unit);
    }
    if total == 0 || n == 0 {
        return Ok(());
    }
    let kern = kernels::active()?;
    let fused = Fused::prepare(kern, w, x, n, act, scratch)?;
    let outs = y.map(|yi| SyncPtr(yi.as_mut_ptr()));
    let body = |range: Range<usize>| {
        for i in 0..N {
            let (lo, hi) = (offsets[i], offsets[i] + w[i].rows);
            let (a, b) = (range.start.max(lo), range.end.min(hi));
            if a < b {
                // SAFETY: rows `a - lo .. b - lo` of matrix `i` (inside it); their outputs are
                // written by this chunk only (chunks tile the numbered rows without overlap).
                unsafe { fused.rows(i, a - lo, b - lo, outs[i]) };
            }
        }
    };
    if exec.threads() > 1 && total >= fused.threshold() {
        let s = schedule.unwrap_or_else(|| exec.schedule());
        exec.parallel_for(0..total / unit, s, &|g: Range<usize>| {
            body(g.start * unit..g.end * unit)
        });
    } else {
        body(0..total);
    }
    Ok(())
}

/// The kernels and quantized input of a product of several matrices with one input
/// ([`gemm_fused`], [`gemm_glu`]), prepared once before the parallel loop.
struct Fused<'w, 'x, 's, const N: usize> {
    w: [&'w Matrix<'w>; N],
    x: &'x [f32],
    n: usize,
    fns: [RowKernel; N],
    /// How the outlier correction reads each matrix's column blocks (int8 matrices only).
    cols: [Option<Columns>; N],
    xq8: Option<Q8Acts<'s>>,
    xqk: Option<Q8Acts<'s>>,
    out8: Option<Outliers<'s>>,
    outk: Option<Outliers<'s>>,
}

impl<'w, 'x, 's, const N: usize> Fused<'w, 'x, 's, N> {
    /// Picks each matrix's kernel and quantizes `x` (`n` rows of the matrices' common `k`,
    /// checked by the caller) once per activation format they need, each in its own part of
    /// `scratch` (sized by [`scratch_bytes`] for both), and so its outlier blocks.
    fn prepare(
        kern: &Kernels,
        w: [&'w Matrix<'w>; N],
        x: &'x [f32],
        n: usize,
        act: Activations,
        scratch: &'s mut [u8],
    ) -> Result<Self> {
        let k = w.first().map_or(0, |m| m.k);
        let int8_fmt = |m: &Matrix<'_>| {
            let fmt = crate::quant::info(m.dtype).act;
            fmt.filter(|_| act != Activations::F32 && m.dtype.is_quantized())
        };
        let needs = |f: ActFormat| w.iter().any(|m| int8_fmt(m) == Some(f));
        let (n8, nk, corr) =
            (needs(ActFormat::Q8), needs(ActFormat::Q8K), act == Activations::Int8);
        let [s8, sk, o8, ok] = split_int8(scratch, k, n, act, [n8, nk, corr && n8, corr && nk]);
        let xq8 =
            if n8 { Some(Q8Acts::quantize_as(ActFormat::Q8, kern, x, n, k, s8)?) } else { None };
        let xqk =
            if nk { Some(Q8Acts::quantize_as(ActFormat::Q8K, kern, x, n, k, sk)?) } else { None };
        let find = |q: &Option<Q8Acts<'s>>, s: &'s mut [u8]| match q {
            Some(q) if corr => {
                Outliers::find(kern, x, k, q, s).map(|o| Some(o).filter(|o| !o.is_empty()))
            }
            _ => Ok(None),
        };
        let (out8, outk) = (find(&xq8, o8)?, find(&xqk, ok)?);
        let mut fns = [RowKernel::F32(kern.matmul_f32(DType::F32)?); N];
        let mut cols = [None; N];
        for i in 0..N {
            fns[i] = match int8_fmt(w[i]) {
                Some(f) => {
                    let (k8, c) = w[i].q8_kernel(kern, f)?;
                    cols[i] = Some(c);
                    RowKernel::Q8(k8, f)
                }
                None => RowKernel::F32(w[i].f32_kernel(kern)?),
            };
        }
        Ok(Fused { w, x, n, fns, cols, xq8, xqk, out8, outk })
    }

    /// Rows below which the loop runs inline: [`PAR_ROWS_QUANT`] if every matrix is
    /// quantized, else [`PAR_ROWS_F32`].
    fn threshold(&self) -> usize {
        if self.w.iter().all(|m| m.dtype.is_quantized()) {
            PAR_ROWS_QUANT
        } else {
            PAR_ROWS_F32
        }
    }

    /// Rows `r0 .. r1` of matrix `i` for all `n` input rows, into `out` (`rows_i` apart).
    ///
    /// # Safety
    ///
    /// `r0 <= r1 <= rows_i`; `out` addresses `n * rows_i` floats of which outputs
    /// `t * rows_i + r` for `r` in `r0 .. r1` are written by this call only.
    unsafe fn rows(&self, i: usize, r0: usize, r1: usize, out: SyncPtr) {
        let m = self.w[i];
        // SAFETY: the table's kernels run only on an ISA this CPU has; rows `r0 .. r1` lie
        // inside `m.data` (`Matrix::new` checked `rows * row_bytes`); `x` holds `n * k` floats
        // and each int8 kernel gets `n` quantized rows in its dtype's format (the outlier
        // residuals one block each, column blocks read as `cols[i]` says); the outputs as the
        // caller's contract says.
        unsafe {
            let wp = m.data.as_ptr().add(r0 * m.row_bytes);
            let y = out.at(r0);
            match self.fns[i] {
                RowKernel::Q8(f, fmt) => {
                    let (q, o) = if fmt == ActFormat::Q8 {
                        (self.xq8.as_ref(), self.out8.as_ref())
                    } else {
                        (self.xqk.as_ref(), self.outk.as_ref())
                    };
                    // A Q8 kernel is only chosen when its format was quantized (and then its
                    // column reads are set).
                    if let (Some(q), Some(c)) = (q, self.cols[i]) {
                        int8_rows(f, o, c, wp, m.row_bytes, r1 - r0, q, self.n, y, m.rows);
                    }
                }
                RowKernel::F32(f) => {
                    f(wp, m.row_bytes, r1 - r0, m.k, self.x.as_ptr(), self.n, y, m.rows)
                }
            }
        }
    }
}

/// Where [`gemm_glu`] puts its product quantized for the next projection: room for `n` rows
/// of the GLU's width in `fmt` (the activation format of the matrix that reads it).
pub(crate) struct GluQuant<'s> {
    /// The activation format.
    pub fmt: ActFormat,
    /// [`crate::quant::q8_acts_bytes_as`]`(fmt, rows, n)` bytes or more.
    pub scratch: &'s mut [u8],
}

/// The gate/up projections of a gated MLP with the activation applied inside the parallel
/// loop: `g = glu(X · Gᵀ, X · Uᵀ)` (`gelu`: GeGLU with tanh, else SwiGLU; [`glu_with`]) in `g`,
/// `u` holding `X · Uᵀ`. Each chunk computes the same rows of both matrices and then their
/// GLU, so the calling thread does not run the GLU after the loop, nor read the other
/// threads' halves of `u`. With `quant`, each chunk also quantizes its columns of the product
/// for the next projection and the quantized activations are returned: items are whole
/// activation blocks (32 or 256 rows of each matrix), so every block is quantized by one
/// chunk with the bytes [`Q8Acts::quantize_as`] gives it. Otherwise items are rows.
///
/// Every output is the same bits as [`gemm_fused`] over `[gate, up]` followed by [`glu_with`]
/// (the kernels compute rows independently; the GLU is elementwise).
///
/// # Errors
///
/// As [`gemm_fused`]; also [`crate::Code::InvalidArgument`] if the matrices' rows differ or
/// the rows are not a multiple of `quant`'s block, and (with `quant`) if the product holds
/// NaN or ±infinity.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_glu<'s>(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: [&Matrix<'_>; 2],
    x: &[f32],
    n: usize,
    g: &mut [f32],
    u: &mut [f32],
    gelu: bool,
    act: Activations,
    scratch: &mut [u8],
    quant: Option<GluQuant<'s>>,
) -> Result<Option<Q8Acts<'s>>> {
    let (rows, k) = (w[0].rows, w[0].k);
    let want = n.checked_mul(rows);
    if w[1].rows != rows
        || w[1].k != k
        || Some(x.len()) != n.checked_mul(k)
        || Some(g.len()) != want
        || Some(u.len()) != want
    {
        return Err(Error::invalid_argument(format_args!(
            "gemm_glu: gate is {rows}x{k}, up {}x{}, n = {n}: x has {}, outputs {} and {}",
            w[1].rows,
            w[1].k,
            x.len(),
            g.len(),
            u.len()
        )));
    }
    let kern = kernels::active()?;
    let parts = quant.map(|q| crate::quant::Q8Parts::new(q.fmt, n, rows, q.scratch)).transpose()?;
    if rows == 0 || n == 0 {
        // SAFETY: no block to write.
        return Ok(parts.map(|p| unsafe { p.finish() }));
    }
    let fused = Fused::prepare(kern, w, x, n, act, scratch)?;
    // Items are quantization blocks (multiples of 8 rows), else rows, or whole interleaved
    // groups for row-interleaved matrices (whose rows are a multiple of 8).
    let unit = parts.as_ref().map_or(w[0].row_unit().max(w[1].row_unit()), |p| p.block_elems());
    let (gp, up) = (SyncPtr(g.as_mut_ptr()), SyncPtr(u.as_mut_ptr()));
    let finite = core::sync::atomic::AtomicBool::new(true);
    let body = |items: Range<usize>| {
        let (a, b) = (items.start * unit, (items.end * unit).min(rows));
        // SAFETY: rows `a .. b` of both matrices (inside them) and their outputs, written by
        // this chunk only (chunks tile the items without overlap); then the GLU of those
        // outputs for each input row, and the quantization of blocks `a / unit .. b / unit`
        // of each row (whole blocks: `rows` is a multiple of `unit` when quantizing), which
        // no other chunk touches; `finish` runs after the loop.
        unsafe {
            fused.rows(0, a, b, gp);
            fused.rows(1, a, b, up);
            for t in 0..n {
                let gt = core::slice::from_raw_parts_mut(gp.at(t * rows + a), b - a);
                let ut = core::slice::from_raw_parts(up.at(t * rows + a).cast_const(), b - a);
                glu_with(Some(kern), gelu, gt, ut);
            }
            if let Some(p) = &parts {
                if !p.quantize_blocks(kern, gp.0.cast_const(), a / unit, b / unit) {
                    finite.store(false, core::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    };
    let items = rows.div_ceil(unit);
    if exec.threads() > 1 && rows >= fused.threshold() {
        exec.parallel_for(0..items, schedule.unwrap_or_else(|| exec.schedule()), &body);
    } else {
        body(0..items);
    }
    match parts {
        Some(_) if !finite.load(core::sync::atomic::Ordering::Relaxed) => {
            Err(crate::quant::non_finite(DType::Q8_0, g).context("int8 activations"))
        }
        // SAFETY: the items cover every block of every row (`rows` is a multiple of `unit`,
        // checked by `Q8Parts::new`), each quantized by the chunk that ran it; the loop
        // returned after every chunk.
        Some(p) => Ok(Some(unsafe { p.finish() })),
        None => Ok(None),
    }
}

/// `Y[n × rows] = X · Wᵀ` from activations already quantized in `w`'s activation format
/// (plain int8, no outlier correction): [`gemm`](super::gemm)'s int8 path without its quantization step.
/// The same bits as [`gemm`](super::gemm) with [`Activations::Int8Plain`] on the activations `xq` came from.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `w` has no int8 kernel, `xq` is not in its format or
/// has another shape, or `y.len() != n * rows`.
pub(crate) fn gemm_q8(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Matrix<'_>,
    xq: &Q8Acts<'_>,
    y: &mut [f32],
) -> Result<()> {
    let (rows, k, n) = (w.rows, w.k, xq.n());
    let fmt = crate::quant::info(w.dtype).act.filter(|_| w.dtype.is_quantized());
    if fmt != Some(xq.format())
        || Some(xq.nb() * xq.format().block_elems()) != Some(k)
        || Some(y.len()) != n.checked_mul(rows)
    {
        return Err(Error::invalid_argument(format_args!(
            "gemm_q8: W is {rows}x{k} {:?}, activations {n} rows of {} blocks {:?}, y has {}",
            w.dtype,
            xq.nb(),
            xq.format(),
            y.len()
        )));
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let kern = kernels::active()?;
    let (f, cols) = w.q8_kernel(kern, xq.format())?;
    let out = SyncPtr(y.as_mut_ptr());
    let (data, rb) = (w.data, w.row_bytes);
    let body = |range: Range<usize>| {
        // SAFETY: as in `gemm_with`'s int8 path: rows `range` lie inside `data`, `xq` holds
        // `n` rows of `k` values in the dtype's activation format, and outputs
        // `t * rows + r` for `r` in `range` are written by this chunk only.
        unsafe {
            let (wp, yp) = (data.as_ptr().add(range.start * rb), out.at(range.start));
            int8_rows(f, None, cols, wp, rb, range.len(), xq, n, yp, rows);
        }
    };
    if exec.threads() > 1 && rows >= PAR_ROWS_QUANT {
        // Whole interleaved groups per chunk for a row-interleaved matrix.
        let (s, unit) = (schedule.unwrap_or_else(|| exec.schedule()), w.row_unit());
        exec.parallel_for(0..rows / unit, s, &|g: Range<usize>| body(g.start * unit..g.end * unit));
    } else {
        body(0..rows);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
