//! GGUF (versions 2 and 3, little-endian) parsed from `&[u8]` with a small bounds-checked
//! reader.
//!
//! Layout (facts from the GGUF specification in the ggml repository):
//!
//! ```text
//! "GGUF"  u32 version  u64 tensor_count  u64 metadata_kv_count
//! metadata_kv_count × { string key, u32 value_type, value }
//! tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//! padding to `general.alignment` (default 32), then the data section
//! ```
//!
//! A string is a u64 byte length and that many bytes (UTF-8). Value types: 0 u8, 1 i8, 2 u16,
//! 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 element type, u64 count,
//! elements), 10 u64, 11 i64, 12 f64. `ne[0]` is the innermost (contiguous) dimension;
//! [`TensorInfo::shape`] lists dimensions outermost first, so `ne` is reversed. Tensor
//! offsets are relative to the data section and multiples of the alignment.
//!
//! Every count and length is checked against the bytes left before it is used (a tensor
//! info takes at least 24 bytes, a key/value 13, an array element at least its fixed size),
//! and no memory is reserved from a count: lists grow with the entries actually read, so
//! the parser's memory is a small multiple of the header it has walked. Arrays are not copied: [`MetaArray`] keeps the array's bytes and decodes on
//! iteration. Tensor data is never copied either: quantized tensors are views in place.
//!
//! The weight types of [`crate::quant::TYPES`] map to rml's [`DType`](crate::tensor::DType)s; the other ggml
//! types are parsed (their sizes are known, so ranges are still checked) and listed as
//! [`FileDType::Unsupported`], refused with [`crate::Code::Unimplemented`] when used. A type
//! id ggml does not define is a [`crate::Code::DataLoss`] at parse time.
//!
//! This module knows containers only: which model a file holds, and what its keys mean, is
//! [`crate::model::config::from_gguf`]'s and [`crate::model::arch`]'s business.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hashbrown::HashMap;

use super::{FileDType, TensorInfo, TensorSource, TensorView};
use crate::error::{Error, Result};
use crate::tensor::Shape;

/// The magic bytes at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of the data section and tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The largest number of dimensions ggml tensors have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// How deep arrays of arrays may nest.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// The GGUF metadata value types (the spec's `gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MetaType {
    /// `u8`.
    U8 = 0,
    /// `i8`.
    I8 = 1,
    /// `u16`.
    U16 = 2,
    /// `i16`.
    I16 = 3,
    /// `u32`.
    U32 = 4,
    /// `i32`.
    I32 = 5,
    /// `f32`.
    F32 = 6,
    /// `bool` (one byte, 0 or 1).
    Bool = 7,
    /// A length-prefixed UTF-8 string.
    String = 8,
    /// An array of one element type.
    Array = 9,
    /// `u64`.
    U64 = 10,
    /// `i64`.
    I64 = 11,
    /// `f64`.
    F64 = 12,
}

impl MetaType {
    fn from_u32(v: u32) -> Option<Self> {
        use MetaType::*;
        Some(match v {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Bytes of a fixed-size value, or the smallest encoding of a variable one (a string's
    /// length prefix; an array's type and count).
    const fn min_size(self) -> usize {
        use MetaType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// The spec's name of the type, for messages and listings.
    pub const fn name(self) -> &'static str {
        use MetaType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value, borrowing strings and arrays from the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MetaValue<'a> {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A string (validated UTF-8).
    Str(&'a str),
    /// An array, decoded on iteration.
    Array(MetaArray<'a>),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl<'a> MetaValue<'a> {
    /// The value's type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::Str(_) => MetaType::String,
            MetaValue::Array(_) => MetaType::Array,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F64(_) => MetaType::F64,
        }
    }

    /// The value as an unsigned integer if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer if it is an integer that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float if it is an `f32` or `f64` (`f32` widened exactly).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The string, if the value is one.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, if the value is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The array, if the value is one.
    pub fn as_array(&self) -> Option<MetaArray<'a>> {
        match *self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for MetaValue<'_> {
    /// Scalars as themselves, strings quoted (at most 64 characters, then `…`), arrays as
    /// `[type; len]` with their first few elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
            MetaValue::Str(s) => {
                let mut end = s.len().min(64);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                if end < s.len() {
                    write!(f, "{:?}…", &s[..end])
                } else {
                    write!(f, "{s:?}")
                }
            }
            MetaValue::Array(a) => {
                write!(f, "[{}; {}]", a.elem_type().name(), a.len())?;
                if !a.is_empty() {
                    f.write_str(" ")?;
                    for (i, v) in a.iter().take(3).enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{v}")?;
                    }
                    if a.len() > 3 {
                        f.write_str(", …")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// A metadata array: its element type, its length and its (already validated) bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetaArray<'a> {
    elem: MetaType,
    len: usize,
    bytes: &'a [u8],
}

impl<'a> MetaArray<'a> {
    /// The element type.
    pub fn elem_type(&self) -> MetaType {
        self.elem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for an empty array.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, decoded one by one.
    pub fn iter(&self) -> impl Iterator<Item = MetaValue<'a>> + 'a {
        let mut r = Reader { buf: self.bytes, pos: 0 };
        let elem = self.elem;
        // The parser walked these bytes with the same reader and depth limit: every element
        // decodes, so `ok()` never ends the iteration early.
        (0..self.len).map_while(move |_| r.value(elem, &"array element", 1).ok())
    }

    fn typed<T>(
        &self,
        key: &str,
        want: &[MetaType],
        f: impl Fn(MetaValue<'a>) -> Option<T>,
    ) -> Result<Vec<T>> {
        if !want.contains(&self.elem) {
            return Err(Error::data_loss(format_args!(
                "GGUF metadata {key:?}: array of {} where {} was expected",
                self.elem.name(),
                want.iter().map(|t| t.name()).collect::<Vec<_>>().join(" or ")
            )));
        }
        let mut out = Vec::with_capacity(self.len);
        for v in self.iter() {
            out.push(f(v).ok_or_else(|| {
                Error::data_loss(format_args!("GGUF metadata {key:?}: element {v} out of range"))
            })?);
        }
        Ok(out)
    }
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn fmt::Display) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(Error::data_loss(format_args!(
                "GGUF: {what}: needs {n} bytes at offset {}, only {} left in the file",
                self.pos,
                self.left()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn fmt::Display) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn fmt::Display) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn fmt::Display) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count or length that must fit in `usize` and in the bytes left, given that each
    /// item takes at least `min_item` bytes.
    fn count(&mut self, min_item: usize, what: &dyn fmt::Display) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_item))
            .is_some_and(|b| b <= self.left());
        if !fits {
            return Err(Error::data_loss(format_args!(
                "GGUF: {what}: count {n} (at offset {at}) is larger than the {} bytes left in \
                 the file allow",
                self.left()
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &dyn fmt::Display) -> Result<&'a str> {
        let n = self.count(1, &format_args!("{what}: string length"))?;
        let bytes = self.take(n, what)?;
        core::str::from_utf8(bytes)
            .map_err(|e| Error::data_loss(format_args!("GGUF: {what}: string is not UTF-8: {e}")))
    }

    /// One value of type `t`; `depth` counts enclosing arrays.
    fn value(
        &mut self,
        t: MetaType,
        what: &dyn fmt::Display,
        depth: usize,
    ) -> Result<MetaValue<'a>> {
        Ok(match t {
            MetaType::U8 => MetaValue::U8(u8::from_le_bytes(self.array(what)?)),
            MetaType::I8 => MetaValue::I8(i8::from_le_bytes(self.array(what)?)),
            MetaType::U16 => MetaValue::U16(u16::from_le_bytes(self.array(what)?)),
            MetaType::I16 => MetaValue::I16(i16::from_le_bytes(self.array(what)?)),
            MetaType::U32 => MetaValue::U32(self.u32(what)?),
            MetaType::I32 => MetaValue::I32(i32::from_le_bytes(self.array(what)?)),
            MetaType::F32 => MetaValue::F32(f32::from_le_bytes(self.array(what)?)),
            MetaType::U64 => MetaValue::U64(self.u64(what)?),
            MetaType::I64 => MetaValue::I64(i64::from_le_bytes(self.array(what)?)),
            MetaType::F64 => MetaValue::F64(f64::from_le_bytes(self.array(what)?)),
            MetaType::Bool => match self.array::<1>(what)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(Error::data_loss(format_args!(
                        "GGUF: {what}: bool byte is {b}, not 0 or 1"
                    )))
                }
            },
            MetaType::String => MetaValue::Str(self.string(what)?),
            MetaType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::data_loss(format_args!(
                        "GGUF: {what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let raw = self.u32(what)?;
                let elem = MetaType::from_u32(raw).ok_or_else(|| {
                    Error::data_loss(format_args!("GGUF: {what}: unknown array element type {raw}"))
                })?;
                let len = self.count(elem.min_size(), &format_args!("{what}: array length"))?;
                let start = self.pos;
                match elem {
                    MetaType::String | MetaType::Array => {
                        for _ in 0..len {
                            self.value(elem, what, depth + 1)?;
                        }
                    }
                    // Fixed-size elements: `count` checked that they fit; bools still need
                    // their bytes checked.
                    MetaType::Bool => {
                        let b = self.take(len, what)?;
                        if let Some(bad) = b.iter().find(|&&x| x > 1) {
                            return Err(Error::data_loss(format_args!(
                                "GGUF: {what}: bool byte is {bad}, not 0 or 1"
                            )));
                        }
                    }
                    _ => {
                        self.take(len * elem.min_size(), what)?;
                    }
                }
                MetaValue::Array(MetaArray { elem, len, bytes: &self.buf[start..self.pos] })
            }
        })
    }
}

/// A ggml tensor type: its id, its name, elements per block and bytes per block (ggml's
/// type traits).
#[derive(Clone, Copy)]
struct GgmlType {
    id: u32,
    name: &'static str,
    block: usize,
    bytes: usize,
}

/// The ggml types rml has no row for in [`crate::quant::TYPES`] (their sizes are needed to
/// lay out a file that holds them; using one is refused). Ids 4, 5, 31..=33 and 36..=38 were
/// removed from ggml and are not listed.
const OTHER_GGML_TYPES: &[GgmlType] = &[
    GgmlType { id: 9, name: "Q8_1", block: 32, bytes: 36 },
    GgmlType { id: 15, name: "Q8_K", block: 256, bytes: 292 },
    GgmlType { id: 16, name: "IQ2_XXS", block: 256, bytes: 66 },
    GgmlType { id: 17, name: "IQ2_XS", block: 256, bytes: 74 },
    GgmlType { id: 18, name: "IQ3_XXS", block: 256, bytes: 98 },
    GgmlType { id: 19, name: "IQ1_S", block: 256, bytes: 50 },
    GgmlType { id: 21, name: "IQ3_S", block: 256, bytes: 110 },
    GgmlType { id: 22, name: "IQ2_S", block: 256, bytes: 82 },
    GgmlType { id: 23, name: "IQ4_XS", block: 256, bytes: 136 },
    GgmlType { id: 25, name: "I16", block: 1, bytes: 2 },
    GgmlType { id: 28, name: "F64", block: 1, bytes: 8 },
    GgmlType { id: 29, name: "IQ1_M", block: 256, bytes: 56 },
    GgmlType { id: 34, name: "TQ1_0", block: 256, bytes: 54 },
    GgmlType { id: 35, name: "TQ2_0", block: 256, bytes: 66 },
    GgmlType { id: 39, name: "MXFP4", block: 32, bytes: 17 },
];

/// The type with ggml id `id`: rml's table first, then [`OTHER_GGML_TYPES`].
fn ggml_type(id: u32) -> Option<GgmlType> {
    if let Some(dt) = crate::quant::from_ggml_id(id) {
        let t = crate::quant::info(dt);
        return Some(GgmlType { id, name: t.name, block: t.block_elems, bytes: t.block_bytes });
    }
    OTHER_GGML_TYPES.iter().find(|t| t.id == id).copied()
}

/// The rml dtype of a file type: a weight type of [`crate::quant::TYPES`], or unsupported.
fn file_dtype(t: &GgmlType) -> FileDType {
    match crate::quant::from_ggml_id(t.id) {
        Some(dt) if crate::quant::info(dt).matmul_f32.is_some() => FileDType::Supported(dt),
        _ => FileDType::Unsupported(t.name),
    }
}

/// A parsed, validated GGUF file borrowing its bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    file: &'a [u8],
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: Vec<(&'a str, MetaValue<'a>)>,
    tensors: Vec<TensorInfo>,
    ggml_type_ids: Vec<u32>,
    index: HashMap<String, usize>,
}

impl<'a> Gguf<'a> {
    /// Parses and validates a whole GGUF file.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for a malformed or truncated file: bad magic, counts or
    /// lengths larger than the bytes left, invalid UTF-8, a key or tensor name given twice,
    /// an unknown value or tensor type, a bad `general.alignment`, more than [`MAX_DIMS`]
    /// dimensions, a size overflow, a misaligned offset, or tensor data outside the file or
    /// overlapping another tensor (messages name the key or tensor);
    /// [`crate::Code::Unimplemented`] for a version other than 2 or 3.
    pub fn parse(file: &'a [u8]) -> Result<Self> {
        let mut r = Reader { buf: file, pos: 0 };
        let magic = r.array::<4>(&"magic")?;
        if magic != MAGIC {
            return Err(Error::data_loss(format_args!(
                "GGUF: bad magic {magic:02x?}, expected \"GGUF\""
            )));
        }
        let version = r.u32(&"version")?;
        if version != 2 && version != 3 {
            return Err(Error::unimplemented(format_args!(
                "GGUF: version {version} is not supported (2 and 3 are)"
            )));
        }
        // The smallest tensor info: empty name (8) + n_dims (4) + type (4) + offset (8).
        let n_tensors_raw = r.u64(&"tensor count")?;
        let n_kv = r.count(13, &"metadata key/value count")?;
        let n_tensors = usize::try_from(n_tensors_raw)
            .ok()
            .filter(|n| n.checked_mul(24).is_some_and(|b| b <= r.left()))
            .ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF: tensor count {n_tensors_raw} is larger than the {} bytes left in the \
                     file allow",
                    r.left()
                ))
            })?;

        // Counts are only upper bounds checked against the bytes left: nothing is reserved from
        // them; the lists grow with the entries actually read.
        let mut metadata: Vec<(&'a str, MetaValue<'a>)> = Vec::new();
        let mut keys: HashMap<&'a str, ()> = HashMap::new();
        for i in 0..n_kv {
            let key = r.string(&format_args!("metadata key #{i}"))?;
            if keys.insert(key, ()).is_some() {
                return Err(Error::data_loss(format_args!(
                    "GGUF: metadata key {key:?} is given twice"
                )));
            }
            let what = format_args!("metadata {key:?}");
            let raw = r.u32(&what)?;
            let t = MetaType::from_u32(raw).ok_or_else(|| {
                Error::data_loss(format_args!("GGUF: metadata {key:?}: unknown value type {raw}"))
            })?;
            let v = r.value(t, &format_args!("metadata {key:?}"), 0)?;
            metadata.push((key, v));
        }

        let alignment = match metadata.iter().find(|(k, _)| *k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, MetaValue::U32(a))) if a.is_power_of_two() && *a <= 1 << 30 => *a as usize,
            Some((_, v)) => {
                return Err(Error::data_loss(format_args!(
                    "GGUF: general.alignment is {v} ({}), expected a u32 power of two",
                    v.meta_type().name()
                )))
            }
        };

        let mut tensors = Vec::new();
        let mut ggml_type_ids = Vec::new();
        let mut index = HashMap::new();
        let mut rel_offsets = Vec::new();
        for i in 0..n_tensors {
            let name = r.string(&format_args!("tensor #{i} name"))?;
            let what = format_args!("tensor {name:?}");
            let n_dims = r.u32(&what)? as usize;
            if n_dims > MAX_DIMS {
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: {n_dims} dimensions, at most {MAX_DIMS} allowed"
                )));
            }
            let mut ne = [0u64; MAX_DIMS];
            for d in ne.iter_mut().take(n_dims) {
                *d = r.u64(&what)?;
            }
            let type_id = r.u32(&what)?;
            let offset = r.u64(&what)?;
            let t = ggml_type(type_id).ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: unknown tensor type {type_id}"
                ))
            })?;
            let ne = &ne[..n_dims];
            let mut dims = [0usize; MAX_DIMS];
            let mut numel: Option<usize> = Some(1);
            // ne[0] is innermost: it becomes the last dimension.
            for (k, &src) in ne.iter().enumerate() {
                let v = usize::try_from(src).ok().filter(|&v| v <= i64::MAX as usize);
                dims[n_dims - 1 - k] = v.unwrap_or(usize::MAX);
                numel = numel.and_then(|n| v.and_then(|v| n.checked_mul(v)));
            }
            let dims = &dims[..n_dims];
            let numel = numel.ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: ne {ne:?} element count overflows"
                ))
            })?;
            let row = ne.first().copied().unwrap_or(1) as usize;
            if t.block > 1 && row % t.block != 0 {
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: {} rows of {row} elements are not a multiple of its \
                     block size {}",
                    t.name, t.block
                )));
            }
            let bytes = (numel / t.block).checked_mul(t.bytes).ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: ne {ne:?} of {} overflows in bytes",
                    t.name
                ))
            })?;
            if offset % alignment as u64 != 0 {
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {name:?}: offset {offset} is not a multiple of the alignment \
                     {alignment}"
                )));
            }
            if index.insert(String::from(name), i).is_some() {
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {name:?} is listed twice"
                )));
            }
            // `dims` holds at most MAX_DIMS entries whose product fits usize.
            let shape = Shape::new(dims)?;
            tensors.push(TensorInfo {
                name: String::from(name),
                dtype: file_dtype(&t),
                shape,
                offset: 0,
                bytes,
            });
            ggml_type_ids.push(type_id);
            rel_offsets.push(offset);
        }

        // The data section starts at the next multiple of the alignment.
        let data_start = r.pos.div_ceil(alignment).saturating_mul(alignment);
        let data_len = file.len().saturating_sub(data_start);
        if !tensors.is_empty() && data_start > file.len() {
            return Err(Error::data_loss(format_args!(
                "GGUF: data section would start at {data_start}, past the end of the file ({} \
                 bytes)",
                file.len()
            )));
        }
        for (t, &rel) in tensors.iter_mut().zip(&rel_offsets) {
            let end = rel.checked_add(t.bytes as u64);
            if end.is_none_or(|e| e > data_len as u64) {
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {:?}: data [{rel}, {rel} + {}) runs past the end of the data \
                     section ({data_len} bytes)",
                    t.name, t.bytes
                )));
            }
            t.offset = data_start + rel as usize;
        }
        // Overlap: empty tensors hold no bytes and overlap nothing, so they are left out (kept
        // in, one between a tensor and another inside it would hide the overlap); sorted by
        // start, each non-empty tensor must begin at or after the end of the one before.
        let mut by_offset: Vec<usize> =
            (0..tensors.len()).filter(|&i| tensors[i].bytes > 0).collect();
        by_offset.sort_by_key(|&i| tensors[i].offset);
        for w in by_offset.windows(2) {
            let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
            if a.offset + a.bytes > b.offset {
                let rel = |t: &TensorInfo| (t.offset - data_start, t.offset - data_start + t.bytes);
                let ((a0, a1), (b0, b1)) = (rel(a), rel(b));
                return Err(Error::data_loss(format_args!(
                    "GGUF: tensor {:?} (data [{b0}, {b1})) overlaps tensor {:?} (data [{a0}, {a1}))",
                    b.name, a.name
                )));
            }
        }
        Ok(Gguf { file, version, alignment, data_start, metadata, tensors, ggml_type_ids, index })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// All metadata key/values in file order.
    pub fn metadata(&self) -> &[(&'a str, MetaValue<'a>)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<MetaValue<'a>> {
        self.metadata.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn typed<T>(
        &self,
        key: &str,
        want: &str,
        f: impl Fn(&MetaValue<'a>) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(&v).map(Some).ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF metadata {key:?}: expected {want}, found {} {v}",
                    v.meta_type().name()
                ))
            }),
        }
    }

    /// `key` as a non-negative integer fitting `usize` (any integer type).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] naming the key if the value is of another type or out of
    /// range.
    pub fn get_usize(&self, key: &str) -> Result<Option<usize>> {
        self.typed(key, "a non-negative integer", |v| {
            v.as_u64().and_then(|x| usize::try_from(x).ok())
        })
    }

    /// `key` as a token id (a non-negative integer fitting u32).
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_usize`].
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "a u32", |v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
    }

    /// `key` as a float (`f32` or `f64`).
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_usize`].
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a float", |v| v.as_f64())
    }

    /// `key` as a string.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_usize`].
    pub fn get_str(&self, key: &str) -> Result<Option<&'a str>> {
        self.typed(key, "a string", |v| v.as_str())
    }

    /// `key` as a boolean.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_usize`].
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", |v| v.as_bool())
    }

    /// `key` as an array.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_usize`].
    pub fn get_array(&self, key: &str) -> Result<Option<MetaArray<'a>>> {
        self.typed(key, "an array", |v| v.as_array())
    }

    fn require<T>(&self, v: Result<Option<T>>, key: &str) -> Result<T> {
        v?.ok_or_else(|| Error::data_loss(format_args!("GGUF: missing metadata {key:?}")))
    }

    /// `general.architecture` (`"llama"` for the models rml runs).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if absent or not a string.
    pub fn architecture(&self) -> Result<&'a str> {
        self.require(self.get_str("general.architecture"), "general.architecture")
    }

    /// The tensors' directory entries in file order (shapes outermost first).
    pub fn infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry for `name`, if present.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The ggml type id of tensor `name` as stored (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0,
    /// 30 BF16, ...).
    pub fn ggml_type_id(&self, name: &str) -> Option<u32> {
        self.index.get(name).map(|&i| self.ggml_type_ids[i])
    }

    /// The raw bytes of tensor `name`, whatever its type.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] if absent.
    pub fn raw_bytes(&self, name: &str) -> Result<&'a [u8]> {
        let info = self
            .info(name)
            .ok_or_else(|| Error::not_found(format_args!("tensor {name:?} is not in the file")))?;
        Ok(&self.file[info.offset..info.offset + info.bytes])
    }

    // ------------------------------------------------------------- tokenizer.ggml.*

    /// `tokenizer.ggml.model` (`"gpt2"` for byte-level BPE, `"llama"` for SentencePiece).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if present but not a string.
    pub fn tokenizer_model(&self) -> Result<Option<&'a str>> {
        self.get_str("tokenizer.ggml.model")
    }

    /// `tokenizer.ggml.pre`, the pre-tokenizer name (`"smollm"`, `"llama-bpe"`, ...).
    ///
    /// # Errors
    ///
    /// As [`Gguf::tokenizer_model`].
    pub fn tokenizer_pre(&self) -> Result<Option<&'a str>> {
        self.get_str("tokenizer.ggml.pre")
    }

    fn string_array(&self, key: &str) -> Result<Vec<&'a str>> {
        let a = self.require(self.get_array(key), key)?;
        a.typed(key, &[MetaType::String], |v| v.as_str())
    }

    /// `tokenizer.ggml.tokens`: the vocabulary, indexed by token id (borrowed, not copied).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if absent or not an array of strings.
    pub fn tokens(&self) -> Result<Vec<&'a str>> {
        self.string_array("tokenizer.ggml.tokens")
    }

    /// `tokenizer.ggml.merges`: BPE merges as `"left right"` strings, highest priority first.
    ///
    /// # Errors
    ///
    /// As [`Gguf::tokens`].
    pub fn merges(&self) -> Result<Vec<&'a str>> {
        self.string_array("tokenizer.ggml.merges")
    }

    /// `tokenizer.ggml.token_type`: per token, 1 normal, 2 unknown, 3 control,
    /// 4 user-defined, 5 unused, 6 byte.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if absent or not an array of integers fitting i32.
    pub fn token_types(&self) -> Result<Vec<i32>> {
        let key = "tokenizer.ggml.token_type";
        let a = self.require(self.get_array(key), key)?;
        a.typed(key, &[MetaType::I32, MetaType::U32, MetaType::I8, MetaType::U8], |v| {
            v.as_i64().and_then(|x| i32::try_from(x).ok())
        })
    }

    /// `tokenizer.ggml.scores` (SentencePiece vocabularies), if present.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if present but not an array of f32.
    pub fn scores(&self) -> Result<Option<Vec<f32>>> {
        let key = "tokenizer.ggml.scores";
        match self.get_array(key)? {
            None => Ok(None),
            Some(a) => a
                .typed(key, &[MetaType::F32], |v| match v {
                    MetaValue::F32(x) => Some(x),
                    _ => None,
                })
                .map(Some),
        }
    }

    /// `tokenizer.ggml.bos_token_id`.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_u32`].
    pub fn bos_token_id(&self) -> Result<Option<u32>> {
        self.get_u32("tokenizer.ggml.bos_token_id")
    }

    /// `tokenizer.ggml.eos_token_id`.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_u32`].
    pub fn eos_token_id(&self) -> Result<Option<u32>> {
        self.get_u32("tokenizer.ggml.eos_token_id")
    }

    /// `tokenizer.ggml.add_bos_token`: whether to prepend BOS when encoding.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_bool`].
    pub fn add_bos_token(&self) -> Result<Option<bool>> {
        self.get_bool("tokenizer.ggml.add_bos_token")
    }

    /// `tokenizer.chat_template` (Jinja), if present.
    ///
    /// # Errors
    ///
    /// As [`Gguf::get_str`].
    pub fn chat_template(&self) -> Result<Option<&'a str>> {
        self.get_str("tokenizer.chat_template")
    }
}

impl<'a> TensorSource<'a> for Gguf<'a> {
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        super::view_of(&self.tensors, &self.index, self.file, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}
