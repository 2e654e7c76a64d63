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
use crate::kernels::quant::{q8_acts_bytes, Q8Acts};
use crate::kernels::{self, Kernels};
use crate::tensor::DType;

/// f32 / f16 / bf16 GEMV runs in parallel only from this many rows on.
pub const PAR_ROWS_F32: usize = 64;
/// Quantized GEMV runs in parallel only from this many rows on.
pub const PAR_ROWS_QUANT: usize = 32;

/// How activations meet quantized weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activations {
    /// f32 activations; quantized weights are dequantized on the fly (most accurate).
    #[default]
    F32,
    /// Activations quantized once to Q8_0, dotted in int8 (fastest). Applies to quantized
    /// weights only; f32/f16/bf16 weights always use f32 activations.
    Int8,
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
    /// a multiple of 32 for a quantized dtype, if an f32 matrix is not 4-byte aligned, or if
    /// the dtype is not a weight dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
    pub fn new(dtype: DType, rows: usize, k: usize, data: &'a [u8]) -> Result<Self> {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4_0 | DType::Q4_1 => {}
            _ => {
                return Err(Error::unimplemented(format_args!(
                    "{dtype} is not a supported weight dtype"
                )))
            }
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

/// Bytes of scratch [`gemv`] / [`gemm`] need for `n` activation rows of `k` inputs under
/// `act`: 0 for [`Activations::F32`]; for [`Activations::Int8`] the Q8 copy of `x`
/// ([`Q8Acts`]: 44 bytes per 32 inputs per row, plus 64 bytes of alignment slack).
pub fn scratch_bytes(k: usize, n: usize, act: Activations) -> usize {
    match act {
        Activations::F32 => 0,
        Activations::Int8 => q8_acts_bytes(k, n),
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
/// (f32/f16/bf16) or [`PAR_ROWS_QUANT`] rows (quantized). With [`Activations::Int8`] and
/// quantized weights `scratch` must hold at least [`scratch_bytes`]`(k, 1, Int8)` bytes;
/// otherwise it is not used. Uses the kernels of [`kernels::active`]; allocates nothing.
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
    if act == Activations::Int8 && quantized {
        let f = kern.matmul_q8(w.dtype)?;
        let xq = Q8Acts::quantize(kern, x, n, k, scratch)?;
        run(&|range: Range<usize>| {
            // SAFETY: `kern` is an available table (only `kernels::table`/`active` hand them
            // out); rows `range` lie inside `data` (`Matrix::new` checked `rows * rb`); `xq`
            // holds `n` rows of `k / 32` blocks; outputs `t * rows + r` for `r` in `range` are
            // inside `y` and written by this chunk only.
            unsafe {
                f(
                    data.as_ptr().add(range.start * rb),
                    rb,
                    range.len(),
                    &xq,
                    n,
                    out.at(range.start),
                    rows,
                )
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
