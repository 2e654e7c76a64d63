//! Block-quantized weights inside safetensors files, as `rml convert --dtype q8_0` writes them.
//!
//! safetensors has no dtype for ggml's blocks, so a Q8_0 matrix `[rows, k]` is stored as a
//! plain `U8` tensor `[rows, k / 32 * 34]` (its rows of `block_q8_0`, unchanged) and marked in
//! the file's `__metadata__` with `"rml.dtype.<tensor name>": "Q8_0"`. Other tools see bytes;
//! rml reads them back as Q8_0 views in place ([`PackedSource`]), so the kernels use them
//! without a copy.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::format::TensorSource;
use crate::format::TensorView;
use crate::tensor::{DType, Shape};

/// The `__metadata__` key prefix that marks a packed tensor (followed by the tensor's name).
pub const PACKED_DTYPE_KEY: &str = "rml.dtype.";

/// The block dtype a metadata value names (`"Q8_0"`, `"Q4_K"`, ...: a quantized row of
/// [`crate::quant::TYPES`]), if any.
pub fn packed_dtype(name: &str) -> Option<DType> {
    crate::quant::quantized_from_name(name)
}

/// The metadata entry that marks `tensor` as packed `dtype`.
pub fn metadata_entry(tensor: &str, dtype: DType) -> (String, String) {
    (format!("{PACKED_DTYPE_KEY}{tensor}"), String::from(dtype.name()))
}

/// The logical view of a packed tensor: `raw` holds `rows` rows of `row_bytes` bytes of
/// `dtype` blocks (`shape` is the stored `[rows, row_bytes]`).
///
/// # Errors
///
/// [`crate::Code::DataLoss`] naming the tensor if the stored shape is not 2-D, the rows are
/// not whole blocks, or the byte count does not match.
pub fn unpack_view<'a>(
    name: &str,
    dtype: DType,
    stored: &[usize],
    raw: &'a [u8],
) -> Result<TensorView<'a>> {
    let [rows, row_bytes] = *stored else {
        return Err(Error::data_loss(format_args!(
            "tensor {name:?}: packed {dtype} must be stored as [rows, row_bytes], found {stored:?}"
        )));
    };
    let bb = dtype.block_bytes();
    if row_bytes % bb != 0 || rows.checked_mul(row_bytes) != Some(raw.len()) {
        return Err(Error::data_loss(format_args!(
            "tensor {name:?}: {rows} rows of {row_bytes} bytes ({} in the file) are not whole \
             {dtype} blocks of {bb} bytes",
            raw.len()
        )));
    }
    let k = row_bytes / bb * dtype.block_size();
    Ok(TensorView { dtype, shape: Shape::new(&[rows, k])?, data: raw })
}

/// Gives a tensor's stored shape and raw bytes (whatever its dtype) by name.
pub type StoredLookup<'r, 'm> = &'r dyn Fn(&str) -> Result<(Shape, &'m [u8])>;

/// A [`TensorSource`] that also understands packed tensors: the packed ones are served as
/// their block dtype, everything else by the wrapped source. `crate::load::Model` builds one
/// with `PackedSource::new` (std); [`PackedSource::from_marks`] works on any source.
pub struct PackedSource<'m> {
    inner: Box<dyn TensorSource<'m> + 'm>,
    packed: Vec<(String, TensorView<'m>)>,
}

impl core::fmt::Debug for PackedSource<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PackedSource").field("packed", &self.packed.len()).finish()
    }
}

impl<'m> PackedSource<'m> {
    /// Wraps `inner`, reading the packing marks of the safetensors `__metadata__` entries
    /// `metadata`; `stored(name)` gives a marked tensor's stored shape and raw bytes.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] naming the tensor for a mark with an unknown dtype;
    /// the errors of `stored` and [`unpack_view`].
    pub fn from_marks(
        inner: Box<dyn TensorSource<'m> + 'm>,
        metadata: &[(String, String)],
        stored: StoredLookup<'_, 'm>,
    ) -> Result<Self> {
        let mut packed = Vec::new();
        for (k, v) in metadata {
            if let Some(tensor) = k.strip_prefix(PACKED_DTYPE_KEY) {
                let dt = packed_dtype(v).ok_or_else(|| {
                    Error::unimplemented(format_args!(
                        "tensor {tensor:?}: packed dtype {v:?} (known: {})",
                        crate::quant::quantized_names()
                    ))
                })?;
                let (shape, raw) = stored(tensor)?;
                packed.push((String::from(tensor), unpack_view(tensor, dt, shape.dims(), raw)?));
            }
        }
        Ok(PackedSource { inner, packed })
    }
}

impl<'m> TensorSource<'m> for PackedSource<'m> {
    fn tensor(&self, name: &str) -> Result<TensorView<'m>> {
        match self.packed.iter().find(|(n, _)| n == name) {
            Some((_, view)) => Ok(*view),
            None => self.inner.tensor(name),
        }
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.inner.tensor_names()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_checks_whole_blocks() {
        let raw = [0u8; 2 * 68];
        let v = unpack_view("w", DType::Q8_0, &[2, 68], &raw).unwrap();
        assert_eq!((v.dtype, v.shape.dims()), (DType::Q8_0, &[2usize, 64][..]));
        for (shape, len) in [([2usize, 67usize], 134usize), ([2, 68], 135)] {
            let e = unpack_view("w", DType::Q8_0, &shape, &vec_of(len)).unwrap_err();
            assert_eq!(e.code(), crate::Code::DataLoss);
            assert!(e.message().contains("\"w\""), "{e}");
        }
        assert!(unpack_view("w", DType::Q8_0, &[136], &raw).is_err());
        assert_eq!(metadata_entry("w", DType::Q8_0), ("rml.dtype.w".into(), "Q8_0".into()));
    }

    fn vec_of(n: usize) -> alloc::vec::Vec<u8> {
        alloc::vec![0u8; n]
    }
}
