//! Writing model containers: the GGUF header and the safetensors header, as bytes (no_std +
//! alloc). Only the containers: what goes into the tensors (dtypes, quantization, names) is
//! the caller's. A file is `header` followed by each tensor's bytes at the offsets the header
//! records, with zero padding between them ([`GgufWriter::padding_after`]); the writer never
//! holds tensor data, so a converter can stream one tensor at a time.
//!
//! GGUF (version 3, little-endian; the layout the reader in [`super::gguf`] documents):
//! `"GGUF"`, `u32 3`, `u64 tensor_count`, `u64 kv_count`, the key/values, the tensor infos
//! (`ne[]` innermost first), zero padding to `general.alignment` (default 32), then the data
//! section, each tensor starting at a multiple of the alignment.
//!
//! safetensors: `u64` header length, a JSON header (`__metadata__` first with its keys sorted,
//! then the tensors in the order given, each `{"dtype", "shape", "data_offsets"}`), padded
//! with spaces to a multiple of 8 bytes, then the tensors back to back.
//!
//! Both are deterministic: the same inputs give the same bytes.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::gguf::{MetaType, MetaValue, DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::error::{Error, Result};

/// An owned GGUF metadata value (see [`MetaValue`] for the borrowed one the reader returns).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
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
    /// A UTF-8 string.
    Str(String),
    /// An array of one element type (every element must have that type).
    Array(MetaType, Vec<Value>),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl Value {
    /// Copies a value the reader returned (arrays element by element).
    pub fn from_meta(v: &MetaValue<'_>) -> Value {
        match *v {
            MetaValue::U8(x) => Value::U8(x),
            MetaValue::I8(x) => Value::I8(x),
            MetaValue::U16(x) => Value::U16(x),
            MetaValue::I16(x) => Value::I16(x),
            MetaValue::U32(x) => Value::U32(x),
            MetaValue::I32(x) => Value::I32(x),
            MetaValue::F32(x) => Value::F32(x),
            MetaValue::Bool(x) => Value::Bool(x),
            MetaValue::Str(s) => Value::Str(String::from(s)),
            MetaValue::Array(a) => {
                Value::Array(a.elem_type(), a.iter().map(|e| Value::from_meta(&e)).collect())
            }
            MetaValue::U64(x) => Value::U64(x),
            MetaValue::I64(x) => Value::I64(x),
            MetaValue::F64(x) => Value::F64(x),
        }
    }

    /// The value's GGUF type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            Value::U8(_) => MetaType::U8,
            Value::I8(_) => MetaType::I8,
            Value::U16(_) => MetaType::U16,
            Value::I16(_) => MetaType::I16,
            Value::U32(_) => MetaType::U32,
            Value::I32(_) => MetaType::I32,
            Value::F32(_) => MetaType::F32,
            Value::Bool(_) => MetaType::Bool,
            Value::Str(_) => MetaType::String,
            Value::Array(..) => MetaType::Array,
            Value::U64(_) => MetaType::U64,
            Value::I64(_) => MetaType::I64,
            Value::F64(_) => MetaType::F64,
        }
    }

    fn encode(&self, key: &str, out: &mut Vec<u8>) -> Result<()> {
        match self {
            Value::U8(x) => out.push(*x),
            Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => out.push(u8::from(*x)),
            Value::Str(s) => put_str(out, s),
            Value::Array(elem, items) => {
                if *elem == MetaType::Array {
                    // Nested arrays need a per-element type the GGUF array header cannot give
                    // without inspecting elements; llama.cpp never writes them.
                    if items.iter().any(|v| v.meta_type() != MetaType::Array) {
                        return Err(mismatch(key, *elem));
                    }
                }
                out.extend_from_slice(&(*elem as u32).to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for v in items {
                    if v.meta_type() != *elem {
                        return Err(mismatch(key, *elem));
                    }
                    v.encode(key, out)?;
                }
            }
            Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        }
        Ok(())
    }
}

fn mismatch(key: &str, elem: MetaType) -> Error {
    Error::invalid_argument(format_args!(
        "GGUF writer: key {key:?}: an array of {} holds an element of another type",
        elem.name()
    ))
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// One tensor's entry in a GGUF file being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// The tensor's name.
    pub name: String,
    /// Its shape, outermost first (written reversed, as ggml's `ne[]`).
    pub shape: Vec<usize>,
    /// The ggml type id (`GGML_TYPE_*` in ggml's `ggml.h`: 0 F32, 1 F16, 8 Q8_0, ...).
    pub ggml_type: u32,
    /// Bytes of data (the caller's count for `shape` in that type).
    pub bytes: usize,
    /// Offset of its data from the start of the data section (set by [`GgufWriter::add_tensor`]).
    pub offset: usize,
}

/// Builds a GGUF header: metadata key/values and tensor entries, then [`GgufWriter::header`].
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    kvs: Vec<(String, Value)>,
    tensors: Vec<GgufTensor>,
    data_len: usize,
}

impl GgufWriter {
    /// An empty writer (alignment [`DEFAULT_ALIGNMENT`] unless `general.alignment` is set
    /// before the first tensor).
    pub fn new() -> Self {
        GgufWriter::default()
    }

    /// The alignment of the data section and of every tensor in it.
    pub fn alignment(&self) -> usize {
        match self.get("general.alignment") {
            Some(Value::U32(a)) if *a > 0 => *a as usize,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kvs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` (replacing an earlier value in place, else appending: keys keep the order
    /// they were first set in).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for `general.alignment` that is not a `u32` power of
    /// two, or set after a tensor was added (the offsets depend on it).
    pub fn set(&mut self, key: &str, value: Value) -> Result<()> {
        if key == "general.alignment" {
            let ok = matches!(value, Value::U32(a) if a.is_power_of_two());
            if !ok || !self.tensors.is_empty() {
                return Err(Error::invalid_argument(format_args!(
                    "GGUF writer: general.alignment must be a u32 power of two set before any \
                     tensor, got {value:?}"
                )));
            }
        }
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.kvs.push((String::from(key), value)),
        }
        Ok(())
    }

    /// Removes `key` if present.
    pub fn remove(&mut self, key: &str) {
        self.kvs.retain(|(k, _)| k != key);
    }

    /// Adds a tensor; its data goes at the next aligned offset of the data section.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a repeated name, no or more than [`MAX_DIMS`]
    /// dimensions, or sizes that overflow.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        ggml_type: u32,
        bytes: usize,
    ) -> Result<()> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::invalid_argument(format_args!(
                "GGUF writer: tensor {name:?} added twice"
            )));
        }
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(Error::invalid_argument(format_args!(
                "GGUF writer: tensor {name:?}: {} dimensions (1..={MAX_DIMS})",
                shape.len()
            )));
        }
        let offset = align_up(self.data_len, self.alignment())
            .ok_or_else(|| Error::invalid_argument("GGUF writer: data section overflows"))?;
        self.data_len = offset
            .checked_add(bytes)
            .ok_or_else(|| Error::invalid_argument("GGUF writer: data section overflows"))?;
        self.tensors.push(GgufTensor {
            name: String::from(name),
            shape: shape.to_vec(),
            ggml_type,
            bytes,
            offset,
        });
        Ok(())
    }

    /// The tensors in the order added, with their data offsets.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// Zero bytes to write after tensor `i`'s data: up to the next tensor's offset, or to the
    /// alignment after the last one (as llama.cpp pads the end of the file).
    ///
    /// # Panics
    ///
    /// If `i` is not a tensor index.
    pub fn padding_after(&self, i: usize) -> usize {
        let t = &self.tensors[i];
        let end = t.offset + t.bytes;
        let next = match self.tensors.get(i + 1) {
            Some(n) => n.offset,
            None => align_up(end, self.alignment()).unwrap_or(end),
        };
        next - end
    }

    /// The header: everything before the data section, padded to the alignment.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for an array whose elements are not all of its type.
    pub fn header(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(&super::gguf::MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&(v.meta_type() as u32).to_le_bytes());
            v.encode(k, &mut out)?;
        }
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.to_le_bytes());
            out.extend_from_slice(&(t.offset as u64).to_le_bytes());
        }
        let padded = align_up(out.len(), self.alignment()).unwrap_or(out.len());
        out.resize(padded, 0);
        Ok(out)
    }
}

fn align_up(n: usize, a: usize) -> Option<usize> {
    Some(n.checked_add(a - 1)? / a * a)
}

/// One tensor of a safetensors file being written: its name, dtype as safetensors spells it
/// (`"F32"`, `"BF16"`, `"U8"`, ...), shape (outermost first) and byte count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsEntry {
    /// The tensor's name.
    pub name: String,
    /// The dtype's name in the safetensors format.
    pub dtype: &'static str,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Bytes of data.
    pub bytes: usize,
}

/// The bytes before a safetensors file's data: the `u64` header length and the JSON header
/// for `tensors` (stored back to back in the order given) and `metadata` (written sorted by
/// key), padded with spaces to a multiple of 8.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] for a repeated tensor name or a tensor called
/// `__metadata__`.
pub fn safetensors_header(
    metadata: &[(String, String)],
    tensors: &[SafetensorsEntry],
) -> Result<Vec<u8>> {
    let mut obj = serde_json::Map::new();
    if !metadata.is_empty() {
        let sorted: BTreeMap<&str, &str> =
            metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut m = serde_json::Map::new();
        for (k, v) in sorted {
            m.insert(String::from(k), serde_json::Value::String(String::from(v)));
        }
        obj.insert(String::from("__metadata__"), serde_json::Value::Object(m));
    }
    let mut offset = 0usize;
    for t in tensors {
        if t.name == "__metadata__" || obj.contains_key(&t.name) {
            return Err(Error::invalid_argument(format_args!(
                "safetensors writer: tensor name {:?} repeated or reserved",
                t.name
            )));
        }
        let end = offset + t.bytes;
        let entry = serde_json::json!({
            "dtype": t.dtype,
            "shape": t.shape,
            "data_offsets": [offset, end],
        });
        obj.insert(t.name.clone(), entry);
        offset = end;
    }
    // serde_json's map is sorted by key, or in insertion order when some crate in the build
    // turns on its `preserve_order` feature: either way one fixed order for the same inputs
    // (the metadata was sorted above).
    let mut json = serde_json::to_vec(&serde_json::Value::Object(obj))
        .map_err(|e| Error::internal(format_args!("safetensors writer: {e}")))?;
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::Gguf;
    use crate::format::safetensors::SafeTensors;
    use crate::format::{FileDType, TensorSource};
    use crate::tensor::DType;
    use alloc::vec;

    #[test]
    fn gguf_round_trips_through_the_reader() {
        let mut w = GgufWriter::new();
        w.set("general.architecture", Value::Str("llama".into())).unwrap();
        w.set("x.u32", Value::U32(7)).unwrap();
        let words =
            Value::Array(MetaType::String, vec![Value::Str("a".into()), Value::Str("bc".into())]);
        w.set("x.words", words).unwrap();
        w.set("x.u32", Value::U32(8)).unwrap();
        w.add_tensor("t.f32", &[2, 3], 0, 24).unwrap();
        w.add_tensor("t.q8", &[1, 32], 8, 34).unwrap();
        let mut file = w.header().unwrap();
        assert_eq!(file.len() % 32, 0);
        for (i, t) in w.tensors().iter().enumerate() {
            assert_eq!(file.len() - w.header().unwrap().len(), t.offset);
            file.extend((0..t.bytes).map(|b| b as u8));
            file.resize(file.len() + w.padding_after(i), 0);
        }
        // The reader wants an aligned buffer for in-place views; parse from a copy at 64.
        let mut block = crate::mem::AlignedBlock::try_new(file.len()).unwrap();
        block.as_mut_slice().copy_from_slice(&file);
        let g = Gguf::parse(block.as_slice()).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), Some("llama"));
        assert_eq!(g.get_u32("x.u32").unwrap(), Some(8));
        let list: Vec<_> =
            g.get_array("x.words").unwrap().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(list, ["a", "bc"]);
        let t = g.tensor("t.f32").unwrap();
        assert_eq!((t.dtype, t.shape.dims()), (DType::F32, &[2usize, 3][..]));
        assert_eq!(t.data, &(0..24u8).collect::<Vec<_>>()[..]);
        assert_eq!(g.tensor("t.q8").unwrap().shape.dims(), &[1, 32]);
        assert!(w.add_tensor("t.q8", &[1], 0, 4).is_err());
        assert!(w.set("general.alignment", Value::U32(64)).is_err());
        let bad = Value::Array(MetaType::U8, vec![Value::U32(1)]);
        w.set("x.bad", bad).unwrap();
        assert!(w.header().is_err());
    }

    #[test]
    fn safetensors_header_is_deterministic_and_parses() {
        let t = |n: &str, b: usize| SafetensorsEntry {
            name: n.into(),
            dtype: "F32",
            shape: vec![b / 4],
            bytes: b,
        };
        let meta = |order: &[usize]| -> Vec<(String, String)> {
            let all = [("z", "1"), ("a", "2"), ("m", "3")];
            order.iter().map(|&i| (all[i].0.into(), all[i].1.into())).collect()
        };
        let tensors = [t("b", 8), t("a", 4)];
        let h1 = safetensors_header(&meta(&[0, 1, 2]), &tensors).unwrap();
        let h2 = safetensors_header(&meta(&[2, 1, 0]), &tensors).unwrap();
        assert_eq!(h1, h2);
        assert_eq!(h1.len() % 8, 0);
        let mut file = h1.clone();
        file.extend([0u8; 12]);
        let st = SafeTensors::parse(&file).unwrap();
        assert_eq!(st.metadata_value("a"), Some("2"));
        assert_eq!(st.info("a").unwrap().dtype, FileDType::Supported(DType::F32));
        assert!(safetensors_header(&[], &[t("x", 4), t("x", 4)]).is_err());
    }
}
