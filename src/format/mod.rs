//! Model file formats parsed from untrusted bytes: safetensors, GGUF v3 and Hugging Face
//! `config.json`.
//!
//! Every parser takes `&[u8]` / `&str` and never trusts it: lengths, offsets and counts are
//! checked before use, and failures are [`crate::Error`]s naming the tensor or field.

use alloc::vec::Vec;

use crate::error::Result;
use crate::tensor::{DType, Shape};

/// One tensor inside a parsed file: its dtype, its shape (outermost dimension first,
/// row-major, as PyTorch / safetensors order it) and its bytes, borrowed from the file.
///
/// `data` may be misaligned for its dtype (safetensors offsets are arbitrary); use
/// [`crate::tensor::Tensor::from_bytes_copied`] or check alignment before casting.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: Shape,
    /// The tensor's bytes (`shape.storage_bytes(dtype)` of them).
    pub data: &'a [u8],
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
