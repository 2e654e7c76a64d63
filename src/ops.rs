//! The layer math on slices: GEMV/GEMM entry points over any weight dtype, with the parallel
//! thresholds of design.md §3.
//!
//! Shapes: a weight [`Matrix`] is `rows × k`, row-major (one output feature per row, as
//! PyTorch's `nn.Linear.weight`). GEMV computes `y[rows] = W · x[k]`; GEMM computes
//! `Y[n × rows] = X[n × k] · Wᵀ`. Work is split over output rows only, never over K, so
//! results are bit-identical for every schedule and thread count.

use core::ops::Range;

use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::kernels::{self, Kernels};
use crate::quant::{q8_acts_bytes_as, ActFormat, Q8Acts, QK_K};
use crate::tensor::DType;

/// f32 / f16 / bf16 GEMV runs in parallel only from this many rows on.
pub const PAR_ROWS_F32: usize = 64;
/// Quantized GEMV runs in parallel only from this many rows on.
pub const PAR_ROWS_QUANT: usize = 32;

/// How activations meet quantized weights.
///
/// The default is [`Activations::Int8`]; [`Activations::F32`] is the exact path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activations {
    /// f32 activations; quantized weights are dequantized on the fly (exact: the f32 result of
    /// the dequantized weights, within float rounding).
    F32,
    /// int8 activations with outlier-block correction (the default): as
    /// [`Activations::Int8Plain`], and each activation block whose largest |value| exceeds
    /// [`OUTLIER_RATIO`] times its row's RMS (a massive-activation channel, which leaves the
    /// block's other values coarsely quantized) has its quantization residual quantized again
    /// and multiplied in by the same int8 kernel over that one column block of the weights.
    /// Results are bit-identical across ISAs, thread counts and schedules, as for the other
    /// modes. Costs one pass over the input and, per outlier block and weight row, about 2-3
    /// blocks' worth of the plain product (the column block is read as strided blocks and
    /// transposed 16 rows at a time); SmolLM2's normalized inputs have 1.2-1.3 outlier blocks
    /// per 576-wide row, and its decode runs 8-15% slower than with
    /// [`Activations::Int8Plain`]. Scratch: [`scratch_bytes`].
    /// Applies to quantized weights only; f32/f16/bf16 weights always use f32 activations.
    #[default]
    Int8,
    /// Activations quantized once to the weight type's int8 format (Q8_0-style blocks of 32
    /// for the 32-element types, Q8_K-style super-blocks of 256 for the K-quants; see
    /// [`crate::quant::ActFormat`]), dotted in int8: ggml's scheme, the fastest. Applies to
    /// quantized weights only; f32/f16/bf16 weights always use f32 activations.
    Int8Plain,
    /// A decoder policy ([`crate::model::DecoderOptions::activations`]): f32 activations for
    /// the projections that read the RMS-normalized residual stream (q/k/v and gate/up),
    /// [`Activations::Int8Plain`] for the others (attention output, down projection, output head).
    /// A single [`gemv`] / [`gemm`] / [`gemm_fused`] call treats it as [`Activations::Int8Plain`];
    /// [`Activations::for_normed_input`] gives what the normalized-input projections use.
    Mixed,
}

/// A borrowed `rows × k` weight matrix in any supported dtype, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    dtype: DType,
    rows: usize,
    k: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> Matrix<'a> {
    /// A matrix over `data`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `data.len() != rows * row_bytes(k)`, if `k` is not
    /// a multiple of the dtype's block size (32, 64 for Q5_0x2, 256 for the K-quants), if an
    /// f32 matrix is not 4-byte aligned, or if
    /// the dtype is not a weight dtype (a row of [`crate::quant::TYPES`] with a matmul).
    pub fn new(dtype: DType, rows: usize, k: usize, data: &'a [u8]) -> Result<Self> {
        if crate::quant::info(dtype).matmul_f32.is_none() {
            return Err(Error::unimplemented(format_args!(
                "{dtype} is not a supported weight dtype"
            )));
        }
        let row_bytes = dtype.row_bytes(k)?;
        let need = row_bytes.checked_mul(rows);
        if need != Some(data.len()) {
            return Err(Error::invalid_argument(format_args!(
                "{dtype} matrix {rows}x{k} needs {need:?} bytes, got {}",
                data.len()
            )));
        }
        if dtype == DType::F32 && data.as_ptr() as usize % 4 != 0 {
            return Err(Error::invalid_argument("f32 matrix data is not 4-byte aligned"));
        }
        Ok(Matrix { dtype, rows, k, row_bytes, data })
    }

    /// The weight dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output features (rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns, K).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The raw bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The raw bytes of row `r`.
    ///
    /// # Panics
    ///
    /// If `r >= rows`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}

impl Activations {
    /// What a projection of the RMS-normalized residual stream (q/k/v, gate/up) uses under
    /// this setting: [`Activations::F32`] for [`Activations::Mixed`], else `self`.
    ///
    /// Why those: teacher-forced over the 731 positions of `tests/data/agreement` (SmolLM2
    /// Q4_1, rml's f32-activation logits as the yardstick), keeping one kind of matmul at f32
    /// activations while the rest are int8 lowers the mean |Δlogit| from 0.223 to 0.164
    /// (q/k/v), 0.181 (gate/up), 0.207 (down), 0.212 (attention output), 0.218 (output head):
    /// the normalized inputs carry SmolLM2's massive-activation channels, so a block holding
    /// one quantizes its other 31 values coarsely. Both normalized kinds at f32: 0.114.
    pub fn for_normed_input(self) -> Activations {
        match self {
            Activations::Mixed => Activations::F32,
            a => a,
        }
    }

    /// What a projection of an input that is not RMS-normalized (the attention output into
    /// o, the SwiGLU product into down) uses under this setting: [`Activations::Int8Plain`]
    /// for [`Activations::Int8`] and [`Activations::Mixed`], else `self`. The output head
    /// reads the final RMSNorm and takes the setting itself ([`Activations::Mixed`] is plain
    /// int8 there).
    ///
    /// Why: teacher-forced over the 3,746 positions of `tests/data/agreement` (SmolLM2 Q4_1,
    /// rml's f32-activation logits as the yardstick), the outlier correction on the
    /// normalized inputs (q/k/v, gate/up, head) gives top-1 3,696, mean |Δlogit| 0.099, max
    /// 1.70; on every input 3,694 / 0.089 / 1.12, at about twice the extra work.
    pub fn for_other_input(self) -> Activations {
        match self {
            Activations::Int8 | Activations::Mixed => Activations::Int8Plain,
            a => a,
        }
    }
}

/// Bytes of scratch [`gemv`] / [`gemm`] / [`gemm_fused`] need for `n` activation rows of `k`
/// inputs under `act`: 0 for [`Activations::F32`]; for [`Activations::Int8Plain`] (and
/// [`Activations::Mixed`]) the int8 copies of `x` in both activation formats
/// ([`crate::quant::q8_acts_bytes`]: 44 bytes per 32 inputs per row, plus 324 per 256 when `k` is a multiple
/// of 256, plus alignment slack); [`Activations::Int8`] adds room for the outlier blocks of
/// both formats (sized for the worst case, every block an outlier: about as much again).
pub fn scratch_bytes(k: usize, n: usize, act: Activations) -> usize {
    match act {
        Activations::F32 => 0,
        _ => int8_parts(k, n, act).iter().sum(),
    }
}

/// The parts of int8 scratch, in order: the Q8 quantization of the input, its Q8_K
/// quantization (when `k` is a multiple of 256), and with [`Activations::Int8`] the outlier
/// blocks of each.
fn int8_parts(k: usize, n: usize, act: Activations) -> [usize; 4] {
    // (k = 0 included: an empty Q8_K quantization still needs its alignment slack.)
    let k_ok = k % QK_K == 0;
    let corr = act == Activations::Int8;
    [
        q8_acts_bytes_as(ActFormat::Q8, k, n),
        if k_ok { q8_acts_bytes_as(ActFormat::Q8K, k, n) } else { 0 },
        if corr { outliers::outlier_bytes(ActFormat::Q8, k, n) } else { 0 },
        if corr && k_ok { outliers::outlier_bytes(ActFormat::Q8K, k, n) } else { 0 },
    ]
}

/// Splits int8 scratch into the parts of [`int8_parts`] that `want` names (the others are
/// empty and take no room; the last one named takes the rest); short scratch gives short
/// parts, which their users report.
fn split_int8(
    scratch: &mut [u8],
    k: usize,
    n: usize,
    act: Activations,
    want: [bool; 4],
) -> [&mut [u8]; 4] {
    let sizes = int8_parts(k, n, act);
    let last = want.iter().rposition(|&w| w);
    let mut rest = scratch;
    let mut parts: [&mut [u8]; 4] = Default::default();
    for i in 0..4 {
        // The last part wanted takes the rest (a caller may size scratch for just that part).
        let len = match want[i] {
            true if Some(i) == last => rest.len(),
            true => sizes[i].min(rest.len()),
            false => 0,
        };
        let (a, b) = core::mem::take(&mut rest).split_at_mut(len);
        parts[i] = a;
        rest = b;
    }
    parts
}

/// Weight bytes the int8 kernel runs over before the outlier correction of the same rows, so
/// that the correction's reads (one block of each row) still hit L2.
const CORRECTION_SPAN_BYTES: usize = 256 << 10;

/// One chunk of an int8 product: `rows` weight rows from `w` (`rb` bytes each) against `xq`
/// into `y` (`ldy` apart), then, with outlier blocks `o`, their correction (column blocks read
/// as `cols` says), in spans of about [`CORRECTION_SPAN_BYTES`].
///
/// # Safety
///
/// As [`kernels::MatmulQ8Fn`] for `f` over these rows, and [`Outliers::apply`]'s contract.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn int8_rows(
    f: kernels::MatmulQ8Fn,
    o: Option<&Outliers<'_>>,
    cols: Columns,
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let Some(o) = o else {
        // SAFETY: caller contract.
        unsafe { f(w, rb, rows, xq, n, y, ldy) };
        return;
    };
    let span = (CORRECTION_SPAN_BYTES / rb.max(1)).max(16) / 16 * 16;
    let mut r = 0;
    while r < rows {
        let len = span.min(rows - r);
        // SAFETY: rows `r .. r + len` of the caller's rows and their outputs.
        unsafe {
            f(w.add(r * rb), rb, len, xq, n, y.add(r), ldy);
            o.apply(cols, w.add(r * rb), rb, len, y.add(r), ldy);
        }
        r += len;
    }
}

/// A raw pointer that may be shared across threads; each chunk writes disjoint rows.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
// SAFETY: used only to write disjoint output rows from different chunks.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// The element pointer `i` places on (a method, so closures capture the whole wrapper).
    ///
    /// # Safety
    ///
    /// `i` is inside the buffer.
    unsafe fn at(self, i: usize) -> *mut f32 {
        // SAFETY: in bounds (caller contract).
        unsafe { self.0.add(i) }
    }
}

/// `y[rows] = W · x`.
///
/// `schedule` `None` uses the executor's default. Runs inline below [`PAR_ROWS_F32`] rows
/// (f32/f16/bf16) or [`PAR_ROWS_QUANT`] rows (quantized). With int8 activations
/// ([`Activations::Int8`], [`Activations::Int8Plain`], [`Activations::Mixed`]) and quantized
/// weights `scratch` must hold at least [`scratch_bytes`]`(k, 1, act)` bytes; otherwise it is
/// not used. Uses the kernels of [`kernels::active`]; allocates nothing.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `x.len() != k`, `y.len() != rows`, `scratch` is too
/// small, or (int8) `x` holds NaN or ±infinity; as [`kernels::active`] if `RML_KERNELS` is
/// invalid.
pub fn gemv(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Matrix<'_>,
    x: &[f32],
    y: &mut [f32],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    gemm_with(kernels::active()?, exec, schedule, w, x, 1, y, act, scratch)
}

/// `Y[n × rows] = X[n × k] · Wᵀ` (prefill).
///
/// As [`gemv`]; `x.len()` must be `n * k`, `y.len()` `n * rows`, and `scratch` (int8 with
/// quantized weights) [`scratch_bytes`]`(k, n, Int8)` bytes.
///
/// # Errors
///
/// As [`gemv`].
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Matrix<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    gemm_with(kernels::active()?, exec, schedule, w, x, n, y, act, scratch)
}

/// [`gemm`] with an explicit kernel table (tests and benchmarks compare ISAs with it).
///
/// Rows are split across `exec` (never K), each output is computed by one chunk with a fixed
/// order of operations, so the result is bit-identical for every schedule and thread count.
///
/// # Errors
///
/// As [`gemv`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_with(
    kern: &Kernels,
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Matrix<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    let (rows, k) = (w.rows, w.k);
    if Some(x.len()) != n.checked_mul(k) || Some(y.len()) != n.checked_mul(rows) {
        return Err(Error::invalid_argument(format_args!(
            "gemm: W is {rows}x{k}, n = {n}: x has {} (want {}), y has {} (want {})",
            x.len(),
            n.saturating_mul(k),
            y.len(),
            n.saturating_mul(rows)
        )));
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let quantized = w.dtype.is_quantized();
    let threshold = if quantized { PAR_ROWS_QUANT } else { PAR_ROWS_F32 };
    let parallel = exec.threads() > 1 && rows >= threshold;
    let schedule = schedule.unwrap_or_else(|| exec.schedule());
    let out = SyncPtr(y.as_mut_ptr());
    let (data, rb) = (w.data, w.row_bytes);
    let run = |body: &(dyn Fn(Range<usize>) + Sync)| {
        if parallel {
            exec.parallel_for(0..rows, schedule, body);
        } else {
            body(0..rows);
        }
    };
    let fmt = crate::quant::info(w.dtype).act;
    if let (Activations::Int8 | Activations::Int8Plain | Activations::Mixed, true, Some(fmt)) =
        (act, quantized, fmt)
    {
        let f = kern.matmul_q8(w.dtype)?;
        let (is8, corr) = (fmt == ActFormat::Q8, act == Activations::Int8);
        let [s8, sk, o8, ok] =
            split_int8(scratch, k, n, act, [is8, !is8, corr && is8, corr && !is8]);
        let (sq, so) = if is8 { (s8, o8) } else { (sk, ok) };
        let xq = Q8Acts::quantize_as(fmt, kern, x, n, k, sq)?;
        let outl = if corr { Some(Outliers::find(kern, x, k, &xq, so)?) } else { None };
        let outl = outl.filter(|o| !o.is_empty());
        let cols = Columns::of(kern, w.dtype, fmt)?;
        run(&|range: Range<usize>| {
            // SAFETY: `kern` is an available table (only `kernels::table`/`active` hand them
            // out); rows `range` lie inside `data` (`Matrix::new` checked `rows * rb`); `xq`
            // holds `n` rows of `k` values in the dtype's activation format, and the outlier
            // residuals one block each of it (column blocks read as `cols` says);
            // outputs `t * rows + r` for `r` in `range` are inside `y` and written by this
            // chunk only.
            unsafe {
                let (wp, yp) = (data.as_ptr().add(range.start * rb), out.at(range.start));
                int8_rows(f, outl.as_ref(), cols, wp, rb, range.len(), &xq, n, yp, rows);
            }
        });
    } else {
        let f = kern.matmul_f32(w.dtype)?;
        run(&|range: Range<usize>| {
            // SAFETY: as above, with `x` holding `n * k` floats and f32 rows 4-byte aligned
            // (`Matrix::new` checked it; `rb` is a multiple of 4 for f32).
            unsafe {
                f(
                    data.as_ptr().add(range.start * rb),
                    rb,
                    range.len(),
                    k,
                    x.as_ptr(),
                    n,
                    out.at(range.start),
                    rows,
                )
            }
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Layer math for the decoder (design.md §3 "Decoder"): RMSNorm, RoPE, softmax, SiLU / SwiGLU
// and attention for one head, on plain f32 slices. Single-threaded; the decoder parallelises
// across heads. Everything here reduces in a fixed order, so results do not depend on how the
// caller splits work.
// ---------------------------------------------------------------------------------------------

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
/// [`PAR_ROWS_F32`]); every output is computed by the same kernel call as in [`gemm`], so the
/// results are bit-identical to separate [`gemm`] calls. `scratch` as for [`gemm`].
///
/// # Errors
///
/// As [`gemm`]; also [`crate::Code::InvalidArgument`] if the matrices' `k` differ.
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
        total += rows;
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
        exec.parallel_for(0..total, schedule.unwrap_or_else(|| exec.schedule()), &body);
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
        let mut fns = [RowKernel::F32(kern.matmul_f32(w[0].dtype)?); N];
        let mut cols = [None; N];
        for i in 0..N {
            fns[i] = match int8_fmt(w[i]) {
                Some(f) => {
                    cols[i] = Some(Columns::of(kern, w[i].dtype, f)?);
                    RowKernel::Q8(kern.matmul_q8(w[i].dtype)?, f)
                }
                None => RowKernel::F32(kern.matmul_f32(w[i].dtype)?),
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
    let unit = parts.as_ref().map_or(1, |p| p.block_elems());
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
/// (plain int8, no outlier correction): [`gemm`]'s int8 path without its quantization step.
/// The same bits as [`gemm`] with [`Activations::Int8Plain`] on the activations `xq` came from.
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
    let f = kern.matmul_q8(w.dtype)?;
    let cols = Columns::of(kern, w.dtype, xq.format())?;
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
        exec.parallel_for(0..rows, schedule.unwrap_or_else(|| exec.schedule()), &body);
    } else {
        body(0..rows);
    }
    Ok(())
}

/// Dot product of two equal-length f32 slices with eight independent partial sums (so the
/// compiler can vectorise it), combined in a fixed order.
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `y[i] += alpha * x[i]`.
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// `y[i] += x[i]` (the residual connection).
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    assert_eq!(x.len(), y.len(), "add_assign: length mismatch");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += xi;
    }
}

/// `Σ x[i]²` in f64 (each square is exact there) as eight partial sums, lane `i % 8`, combined
/// as `((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))`: a fixed order, so the same bits on
/// every machine, and independent chains the compiler vectorizes. (One running sum was a
/// chain of dependent f64 adds: 0.8 µs per 576-wide row, a fifth of the serial work between
/// SmolLM2's parallel loops at two threads.)
fn sum_squares(x: &[f32]) -> f64 {
    let mut s = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in s.iter_mut().zip(c) {
            *a += (v as f64) * (v as f64);
        }
    }
    for (a, &v) in s.iter_mut().zip(chunks.remainder()) {
        *a += (v as f64) * (v as f64);
    }
    ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
}

/// RMSNorm of one row (Llama's `LlamaRMSNorm`): `out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]`.
///
/// The mean of squares is accumulated in f64 (eight partial sums in a fixed order): the
/// residual stream of real models reaches ~2·10⁴, whose squares summed in f32 would lose
/// digits.
///
/// # Panics
///
/// If `x`, `w` and `out` differ in length or are empty.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(!x.is_empty() && x.len() == w.len() && x.len() == out.len(), "rms_norm: shapes");
    let ss = sum_squares(x);
    let inv = 1.0 / libm::sqrt(ss / x.len() as f64 + eps as f64);
    let inv = inv as f32;
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = wi * (xi * inv);
    }
}

/// [`rms_norm`] in place: `x[i] = x[i] / sqrt(mean(x²) + eps) * w[i]` (per-head q/k norms,
/// Gemma's post-norms).
///
/// # Panics
///
/// If `x` and `w` differ in length or are empty.
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    assert!(!x.is_empty() && x.len() == w.len(), "rms_norm_in_place: shapes");
    let ss = sum_squares(x);
    let inv = (1.0 / libm::sqrt(ss / x.len() as f64 + eps as f64)) as f32;
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = wi * (*xi * inv);
    }
}

/// The RoPE inverse frequencies `inv_freq[i] = theta^(-2i/d)` for `i < d/2`, written to
/// `out` (`d / 2` values), as Hugging Face's default rope computes them.
///
/// # Panics
///
/// If `out.len() * 2 != head_dim`.
pub fn rope_inv_freq(theta: f32, head_dim: usize, out: &mut [f32]) {
    assert_eq!(out.len() * 2, head_dim, "rope_inv_freq: out must hold head_dim / 2 values");
    for (i, f) in out.iter_mut().enumerate() {
        let e = (2 * i) as f64 / head_dim as f64;
        *f = (1.0 / libm::pow(theta as f64, e)) as f32;
    }
}

/// Fills `cos[i]` and `sin[i]` with the rotation for position `pos` and `inv_freq[i]`
/// (angle `pos * inv_freq[i]`, rounded to f32 first as PyTorch does).
///
/// # Panics
///
/// If the three slices differ in length.
pub fn rope_cos_sin(pos: usize, inv_freq: &[f32], cos: &mut [f32], sin: &mut [f32]) {
    assert!(inv_freq.len() == cos.len() && cos.len() == sin.len(), "rope_cos_sin: shapes");
    for ((&f, c), s) in inv_freq.iter().zip(cos.iter_mut()).zip(sin.iter_mut()) {
        let angle = (pos as f32 * f) as f64;
        *c = libm::cos(angle) as f32;
        *s = libm::sin(angle) as f32;
    }
}

/// How the two halves of each rotated pair sit inside a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Hugging Face's `rotate_half`: element `i` pairs with `i + d/2`.
    RotateHalf,
    /// GPT-J / llama.cpp style: element `2i` pairs with `2i + 1`. Equivalent to `RotateHalf`
    /// on GGUF Llama weights, whose q/k rows are stored permuted so that pairs are adjacent.
    Interleaved,
}

/// Applies RoPE in place to `x`, a run of heads of `2 * cos.len()` elements each. Pair `i` of
/// every head is rotated by the angle whose cosine and sine are `cos[i]`, `sin[i]`:
/// `(a, b) → (a cos − b sin, b cos + a sin)`.
///
/// # Panics
///
/// If `cos` and `sin` differ in length, are empty, or `x.len()` is not a whole number of heads.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    assert!(half > 0 && sin.len() == half, "rope: cos/sin shapes");
    assert_eq!(x.len() % (2 * half), 0, "rope: x is not a whole number of heads");
    for head in x.chunks_exact_mut(2 * half) {
        match layout {
            RopeLayout::RotateHalf => {
                let (lo, hi) = head.split_at_mut(half);
                for i in 0..half {
                    let (a, b) = (lo[i], hi[i]);
                    lo[i] = a * cos[i] - b * sin[i];
                    hi[i] = b * cos[i] + a * sin[i];
                }
            }
            RopeLayout::Interleaved => {
                for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                    let (a, b) = (pair[0], pair[1]);
                    pair[0] = a * cos[i] - b * sin[i];
                    pair[1] = b * cos[i] + a * sin[i];
                }
            }
        }
    }
}

/// Softmax in place: `x[i] = exp(x[i] − max) / Σ exp(x[j] − max)`. An empty slice is left
/// alone. `-inf` entries get probability 0.
pub fn softmax(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = expf(*v - max);
    }
    for &v in x.iter() {
        sum += v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// SiLU (swish): `x · sigmoid(x) = x / (1 + e^(−x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(-x))
}

/// The SwiGLU gate in place: `gate[i] = silu(gate[i]) * up[i]` (Llama's MLP before
/// `down_proj`).
///
/// # Panics
///
/// If the lengths differ.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: length mismatch");
    swiglu_body(gate, up);
}

/// [`swiglu`] with the kernels of `k`: the same bits on every ISA (the loop is compiled for
/// the ISA's vector width; each lane runs [`silu`]'s operations unchanged), several times
/// faster than the portable loop where the ISA has wide vectors.
///
/// # Panics
///
/// If the lengths differ.
pub fn swiglu_on(k: &Kernels, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: length mismatch");
    // SAFETY: a `Kernels` table is only handed out for an ISA this CPU runs.
    unsafe { (k.swiglu)(gate, up) }
}

/// The loop of [`swiglu`] (the lengths are checked by the callers; a longer `gate` keeps its
/// tail). Kernel tables compile it under their target features.
#[inline(always)]
pub(crate) fn swiglu_body(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// The gated activation of a decoder's MLP (`gelu`: GeGLU with tanh, else SwiGLU) with the
/// active kernels when there are some, the scalar table's otherwise (the same bits).
pub(crate) fn glu_with(k: Option<&Kernels>, gelu: bool, gate: &mut [f32], up: &[f32]) {
    let k = k.unwrap_or(&kernels::SCALAR);
    if gelu {
        geglu_tanh_on(k, gate, up)
    } else {
        swiglu_on(k, gate, up)
    }
}

/// GELU with the tanh approximation (PyTorch's `gelu(x, approximate="tanh")`,
/// transformers' `gelu_pytorch_tanh`): `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// The GeGLU gate in place: `gate[i] = gelu_tanh(gate[i]) * up[i]` (Gemma's MLP before
/// `down_proj`).
///
/// # Panics
///
/// If the lengths differ.
pub fn geglu_tanh(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "geglu_tanh: length mismatch");
    geglu_tanh_body(gate, up);
}

/// [`geglu_tanh`] with the kernels of `k`: the same bits on every ISA, as [`swiglu_on`].
///
/// # Panics
///
/// If the lengths differ.
pub fn geglu_tanh_on(k: &Kernels, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "geglu_tanh: length mismatch");
    // SAFETY: a `Kernels` table is only handed out for an ISA this CPU runs.
    unsafe { (k.geglu_tanh)(gate, up) }
}

/// The loop of [`geglu_tanh`], as [`swiglu_body`].
#[inline(always)]
pub(crate) fn geglu_tanh_body(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh_fast(*g) * u;
    }
}

/// [`gelu_tanh`] as `x / (1 + e^(-2 z))` (the same function: `0.5 (1 + tanh z) = 1 / (1 +
/// e^(-2 z))`) with a branch-free `e^y` ([`exp_poly`]) the compiler vectorises; within a few
/// f32 ulps of [`gelu_tanh`] (libm's `tanhf`).
#[inline(always)]
fn gelu_tanh_fast(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let z = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp_poly(-2.0 * z))
}

/// `e^x` with exactly the bits of `libm::expf` (FreeBSD's `e_expf.c`: `k = round(x / ln 2)`,
/// `r = x - k ln 2` in two parts, the rational approximation `1 + r + r c / (2 - c)` with its
/// two-coefficient `c`, times `2^k` as `scalbnf` applies it) for every input, NaN, infinities and
/// subnormal results included, but with every branch written as a select, so that loops over
/// it vectorise. SiLU and softmax use it: their results stay those of the scalar libm call.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    // libm's constants, by their bits: ln 2 in two parts, 1 / ln 2, the two coefficients.
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
    const P1: f32 = f32::from_bits(0x3e2a_aa8f);
    const P2: f32 = f32::from_bits(0xbb35_5215);
    let bits = x.to_bits();
    let hx = bits & 0x7fff_ffff;
    let neg = bits >> 31 != 0;
    // Argument reduction: |x| > 1.5 ln 2 rounds x / ln 2, 0.5 ln 2 < |x| <= 1.5 ln 2 takes
    // k = ±1, smaller |x| takes k = 0 (then hi = x and lo = 0 exactly, as libm's branch has it).
    // `as i32` would saturate lane by lane (scalar code on x86); clamping first keeps every k
    // a result can use (-151..=129, see below) and makes the plain conversion defined, so the
    // loop vectorises. Lanes clamped here (NaN, |x| > 110) take a special case below.
    #[allow(clippy::manual_clamp)] // `clamp` keeps NaN; `max` / `min` replace it
    let t = (INV_LN2 * x + if neg { -0.5 } else { 0.5 }).max(-160.0).min(160.0);
    // SAFETY: `t` is finite and within ±160 (`max` / `min` turn NaN into a bound).
    let k_far = unsafe { t.to_int_unchecked::<i32>() };
    let k_near = if neg { -1 } else { 1 };
    let k = if hx > 0x3f85_1592 {
        k_far
    } else if hx > 0x3eb1_7218 {
        k_near
    } else {
        0
    };
    let kf = k as f32;
    let hi = x - kf * LN2_HI;
    let lo = kf * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (P1 + rr * P2);
    let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
    // scalbnf(y, k) for the k this range produces (-150..=128): one pre-scaling step, then the
    // power of two built in the exponent bits.
    let (y, k) = if k > 127 {
        (y * f32::from_bits(0x7f00_0000), k.wrapping_sub(127))
    } else if k < -126 {
        (y * f32::from_bits(0x0c80_0000), k.wrapping_add(102))
    } else {
        (y, k)
    };
    let scaled = y * f32::from_bits((k.wrapping_add(127) as u32) << 23);
    // Special cases, in libm's order.
    if hx >= 0x42ae_ac50 {
        if hx > 0x7f80_0000 {
            x // NaN
        } else if !neg && hx >= 0x42b1_7218 {
            x * f32::from_bits(0x7f00_0000) // overflow: +inf
        } else if neg && hx >= 0x42cf_f1b5 {
            0.0 // x <= -103.97: underflow
        } else {
            scaled
        }
    } else if hx <= 0x3900_0000 {
        1.0 + x // |x| <= 2^-14
    } else {
        scaled
    }
}

/// `e^y`, branch-free (Cephes' `expf`): `y` clamped to `[-87, 88]`, `n = round(y / ln 2)` by
/// the `1.5 · 2^23` shift, `r = y - n ln 2` in two parts, a degree-5 polynomial, times `2^n`
/// built in the exponent bits. Relative error about 1e-7; NaN stays NaN.
#[inline(always)]
fn exp_poly(y: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const SHIFT: f32 = 12_582_912.0;
    let y = y.clamp(-87.0, 88.0);
    let n = (y * LOG2E + SHIFT) - SHIFT;
    let r = (y - n * 0.693_359_4) - n * -2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = (p * r * r + r) + 1.0;
    // `n` is a whole number in -126..=127 unless `y` is NaN (then `e` is NaN and so is the
    // result, whatever the power of two): clamping makes the plain conversion defined and
    // vectorisable (`as i32` saturates lane by lane).
    #[allow(clippy::manual_clamp)] // `clamp` keeps NaN; `max` / `min` replace it
    // SAFETY: finite and within -127..=128 after `max` / `min` (which turn NaN into a bound).
    let n = unsafe { n.max(-127.0).min(128.0).to_int_unchecked::<i32>() };
    e * f32::from_bits(((n + 127) as u32) << 23)
}

/// Soft-capping in place: `x[i] = cap * tanh(x[i] / cap)` (Gemma's
/// `final_logit_softcapping`).
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = cap * libm::tanhf(*v / cap);
    }
}

mod attention;
mod gelu;
mod layer_norm;
mod outliers;
pub(crate) use attention::run_block as attention_block;
pub use attention::{attention_group, attention_group_on, GroupShape, KvRows};
pub use gelu::{gelu_erf, gelu_erf_in_place};
pub use layer_norm::{layer_norm, layer_norm_in_place};
pub use outliers::OUTLIER_RATIO;
use outliers::{Columns, Outliers};

/// Scaled dot-product attention for one query head over `n` cached positions:
/// `out = Σ_t softmax_t(scale · q·k_t) · v_t`.
///
/// `keys` and `values` hold positions `0..n` of one KV head, `q.len()` floats each, position
/// `t` at `[t * d, (t + 1) * d)`; `scores` is scratch of at least `n` floats. Positions past
/// `n` are not read (causality is the caller's choice of `n`). With an AVX2 kernel tier
/// active the two loops over the cache run as AVX2 code with the same arithmetic (bit-identical
/// results).
///
/// # Panics
///
/// If `n == 0`, `out.len() != q.len()`, `keys`/`values` hold fewer than `n * q.len()` floats,
/// or `scores` fewer than `n`.
pub fn attention_head(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    n: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = q.len();
    assert!(n > 0 && out.len() == d, "attention_head: shapes");
    assert!(keys.len() >= n * d && values.len() >= n * d && scores.len() >= n);
    let scores = &mut scores[..n];
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
    if kernels::active().is_ok_and(|k| k.isa().has_avx2()) {
        // SAFETY: the active table is an AVX2 tier, so the CPU has AVX2; `keys` and `values`
        // hold `n * d` floats (asserted above). Same arithmetic as the loops below.
        unsafe {
            kernels::attention::scores(q, keys, scale, scores);
            softmax(scores);
            kernels::attention::weighted_sum(scores, values, out);
        }
        return;
    }
    for (t, s) in scores.iter_mut().enumerate() {
        *s = dot(q, &keys[t * d..(t + 1) * d]) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    for (t, &p) in scores.iter().enumerate() {
        axpy(p, &values[t * d..(t + 1) * d], out);
    }
}

/// Row `r` of `w` widened to f32 into `out` (`w.k()` floats): an embedding lookup.
///
/// # Panics
///
/// If `r >= w.rows()` or `out.len() != w.k()`.
pub fn dequantize_row(w: &Matrix<'_>, r: usize, out: &mut [f32]) {
    assert_eq!(out.len(), w.k(), "dequantize_row: out must hold k floats");
    let f = crate::quant::info(w.dtype()).dequantize;
    // `Matrix::new` admits only the weight dtypes, which all dequantize.
    match f {
        Some(f) => f(w.row(r), out),
        None => out.fill(0.0),
    }
}

#[cfg(test)]
mod layer_math_tests {
    use super::*;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn dot_matches_naive_sum_for_ragged_lengths() {
        for n in [0usize, 1, 7, 8, 9, 31, 64, 100] {
            let a: alloc::vec::Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: alloc::vec::Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64) * (*y as f64)).sum();
            assert!(close(dot(&a, &b), naive as f32, 1e-5), "n = {n}");
        }
    }

    #[test]
    fn rms_norm_by_value() {
        // mean(x²) = (9 + 16) / 2 = 12.5; 1 / sqrt(12.5 + 0.5) = 0.27735
        let mut out = [0f32; 2];
        rms_norm(&[3.0, -4.0], &[1.0, 2.0], 0.5, &mut out);
        let inv = 1.0 / 13f32.sqrt();
        assert!(close(out[0], 3.0 * inv, 1e-6) && close(out[1], -8.0 * inv, 1e-6), "{out:?}");
    }

    #[test]
    fn softmax_by_value_and_masked_entries() {
        let mut x = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        softmax(&mut x);
        let e: [f32; 3] = [(-2f32).exp(), (-1f32).exp(), 1.0];
        let s: f32 = e.iter().sum();
        for i in 0..3 {
            assert!(close(x[i], e[i] / s, 1e-6));
        }
        assert_eq!(x[3], 0.0);
        let mut big = [1e4f32, 1e4];
        softmax(&mut big);
        assert_eq!(big, [0.5, 0.5]);
    }

    #[test]
    fn silu_and_swiglu_by_value() {
        assert_eq!(silu(0.0), 0.0);
        assert!(close(silu(1.0), 1.0 / (1.0 + (-1f32).exp()), 1e-6));
        assert!(close(silu(-20.0), -20.0 * (-20f32).exp(), 1e-3));
        let mut g = [2.0f32, -1.0];
        swiglu(&mut g, &[3.0, 0.5]);
        assert!(close(g[0], 3.0 * silu(2.0), 1e-6) && close(g[1], 0.5 * silu(-1.0), 1e-6));
    }

    /// Every input in `bits` (stepping by `step`) gives libm's bits.
    fn expf_matches_libm_over(bits: impl Iterator<Item = u32>) {
        for b in bits {
            let x = f32::from_bits(b);
            let (got, want) = (expf(x), libm::expf(x));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "expf({x:e}) = {got:e} ({:#x}), libm {want:e} ({:#x})",
                got.to_bits(),
                want.to_bits()
            );
        }
    }

    #[test]
    fn expf_has_libms_bits() {
        // A sweep of both signs, dense runs around every branch threshold of libm's expf
        // (0x39000000: 2^-14, 0x3eb17218: ln2/2, 0x3f851592: 1.5 ln2, 0x42aeac50: the
        // subnormal range, 0x42b17218: overflow, 0x42cff1b5: underflow to 0), the
        // specials, and the inputs that vectorised loops see (x − max of softmax, −x of SiLU).
        expf_matches_libm_over((0..=u32::MAX).step_by(4099));
        for t in [0x3900_0000u32, 0x3eb1_7218, 0x3f85_1592, 0x42ae_ac50, 0x42b1_7218, 0x42cf_f1b5] {
            for sign in [0, 0x8000_0000u32] {
                expf_matches_libm_over((t - 3000..t + 3000).map(|b| b | sign));
            }
        }
        expf_matches_libm_over([0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0, 0x8000_0000].into_iter());
        // Dense in the range activations live in: [-20, 20] in steps of 1/1024.
        expf_matches_libm_over((-20 * 1024..=20 * 1024).map(|i| (i as f32 / 1024.0).to_bits()));
    }

    #[test]
    #[ignore = "all 2^32 inputs (one to two minutes optimised): cargo test --release --lib -- --ignored expf"]
    fn expf_has_libms_bits_for_every_input() {
        expf_matches_libm_over(0..=u32::MAX);
    }

    #[test]
    fn rope_rotates_pairs_in_both_layouts() {
        let mut inv = [0f32; 2];
        rope_inv_freq(100.0, 4, &mut inv);
        assert_eq!(inv[0], 1.0);
        assert!(close(inv[1], 0.1, 1e-6));
        let (mut c, mut s) = ([0f32; 2], [0f32; 2]);
        rope_cos_sin(3, &inv, &mut c, &mut s);
        assert!(close(c[0], 3f32.cos(), 1e-6) && close(s[1], 0.3f32.sin(), 1e-6));
        // Rotate-half: pairs (0, 2), (1, 3).
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rope(&mut x, &c, &s, RopeLayout::RotateHalf);
        let want = [
            1.0 * c[0] - 3.0 * s[0],
            2.0 * c[1] - 4.0 * s[1],
            3.0 * c[0] + 1.0 * s[0],
            4.0 * c[1] + 2.0 * s[1],
        ];
        for i in 0..4 {
            assert!(close(x[i], want[i], 1e-6), "{x:?} vs {want:?}");
        }
        // Interleaved on the permuted vector [1, 3, 2, 4] gives the same numbers permuted.
        let mut y = [1.0f32, 3.0, 2.0, 4.0];
        rope(&mut y, &c, &s, RopeLayout::Interleaved);
        assert_eq!(y, [want[0], want[2], want[1], want[3]]);
        // Position 0 is the identity.
        rope_cos_sin(0, &inv, &mut c, &mut s);
        let mut z = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        rope(&mut z, &c, &s, RopeLayout::RotateHalf);
        assert_eq!(z, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    }

    #[test]
    fn attention_head_by_value() {
        // Two positions, d = 2: scores = [q·k0, q·k1] * scale.
        let q = [1.0f32, 0.0];
        let keys = [0.0f32, 1.0, 2.0, 0.0];
        let values = [10.0f32, 0.0, 0.0, 20.0];
        let mut scores = [0f32; 4];
        let mut out = [0f32; 2];
        attention_head(&q, &keys, &values, 2, 0.5, &mut scores, &mut out);
        let (p0, p1) = (1.0 / (1.0 + 1f32.exp()), 1f32.exp() / (1.0 + 1f32.exp()));
        assert!(close(out[0], 10.0 * p0, 1e-6) && close(out[1], 20.0 * p1, 1e-6), "{out:?}");
        // n = 1 attends to position 0 only.
        attention_head(&q, &keys, &values, 1, 0.5, &mut scores, &mut out);
        assert_eq!(out, [10.0, 0.0]);
    }

    #[test]
    fn attention_head_is_bit_identical_to_the_portable_loops() {
        // On an AVX2 tier `attention_head` runs the SIMD loops; they must give the bits of
        // `dot` / `softmax` / `axpy` (on other machines this compares the portable path with
        // itself).
        for d in [1usize, 7, 8, 13, 32, 64, 80, 128] {
            for n in [1usize, 3, 4, 5, 17, 64] {
                let f = |i: usize, s: f32| (i as f32 * 0.731 + s).sin() * 2.5;
                let q: alloc::vec::Vec<f32> = (0..d).map(|i| f(i, 0.3)).collect();
                let keys: alloc::vec::Vec<f32> = (0..n * d).map(|i| f(i, 1.1)).collect();
                let values: alloc::vec::Vec<f32> = (0..n * d).map(|i| f(i, 2.7)).collect();
                let mut scores = alloc::vec![0f32; n];
                let mut out = alloc::vec![0f32; d];
                attention_head(&q, &keys, &values, n, 0.125, &mut scores, &mut out);
                let mut want_s: alloc::vec::Vec<f32> =
                    (0..n).map(|t| dot(&q, &keys[t * d..(t + 1) * d]) * 0.125).collect();
                softmax(&mut want_s);
                let mut want = alloc::vec![0f32; d];
                for (t, &p) in want_s.iter().enumerate() {
                    axpy(p, &values[t * d..(t + 1) * d], &mut want);
                }
                let bits =
                    |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<alloc::vec::Vec<_>>();
                assert_eq!(bits(&scores), bits(&want_s), "scores d={d} n={n}");
                assert_eq!(bits(&out), bits(&want), "output d={d} n={n}");
            }
        }
    }

    #[test]
    fn gemm_fused_equals_separate_gemms_bit_for_bit() {
        use crate::quant::quantize_row_q8_0;
        let k = 64;
        let vals = |rows: usize, seed: usize| -> alloc::vec::Vec<f32> {
            (0..rows * k).map(|i| (((i * 7 + seed * 13) % 29) as f32 - 14.0) * 0.05).collect()
        };
        let f32_bytes = |v: &[f32]| -> crate::mem::AlignedBlock {
            let b: alloc::vec::Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            crate::mem::AlignedBlock::try_from_slice(&b).unwrap()
        };
        let (a, b, c) = (vals(40, 1), vals(72, 2), vals(33, 3));
        let mut q8 = alloc::vec![0u8; 72 * 68];
        for (row, out) in b.chunks_exact(k).zip(q8.chunks_exact_mut(68)) {
            quantize_row_q8_0(row, out).unwrap();
        }
        let (ab, cb) = (f32_bytes(&a), f32_bytes(&c));
        let wa = Matrix::new(DType::F32, 40, k, ab.as_slice()).unwrap();
        let wb = Matrix::new(DType::Q8_0, 72, k, &q8).unwrap();
        let wc = Matrix::new(DType::F32, 33, k, cb.as_slice()).unwrap();
        let n = 3;
        let x: alloc::vec::Vec<f32> = (0..n * k).map(|i| ((i % 11) as f32 - 5.0) * 0.3).collect();
        for act in [Activations::F32, Activations::Int8Plain] {
            let mut scratch = alloc::vec![0u8; scratch_bytes(k, n, act) + 64];
            let off = scratch.as_ptr().align_offset(64);
            let scratch = &mut scratch[off..];
            let exec = crate::exec::InlineExecutor;
            let mut want =
                [alloc::vec![0f32; n * 40], alloc::vec![0f32; n * 72], alloc::vec![0f32; n * 33]];
            for (w, y) in [&wa, &wb, &wc].into_iter().zip(want.iter_mut()) {
                gemm(&exec, None, w, &x, n, y, act, scratch).unwrap();
            }
            let (mut ya, mut yb, mut yc) =
                (alloc::vec![0f32; n * 40], alloc::vec![0f32; n * 72], alloc::vec![0f32; n * 33]);
            gemm_fused(
                &exec,
                None,
                [&wa, &wb, &wc],
                &x,
                n,
                [&mut ya, &mut yb, &mut yc],
                act,
                scratch,
            )
            .unwrap();
            assert!(ya == want[0] && yb == want[1] && yc == want[2], "{act:?}");
            if act == Activations::Int8Plain {
                // A single call treats the decoder policy `Mixed` as int8.
                gemm_fused(
                    &exec,
                    None,
                    [&wa, &wb, &wc],
                    &x,
                    n,
                    [&mut ya, &mut yb, &mut yc],
                    Activations::Mixed,
                    scratch,
                )
                .unwrap();
                assert!(ya == want[0] && yb == want[1] && yc == want[2], "Mixed");
            }
        }
        assert_eq!(Activations::Mixed.for_normed_input(), Activations::F32);
        assert_eq!(Activations::Int8Plain.for_normed_input(), Activations::Int8Plain);
        assert_eq!(
            scratch_bytes(k, n, Activations::Mixed),
            scratch_bytes(k, n, Activations::Int8Plain)
        );
        let short = Matrix::new(DType::F32, 1, 32, &ab.as_slice()[..128]).unwrap();
        let (mut y1, mut y2) = (alloc::vec![0f32; 40], alloc::vec![0f32; 1]);
        let e = gemm_fused(
            &crate::exec::InlineExecutor,
            None,
            [&wa, &short],
            &x[..k],
            1,
            [&mut y1, &mut y2],
            Activations::F32,
            &mut [],
        );
        assert_eq!(e.unwrap_err().code(), crate::Code::InvalidArgument);
    }

    /// `gemm_glu` (with and without the in-loop quantization, both formats, several
    /// executors and schedules) against `gemm_fused` + `glu_with` + `Q8Acts::quantize_as`, and
    /// `gemm_q8` against `gemm` with plain int8 on the same product: every bit the same.
    #[test]
    fn gemm_glu_and_gemm_q8_equal_the_separate_steps_bit_for_bit() {
        use crate::quant::quantize_row_q8_0;
        let (k, rows, n) = (64, 256, 3);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        };
        let q8_matrix = |rows: usize, k: usize, next: &mut dyn FnMut() -> f32| {
            let v: alloc::vec::Vec<f32> = (0..rows * k).map(|_| next()).collect();
            let mut b = alloc::vec![0u8; rows * k / 32 * 34];
            for (row, out) in v.chunks_exact(k).zip(b.chunks_exact_mut(k / 32 * 34)) {
                quantize_row_q8_0(row, out).unwrap();
            }
            b
        };
        let (gb, ub) = (q8_matrix(rows, k, &mut next), q8_matrix(rows, k, &mut next));
        let gate = Matrix::new(DType::Q8_0, rows, k, &gb).unwrap();
        let up = Matrix::new(DType::Q8_0, rows, k, &ub).unwrap();
        // A down projection per activation format: Q8_0 (Q8) and Q4_K bytes with valid f16
        // scales (Q8_K), 40 rows of the product's width.
        let db = q8_matrix(40, rows, &mut next);
        let down8 = Matrix::new(DType::Q8_0, 40, rows, &db).unwrap();
        let mut kb = alloc::vec![0u8; 40 * 144];
        for (i, blk) in kb.chunks_exact_mut(144).enumerate() {
            for (j, b) in blk.iter_mut().enumerate() {
                *b = ((i * 31 + j * 7) % 251) as u8;
            }
            blk[..4].copy_from_slice(&[0x00, 0x2C, 0x00, 0x28]); // d = 2^-4, dmin = 2^-5
        }
        let downk = Matrix::new(DType::Q4_K, 40, rows, &kb).unwrap();
        let x: alloc::vec::Vec<f32> = (0..n * k).map(|_| next()).collect();
        let kern = kernels::active().unwrap();
        // The inline executor, and with std two pools (2 and 3 threads).
        let inline: &dyn Executor = &crate::exec::InlineExecutor;
        #[cfg(feature = "std")]
        let pools = [crate::exec::ThreadPool::new(2), crate::exec::ThreadPool::new(3)];
        #[cfg(feature = "std")]
        let execs: alloc::vec::Vec<&dyn Executor> =
            core::iter::once(inline).chain(pools.iter().map(|p| p as &dyn Executor)).collect();
        #[cfg(not(feature = "std"))]
        let execs = [inline];
        for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
            let mut sv = alloc::vec![0u8; scratch_bytes(k, n, act) + 64];
            let off = sv.as_ptr().align_offset(64);
            let scratch = &mut sv[off..];
            let (mut wg, mut wu) = (alloc::vec![0f32; n * rows], alloc::vec![0f32; n * rows]);
            let exec = crate::exec::InlineExecutor;
            gemm_fused(&exec, None, [&gate, &up], &x, n, [&mut wg, &mut wu], act, scratch).unwrap();
            for gelu in [false, true] {
                let mut want = wg.clone();
                glu_with(Some(kern), gelu, &mut want, &wu);
                for (fmt, down) in [(ActFormat::Q8, &down8), (ActFormat::Q8K, &downk)] {
                    let mut rq = alloc::vec![0u8; q8_acts_bytes_as(fmt, rows, n)];
                    let wq = Q8Acts::quantize_as(fmt, kern, &want, n, rows, &mut rq).unwrap();
                    let mut wy = alloc::vec![0f32; n * 40];
                    let mut ds = alloc::vec![0u8; scratch_bytes(rows, n, Activations::Int8Plain)];
                    let exec = crate::exec::InlineExecutor;
                    let plain = Activations::Int8Plain;
                    gemm(&exec, None, down, &want, n, &mut wy, plain, &mut ds).unwrap();
                    for exec in &execs {
                        for sched in [None, Some(Schedule::Static), Some(Schedule::Grain(1))] {
                            let (mut g, mut u) =
                                (alloc::vec![0f32; n * rows], alloc::vec![0f32; n * rows]);
                            let at = alloc::format!("{act:?} gelu {gelu} {fmt:?} {sched:?}");
                            let mut qv = alloc::vec![0u8; q8_acts_bytes_as(fmt, rows, n)];
                            let mut run = |g: &mut [f32], u: &mut [f32], q| {
                                let w = [&gate, &up];
                                gemm_glu(*exec, sched, w, &x, n, g, u, gelu, act, scratch, q)
                            };
                            let none = run(&mut g, &mut u, None).unwrap();
                            assert!(none.is_none() && g == want && u == wu, "{at}");
                            let q = GluQuant { fmt, scratch: &mut qv };
                            let hq = run(&mut g, &mut u, Some(q)).unwrap().unwrap();
                            assert!(g == want && u == wu, "{at}");
                            assert_eq!(hq.qs(), wq.qs(), "{at}");
                            assert_eq!(hq.d(), wq.d(), "{at}");
                            assert_eq!(hq.s(), wq.s(), "{at}");
                            assert_eq!(hq.sum(), wq.sum(), "{at}");
                            let mut y = alloc::vec![0f32; n * 40];
                            gemm_q8(*exec, sched, down, &hq, &mut y).unwrap();
                            assert!(y == wy, "{at}");
                        }
                    }
                }
            }
        }
        // Wrong shapes and formats are refused, and a product that overflows is reported,
        // not quantized (f32 activations, 1 or `n` rows, outputs sized for the gate).
        let exec = crate::exec::InlineExecutor;
        let code = |w: [&Matrix<'_>; 2], x: &[f32], q: Option<GluQuant<'_>>| {
            let len = x.len() / k * w[0].rows;
            let (mut g, mut u) = (alloc::vec![0f32; len], alloc::vec![0f32; len]);
            let n = x.len() / k;
            let e =
                gemm_glu(&exec, None, w, x, n, &mut g, &mut u, false, Activations::F32, &mut [], q);
            e.err().map(|e| e.code())
        };
        let invalid = Some(crate::Code::InvalidArgument);
        let short = Matrix::new(DType::Q8_0, 32, k, &gb[..32 * 68]).unwrap();
        assert_eq!(code([&gate, &short], &x, None), invalid, "rows differ");
        let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8K, 32, n)];
        let odd = GluQuant { fmt: ActFormat::Q8K, scratch: &mut qv };
        assert_eq!(code([&short, &short], &x, Some(odd)), invalid, "32 rows, Q8_K blocks");
        let big: alloc::vec::Vec<u8> =
            [1.0e30f32; 64 * 32].iter().flat_map(|v| v.to_le_bytes()).collect();
        let big = crate::mem::AlignedBlock::try_from_slice(&big).unwrap();
        let wbig = Matrix::new(DType::F32, 32, k, big.as_slice()).unwrap();
        let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8, 32, 1)];
        let q = GluQuant { fmt: ActFormat::Q8, scratch: &mut qv };
        assert_eq!(code([&wbig, &wbig], &[1.0e30; 64], Some(q)), invalid, "non-finite product");
        let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8, rows, n)];
        let want = alloc::vec![0.5f32; n * rows];
        let xq = Q8Acts::quantize_as(ActFormat::Q8, kern, &want, n, rows, &mut qv).unwrap();
        let mut y = alloc::vec![0f32; n * 40];
        let e = gemm_q8(&exec, None, &downk, &xq, &mut y);
        assert_eq!(e.unwrap_err().code(), crate::Code::InvalidArgument, "Q8 acts for Q4_K");
    }

    #[test]
    fn dequantize_row_every_dtype() {
        let vals: [f32; 32] = core::array::from_fn(|i| i as f32 - 16.0);
        let f32_bytes: alloc::vec::Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf: alloc::vec::Vec<u8> =
            vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect();
        let hf: alloc::vec::Vec<u8> =
            vals.iter().flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes()).collect();
        // Q8_0 with d = 1: q = value.
        let mut q8 = alloc::vec![0u8; 34];
        q8[..2].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        for (i, v) in vals.iter().enumerate() {
            q8[2 + i] = (*v as i8) as u8;
        }
        // Q4_1 with d = 1, m = -16: both nibbles of byte j are j, so elements j and j + 16 are j - 16.
        let mut q41 = alloc::vec![0u8; 20];
        q41[..2].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        q41[2..4].copy_from_slice(&half::f16::from_f32(-16.0).to_bits().to_le_bytes());
        for j in 0..16 {
            q41[4 + j] = j as u8 | ((j as u8) << 4);
        }
        let mut out = [0f32; 32];
        let aligned = crate::mem::AlignedBlock::try_from_slice(&f32_bytes).unwrap();
        for (dt, bytes) in [
            (DType::F32, aligned.as_slice()),
            (DType::BF16, &bf[..]),
            (DType::F16, &hf[..]),
            (DType::Q8_0, &q8[..]),
        ] {
            let m = Matrix::new(dt, 1, 32, bytes).unwrap();
            dequantize_row(&m, 0, &mut out);
            assert_eq!(out, vals, "{dt}");
        }
        let m = Matrix::new(DType::Q4_1, 1, 32, &q41).unwrap();
        dequantize_row(&m, 0, &mut out);
        let want: [f32; 32] = core::array::from_fn(|i| (i % 16) as f32 - 16.0);
        assert_eq!(out, want);
    }
}
