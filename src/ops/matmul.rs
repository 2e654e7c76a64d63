//! GEMV/GEMM entry points over every weight dtype: [`Matrix`], [`Activations`], [`gemv`],
//! [`gemm`], [`gemm_with`], the int8 scratch they need ([`scratch_bytes`]) and
//! [`dequantize_row`] (an embedding lookup). The fused products that share one quantized input
//! are in `fused.rs`. Parallel thresholds and the bit-identity rule: the [module
//! docs](crate::ops).

use core::ops::Range;

use super::outliers::{self, Columns, Outliers};
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
    /// [`OUTLIER_RATIO`](super::OUTLIER_RATIO) times its row's RMS (a massive-activation channel, which leaves the
    /// block's other values coarsely quantized) has its quantization residual quantized again
    /// and multiplied in by the same int8 kernel over that one column block of the weights.
    /// Results are bit-identical across ISAs, thread counts and schedules, as for the other
    /// modes. Costs one pass over the input and, per outlier block and weight row, about 2-3
    /// blocks' worth of the plain product (the column block is read as strided blocks and
    /// transposed 16 rows at a time); SmolLM2's normalized inputs have 1.2-1.3 outlier blocks
    /// per 576-wide row (what that costs in decode speed: `docs/perf/notes-ops-decoder.md`).
    /// Scratch: [`scratch_bytes`].
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
    /// A single [`gemv`] / [`gemm`] / [`gemm_fused`](super::gemm_fused) call treats it as [`Activations::Int8Plain`];
    /// [`Activations::for_normed_input`] gives what the normalized-input projections use.
    Mixed,
}

/// A borrowed `rows × k` weight matrix in any supported dtype, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub(super) dtype: DType,
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) row_bytes: usize,
    pub(super) data: &'a [u8],
    /// The bytes are in the row-interleaved layout ([`crate::kernels::rows8`]).
    pub(super) rows8: bool,
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
        Ok(Matrix { dtype, rows, k, row_bytes, data, rows8: false })
    }

    /// A matrix over `data` in the row-interleaved layout ([`crate::kernels::rows8`], made
    /// by [`crate::kernels::rows8::pack`]): only the int8 products read it (with a table
    /// that has [`Kernels::matmul_q8_rows8`] for `dtype`; f32 activations are an error), and
    /// [`dequantize_row`].
    ///
    /// # Errors
    ///
    /// As [`Matrix::new`]; [`crate::Code::Unimplemented`] if `dtype` has no interleaved
    /// layout, [`crate::Code::InvalidArgument`] if `rows` is not a multiple of
    /// [`crate::kernels::rows8::ROWS`].
    pub fn new_rows8(dtype: DType, rows: usize, k: usize, data: &'a [u8]) -> Result<Self> {
        let m = Matrix::new(dtype, rows, k, data)?;
        if !kernels::rows8::supports(dtype) {
            return Err(Error::unimplemented(format_args!(
                "{dtype} has no row-interleaved layout"
            )));
        }
        if rows % kernels::rows8::ROWS != 0 {
            return Err(Error::invalid_argument(format_args!(
                "row-interleaved {dtype} matrix: {rows} rows is not a multiple of {}",
                kernels::rows8::ROWS
            )));
        }
        Ok(Matrix { rows8: true, ..m })
    }

    /// Whether the bytes are in the row-interleaved layout ([`Matrix::new_rows8`]).
    pub fn is_rows8(&self) -> bool {
        self.rows8
    }

    /// Rows per unit of work: the kernels take whole interleaved groups (8 rows) of a
    /// [`Matrix::new_rows8`] matrix, single rows of others.
    pub(super) fn row_unit(&self) -> usize {
        if self.rows8 {
            kernels::rows8::ROWS
        } else {
            1
        }
    }

    /// The int8 kernel of this matrix in `kern` and how the outlier correction reads its
    /// column blocks of activation format `fmt`.
    ///
    /// # Errors
    ///
    /// As [`Kernels::matmul_q8`]; [`crate::Code::Unimplemented`] for an interleaved matrix
    /// whose layout `kern` has no kernel for.
    pub(super) fn q8_kernel(
        &self,
        kern: &Kernels,
        fmt: ActFormat,
    ) -> Result<(kernels::MatmulQ8Fn, Columns)> {
        if !self.rows8 {
            return Ok((kern.matmul_q8(self.dtype)?, Columns::of(kern, self.dtype, fmt)?));
        }
        let f = kern.matmul_q8_rows8(self.dtype).ok_or_else(|| {
            Error::unimplemented(format_args!(
                "the {} kernels have no int8 kernel for row-interleaved {}",
                kern.isa(),
                self.dtype
            ))
        })?;
        Ok((f, Columns::rows8(f, self.dtype)))
    }

    /// The f32-activation kernel of this matrix in `kern`.
    ///
    /// # Errors
    ///
    /// As [`Kernels::matmul_f32`]; [`crate::Code::Unimplemented`] for an interleaved matrix.
    pub(super) fn f32_kernel(&self, kern: &Kernels) -> Result<kernels::MatmulF32Fn> {
        if self.rows8 {
            return Err(Error::unimplemented(format_args!(
                "row-interleaved {} weights take int8 activations only",
                self.dtype
            )));
        }
        kern.matmul_f32(self.dtype)
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
    /// If `r >= rows`, or the matrix is row-interleaved ([`Matrix::is_rows8`]: its rows are
    /// not contiguous).
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert!(!self.rows8, "Matrix::row of a row-interleaved matrix");
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

/// Bytes of scratch [`gemv`] / [`gemm`] / [`gemm_fused`](super::gemm_fused) need for `n` activation rows of `k`
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
pub(super) fn int8_parts(k: usize, n: usize, act: Activations) -> [usize; 4] {
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
pub(super) fn split_int8(
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
pub(super) unsafe fn int8_rows(
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
pub(super) struct SyncPtr(pub(super) *mut f32);
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
    pub(super) unsafe fn at(self, i: usize) -> *mut f32 {
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
    // Whole interleaved groups per chunk for a row-interleaved matrix (`rows` is a multiple
    // of the unit then).
    let unit = w.row_unit();
    let run = |body: &(dyn Fn(Range<usize>) + Sync)| {
        if parallel {
            exec.parallel_for(0..rows / unit, schedule, &|g: Range<usize>| {
                body(g.start * unit..g.end * unit)
            });
        } else {
            body(0..rows);
        }
    };
    let fmt = crate::quant::info(w.dtype).act;
    if let (Activations::Int8 | Activations::Int8Plain | Activations::Mixed, true, Some(fmt)) =
        (act, quantized, fmt)
    {
        let (f, cols) = w.q8_kernel(kern, fmt)?;
        let (is8, corr) = (fmt == ActFormat::Q8, act == Activations::Int8);
        let [s8, sk, o8, ok] =
            split_int8(scratch, k, n, act, [is8, !is8, corr && is8, corr && !is8]);
        let (sq, so) = if is8 { (s8, o8) } else { (sk, ok) };
        let xq = Q8Acts::quantize_as(fmt, kern, x, n, k, sq)?;
        let outl = if corr { Some(Outliers::find(kern, x, k, &xq, so)?) } else { None };
        let outl = outl.filter(|o| !o.is_empty());
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
        let f = w.f32_kernel(kern)?;
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

/// Row `r` of `w` widened to f32 into `out` (`w.k()` floats): an embedding lookup.
///
/// # Panics
///
/// If `r >= w.rows()` or `out.len() != w.k()`.
pub fn dequantize_row(w: &Matrix<'_>, r: usize, out: &mut [f32]) {
    assert_eq!(out.len(), w.k(), "dequantize_row: out must hold k floats");
    let f = crate::quant::info(w.dtype()).dequantize;
    // `Matrix::new` admits only the weight dtypes, which all dequantize.
    let Some(f) = f else {
        out.fill(0.0);
        return;
    };
    if !w.rows8 {
        f(w.row(r), out);
        return;
    }
    assert!(r < w.rows, "dequantize_row: row {r} of {}", w.rows);
    // Block by block out of the interleaved group.
    let (bb, mut blk) = (w.dtype.block_bytes(), [0u8; kernels::rows8::MAX_BLOCK_BYTES]);
    let be = w.dtype.block_size();
    for (b, o) in out.chunks_exact_mut(be).enumerate() {
        kernels::rows8::unpack_block(w.dtype, w.row_bytes, w.data, r, b, &mut blk[..bb]);
        f(&blk[..bb], o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
