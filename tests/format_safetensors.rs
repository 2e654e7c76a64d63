//! safetensors: the real fixture files, and malformed files by category (each a hand-made
//! byte string). Every error must name the tensor (or key) and the problem, and parsing these
//! small files must never make an allocation larger than the input plus a small fixed
//! overhead. (A header packed with thousands of minimal entries costs a few times its size,
//! one fixed-size record per tensor: `format_adversarial` bounds that at 4x.)

#[path = "common/largest_alloc.rs"]
mod largest_alloc;

use largest_alloc::largest_allocation;

use rml::format::safetensors::SafeTensors;
use rml::format::{FileDType, TensorSource};
use rml::{Code, DType, Error};

/// Fixed overhead allowed above the input size: a few small tables (the tensor list starts at
/// 4 entries, the name index, serde_json's scratch buffer).
const SLACK: usize = 1024;

/// Parses `bytes`, asserting that no single allocation exceeded `bytes.len() + SLACK`.
fn parse(bytes: &[u8]) -> Result<usize, Error> {
    let (r, largest) = largest_allocation(|| SafeTensors::parse(bytes).map(|st| st.len()));
    assert!(
        largest <= bytes.len() + SLACK,
        "largest allocation {largest} for a {}-byte input",
        bytes.len()
    );
    r
}

/// A file from a header string and a data section.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

/// Asserts `r` failed with `code` and a message containing every one of `needles`.
fn expect_err(r: Result<usize, Error>, code: Code, needles: &[&str]) {
    let e = r.expect_err("malformed input was accepted");
    assert_eq!(e.code(), code, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "message {:?} lacks {n:?}", e.message());
    }
}

fn data_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

// ------------------------------------------------------------------ real files

#[test]
fn tiny_llama_models_in_three_dtypes() {
    for (dir, dtype, bytes) in
        [("f32", DType::F32, 4), ("bf16", DType::BF16, 2), ("f16", DType::F16, 2)]
    {
        let raw = std::fs::read(data_dir().join("tiny-llama").join(dir).join("model.safetensors"))
            .unwrap();
        let st = SafeTensors::parse(&raw).unwrap();
        assert_eq!(st.len(), 21, "{dir}");
        assert_eq!(st.metadata_value("format"), Some("pt"));
        let q = st.tensor("model.layers.1.self_attn.q_proj.weight").unwrap();
        assert_eq!(q.dtype, dtype);
        assert_eq!(q.shape.dims(), &[64, 64]);
        assert_eq!(q.data.len(), 64 * 64 * bytes);
        let k = st.tensor("model.layers.0.self_attn.k_proj.weight").unwrap();
        assert_eq!(k.shape.dims(), &[32, 64]);
        let gate = st.tensor("model.layers.0.mlp.gate_proj.weight").unwrap();
        assert_eq!(gate.shape.dims(), &[176, 64]);
        assert!(st.tensor("lm_head.weight").is_ok());
        // The final norm's first weights, as Python reads them.
        let mut norm = vec![0f32; 64];
        st.tensor("model.norm.weight").unwrap().dequantize_into(&mut norm).unwrap();
        let want: [f32; 4] = match dtype {
            DType::BF16 => [1.0, 1.2890625, 1.3203125, 0.99609375],
            _ => [1.0021032, 1.2927207, 1.3168142, 0.9971161],
        };
        for (g, w) in norm.iter().zip(want) {
            assert!((g - w).abs() < 1e-3, "{dir}: {g} vs {w}");
        }
        // The same directory as the safetensors crate reads it.
        let theirs = safetensors::SafeTensors::deserialize(&raw).unwrap();
        assert_eq!(theirs.len(), st.len());
        for info in st.infos() {
            let t = theirs.tensor(&info.name).unwrap();
            assert_eq!(t.shape(), info.shape.dims(), "{}", info.name);
            assert_eq!(t.data(), st.raw_bytes(&info.name).unwrap(), "{}", info.name);
        }
    }
}

#[test]
fn tiny_llama_reference_ids_and_logits() {
    let raw = std::fs::read(data_dir().join("tiny-llama/f32/reference.safetensors")).unwrap();
    let st = SafeTensors::parse(&raw).unwrap();
    assert_eq!(st.metadata_value("generator"), Some("make_tiny_llama.py"));
    let prompt = st.tensor("prompt").unwrap().to_tensor().unwrap();
    assert_eq!(
        prompt.as_i64().unwrap(),
        &[1, 17, 42, 99, 3, 250, 128, 7, 64, 200, 13, 77, 5, 31, 180, 222]
    );
    let generated = st.tensor("generated").unwrap().to_tensor().unwrap();
    assert_eq!(generated.as_i64().unwrap(), &[103, 134, 245, 181, 8, 149, 139, 99, 67]);
    let logits = st.tensor("prefill_logits").unwrap();
    assert_eq!(logits.shape.dims(), &[16, 256]);
    let t = logits.to_tensor().unwrap();
    let v = t.as_f32().unwrap();
    assert!((v[0] - 0.5248116).abs() < 1e-6 && (v[2] + 1.3141607).abs() < 1e-6);
}

#[test]
fn smollm2_reference() {
    let raw = std::fs::read(data_dir().join("smollm2-135m/reference.safetensors")).unwrap();
    let st = SafeTensors::parse(&raw).unwrap();
    assert_eq!(st.len(), 36);
    assert_eq!(st.metadata_value("prompt_text"), Some("Once upon a time, there was a little"));
    let p = st.tensor("prompt").unwrap().to_tensor().unwrap();
    assert_eq!(p.as_i64().unwrap(), &[6403, 1980, 253, 655, 28, 665, 436, 253, 1838]);
    assert_eq!(st.tensor("decode_logits").unwrap().shape.dims(), &[16, 49152]);
    assert_eq!(st.tensor("hidden.layer29_out").unwrap().shape.dims(), &[9, 576]);
}

// ------------------------------------------------------------------ header length

#[test]
fn header_length_huge() {
    let mut f = u64::MAX.to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    expect_err(parse(&f), Code::ResourceExhausted, &["header length", "limit"]);
    let mut f = (1u64 << 40).to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    expect_err(parse(&f), Code::ResourceExhausted, &["header length 1099511627776"]);
}

#[test]
fn header_length_zero() {
    expect_err(parse(&0u64.to_le_bytes()), Code::DataLoss, &["header length 0"]);
}

#[test]
fn header_length_past_end() {
    let mut f = 100u64.to_le_bytes().to_vec();
    f.extend_from_slice(b"{\"a\":1}");
    expect_err(parse(&f), Code::DataLoss, &["header length 100", "past the end"]);
}

#[test]
fn file_shorter_than_length_prefix() {
    expect_err(parse(&[1, 0, 0]), Code::DataLoss, &["3 bytes", "8-byte header length"]);
    expect_err(parse(&[]), Code::DataLoss, &["0 bytes"]);
}

#[test]
fn header_not_json() {
    expect_err(parse(&file("{not json}", &[])), Code::DataLoss, &["not a valid JSON object"]);
    expect_err(parse(&file("[1, 2]", &[])), Code::DataLoss, &["not a valid JSON object"]);
    expect_err(parse(&file("{} trailing", &[])), Code::DataLoss, &["not a valid JSON object"]);
    let mut bad_utf8 = file("{\"\u{e9}\":{}}", &[]);
    let at = bad_utf8.iter().position(|&b| b == 0xC3).unwrap();
    bad_utf8[at] = 0xFF;
    expect_err(parse(&bad_utf8), Code::DataLoss, &["not a valid JSON object"]);
}

#[test]
fn header_padded_with_spaces_accepted() {
    // Writers pad the header with spaces so the data section starts 8-byte aligned.
    let f = file(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}     "#, &[0; 4]);
    assert_eq!(parse(&f).unwrap(), 1);
}

#[test]
fn entry_not_an_object_or_missing_fields() {
    let f = file(r#"{"w": 5}"#, &[]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\""]);
    let f = file(r#"{"w": {"shape":[1],"data_offsets":[0,4]}}"#, &[0; 4]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "missing \"dtype\""]);
    let f = file(r#"{"w": {"dtype":"F32","data_offsets":[0,4]}}"#, &[0; 4]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "missing \"shape\""]);
    let f = file(r#"{"w": {"dtype":"F32","shape":[1]}}"#, &[0; 4]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "missing \"data_offsets\""]);
    let f = file(r#"{"w": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#, &[0; 4]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\""]);
    let f = file(r#"{"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}"#, &[0; 4]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\""]);
}

// ------------------------------------------------------------------ offsets

#[test]
fn offsets_reversed() {
    let f = file(r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#, &[0; 8]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "[8, 0]", "reversed"]);
}

#[test]
fn offsets_out_of_range() {
    let f = file(r#"{"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}}"#, &[0; 16]);
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "past the end", "16 bytes"]);
    let f = file(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}}"#,
        &[0; 16],
    );
    expect_err(parse(&f), Code::DataLoss, &["\"w\"", "past the end"]);
}

#[test]
fn offsets_overlapping() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    expect_err(parse(&file(h, &[0; 12])), Code::DataLoss, &["\"b\"", "overlaps", "\"a\""]);
}

#[test]
fn offsets_leaving_holes() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                "b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}"#;
    expect_err(parse(&file(h, &[0; 20])), Code::DataLoss, &["hole", "[8, 12)", "\"b\""]);
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    expect_err(parse(&file(h, &[0; 12])), Code::DataLoss, &["hole", "[0, 4)", "\"a\""]);
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    expect_err(parse(&file(h, &[0; 11])), Code::DataLoss, &["3 unused bytes", "after the last"]);
}

#[test]
fn offsets_disagree_with_shape() {
    let h = r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    expect_err(parse(&file(h, &[0; 8])), Code::DataLoss, &["\"w\"", "hold 8 bytes", "needs 12"]);
}

// ------------------------------------------------------------------ shapes and dtypes

#[test]
fn shape_product_overflowing() {
    let h = r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}}"#;
    expect_err(parse(&file(h, &[0; 8])), Code::DataLoss, &["\"w\"", "overflows"]);
    // The element count fits but the byte count does not.
    let h = r#"{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}"#;
    expect_err(parse(&file(h, &[0; 8])), Code::DataLoss, &["\"w\"", "overflows"]);
}

#[test]
fn rank_above_eight() {
    let h = r#"{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}"#;
    expect_err(parse(&file(h, &[0; 4])), Code::Unimplemented, &["\"w\"", "rank 9"]);
}

#[test]
fn unknown_dtype() {
    let h = r#"{"w":{"dtype":"Q7_Z","shape":[1],"data_offsets":[0,1]}}"#;
    expect_err(parse(&file(h, &[0])), Code::Unimplemented, &["\"w\"", "unknown dtype", "Q7_Z"]);
}

#[test]
fn known_but_unsupported_dtype_refused_at_use() {
    let h = r#"{"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}"#;
    let f = file(h, &[0; 4]);
    let st = SafeTensors::parse(&f).unwrap();
    assert_eq!(st.infos()[0].dtype, FileDType::Unsupported("U16"));
    let e = st.tensor("w").unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"w\"") && e.message().contains("U16"), "{e}");
}

// ------------------------------------------------------------------ names and metadata

#[test]
fn duplicate_names() {
    let h = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                "w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    expect_err(parse(&file(h, &[0; 8])), Code::DataLoss, &["\"w\"", "twice"]);
    let h = r#"{"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}}"#;
    expect_err(parse(&file(h, &[])), Code::DataLoss, &["duplicate", "__metadata__"]);
    let h = r#"{"__metadata__":{"a":"1","a":"2"}}"#;
    expect_err(parse(&file(h, &[])), Code::DataLoss, &["duplicate key \"a\""]);
    let h = r#"{"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}"#;
    expect_err(parse(&file(h, &[0; 4])), Code::DataLoss, &["\"w\"", "duplicate key \"dtype\""]);
}

#[test]
fn non_string_metadata() {
    let h = r#"{"__metadata__":{"format":"pt","epoch":3}}"#;
    expect_err(parse(&file(h, &[])), Code::DataLoss, &["\"epoch\"", "string"]);
    let h = r#"{"__metadata__":{"nested":{"a":"b"}}}"#;
    expect_err(parse(&file(h, &[])), Code::DataLoss, &["\"nested\"", "string"]);
    let h = r#"{"__metadata__":["a"]}"#;
    expect_err(parse(&file(h, &[])), Code::DataLoss, &["__metadata__"]);
    // `null` is no metadata, as the safetensors crate reads it.
    assert_eq!(parse(&file(r#"{"__metadata__":null}"#, &[])).unwrap(), 0);
}

// ------------------------------------------------------------------ valid edge cases

#[test]
fn zero_size_and_scalar_tensors_accepted() {
    let h = r#"{"empty":{"dtype":"F32","shape":[0,64],"data_offsets":[0,0]},
                "scalar":{"dtype":"F32","shape":[],"data_offsets":[0,4]},
                "empty2":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]}}"#;
    let f = file(h, &2.5f32.to_le_bytes());
    assert_eq!(parse(&f).unwrap(), 3);
    let st = SafeTensors::parse(&f).unwrap();
    let e = st.tensor("empty").unwrap();
    assert_eq!((e.shape.dims(), e.data.len()), (&[0usize, 64][..], 0));
    let s = st.tensor("scalar").unwrap();
    assert_eq!(s.shape.rank(), 0);
    let t = s.to_tensor().unwrap();
    assert_eq!(t.as_f32().unwrap(), &[2.5]);
    assert_eq!(st.tensor("empty2").unwrap().data.len(), 0);
    // An empty file (no tensors at all) is valid too.
    assert_eq!(parse(&file("{}", &[])).unwrap(), 0);
}

#[test]
fn misaligned_data_read_correctly() {
    // Header padding puts the data section at 1 mod 4: every f32 is misaligned.
    let mut h = String::from(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}"#);
    while (8 + h.len()) % 4 != 1 {
        h.push(' ');
    }
    let vals = [1.25f32, -3.5, 1e30];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    // Place the file at an aligned address so that data really sits at an odd one.
    let bytes = file(&h, &data);
    let block = rml::mem::AlignedBlock::try_from_slice(&bytes).unwrap();
    let st = SafeTensors::parse(block.as_slice()).unwrap();
    let v = st.tensor("a").unwrap();
    assert_eq!(v.data.as_ptr() as usize % 4, 1);
    let t = v.to_tensor().unwrap();
    assert_eq!(t.as_f32().unwrap(), &vals);
    assert!(matches!(t.storage(), rml::Storage::Owned(_)), "misaligned data must be copied");
    let mut out = [0f32; 3];
    v.dequantize_into(&mut out).unwrap();
    assert_eq!(out, vals);
    assert_eq!(v.to_f32_tensor().unwrap().as_f32().unwrap(), &vals);
}

#[test]
fn aligned_data_borrowed_not_copied() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let h = format!("{h:<64}");
    let bytes = file(&h, &[0; 8]);
    let block = rml::mem::AlignedBlock::try_from_slice(&bytes).unwrap();
    let st = SafeTensors::parse(block.as_slice()).unwrap();
    let t = st.tensor("a").unwrap().to_tensor().unwrap();
    assert!(matches!(t.storage(), rml::Storage::Borrowed(_)));
}

#[test]
fn empty_tensor_with_huge_dimensions_is_usable() {
    // Zero elements, whatever the other dimensions: zero bytes, usable as an empty tensor
    // (this used to parse, then fail at use with "4611686018427387904 elements overflow").
    let h = r#"{"w":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]},
               "v":{"dtype":"BF16","shape":[0,4611686018427387904],"data_offsets":[0,0]}}"#;
    let f = file(h, &[]);
    assert_eq!(parse(&f).unwrap(), 2);
    let st = SafeTensors::parse(&f).unwrap();
    for name in ["w", "v"] {
        let v = st.tensor(name).unwrap();
        assert_eq!(v.shape.storage_bytes(v.dtype).unwrap(), 0);
        assert_eq!(v.to_tensor().unwrap().as_bytes().len(), 0);
        v.dequantize_into(&mut []).unwrap();
    }
    assert!(st.tensor("w").unwrap().to_tensor().unwrap().as_f32().unwrap().is_empty());
}

#[test]
fn deep_nesting_in_an_ignored_key_is_refused_like_the_reference_does() {
    // serde_json's nesting limit (128) applies to unknown keys too, as in the safetensors
    // crate; deeper values used to be skipped, so rml accepted files the reference rejects.
    for depth in [200usize, 100_000] {
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let h = format!(r#"{{"w":{{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":{deep}}}}}"#);
        let f = file(&h, &[0; 4]);
        assert!(safetensors::SafeTensors::deserialize(&f).is_err());
        expect_err(parse(&f), Code::DataLoss, &["\"w\"", "recursion limit"]);
        for h in [format!(r#"{{"__metadata__":{{"k":{deep}}}}}"#), format!(r#"{{"w":{deep}}}"#)] {
            expect_err(parse(&file(&h, &[0; 4])), Code::DataLoss, &[]);
        }
    }
    // Shallow unknown values are still ignored.
    let h = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":{"a":[1,"b",null,{}]}}}"#;
    assert_eq!(parse(&file(h, &[0; 4])).unwrap(), 1);
}
