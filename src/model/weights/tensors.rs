//! The forms a weight takes once loaded: a matrix ([`Linear`], borrowed from the file or
//! converted at load, see [`conversion`]), an f32 vector ([`Vector`]: norm weights and
//! biases), and the inline name that labels them ([`TensorName`]).

use core::fmt::Write as _;

use crate::error::{Error, Result};
use crate::format::TensorSource;
use crate::format::TensorView;
use crate::mem::place::Place;
use crate::mem::AlignedBlock;
use crate::ops::Matrix;
use crate::quant::quantize_row_q8_0;
use crate::tensor::DType;

/// How matrices are kept in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// As stored in the file (no copy unless an f32 matrix is misaligned).
    #[default]
    AsStored,
    /// f32 / f16 / bf16 matrices quantized to Q8_0 at load (already-quantized ones kept;
    /// matrices whose rows are not a multiple of 32 long stay as stored).
    Q8_0,
}

/// A tensor's bytes: borrowed from the file, or owned (converted or realigned at load).
#[derive(Debug)]
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBlock),
}

impl Bytes<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) => b,
            Bytes::Owned(b) => b.as_slice(),
        }
    }
}

/// A tensor name kept inline (no heap): up to [`TensorName::CAPACITY`] bytes, longer names
/// cut at a character boundary (they only label messages and lookups).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorName {
    buf: [u8; TensorName::CAPACITY],
    len: u8,
}

impl TensorName {
    /// The longest name kept whole, in bytes.
    pub const CAPACITY: usize = 96;

    /// The name `s` (cut to [`TensorName::CAPACITY`] bytes at a character boundary).
    pub fn new(s: &str) -> Self {
        let mut n = TensorName { buf: [0; Self::CAPACITY], len: 0 };
        let _ = n.write_str(s);
        n
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only whole characters are ever copied in (`write_str`).
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl core::fmt::Write for TensorName {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = Self::CAPACITY - self.len as usize;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        let at = self.len as usize;
        self.buf[at..at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take as u8;
        Ok(())
    }
}

impl core::fmt::Debug for TensorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl core::fmt::Display for TensorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A weight matrix, `rows × k` row-major (PyTorch's `nn.Linear.weight`).
#[derive(Debug)]
pub struct Linear<'a> {
    name: TensorName,
    dtype: DType,
    rows: usize,
    k: usize,
    bytes: Bytes<'a>,
    /// The bytes are in the row-interleaved layout ([`crate::kernels::rows8`]).
    rows8: bool,
    /// Loading changed the layout for the active kernels ([`Linear::is_repacked`]).
    repacked: bool,
}

impl Linear<'_> {
    /// The kernels' view of the matrix (checked once at load, so this does not fail for a
    /// loaded [`Linear`]).
    ///
    /// # Errors
    ///
    /// As [`Matrix::new`].
    pub fn matrix(&self) -> Result<Matrix<'_>> {
        if self.rows8 {
            Matrix::new_rows8(self.dtype, self.rows, self.k, self.bytes.as_slice())
        } else {
            Matrix::new(self.dtype, self.rows, self.k, self.bytes.as_slice())
        }
    }

    /// `true` if the bytes are in the row-interleaved layout loading makes for the active
    /// kernels ([`crate::kernels::rows8`]; only the int8 products read them).
    pub fn is_rows8(&self) -> bool {
        self.rows8
    }

    /// The tensor's name in the file.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes of storage.
    pub fn size_bytes(&self) -> usize {
        self.bytes.as_slice().len()
    }

    /// `true` if the bytes are the file's own (not a copy).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.bytes, Bytes::Borrowed(_))
    }

    /// `true` if loading put the matrix in a layout the active kernels run faster
    /// (`DecoderOptions::repack_weights`): Q5_0 as [`DType::Q5_0x2`] pairs, the
    /// row-interleaved layout ([`Linear::is_rows8`]), or Q5_0 / IQ4_NL widened to Q8_0 (the
    /// same values) for f32 activations. `false` for a matrix used as stored, copied, or
    /// quantized to Q8_0 by [`WeightFormat::Q8_0`] and not interleaved.
    pub fn is_repacked(&self) -> bool {
        self.repacked
    }
}

/// An f32 vector owned in an aligned block (the norm weights).
#[derive(Debug)]
pub struct Vector {
    block: AlignedBlock,
}

impl Vector {
    /// Reads the norm or bias vector `name` (`len` values) into an f32 block from `place`,
    /// adding `offset` to every value.
    pub(super) fn from_view(
        name: &str,
        view: &TensorView<'_>,
        len: usize,
        offset: f32,
        place: &mut Place<'_>,
    ) -> Result<Self> {
        check_shape(name, view, &[len])?;
        // Norm weights and biases are float vectors in every file the reference tools write
        // (llama.cpp's converter and quantizer never quantize a 1-D tensor); a block dtype here
        // is a damaged file whose bytes would read as plausible but wrong values.
        if view.dtype.is_quantized() {
            return Err(Error::data_loss(format_args!(
                "tensor {name:?}: a norm or bias vector must be F32, F16 or BF16, found {}",
                view.dtype
            )));
        }
        let mut block = place.block(len * 4, name)?;
        let v: &mut [f32] = crate::tensor::cast_slice_mut(block.as_mut_slice());
        view.dequantize_into(v).map_err(|e| e.context(format_args!("tensor {name:?}")))?;
        if offset != 0.0 {
            v.iter_mut().for_each(|x| *x += offset);
        }
        Ok(Vector { block })
    }

    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        crate::tensor::cast_slice(self.block.as_slice())
    }
}

/// Fails unless `view` has shape `want`, naming the tensor.
pub(super) fn check_shape(name: &str, view: &TensorView<'_>, want: &[usize]) -> Result<()> {
    if view.shape.dims() != want {
        return Err(Error::invalid_argument(format_args!(
            "tensor {name:?}: shape {:?}, expected {want:?} from the config",
            view.shape.dims()
        )));
    }
    Ok(())
}

/// What loading may do to a matrix beyond using it as stored, for the activations a decoder
/// runs ([`crate::model::DecoderOptions::repack_weights`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Repack {
    /// Use the matrices as stored (converted only as the [`WeightFormat`] says).
    Off,
    /// Copy them into the layouts the active int8 kernels read fastest.
    Int8,
    /// Widen those the active f32-activation kernels run faster as Q8_0
    /// ([`crate::kernels::Kernels::f32_via_q8_0`]).
    F32,
}

/// How loading makes a matrix's new buffer ([`conversion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// f32 / f16 / bf16 quantized to Q8_0 ([`WeightFormat::Q8_0`]); with `rows8`, then
    /// interleaved.
    Quantize { rows8: bool },
    /// The bytes copied as they are (a misaligned f32 matrix).
    Copy,
    /// Q5_0 repacked into [`DType::Q5_0x2`] pairs.
    Pairs,
    /// Copied into the row-interleaved layout ([`crate::kernels::rows8`]).
    Rows8,
    /// Widened to Q8_0, the same values ([`crate::quant::q8_0::widen_to_q8_0`]).
    Widen,
}

/// A matrix's new buffer: its dtype, size in bytes and how it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conversion {
    pub(crate) dtype: DType,
    pub(crate) bytes: usize,
    pub(crate) how: How,
}

/// What loading does with a `rows × k` matrix stored as `dtype` (its bytes at `data`): a
/// [`Conversion`] when it is converted or copied into a new buffer, `None` when it is used
/// in place. With [`Repack::Int8`], the active kernels' fastest int8 layout: a Q5_0 matrix
/// whose rows are whole pairs of blocks (`k % 64 == 0`) is copied into [`DType::Q5_0x2`]
/// (the same bytes, repacked) where they have a SIMD body for it; a matrix of a dtype they
/// have a row-interleaved kernel for ([`crate::kernels::Kernels::matmul_q8_rows8`]), with
/// rows a multiple of 8, is copied into that layout. With [`Repack::F32`], a matrix of a
/// dtype whose f32 product they run faster as Q8_0 is widened to it. [`super::Weights::load`]
/// and the memory plan both ask this.
///
/// # Errors
///
/// [`crate::Code::ResourceExhausted`] if the converted size overflows.
pub(crate) fn conversion(
    dtype: DType,
    data: *const u8,
    rows: usize,
    k: usize,
    format: WeightFormat,
    repack: Repack,
) -> Result<Option<Conversion>> {
    let overflow = || Error::resource_exhausted(format_args!("{rows} x {k} matrix overflows"));
    let kern = if repack == Repack::Off { None } else { crate::kernels::active().ok() };
    let int8 = repack == Repack::Int8;
    let pairs = int8 && kern.is_some_and(|k| k.has_simd_q8(DType::Q5_0x2));
    let rows8 = |dt: DType| {
        int8 && kern.is_some_and(|k| k.matmul_q8_rows8(dt).is_some())
            && rows % crate::kernels::rows8::ROWS == 0
    };
    let widen = |dt: DType| repack == Repack::F32 && kern.is_some_and(|k| k.f32_via_q8_0(dt));
    let sized = |dtype: DType, how: How| -> Result<Option<Conversion>> {
        let bytes = dtype.row_bytes(k)?.checked_mul(rows).ok_or_else(overflow)?;
        Ok(Some(Conversion { dtype, bytes, how }))
    };
    match (dtype, format) {
        (DType::F32 | DType::F16 | DType::BF16, WeightFormat::Q8_0)
            if k % DType::Q8_0.block_size() == 0 =>
        {
            sized(DType::Q8_0, How::Quantize { rows8: rows8(DType::Q8_0) })
        }
        (DType::F32, _) if data as usize % 4 != 0 => sized(DType::F32, How::Copy),
        (DType::Q5_0, _) if pairs && k % DType::Q5_0x2.block_size() == 0 => {
            sized(DType::Q5_0x2, How::Pairs)
        }
        (dt, _) if rows8(dt) => sized(dt, How::Rows8),
        (dt, _) if widen(dt) => sized(DType::Q8_0, How::Widen),
        _ => Ok(None),
    }
}

/// Loads the matrix `name`, `rows × k`, converting or copying it as [`conversion`] says
/// (new buffers from `place`).
pub(super) fn linear<'s: 'a, 'a>(
    src: &dyn TensorSource<'s>,
    name: &str,
    rows: usize,
    k: usize,
    format: WeightFormat,
    repack: Repack,
    place: &mut Place<'a>,
) -> Result<Linear<'a>> {
    let view = src.tensor(name)?;
    check_shape(name, &view, &[rows, k])?;
    let ctx = |e: Error| e.context(format_args!("tensor {name:?}"));
    let conv = conversion(view.dtype, view.data.as_ptr(), rows, k, format, repack).map_err(ctx)?;
    let (dtype, bytes, how) = match conv {
        None => (view.dtype, Bytes::Borrowed(view.data), None),
        Some(Conversion { dtype, bytes, how }) => {
            let mut block = place.block(bytes, name)?;
            make(how, &view, rows, k, block.as_mut_slice()).map_err(ctx)?;
            (dtype, Bytes::Owned(block), Some(how))
        }
    };
    let rows8 = matches!(how, Some(How::Rows8 | How::Quantize { rows8: true }));
    let repacked = rows8 || matches!(how, Some(How::Pairs | How::Widen));
    let lin = Linear { name: TensorName::new(name), dtype, rows, k, bytes, rows8, repacked };
    lin.matrix().map_err(ctx)?;
    Ok(lin)
}

/// Fills `out` with the `view` matrix (`rows × k`) made as `how` says ([`conversion`]).
fn make(how: How, view: &TensorView<'_>, rows: usize, k: usize, out: &mut [u8]) -> Result<()> {
    match how {
        How::Quantize { rows8 } => {
            // Block by block (32 values on the stack): no temporary heap buffer.
            const QK: usize = crate::quant::QK;
            let elem = view.dtype.block_bytes();
            let one = crate::tensor::Shape::new(&[QK])?;
            let mut vals = [0f32; QK];
            let q8 = DType::Q8_0.block_bytes();
            for (b, out) in out.chunks_exact_mut(q8).enumerate() {
                let src = TensorView {
                    dtype: view.dtype,
                    shape: one,
                    data: &view.data[b * QK * elem..(b + 1) * QK * elem],
                };
                src.dequantize_into(&mut vals)?;
                quantize_row_q8_0(&vals, out)?;
            }
            if rows8 {
                // Interleave the converted rows one group at a time (a group's bytes on
                // the heap only: 8 rows).
                let rb = DType::Q8_0.row_bytes(k)?;
                let mut tmp = alloc::vec::Vec::new();
                tmp.try_reserve_exact(8 * rb)
                    .map_err(|_| Error::resource_exhausted("row group"))?;
                tmp.resize(8 * rb, 0);
                for g in out.chunks_exact_mut(8 * rb) {
                    tmp.copy_from_slice(g);
                    crate::kernels::rows8::pack(DType::Q8_0, 8, k, &tmp, g)?;
                }
            }
        }
        How::Copy => out.copy_from_slice(view.data),
        How::Pairs => crate::quant::q5_0x2::repack(view.data, out)?,
        How::Rows8 => crate::kernels::rows8::pack(view.dtype, rows, k, view.data, out)?,
        How::Widen => crate::quant::q8_0::widen_to_q8_0(view.dtype, view.data, out)?,
    }
    Ok(())
}
