//! Model containers parsed from untrusted bytes: safetensors and GGUF v3. Containers only:
//! tensors and metadata, no model. What a file's tensors and keys mean for a model family is
//! [`crate::model::config`]'s and [`crate::model::arch`]'s.
//!
//! Every parser takes `&[u8]` / `&str` and never trusts it: lengths, offsets and counts are
//! checked before use, and failures are [`crate::Error`]s naming the tensor or field.
//!
//! - [`safetensors::SafeTensors`]: a `.safetensors` file (header + data section).
//! - [`gguf::Gguf`]: a GGUF v3 file (metadata, tensor infos, aligned data).
//!
//! Both tensor files implement [`TensorSource`] (the decoder's view) and list their tensors as
//! [`TensorInfo`]s (for `rml inspect`).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::error::{Error, Result};
use crate::tensor::{DType, Shape, Tensor};

pub mod gguf;
pub mod safetensors;
pub mod write;

/// One tensor inside a parsed file: its dtype, its shape (outermost dimension first,
/// row-major, as PyTorch / safetensors order it) and its bytes, borrowed from the file.
///
/// `data` may be misaligned for its dtype (safetensors offsets are arbitrary); use
/// [`TensorView::to_tensor`] (borrows when aligned, copies into an aligned buffer otherwise),
/// [`TensorView::to_f32_tensor`] or [`TensorView::dequantize_into`] (read bytes with
/// `from_le_bytes`, never cast) rather than casting the bytes yourself.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: Shape,
    /// The tensor's bytes (`shape.storage_bytes(dtype)` of them).
    pub data: &'a [u8],
}

/// The alignment a dtype's elements need for a typed view (1 for the block-quantized types,
/// whose kernels read the f16 scales byte-wise).
fn element_align(dtype: DType) -> usize {
    if dtype.is_quantized() {
        1
    } else {
        dtype.block_bytes()
    }
}

impl<'a> TensorView<'a> {
    /// A [`Tensor`] over the view: the bytes borrowed in place when their address is aligned
    /// for the dtype, otherwise copied into a fresh 64-byte aligned (counted) buffer.
    /// Data is little-endian, as both file formats store it, so typed views of the result
    /// (`Tensor::as_f32`, ...) are right on little-endian targets only (all rml targets:
    /// x86_64, aarch64, Arm Cortex-M, RISC-V); [`TensorView::dequantize_into`] is right on any.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `data` does not match `shape` × `dtype`;
    /// [`crate::Code::ResourceExhausted`] if the copy cannot be allocated.
    pub fn to_tensor(&self) -> Result<Tensor<'a>> {
        if self.data.as_ptr() as usize % element_align(self.dtype) == 0 {
            Tensor::from_buffer(self.dtype, self.shape, self.data)
        } else {
            Tensor::from_bytes_copied(self.dtype, self.shape, self.data)
        }
    }

    /// Widens (F16, BF16), copies (F32) or dequantizes (the quantized types) the view into
    /// `out`, one f32 per element, reading little-endian bytes at any alignment.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] for the integer dtypes;
    /// [`crate::Code::InvalidArgument`] if `data` does not match `shape` × `dtype`.
    ///
    /// # Panics
    ///
    /// If `out.len() != self.shape.numel()`.
    pub fn dequantize_into(&self, out: &mut [f32]) -> Result<()> {
        assert_eq!(out.len(), self.shape.numel(), "dequantize_into: output length");
        let need = self.shape.storage_bytes(self.dtype)?;
        if need != self.data.len() {
            return Err(Error::invalid_argument(format_args!(
                "{} {:?} needs {need} bytes, view has {}",
                self.dtype,
                self.shape,
                self.data.len()
            )));
        }
        crate::quant::dequantize(self.dtype, self.data, out)
            .map_err(|e| e.context(format_args!("{:?}", self.shape)))?;
        Ok(())
    }

    /// The view as a new, aligned f32 [`Tensor`] of the same shape (see
    /// [`TensorView::dequantize_into`]).
    ///
    /// # Errors
    ///
    /// As [`TensorView::dequantize_into`], plus [`crate::Code::ResourceExhausted`].
    pub fn to_f32_tensor(&self) -> Result<Tensor<'static>> {
        let mut t = Tensor::zeros(DType::F32, self.shape)?;
        self.dequantize_into(t.as_f32_mut()?)?;
        Ok(t)
    }
}

/// A parsed model file that hands out tensors by name (safetensors, GGUF, sharded folders).
pub trait TensorSource<'a> {
    /// The tensor called `name`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming the tensor if absent; [`crate::Code::Unimplemented`]
    /// naming the type if the file stores it in a dtype rml does not support.
    fn tensor(&self, name: &str) -> Result<TensorView<'a>>;

    /// The names of all tensors, in file order.
    fn tensor_names(&self) -> Vec<&str>;
}

/// A tensor's element type as the file stores it: one rml computes with, or another type
/// the format defines (listed by name, refused with `Unimplemented` when the tensor is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileDType {
    /// A type rml supports.
    Supported(DType),
    /// A valid type of the file format that rml does not compute with (`"F64"`, `"Q6_K"`).
    Unsupported(&'static str),
}

impl FileDType {
    /// The type's name as the format spells it (rml's names for supported types).
    pub fn name(&self) -> &'static str {
        match self {
            FileDType::Supported(d) => d.name(),
            FileDType::Unsupported(n) => n,
        }
    }

    /// The rml dtype, or an [`crate::Code::Unimplemented`] error naming `tensor` and the type.
    ///
    /// # Errors
    ///
    /// As described.
    pub fn supported(&self, tensor: &str) -> Result<DType> {
        match self {
            FileDType::Supported(d) => Ok(*d),
            FileDType::Unsupported(n) => Err(Error::unimplemented(format_args!(
                "tensor {tensor:?}: dtype {n} is not supported by rml"
            ))),
        }
    }
}

impl fmt::Display for FileDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor's entry in a file's directory, for listing (`rml inspect`) and lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type as stored.
    pub dtype: FileDType,
    /// Its shape, outermost first (GGUF's innermost-first `ne[]` already reversed).
    pub shape: Shape,
    /// Absolute byte offset of its data in the file.
    pub offset: usize,
    /// Bytes of data.
    pub bytes: usize,
}

/// Looks up a tensor in a name → index map and returns its view into `file`.
pub(crate) fn view_of<'a>(
    infos: &[TensorInfo],
    index: &hashbrown::HashMap<String, usize>,
    file: &'a [u8],
    name: &str,
) -> Result<TensorView<'a>> {
    let i = *index
        .get(name)
        .ok_or_else(|| Error::not_found(format_args!("tensor {name:?} is not in the file")))?;
    let info = &infos[i];
    let dtype = info.dtype.supported(name)?;
    // Parsers checked every range against the file.
    let data = file
        .get(info.offset..info.offset + info.bytes)
        .ok_or_else(|| Error::internal(format_args!("tensor {name:?}: range not checked")))?;
    Ok(TensorView { dtype, shape: info.shape, data })
}
