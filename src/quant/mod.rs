//! Quantized and plain weight formats: one file per ggml block type and THE table
//! ([`TYPES`], indexed by [`DType`]) that every other part of rml reads block sizes, byte
//! counts, ggml type ids, names and the scalar oracle from.
//!
//! Each type file (`q8_0.rs`, `q4_0.rs`, `q4_1.rs`, ...) holds the `#[repr(C)]` block struct
//! named after ggml's (`block_q8_0` in ggml's `ggml-common.h` → [`BlockQ8_0`]) with a `const`
//! size assert, the scalar dequantizer (the oracle, bit-identical to ggml's `to_float` and to
//! the `gguf` Python package), the weight quantizer where ggml has a reference one (ggml's
//! arithmetic, so rml writes the bytes llama-quantize writes), the scalar dot products with f32
//! and int8 activations, and the activation format its int8 path pairs with ([`ActFormat`]).
//! [`q8`] is the int8 activation format itself ([`Q8Acts`]).
//!
//! [`reference`](mod@reference) holds the arithmetic the scalar oracle and every SIMD tier reproduce (the
//! int8 accumulation order, the Q8 rounding rule). This module depends on no kernel:
//! `crate::kernels` builds its scalar table from the reference row dots of [`TYPES`] and
//! fills [`Q8Acts`] through [`BlockQuantizer`].
//!
//! Adding a format: a file here, its `mod` line and row in [`TYPES`], and its variant in
//! [`DType`]; SIMD bodies (optional: a
//! type without one runs the scalar entry) go into `kernels/types/<type>.rs`, named in
//! `kernels/types/mod.rs`'s type list.
//!
//! [`q5_0x2`] is rml's own: Q5_0 repacked at load for the AVX-512 int8 kernel (its
//! [`TypeInfo::ggml_id`] is [`NOT_IN_FILES`], so no file and no name lookup yields it).

// Block layouts read clearest as index arithmetic (element `e` of sub-block `j`...).
#![allow(clippy::needless_range_loop)]

use half::f16;

use crate::error::{Error, Result};
use crate::tensor::DType;

mod float;
pub mod iq4_nl;
pub mod layout;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_0x2;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8;
pub mod q8_0;
pub mod reference;

pub use layout::BlockLayout;
pub use q4_0::{dequantize_block_q4_0, dequantize_row_q4_0, quantize_row_q4_0, BlockQ4_0};
pub use q4_1::{dequantize_block_q4_1, dequantize_row_q4_1, quantize_row_q4_1, BlockQ4_1};
pub use q5_0::{dequantize_block_q5_0, quantize_row_q5_0, BlockQ5_0};
pub use q5_1::{dequantize_block_q5_1, quantize_row_q5_1, BlockQ5_1};
pub(crate) use q8::Q8Parts;
pub use q8::{q8_acts_bytes, q8_acts_bytes_as, BlockQuantizer, Q8Acts};
pub use q8_0::{dequantize_block_q8_0, dequantize_row_q8_0, quantize_row_q8_0, BlockQ8_0};

/// Elements per block of the 32-element types (Q8_0, Q4_0, Q4_1, ...) and of the Q8
/// activation format.
pub const QK: usize = 32;

/// Elements per super-block of the K-quants (ggml's `QK_K`) and of the Q8_K activation format.
pub const QK_K: usize = 256;

/// The int8 activation format a quantized weight type's int8 path pairs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActFormat {
    /// Q8_0-style blocks of 32 (f32 scale, 32 × i8, block sum and scaled block sum):
    /// [`Q8Acts`] with [`ActFormat::Q8`].
    Q8,
    /// Q8_K-style super-blocks of 256 (f32 scale, 256 × i8, the sums of each 16 values), for
    /// the K-quants: [`Q8Acts`] with [`ActFormat::Q8K`].
    Q8K,
}

impl ActFormat {
    /// Activation values per block: 32 for [`ActFormat::Q8`], 256 for [`ActFormat::Q8K`].
    pub const fn block_elems(self) -> usize {
        match self {
            ActFormat::Q8 => QK,
            ActFormat::Q8K => QK_K,
        }
    }
}

/// Whole blocks to f32: `(bytes, out)`, see [`TypeInfo::dequantize`].
pub type DequantizeFn = fn(&[u8], &mut [f32]);

/// A weight quantizer: a row of f32 to whole blocks, see [`TypeInfo::quantize`].
pub type QuantizeFn = fn(&[f32], &mut [u8]) -> Result<()>;

/// A reference row dot with f32 activations: `(row bytes, x)` with `x.len()` the row's
/// elements.
pub type DotF32Fn = fn(&[u8], &[f32]) -> f32;

/// A reference row dot with int8 activations: `(row bytes, activation row)`; the row holds
/// exactly the activation row's blocks.
pub type DotQ8Fn = fn(&[u8], &q8::Q8Row<'_>) -> f32;

/// One row of THE table: what rml knows about a [`DType`].
#[derive(Clone, Copy, Debug)]
pub struct TypeInfo {
    /// The dtype this row describes (row `i` describes the dtype with index `i`).
    pub dtype: DType,
    /// The name in safetensors headers, GGUF tools and error messages (`"Q4_K"`).
    pub name: &'static str,
    /// ggml's `enum ggml_type` value (GGUF's tensor type id); [`NOT_IN_FILES`] for rml's
    /// load-time layouts.
    pub ggml_id: u32,
    /// Elements per block (1 for plain types).
    pub block_elems: usize,
    /// Bytes per block (per element for plain types).
    pub block_bytes: usize,
    /// Whole blocks to f32: `(bytes, out)` with `bytes.len() / block_bytes * block_elems ==
    /// out.len()`, little-endian at any alignment; `None` for the integer types.
    pub dequantize: Option<DequantizeFn>,
    /// The weight quantizer (ggml's reference arithmetic), if rml has one.
    pub quantize: Option<QuantizeFn>,
    /// The activation format of the int8 path (`None`: f32 activations only).
    pub act: Option<ActFormat>,
    /// The reference row dot with f32 activations (the arithmetic of the scalar oracle's
    /// f32-activation matmul, which `crate::kernels` builds from it); `None` if the type is
    /// not a weight type.
    pub matmul_f32: Option<DotF32Fn>,
    /// The reference row dot with int8 activations, for the types with an [`ActFormat`].
    pub matmul_q8: Option<DotQ8Fn>,
}

impl TypeInfo {
    /// Weight bytes per activation block of the int8 path ([`ActFormat::block_elems`]
    /// elements): the block bytes, or a pair layout's bytes per half; 0 without an int8
    /// path.
    pub const fn act_block_bytes(&self) -> usize {
        match self.act {
            Some(a) => self.block_bytes * a.block_elems() / self.block_elems,
            None => 0,
        }
    }

    /// A plain (non-block) type.
    const fn plain(dtype: DType, name: &'static str, ggml_id: u32, bytes: usize) -> Self {
        TypeInfo {
            dtype,
            name,
            ggml_id,
            block_elems: 1,
            block_bytes: bytes,
            dequantize: None,
            quantize: None,
            act: None,
            matmul_f32: None,
            matmul_q8: None,
        }
    }
}

/// THE table, one row per [`DType`] in declaration order (checked at compile time).
pub static TYPES: [TypeInfo; DType::COUNT] = [
    float::F32,
    float::F16,
    float::BF16,
    TypeInfo::plain(DType::I8, "I8", 24, 1),
    TypeInfo::plain(DType::I32, "I32", 26, 4),
    TypeInfo::plain(DType::I64, "I64", 27, 8),
    q8_0::INFO,
    q4_0::INFO,
    q4_1::INFO,
    q5_0::INFO,
    q5_1::INFO,
    iq4_nl::INFO,
    q2_k::INFO,
    q3_k::INFO,
    q4_k::INFO,
    q5_k::INFO,
    q6_k::INFO,
    q5_0x2::INFO,
];

const _: () = {
    let mut i = 0;
    while i < DType::COUNT {
        assert!(TYPES[i].dtype as usize == i, "TYPES rows must follow DType's order");
        i += 1;
    }
};

/// The table row of `dtype`.
#[inline]
pub const fn info(dtype: DType) -> &'static TypeInfo {
    &TYPES[dtype as usize]
}

/// The dtype with ggml type id `id`, if rml implements it.
pub fn from_ggml_id(id: u32) -> Option<DType> {
    TYPES.iter().find(|t| t.ggml_id == id && t.ggml_id != NOT_IN_FILES).map(|t| t.dtype)
}

/// The [`TypeInfo::ggml_id`] of rml's load-time layouts ([`DType::Q5_0x2`]): no file type.
pub const NOT_IN_FILES: u32 = u32::MAX;

/// The block dtype named `name` (`"Q8_0"`, `"Q4_K"`, ...), if rml implements it.
pub fn quantized_from_name(name: &str) -> Option<DType> {
    TYPES
        .iter()
        .find(|t| t.block_elems > 1 && t.ggml_id != NOT_IN_FILES && t.name == name)
        .map(|t| t.dtype)
}

/// The names of the block dtypes, comma-separated (for error messages).
pub fn quantized_names() -> impl core::fmt::Display {
    struct Names;
    impl core::fmt::Display for Names {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let mut first = true;
            for t in TYPES.iter().filter(|t| t.block_elems > 1 && t.ggml_id != NOT_IN_FILES) {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(t.name)?;
                first = false;
            }
            Ok(())
        }
    }
    Names
}

/// Dequantizes (or widens) whole blocks of `dtype` at `bytes` into `out`.
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] for the integer types; [`crate::Code::InvalidArgument`] if
/// `out.len()` is not a multiple of the block size or `bytes` is not exactly its blocks.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let t = info(dtype);
    let Some(f) = t.dequantize else {
        return Err(Error::unimplemented(format_args!(
            "{dtype}: converting to f32 is not supported"
        )));
    };
    let nb = row_blocks(dtype, out.len())?;
    check_bytes(dtype, nb, bytes.len(), "input")?;
    f(bytes, out);
    Ok(())
}

/// Reads the little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
pub fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Rounds to the nearest integer, ties away from zero (C's `roundf`): the one rounding rule
/// every quantizer in rml uses, on every ISA.
#[inline(always)]
pub fn round_ties_away(v: f32) -> f32 {
    libm::roundf(v)
}

/// Number of blocks in a row of `len` elements of `dtype`.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] naming the block size if `len` is not a multiple of it.
pub(crate) fn row_blocks(dtype: DType, len: usize) -> Result<usize> {
    let bs = info(dtype).block_elems;
    if len % bs != 0 {
        return Err(Error::invalid_argument(format_args!(
            "{dtype}: row of {len} elements is not a multiple of the block size {bs}"
        )));
    }
    Ok(len / bs)
}

/// Checks that `bytes` holds exactly `nb` blocks of `dtype`.
pub(crate) fn check_bytes(dtype: DType, nb: usize, bytes: usize, what: &str) -> Result<()> {
    let want = nb * dtype.block_bytes();
    if bytes != want {
        return Err(Error::invalid_argument(format_args!(
            "{dtype}: {what} has {bytes} bytes, {nb} blocks need {want}"
        )));
    }
    Ok(())
}

/// Stores `v` as little-endian f16 bits at `out[0..2]`.
///
/// # Errors
///
/// [`crate::Code::OutOfRange`] if `v` rounds to an infinite f16 (`|v| >= 65520`).
pub(crate) fn put_f16(
    out: &mut [u8],
    v: f32,
    dtype: DType,
    block: usize,
    what: &str,
) -> Result<()> {
    let h = f16::from_f32(v);
    if h.is_infinite() {
        return Err(Error::out_of_range(format_args!(
            "{dtype} block {block}: {what} {v} does not fit in f16"
        )));
    }
    out[..2].copy_from_slice(&h.to_bits().to_le_bytes());
    Ok(())
}

/// The error for a row holding NaN or ±infinity.
#[cold]
pub(crate) fn non_finite(dtype: DType, x: &[f32]) -> Error {
    let i = x.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Error::invalid_argument(format_args!(
        "{dtype}: cannot quantize non-finite input (element {i} is {})",
        x.get(i).copied().unwrap_or(f32::NAN)
    ))
}

/// The checks every weight quantizer starts with: `x` whole blocks, `out` their bytes, all
/// finite. Returns the block count.
pub(crate) fn quantize_checks(dtype: DType, x: &[f32], out: &[u8]) -> Result<usize> {
    let nb = row_blocks(dtype, x.len())?;
    check_bytes(dtype, nb, out.len(), "output")?;
    if x.iter().any(|v| !v.is_finite()) {
        return Err(non_finite(dtype, x));
    }
    Ok(nb)
}

/// Dequantizes a row of `dtype` blocks with `block` (a per-block dequantizer).
pub(crate) fn dequantize_row_with(
    dtype: DType,
    bytes: &[u8],
    out: &mut [f32],
    block: fn(&[u8], &mut [f32]),
) -> Result<()> {
    let nb = row_blocks(dtype, out.len())?;
    check_bytes(dtype, nb, bytes.len(), "input")?;
    let t = info(dtype);
    for (blk, o) in bytes.chunks_exact(t.block_bytes).zip(out.chunks_exact_mut(t.block_elems)) {
        block(blk, o);
    }
    Ok(())
}

/// Applies a per-block dequantizer to whole blocks (the [`TypeInfo::dequantize`] shape).
#[inline(always)]
pub(crate) fn blocks_with(
    bytes: &[u8],
    out: &mut [f32],
    elems: usize,
    block_bytes: usize,
    block: fn(&[u8], &mut [f32]),
) {
    for (blk, o) in bytes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(elems)) {
        block(blk, o);
    }
}
