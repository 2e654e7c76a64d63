//! Tensors: [`DType`], a small fixed-rank [`Shape`], [`Storage`] (owned, pooled or borrowed
//! bytes) and [`Tensor`], with typed views that check dtype and alignment.
//!
//! Data is row-major (the last dimension is contiguous). Block-quantized dtypes (Q8_0, Q4_0,
//! Q4_1, ...) pack the last dimension in blocks using ggml's block layouts, so the last
//! dimension must be a multiple of the block size. Block sizes, bytes and names come from
//! the one table of [`crate::quant`].

use core::fmt;
use core::mem::align_of;

use crate::error::{Error, Result};
use crate::mem::AlignedBlock;

/// An element type. Block-quantized types know their block size and bytes per block.
///
/// Quantized variants carry ggml's type names (`Q4_K`, `IQ4_NL`), the names every GGUF tool
/// prints.
#[allow(non_camel_case_types)]
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (the upper half of an f32).
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// ggml `block_q8_0`: f16 scale `d` + 32 × i8; value = `d * q`. 34 bytes per 32 elements.
    Q8_0,
    /// ggml `block_q4_0`: f16 scale `d` + 16 bytes of nibbles; value = `d * (q - 8)`; element
    /// `j < 16` is the low nibble of byte `j`, element `j + 16` the high nibble. 18 bytes.
    Q4_0,
    /// ggml `block_q4_1`: f16 scale `d`, f16 min `m`, 16 bytes of nibbles (as Q4_0);
    /// value = `d * q + m`. 20 bytes per 32 elements.
    Q4_1,
    /// ggml `block_q5_0` (see [`crate::quant::q5_0`]). 22 bytes per 32 elements.
    Q5_0,
    /// ggml `block_q5_1` (see [`crate::quant::q5_1`]). 24 bytes per 32 elements.
    Q5_1,
    /// ggml `block_iq4_nl` (see [`crate::quant::iq4_nl`]). 18 bytes per 32 elements.
    IQ4_NL,
    /// ggml `block_q2_K` (see [`crate::quant::q2_k`]). 84 bytes per 256 elements.
    Q2_K,
    /// ggml `block_q3_K` (see [`crate::quant::q3_k`]). 110 bytes per 256 elements.
    Q3_K,
    /// ggml `block_q4_K` (see [`crate::quant::q4_k`]). 144 bytes per 256 elements.
    Q4_K,
    /// ggml `block_q5_K` (see [`crate::quant::q5_k`]). 176 bytes per 256 elements.
    Q5_K,
    /// ggml `block_q6_K` (see [`crate::quant::q6_k`]). 210 bytes per 256 elements.
    Q6_K,
    /// Two consecutive Q5_0 blocks of a row repacked for the AVX-512 int8 kernels (see
    /// [`crate::quant::q5_0x2`]): 44 bytes per 64 elements, the same bytes per row as Q5_0.
    /// rml's own load-time layout: never read from or written to files. Int8 products give
    /// Q5_0's bits; f32-activation products run the scalar oracle on every ISA.
    Q5_0x2,
}

impl DType {
    /// Number of dtypes (rows of [`crate::quant::TYPES`]).
    pub const COUNT: usize = 18;

    /// Elements per block: 32 or 256 for the quantized types, 1 otherwise.
    pub const fn block_size(self) -> usize {
        crate::quant::info(self).block_elems
    }

    /// Bytes per block (per element for plain types).
    pub const fn block_bytes(self) -> usize {
        crate::quant::info(self).block_bytes
    }

    /// `true` for the block-quantized types.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// The name used in safetensors headers and error messages (`"F32"`, `"BF16"`, `"Q8_0"`).
    pub const fn name(self) -> &'static str {
        crate::quant::info(self).name
    }

    /// Bytes taken by a row of `n` elements.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `n` is not a multiple of the block size,
    /// [`crate::Code::ResourceExhausted`] on overflow.
    pub fn row_bytes(self, n: usize) -> Result<usize> {
        let bs = self.block_size();
        if n % bs != 0 {
            return Err(Error::invalid_argument(format_args!(
                "{}: row of {n} elements is not a multiple of the block size {bs}",
                self.name()
            )));
        }
        (n / bs).checked_mul(self.block_bytes()).ok_or_else(|| {
            Error::resource_exhausted(format_args!("{}: {n} elements overflow usize", self.name()))
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The largest rank a [`Shape`] holds.
pub const MAX_RANK: usize = 8;

/// A tensor shape of rank 0..=[`MAX_RANK`], stored inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [usize; MAX_RANK],
    rank: u8,
}

impl Shape {
    /// A shape from its dimensions (outermost first). Rank 0 is a scalar (one element).
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] for rank above [`MAX_RANK`];
    /// [`crate::Code::InvalidArgument`] if the element count overflows `usize`.
    pub fn new(dims: &[usize]) -> Result<Self> {
        if dims.len() > MAX_RANK {
            return Err(Error::unimplemented(format_args!(
                "rank {} is above the supported maximum {MAX_RANK}",
                dims.len()
            )));
        }
        let mut s = Shape { dims: [0; MAX_RANK], rank: dims.len() as u8 };
        s.dims[..dims.len()].copy_from_slice(dims);
        s.checked_numel().ok_or_else(|| {
            Error::invalid_argument(format_args!("shape {s:?}: element count overflows usize"))
        })?;
        Ok(s)
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    fn checked_numel(&self) -> Option<usize> {
        self.dims().iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Number of elements (1 for a scalar; cannot overflow, [`Shape::new`] checked it).
    pub fn numel(&self) -> usize {
        self.dims().iter().product()
    }

    /// Bytes needed to store this shape in `dtype`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if the last dimension is not a multiple of the block
    /// size of a quantized dtype; [`crate::Code::ResourceExhausted`] on overflow.
    /// A shape with no elements (any dimension 0) needs 0 bytes, however large its other
    /// dimensions are.
    pub fn storage_bytes(&self, dtype: DType) -> Result<usize> {
        let last = self.dims().last().copied().unwrap_or(1);
        let bs = dtype.block_size();
        if last % bs != 0 {
            return Err(Error::invalid_argument(format_args!(
                "shape {self:?} of {dtype}: rows of {last} elements are not a multiple of the \
                 block size {bs}"
            )));
        }
        // `numel` fits usize (checked by `Shape::new`) and is a multiple of the block size.
        (self.numel() / bs).checked_mul(dtype.block_bytes()).ok_or_else(|| {
            Error::resource_exhausted(format_args!("shape {self:?} of {dtype} overflows usize"))
        })
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.dims()).finish()
    }
}

/// Where a tensor's bytes live.
pub enum Storage<'a> {
    /// An owned, 64-byte aligned, counted block.
    Owned(AlignedBlock),
    /// A block drawn from a thread's [`crate::mem::BufferPool`]; returns to it on drop.
    #[cfg(feature = "std")]
    Pooled(crate::mem::PooledBlock),
    /// Borrowed bytes (a mmapped file, a `&'static [u8]`): not counted, not freed.
    Borrowed(&'a [u8]),
}

impl Storage<'static> {
    /// Allocates `len` zeroed, 64-byte aligned bytes: from the current thread's
    /// [`crate::mem::BufferPool`] while a [`crate::mem::ScopedBufferPool`] is alive (std),
    /// otherwise a fresh counted block.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if the allocation fails.
    pub fn allocate(len: usize) -> Result<Self> {
        #[cfg(feature = "std")]
        if let Some(pool) = crate::mem::buffer_pool::current() {
            return Ok(Storage::Pooled(pool.take(len)?));
        }
        Ok(Storage::Owned(AlignedBlock::try_new(len)?))
    }
}

impl Storage<'_> {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Storage::Owned(b) => b.as_slice(),
            #[cfg(feature = "std")]
            Storage::Pooled(p) => p.block().as_slice(),
            Storage::Borrowed(s) => s,
        }
    }

    /// The bytes for writing, or `None` for borrowed storage.
    pub fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Storage::Owned(b) => Some(b.as_mut_slice()),
            #[cfg(feature = "std")]
            Storage::Pooled(p) => Some(p.block_mut().as_mut_slice()),
            Storage::Borrowed(_) => None,
        }
    }
}

impl fmt::Debug for Storage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Storage::Owned(_) => "Owned",
            #[cfg(feature = "std")]
            Storage::Pooled(_) => "Pooled",
            Storage::Borrowed(_) => "Borrowed",
        };
        write!(f, "Storage::{kind}({} bytes)", self.as_bytes().len())
    }
}

/// A dense, row-major tensor: dtype, shape and storage.
#[derive(Debug)]
pub struct Tensor<'a> {
    dtype: DType,
    shape: Shape,
    storage: Storage<'a>,
}

impl<'a> Tensor<'a> {
    /// A tensor over borrowed bytes (not counted in the memory statistics, never copied).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `bytes.len()` differs from what `shape` × `dtype`
    /// needs (both are named), or a quantized last dimension is not a multiple of 32.
    pub fn from_buffer(dtype: DType, shape: Shape, bytes: &'a [u8]) -> Result<Self> {
        let need = shape.storage_bytes(dtype)?;
        if bytes.len() != need {
            return Err(Error::invalid_argument(format_args!(
                "tensor {dtype} {shape:?} needs {need} bytes, buffer has {}",
                bytes.len()
            )));
        }
        Ok(Tensor { dtype, shape, storage: Storage::Borrowed(bytes) })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The storage.
    pub fn storage(&self) -> &Storage<'a> {
        &self.storage
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.as_bytes()
    }

    fn check<T>(&self, want: DType) -> Result<()> {
        if self.dtype != want {
            return Err(Error::invalid_argument(format_args!(
                "tensor {:?}: dtype is {}, not {want}",
                self.shape, self.dtype
            )));
        }
        // No elements: nothing to misread, whatever the (dangling) address of the bytes.
        let addr = self.as_bytes().as_ptr() as usize;
        if !self.as_bytes().is_empty() && addr % align_of::<T>() != 0 {
            return Err(Error::invalid_argument(format_args!(
                "tensor {want} {:?}: data at {addr:#x} is not {}-byte aligned",
                self.shape,
                align_of::<T>()
            )));
        }
        Ok(())
    }

    /// The elements as `f32`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if the dtype is not F32 or the data is misaligned.
    pub fn as_f32(&self) -> Result<&[f32]> {
        self.check::<f32>(DType::F32)?;
        Ok(cast_slice(self.as_bytes()))
    }

    /// The elements as `i32`.
    ///
    /// # Errors
    ///
    /// As [`Tensor::as_f32`], for I32.
    pub fn as_i32(&self) -> Result<&[i32]> {
        self.check::<i32>(DType::I32)?;
        Ok(cast_slice(self.as_bytes()))
    }

    /// The elements as `i64`.
    ///
    /// # Errors
    ///
    /// As [`Tensor::as_f32`], for I64.
    pub fn as_i64(&self) -> Result<&[i64]> {
        self.check::<i64>(DType::I64)?;
        Ok(cast_slice(self.as_bytes()))
    }
}

impl Tensor<'static> {
    /// A zero-filled tensor in freshly allocated storage (see [`Storage::allocate`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a quantized last dimension not a multiple of 32,
    /// [`crate::Code::ResourceExhausted`] if the allocation fails.
    pub fn zeros(dtype: DType, shape: Shape) -> Result<Self> {
        let bytes = shape.storage_bytes(dtype)?;
        Ok(Tensor { dtype, shape, storage: Storage::allocate(bytes)? })
    }

    /// An owned, aligned copy of `bytes` (used when borrowed data is misaligned).
    ///
    /// # Errors
    ///
    /// As [`Tensor::from_buffer`], plus [`crate::Code::ResourceExhausted`].
    pub fn from_bytes_copied(dtype: DType, shape: Shape, bytes: &[u8]) -> Result<Self> {
        Tensor::from_buffer(dtype, shape, bytes)?;
        let mut storage = Storage::allocate(bytes.len())?;
        // `allocate` never returns borrowed storage.
        if let Some(dst) = storage.as_bytes_mut() {
            dst.copy_from_slice(bytes);
        }
        Ok(Tensor { dtype, shape, storage })
    }

    /// The elements as mutable `f32`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if the dtype is not F32.
    pub fn as_f32_mut(&mut self) -> Result<&mut [f32]> {
        self.check::<f32>(DType::F32)?;
        match self.storage.as_bytes_mut() {
            Some(b) => Ok(cast_slice_mut(b)),
            None => Err(Error::invalid_argument("tensor storage is borrowed (read-only)")),
        }
    }
}

/// Reinterprets aligned bytes as `T` elements (trailing bytes that do not fill a `T` are
/// ignored). Fewer bytes than one `T` give an empty slice at any address.
///
/// # Panics
///
/// If `bytes` holds at least one `T` and is not aligned for `T` (callers check first).
pub(crate) fn cast_slice<T: crate::mem::Pod>(bytes: &[u8]) -> &[T] {
    if bytes.len() < core::mem::size_of::<T>() {
        return &[];
    }
    assert_eq!(bytes.as_ptr() as usize % align_of::<T>(), 0, "misaligned cast");
    // SAFETY: aligned (asserted), in bounds (length rounded down), `T` is Pod so every bit
    // pattern is a valid value.
    unsafe {
        core::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / core::mem::size_of::<T>())
    }
}

/// Mutable version of [`cast_slice`].
///
/// # Panics
///
/// If `bytes` holds at least one `T` and is not aligned for `T`.
pub(crate) fn cast_slice_mut<T: crate::mem::Pod>(bytes: &mut [u8]) -> &mut [T] {
    if bytes.len() < core::mem::size_of::<T>() {
        return &mut [];
    }
    assert_eq!(bytes.as_ptr() as usize % align_of::<T>(), 0, "misaligned cast");
    // SAFETY: as `cast_slice`, with exclusive access from `&mut`.
    unsafe {
        core::slice::from_raw_parts_mut(
            bytes.as_mut_ptr().cast(),
            bytes.len() / core::mem::size_of::<T>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_types() {
        assert_eq!(DType::Q8_0.row_bytes(64).unwrap(), 68);
        assert_eq!(DType::Q4_0.row_bytes(32).unwrap(), 18);
        assert_eq!(DType::Q4_1.row_bytes(96).unwrap(), 60);
        assert_eq!(DType::Q4_1.row_bytes(33).unwrap_err().code(), crate::Code::InvalidArgument);
        assert_eq!(DType::BF16.row_bytes(3).unwrap(), 6);
    }

    #[test]
    fn shapes() {
        assert_eq!(Shape::new(&[]).unwrap().numel(), 1);
        assert_eq!(Shape::new(&[2, 0, 3]).unwrap().storage_bytes(DType::F32).unwrap(), 0);
        assert!(Shape::new(&[usize::MAX, 2]).is_err());
        assert!(Shape::new(&[1; 9]).is_err());
        let s = Shape::new(&[usize::MAX / 2]).unwrap();
        assert!(s.storage_bytes(DType::F32).is_err());
        assert_eq!(Shape::new(&[3, 64]).unwrap().storage_bytes(DType::Q4_1).unwrap(), 120);
        assert_eq!(Shape::new(&[]).unwrap().storage_bytes(DType::I64).unwrap(), 8);
        assert!(Shape::new(&[2, 48]).unwrap().storage_bytes(DType::Q8_0).is_err());
    }

    #[test]
    fn empty_shapes_need_no_bytes_whatever_their_other_dimensions() {
        for dims in [&[usize::MAX / 2, 0][..], &[0, usize::MAX / 2], &[0, 1 << 62, 7]] {
            let s = Shape::new(dims).unwrap();
            assert_eq!(s.numel(), 0);
            assert_eq!(s.storage_bytes(DType::F32).unwrap(), 0, "{dims:?}");
        }
        let s = Shape::new(&[0, usize::MAX - 31]).unwrap();
        assert_eq!(s.storage_bytes(DType::Q8_0).unwrap(), 0);
        // The block rule still applies to an empty quantized shape.
        assert!(Shape::new(&[0, 33]).unwrap().storage_bytes(DType::Q8_0).is_err());
        let t = Tensor::from_buffer(DType::F32, Shape::new(&[1 << 62, 0]).unwrap(), &[]).unwrap();
        assert!(t.as_f32().unwrap().is_empty());
    }

    #[test]
    fn typed_views_check_dtype_and_alignment() {
        let block = AlignedBlock::try_new(17).unwrap();
        let t = Tensor::from_buffer(DType::F32, Shape::new(&[4]).unwrap(), &block.as_slice()[..16])
            .unwrap();
        assert_eq!(t.as_f32().unwrap(), &[0.0; 4]);
        assert!(t.as_i32().is_err());
        let mis =
            Tensor::from_buffer(DType::F32, Shape::new(&[4]).unwrap(), &block.as_slice()[1..17])
                .unwrap();
        assert_eq!(mis.as_f32().unwrap_err().code(), crate::Code::InvalidArgument);
        let fixed = Tensor::from_bytes_copied(DType::F32, *mis.shape(), mis.as_bytes()).unwrap();
        assert_eq!(fixed.as_f32().unwrap().len(), 4);
        assert!(Tensor::from_buffer(DType::F32, Shape::new(&[5]).unwrap(), &[0u8; 16]).is_err());
    }
}
