//! Validated safetensors parsing on `&[u8]`.
//!
//! Layout (the format's own specification): an 8-byte little-endian header length `n`, `n`
//! bytes of UTF-8 JSON — an object mapping tensor names to
//! `{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}` plus an optional
//! `"__metadata__"` object of string → string — then the data section. Offsets are relative
//! to the start of the data section.
//!
//! The `safetensors` crate supplies the dtype vocabulary ([`::safetensors::Dtype`]: its names
//! and bit sizes). Its own `SafeTensors::deserialize` is not used for parsing because it
//! silently keeps the last of two tensors with the same name (a `HashMap`), and its errors do
//! not name the tensor; this module walks the header itself (streaming, in file order) and
//! checks, naming the tensor and the problem:
//!
//! - the header length: at least 2, at most [`MAX_HEADER_BYTES`], inside the file;
//! - the header is one JSON object; every key appears once (tensor names, `__metadata__`, and
//!   the keys inside each entry);
//! - `__metadata__` values are strings;
//! - each dtype is a safetensors dtype (unknown ones are named); types rml does not compute
//!   with (`F64`, `U8`, ...) are listed and refused only when the tensor is used;
//! - rank at most [`crate::tensor::MAX_RANK`]; shape product × dtype size without overflow;
//! - `begin <= end <= data length` and `end - begin` equal to the size the shape needs;
//! - sorted by offset, the tensors tile the data section exactly: no overlap, no hole, no
//!   trailing bytes.
//!
//! Zero-size tensors (a dimension of 0) and scalars (`"shape": []`) are valid. Nothing is
//! allocated beyond what the header's own bytes bound (names, metadata strings, and one
//! fixed-size record per tensor). Data is never cast here: [`crate::format::TensorView`]
//! converts misaligned data safely.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hashbrown::HashMap;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{FileDType, TensorInfo, TensorSource, TensorView};
use crate::error::{Error, Result};
use crate::tensor::{DType, Shape, MAX_RANK};

/// The largest header accepted, in bytes (the `safetensors` crate's own limit, 100 MB).
pub const MAX_HEADER_BYTES: usize = 100_000_000;

/// A parsed, validated safetensors file borrowing its bytes.
#[derive(Debug)]
pub struct SafeTensors<'a> {
    file: &'a [u8],
    data_start: usize,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    metadata: Vec<(String, String)>,
}

/// One tensor entry as read from the header, before validation.
struct RawEntry {
    name: String,
    dtype: Option<String>,
    dims: [u64; MAX_RANK],
    rank: usize,
    has_shape: bool,
    offsets: Option<[u64; 2]>,
}

/// What the header walk collects: validated entries (each checked as soon as it is read, so
/// a malformed entry stops the walk before more memory is spent) and the metadata.
#[derive(Default)]
struct Header {
    tensors: Vec<TensorInfo>,
    metadata: Option<Vec<(String, String)>>,
}

impl<'a> SafeTensors<'a> {
    /// Parses and validates a whole safetensors file.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for a malformed or truncated file (the message names the
    /// tensor or key and the problem); [`crate::Code::Unimplemented`] for an unknown dtype
    /// or a rank above [`MAX_RANK`]; [`crate::Code::ResourceExhausted`] for a header longer
    /// than [`MAX_HEADER_BYTES`].
    pub fn parse(file: &'a [u8]) -> Result<Self> {
        let Some(len_bytes) = file.get(..8) else {
            return Err(Error::data_loss(format_args!(
                "safetensors: file is {} bytes, shorter than the 8-byte header length",
                file.len()
            )));
        };
        let mut le = [0u8; 8];
        le.copy_from_slice(len_bytes);
        let n = u64::from_le_bytes(le);
        if n > MAX_HEADER_BYTES as u64 {
            return Err(Error::resource_exhausted(format_args!(
                "safetensors: header length {n} is above the limit of {MAX_HEADER_BYTES} bytes"
            )));
        }
        let n = n as usize;
        if n < 2 {
            return Err(Error::data_loss(format_args!(
                "safetensors: header length {n} is too small for a JSON object"
            )));
        }
        let Some(header) = file.get(8..8 + n) else {
            return Err(Error::data_loss(format_args!(
                "safetensors: header length {n} runs past the end of the file ({} bytes after \
                 the length prefix)",
                file.len() - 8
            )));
        };
        let data_start = 8 + n;
        let data_len = file.len() - data_start;
        let Header { mut tensors, metadata } = parse_header(header, data_start, data_len)?;
        // Tile check: sorted by (begin, end), each tensor starts where the previous ended.
        tensors.sort_by_key(|t| (t.offset, t.bytes));
        let mut index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(Error::data_loss(format_args!(
                    "safetensors: tensor {:?} appears twice in the header",
                    t.name
                )));
            }
        }
        let mut end = data_start;
        let mut prev: Option<&str> = None;
        for t in &tensors {
            if t.offset < end {
                return Err(Error::data_loss(format_args!(
                    "safetensors: tensor {:?} (data [{}, {})) overlaps tensor {:?} (ends at {})",
                    t.name,
                    t.offset - data_start,
                    t.offset - data_start + t.bytes,
                    prev.unwrap_or(""),
                    end - data_start
                )));
            }
            if t.offset > end {
                return Err(Error::data_loss(format_args!(
                    "safetensors: hole of {} unused bytes [{}, {}) before tensor {:?}",
                    t.offset - end,
                    end - data_start,
                    t.offset - data_start,
                    t.name
                )));
            }
            end = t.offset + t.bytes;
            prev = Some(&t.name);
        }
        if end != file.len() {
            return Err(Error::data_loss(format_args!(
                "safetensors: {} unused bytes [{}, {}) after the last tensor",
                file.len() - end,
                end - data_start,
                data_len
            )));
        }
        Ok(SafeTensors { file, data_start, tensors, index, metadata: metadata.unwrap_or_default() })
    }

    /// The tensors' directory entries, sorted by data offset (file order).
    pub fn infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry for `name`, if present.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of tensor `name`, whatever its dtype.
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

    /// The `__metadata__` entries (string → string) in header order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The value of metadata key `key`, if present.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Byte offset of the data section in the file (8 + header length).
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// `true` if the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

impl<'a> TensorSource<'a> for SafeTensors<'a> {
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        super::view_of(&self.tensors, &self.index, self.file, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}

/// Maps a safetensors dtype name to rml's type, the name of a valid type rml does not
/// support, and the type's size in bits.
fn map_dtype(tensor: &str, name: &str) -> Result<(FileDType, usize)> {
    use ::safetensors::Dtype as S;
    let st: S =
        serde::Deserialize::deserialize(de::value::StrDeserializer::<de::value::Error>::new(name))
            .map_err(|_| {
                Error::unimplemented(format_args!(
                    "safetensors: tensor {tensor:?}: unknown dtype {name:?}"
                ))
            })?;
    let dt = match st {
        S::F32 => FileDType::Supported(DType::F32),
        S::F16 => FileDType::Supported(DType::F16),
        S::BF16 => FileDType::Supported(DType::BF16),
        S::I8 => FileDType::Supported(DType::I8),
        S::I32 => FileDType::Supported(DType::I32),
        S::I64 => FileDType::Supported(DType::I64),
        // `Dtype` is non_exhaustive: name whatever else it knows by its own spelling.
        other => FileDType::Unsupported(static_dtype_name(other)),
    };
    Ok((dt, st.bitsize()))
}

/// The safetensors crate's names as `&'static str` (its `Display` writes them; this keeps
/// them without allocating per tensor).
fn static_dtype_name(d: ::safetensors::Dtype) -> &'static str {
    use ::safetensors::Dtype as S;
    match d {
        S::BOOL => "BOOL",
        S::F4 => "F4",
        S::F6_E2M3 => "F6_E2M3",
        S::F6_E3M2 => "F6_E3M2",
        S::U8 => "U8",
        S::I8 => "I8",
        S::F8_E5M2 => "F8_E5M2",
        S::F8_E4M3 => "F8_E4M3",
        S::F8_E8M0 => "F8_E8M0",
        S::F8_E4M3FNUZ => "F8_E4M3FNUZ",
        S::F8_E5M2FNUZ => "F8_E5M2FNUZ",
        S::I16 => "I16",
        S::U16 => "U16",
        S::F16 => "F16",
        S::BF16 => "BF16",
        S::I32 => "I32",
        S::U32 => "U32",
        S::F32 => "F32",
        S::C64 => "C64",
        S::F64 => "F64",
        S::I64 => "I64",
        S::U64 => "U64",
        _ => "(a safetensors dtype unknown to rml)",
    }
}

fn validate_entry(e: RawEntry, data_start: usize, data_len: usize) -> Result<TensorInfo> {
    let name = e.name;
    let Some(dtype_name) = e.dtype else {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: missing \"dtype\""
        )));
    };
    if !e.has_shape {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: missing \"shape\""
        )));
    }
    let Some([begin, end]) = e.offsets else {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: missing \"data_offsets\""
        )));
    };
    let (dtype, bits) = map_dtype(&name, &dtype_name)?;
    if e.rank > MAX_RANK {
        return Err(Error::unimplemented(format_args!(
            "safetensors: tensor {name:?}: rank {} is above the supported maximum {MAX_RANK}",
            e.rank
        )));
    }
    let mut dims = [0usize; MAX_RANK];
    let mut numel: Option<usize> = Some(1);
    for (d, &v) in dims.iter_mut().zip(&e.dims[..e.rank]) {
        let v = usize::try_from(v).ok();
        *d = v.unwrap_or(usize::MAX);
        numel = numel.and_then(|n| v.and_then(|v| n.checked_mul(v)));
    }
    let dims = &dims[..e.rank];
    let bytes = numel.and_then(|n| n.checked_mul(bits)).ok_or_else(|| {
        Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: shape {dims:?} of {} overflows the address space",
            dtype.name()
        ))
    })?;
    if bytes % 8 != 0 {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: shape {dims:?} of {} is not a whole number of bytes",
            dtype.name()
        )));
    }
    let bytes = bytes / 8;
    if begin > end {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: data_offsets [{begin}, {end}] are reversed"
        )));
    }
    if end > data_len as u64 {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: data_offsets [{begin}, {end}] run past the end of the \
             data section ({data_len} bytes)"
        )));
    }
    let (begin, end) = (begin as usize, end as usize);
    if end - begin != bytes {
        return Err(Error::data_loss(format_args!(
            "safetensors: tensor {name:?}: data_offsets [{begin}, {end}] hold {} bytes, shape \
             {dims:?} of {} needs {bytes}",
            end - begin,
            dtype.name()
        )));
    }
    // Checked above: the element count fits usize, so `Shape::new` only fails on rank.
    let shape = Shape::new(dims)?;
    Ok(TensorInfo { name, dtype, shape, offset: data_start + begin, bytes })
}

fn parse_header(header: &[u8], data_start: usize, data_len: usize) -> Result<Header> {
    let mut de = serde_json::Deserializer::from_slice(header);
    let mut failed = None;
    let visitor = HeaderVisitor { data_start, data_len, failed: &mut failed };
    let parsed = de.deserialize_map(visitor).and_then(|h| de.end().map(|()| h));
    match (parsed, failed) {
        (Ok(h), _) => Ok(h),
        // A validation error found inside the walk keeps its own code and message.
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(Error::data_loss(format_args!(
            "safetensors: header is not a valid JSON object: {e}"
        ))),
    }
}

fn custom<E: de::Error>(args: fmt::Arguments<'_>) -> E {
    E::custom(args)
}

struct HeaderVisitor<'f> {
    data_start: usize,
    data_len: usize,
    /// Where a validation error (with its own [`crate::Code`]) is left for `parse_header`.
    failed: &'f mut Option<Error>,
}

impl<'de> Visitor<'de> for HeaderVisitor<'_> {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut h = Header::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if h.metadata.is_some() {
                    return Err(custom(format_args!("duplicate key \"__metadata__\"")));
                }
                h.metadata = Some(map.next_value_seed(MetadataSeed)?);
            } else {
                let entry = match map.next_value_seed(EntrySeed { name: &key }) {
                    Ok(e) => e,
                    Err(err) => {
                        *self.failed = Some(Error::data_loss(format_args!(
                            "safetensors: tensor {key:?}: invalid entry: {err}"
                        )));
                        return Err(err);
                    }
                };
                match validate_entry(
                    RawEntry { name: key, ..entry },
                    self.data_start,
                    self.data_len,
                ) {
                    Ok(info) => h.tensors.push(info),
                    Err(e) => {
                        *self.failed = Some(e);
                        return Err(custom(format_args!("invalid tensor entry")));
                    }
                }
            }
        }
        Ok(h)
    }
}

struct MetadataSeed;

impl<'de> DeserializeSeed<'de> for MetadataSeed {
    type Value = Vec<(String, String)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        // `"__metadata__": null` means no metadata (the safetensors crate accepts it too).
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed {
    type Value = Vec<(String, String)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"__metadata__\" as an object of string values")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(StringValue { key: &key })?;
            out.push((key, value));
        }
        // Duplicate keys: sort a list of indices (no second copy of the strings).
        let mut order: Vec<usize> = (0..out.len()).collect();
        order.sort_by(|&a, &b| out[a].0.cmp(&out[b].0));
        for w in order.windows(2) {
            if out[w[0]].0 == out[w[1]].0 {
                return Err(custom(format_args!(
                    "duplicate key {:?} in \"__metadata__\"",
                    out[w[0]].0
                )));
            }
        }
        Ok(out)
    }
}

/// Accepts only a JSON string; anything else is an error naming the metadata key.
struct StringValue<'k> {
    key: &'k str,
}

impl<'de> DeserializeSeed<'de> for StringValue<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StringValue<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string for \"__metadata__\" key {:?}", self.key)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(String::from(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

struct EntrySeed<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = RawEntry;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawEntry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = RawEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object {{dtype, shape, data_offsets}} for tensor {:?}", self.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntry, A::Error> {
        let mut e = RawEntry {
            name: String::new(),
            dtype: None,
            dims: [0; MAX_RANK],
            rank: 0,
            has_shape: false,
            offsets: None,
        };
        let name = self.name;
        let dup = |field: &str| -> A::Error {
            custom(format_args!("tensor {name:?}: duplicate key {field:?}"))
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "dtype" => {
                    if e.dtype.is_some() {
                        return Err(dup("dtype"));
                    }
                    e.dtype = Some(map.next_value::<String>()?);
                }
                "shape" => {
                    if e.has_shape {
                        return Err(dup("shape"));
                    }
                    let (dims, rank) = map.next_value_seed(ShapeSeed { name })?;
                    e.dims = dims;
                    e.rank = rank;
                    e.has_shape = true;
                }
                "data_offsets" => {
                    if e.offsets.is_some() {
                        return Err(dup("data_offsets"));
                    }
                    e.offsets = Some(map.next_value_seed(OffsetsSeed { name })?);
                }
                // Unknown keys are ignored, as the safetensors crate does (and, like it, with
                // serde_json's nesting limit: `IgnoredAny` would skip any depth).
                _ => {
                    map.next_value_seed(Skip)?;
                }
            }
        }
        Ok(e)
    }
}

/// Skips one JSON value of any shape through `deserialize_any`, so that the deserializer's
/// recursion limit applies to it; allocates nothing beyond what the deserializer itself does.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

/// A shape array read into a fixed buffer: ranks above [`MAX_RANK`] are counted, not stored.
struct ShapeSeed<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for ShapeSeed<'_> {
    type Value = ([u64; MAX_RANK], usize);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed<'_> {
    type Value = ([u64; MAX_RANK], usize);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array of non-negative integers as the shape of tensor {:?}", self.name)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut dims = [0u64; MAX_RANK];
        let mut rank = 0usize;
        while let Some(d) = seq.next_element::<u64>()? {
            if let Some(slot) = dims.get_mut(rank) {
                *slot = d;
            }
            rank = rank.saturating_add(1);
        }
        Ok((dims, rank))
    }
}

struct OffsetsSeed<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for OffsetsSeed<'_> {
    type Value = [u64; 2];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed<'_> {
    type Value = [u64; 2];

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "two non-negative integers [begin, end] as data_offsets of tensor {:?}",
            self.name
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = [0u64; 2];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = seq
                .next_element::<u64>()?
                .ok_or_else(|| <A::Error as de::Error>::invalid_length(i, &self))?;
        }
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(<A::Error as de::Error>::invalid_length(3, &self));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    /// A file from a header string and a data section.
    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn two_tensors_in_file_order() {
        let h = r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]},"__metadata__":{"format":"pt"}}"#;
        let mut data = vec![1u8, 2, 3, 4];
        data.extend_from_slice(&1.5f32.to_le_bytes());
        data.extend_from_slice(&(-2.0f32).to_le_bytes());
        let f = file(h, &data);
        let st = SafeTensors::parse(&f).unwrap();
        assert_eq!(st.tensor_names(), ["a", "b"]);
        assert_eq!(st.metadata_value("format"), Some("pt"));
        let b = st.tensor("b").unwrap();
        assert_eq!(b.dtype, DType::F32);
        assert_eq!(b.shape.dims(), &[2]);
        let mut out = [0f32; 2];
        b.dequantize_into(&mut out).unwrap();
        assert_eq!(out, [1.5, -2.0]);
        assert_eq!(st.tensor("zz").unwrap_err().code(), crate::Code::NotFound);
        let msg = format!("{}", st.tensor("zz").unwrap_err());
        assert!(msg.contains("\"zz\""), "{msg}");
    }

    #[test]
    fn unsupported_but_valid_dtype_listed_then_refused_at_use() {
        let f = file(r#"{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#, &[0; 8]);
        let st = SafeTensors::parse(&f).unwrap();
        assert_eq!(st.infos()[0].dtype, FileDType::Unsupported("F64"));
        let e = st.tensor("x").unwrap_err();
        assert_eq!(e.code(), crate::Code::Unimplemented);
        assert!(e.message().contains("\"x\"") && e.message().contains("F64"), "{e}");
        assert_eq!(st.raw_bytes("x").unwrap().len(), 8);
    }
}
