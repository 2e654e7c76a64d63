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
use crate::kernels::scalar;
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

    /// Dot of row `r` with `x` (scalar oracle).
    fn dot_row(&self, r: usize, x: &[f32]) -> f32 {
        let row = self.row(r);
        match self.dtype {
            DType::F32 => scalar::dot_f32(crate::tensor::cast_slice(row), x),
            DType::F16 => scalar::dot_f16(row, x),
            DType::BF16 => scalar::dot_bf16(row, x),
            DType::Q8_0 => scalar::dot_q8_0_f32(row, x),
            DType::Q4_0 => scalar::dot_q4_0_f32(row, x),
            DType::Q4_1 => scalar::dot_q4_1_f32(row, x),
            // `Matrix::new` admits only the weight dtypes above.
            _ => 0.0,
        }
    }
}

/// Bytes of scratch [`gemv`] / [`gemm`] need for `k` inputs per activation row under `act`
/// (the Q8_0 copy of `x` for [`Activations::Int8`]; 0 for f32).
pub fn scratch_bytes(k: usize, n: usize, act: Activations) -> usize {
    match act {
        Activations::F32 => 0,
        Activations::Int8 => n * k.div_ceil(32) * 36,
    }
}

/// A raw pointer that may be shared across threads; each chunk writes disjoint rows.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
// SAFETY: used only to write disjoint output rows from different chunks.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

/// `y[rows] = W · x`.
///
/// `schedule` `None` uses the executor's default. Runs inline below [`PAR_ROWS_F32`] rows
/// (f32/f16/bf16) or [`PAR_ROWS_QUANT`] rows (quantized). `scratch` must hold at least
/// [`scratch_bytes`]`(k, 1, act)` bytes.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `x.len() != k`, `y.len() != rows` or `scratch` is
/// too small.
pub fn gemv(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Matrix<'_>,
    x: &[f32],
    y: &mut [f32],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    gemm(exec, schedule, w, x, 1, y, act, scratch)
}

/// `Y[n × rows] = X[n × k] · Wᵀ` (prefill).
///
/// As [`gemv`]; `x.len()` must be `n * k` and `y.len()` `n * rows`.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] on a length mismatch.
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
    let (rows, k) = (w.rows, w.k);
    if x.len() != n * k || y.len() != n * rows {
        return Err(Error::invalid_argument(format_args!(
            "gemm: W is {rows}x{k}, n = {n}: x has {} (want {}), y has {} (want {})",
            x.len(),
            n * k,
            y.len(),
            n * rows
        )));
    }
    let need = scratch_bytes(k, n, act);
    if scratch.len() < need {
        return Err(Error::invalid_argument(format_args!(
            "gemm: scratch has {} bytes, needs {need}",
            scratch.len()
        )));
    }
    let threshold = if w.dtype.is_quantized() { PAR_ROWS_QUANT } else { PAR_ROWS_F32 };
    let out = SyncPtr(y.as_mut_ptr());
    let body = |range: Range<usize>| {
        let out = &out;
        for r in range {
            for t in 0..n {
                let v = w.dot_row(r, &x[t * k..(t + 1) * k]);
                // SAFETY: `t * rows + r < n * rows == y.len()`; each (t, r) is written by the
                // one chunk that owns row r.
                unsafe { out.0.add(t * rows + r).write(v) };
            }
        }
    };
    if exec.threads() > 1 && rows >= threshold {
        exec.parallel_for(0..rows, schedule.unwrap_or_else(|| exec.schedule()), &body);
    } else {
        body(0..rows);
    }
    Ok(())
}
