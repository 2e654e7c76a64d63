//! GGUF: the real SmolLM2-135M-Instruct file (found or fetched as `rml` does) and
//! malformed files by category, each built by hand.

use rml::format::gguf::{Gguf, MetaType, MetaValue};
use rml::format::{FileDType, TensorSource};
use rml::model::config::parse_config;
use rml::model::config::RopeScaling;
use rml::{Code, DType};

// ------------------------------------------------------------------ a tiny GGUF writer

/// Builds GGUF bytes field by field (so tests can also write wrong ones).
struct Builder {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    alignment: usize,
}

fn gstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Builder {
    fn new() -> Self {
        Builder {
            version: 3,
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            data: vec![],
            alignment: 32,
        }
    }

    fn kv_raw(mut self, key: &str, ty: u32, value: &[u8]) -> Self {
        gstr(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    fn kv_u32(self, key: &str, v: u32) -> Self {
        self.kv_raw(key, 4, &v.to_le_bytes())
    }

    fn kv_f32(self, key: &str, v: f32) -> Self {
        self.kv_raw(key, 6, &v.to_le_bytes())
    }

    fn kv_str(self, key: &str, v: &str) -> Self {
        let mut b = vec![];
        gstr(&mut b, v);
        self.kv_raw(key, 8, &b)
    }

    fn kv_str_array(self, key: &str, items: &[&str]) -> Self {
        let mut b = 8u32.to_le_bytes().to_vec();
        b.extend_from_slice(&(items.len() as u64).to_le_bytes());
        for s in items {
            gstr(&mut b, s);
        }
        self.kv_raw(key, 9, &b)
    }

    /// A tensor info with `ne` innermost first; its data is appended (aligned) from `bytes`.
    fn tensor(mut self, name: &str, ne: &[u64], ty: u32, bytes: &[u8]) -> Self {
        while self.data.len() % self.alignment != 0 {
            self.data.push(0);
        }
        let off = self.data.len() as u64;
        self.data.extend_from_slice(bytes);
        self.tensor_info(name, ne, ty, off)
    }

    fn tensor_info(mut self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Self {
        gstr(&mut self.infos, name);
        self.infos.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ty.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    fn build(&self) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&self.version.to_le_bytes());
        f.extend_from_slice(&self.n_tensors.to_le_bytes());
        f.extend_from_slice(&self.n_kv.to_le_bytes());
        f.extend_from_slice(&self.kv);
        f.extend_from_slice(&self.infos);
        while f.len() % self.alignment != 0 {
            f.push(0);
        }
        f.extend_from_slice(&self.data);
        f
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn expect_err(bytes: &[u8], code: Code, needles: &[&str]) {
    let e = Gguf::parse(bytes).expect_err("malformed GGUF was accepted");
    assert_eq!(e.code(), code, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "message {:?} lacks {n:?}", e.message());
    }
}

// ------------------------------------------------------------------ valid hand-made files

#[test]
fn small_file_round_trip() {
    let w: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let f = Builder::new()
        .kv_str("general.architecture", "llama")
        .kv_u32("some.count", 7)
        .kv_f32("some.float", 0.5)
        .kv_str_array("tokenizer.ggml.tokens", &["a", "bc", ""])
        .tensor("w", &[3, 2], 0, &f32_bytes(&w))
        .tensor("v", &[4], 0, &f32_bytes(&[1.0; 4]))
        .build();
    let g = Gguf::parse(&f).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.data_start() % 32, 0);
    assert_eq!(g.get_usize("some.count").unwrap(), Some(7));
    assert_eq!(g.get_f64("some.float").unwrap(), Some(0.5));
    assert_eq!(g.tokens().unwrap(), ["a", "bc", ""]);
    let t = g.tensor("w").unwrap();
    // ne = [3, 2] (innermost first) is a 2 × 3 matrix.
    assert_eq!(t.shape.dims(), &[2, 3]);
    let mut out = [0f32; 6];
    t.dequantize_into(&mut out).unwrap();
    assert_eq!(out.to_vec(), w);
    // A view into the file, not a copy.
    assert!(f.as_ptr_range().contains(&t.data.as_ptr()));
    assert_eq!(g.tensor_names(), ["w", "v"]);
    let e = g.get_str("some.count").unwrap_err();
    assert!(e.message().contains("some.count") && e.message().contains("u32"), "{e}");
}

#[test]
fn every_metadata_type_including_nested_arrays() {
    let mut nested = 9u32.to_le_bytes().to_vec(); // array of arrays
    nested.extend_from_slice(&2u64.to_le_bytes());
    for n in [1u64, 2] {
        nested.extend_from_slice(&5u32.to_le_bytes()); // of i32
        nested.extend_from_slice(&n.to_le_bytes());
        for i in 0..n {
            nested.extend_from_slice(&(-(i as i32)).to_le_bytes());
        }
    }
    let f = Builder::new()
        .kv_raw("u8", 0, &[200])
        .kv_raw("i8", 1, &[0xFF])
        .kv_raw("u16", 2, &60000u16.to_le_bytes())
        .kv_raw("i16", 3, &(-300i16).to_le_bytes())
        .kv_raw("u32", 4, &4_000_000_000u32.to_le_bytes())
        .kv_raw("i32", 5, &(-5i32).to_le_bytes())
        .kv_raw("f32", 6, &1.5f32.to_le_bytes())
        .kv_raw("bool", 7, &[1])
        .kv_str("string", "héllo")
        .kv_raw("u64", 10, &u64::MAX.to_le_bytes())
        .kv_raw("i64", 11, &i64::MIN.to_le_bytes())
        .kv_raw("f64", 12, &(-2.25f64).to_le_bytes())
        .kv_raw("nested", 9, &nested)
        .build();
    let g = Gguf::parse(&f).unwrap();
    assert_eq!(g.get("u8"), Some(MetaValue::U8(200)));
    assert_eq!(g.get("i8"), Some(MetaValue::I8(-1)));
    assert_eq!(g.get("u16"), Some(MetaValue::U16(60000)));
    assert_eq!(g.get("i16"), Some(MetaValue::I16(-300)));
    assert_eq!(g.get("u32"), Some(MetaValue::U32(4_000_000_000)));
    assert_eq!(g.get("i32"), Some(MetaValue::I32(-5)));
    assert_eq!(g.get("f32"), Some(MetaValue::F32(1.5)));
    assert_eq!(g.get("bool"), Some(MetaValue::Bool(true)));
    assert_eq!(g.get("string"), Some(MetaValue::Str("héllo")));
    assert_eq!(g.get("u64"), Some(MetaValue::U64(u64::MAX)));
    assert_eq!(g.get("i64"), Some(MetaValue::I64(i64::MIN)));
    assert_eq!(g.get("f64"), Some(MetaValue::F64(-2.25)));
    let a = g.get_array("nested").unwrap().unwrap();
    assert_eq!((a.elem_type(), a.len()), (MetaType::Array, 2));
    let inner: Vec<Vec<i64>> = a
        .iter()
        .map(|v| v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect())
        .collect();
    assert_eq!(inner, [vec![0], vec![0, -1]]);
    assert_eq!(g.get("nested").unwrap().to_string(), "[array; 2] [i32; 1] 0, [i32; 2] 0, -1");
    assert_eq!(g.get_usize("i8").unwrap_err().code(), Code::DataLoss);
}

#[test]
fn custom_alignment_and_quantized_view_in_place() {
    // Two Q8_0 rows of 32 (34 bytes each), with a 64-byte alignment.
    let mut b = Builder::new();
    b.alignment = 64;
    let mut q = vec![];
    for row in 0..2u8 {
        q.extend_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        q.extend((0..32).map(|i| (i as i8 - 16 + row as i8) as u8));
    }
    let f = b.kv_u32("general.alignment", 64).tensor("q", &[32, 2], 8, &q).build();
    let g = Gguf::parse(&f).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_start() % 64, 0);
    let t = g.tensor("q").unwrap();
    assert_eq!((t.dtype, t.shape.dims()), (DType::Q8_0, &[2usize, 32][..]));
    assert_eq!(t.data, &q[..]);
    assert!(f.as_ptr_range().contains(&t.data.as_ptr()), "quantized data must not be copied");
    let mut out = [0f32; 64];
    t.dequantize_into(&mut out).unwrap();
    assert_eq!(out[0], -8.0);
    assert_eq!(out[32 + 31], 0.5 * 16.0);
}

#[test]
fn unsupported_type_named_at_use_not_parse() {
    // IQ4_XS: 256 elements in 136 bytes.
    let f = Builder::new().tensor("k", &[256], 23, &[0; 136]).build();
    let g = Gguf::parse(&f).unwrap();
    assert_eq!(g.infos()[0].dtype, FileDType::Unsupported("IQ4_XS"));
    assert_eq!(g.ggml_type_id("k"), Some(23));
    let e = g.tensor("k").unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"k\"") && e.message().contains("IQ4_XS"), "{e}");
    assert_eq!(g.raw_bytes("k").unwrap().len(), 136);
}

#[test]
fn every_weight_type_mixed_in_one_file_is_a_view_in_place() {
    // (ggml id, dtype, rows of k): two rows of every type rml computes, in one file.
    let types = [
        (0, DType::F32, 32),
        (1, DType::F16, 32),
        (30, DType::BF16, 32),
        (8, DType::Q8_0, 64),
        (2, DType::Q4_0, 64),
        (3, DType::Q4_1, 64),
        (6, DType::Q5_0, 64),
        (7, DType::Q5_1, 64),
        (20, DType::IQ4_NL, 64),
        (10, DType::Q2_K, 256),
        (11, DType::Q3_K, 256),
        (12, DType::Q4_K, 512),
        (13, DType::Q5_K, 256),
        (14, DType::Q6_K, 256),
    ];
    let mut b = Builder::new();
    let mut sizes = Vec::new();
    for (i, &(id, dt, k)) in types.iter().enumerate() {
        let bytes = 2 * dt.row_bytes(k).unwrap();
        // Zero bytes decode to finite values in every type (scales 0).
        b = b.tensor(&format!("t{i}"), &[k as u64, 2], id, &vec![0u8; bytes]);
        sizes.push(bytes);
    }
    let f = b.build();
    let g = Gguf::parse(&f).unwrap();
    for (i, &(id, dt, k)) in types.iter().enumerate() {
        let name = format!("t{i}");
        assert_eq!(g.ggml_type_id(&name), Some(id));
        let t = g.tensor(&name).unwrap();
        assert_eq!((t.dtype, t.shape.dims()), (dt, &[2usize, k][..]), "{name}");
        assert_eq!(t.data.len(), sizes[i], "{dt}");
        assert!(f.as_ptr_range().contains(&t.data.as_ptr()), "{dt} must not be copied");
        let mut out = vec![1f32; 2 * k];
        t.dequantize_into(&mut out).unwrap();
        assert!(out.iter().all(|&v| v == 0.0), "{dt}");
    }
}

#[test]
fn a_row_that_is_not_whole_super_blocks_is_named() {
    // Q4_K rows of 128 elements: half a super-block.
    let f = Builder::new().tensor_info("blk.0.ffn_up.weight", &[128, 2], 12, 0).build();
    expect_err(&f, Code::DataLoss, &["\"blk.0.ffn_up.weight\"", "Q4_K", "128", "block size 256"]);
}

// ------------------------------------------------------------------ malformed by category

#[test]
fn bad_magic() {
    let mut f = Builder::new().build();
    f[..4].copy_from_slice(b"GGML");
    expect_err(&f, Code::DataLoss, &["bad magic"]);
    expect_err(b"GG", Code::DataLoss, &["magic", "needs 4 bytes"]);
    expect_err(b"", Code::DataLoss, &["magic"]);
}

#[test]
fn unsupported_version() {
    for v in [0u32, 1, 4, u32::MAX] {
        let mut b = Builder::new();
        b.version = v;
        expect_err(&b.build(), Code::Unimplemented, &[&format!("version {v}")]);
    }
    let mut b = Builder::new();
    b.version = 2;
    assert!(Gguf::parse(&b.build()).is_ok());
}

#[test]
fn counts_larger_than_the_file() {
    let mut b = Builder::new();
    b.n_tensors = u64::MAX;
    expect_err(&b.build(), Code::DataLoss, &["tensor count 18446744073709551615"]);
    let mut b = Builder::new();
    b.n_tensors = 1 << 40;
    expect_err(&b.build(), Code::DataLoss, &["tensor count"]);
    let mut b = Builder::new().kv_u32("a", 1);
    b.n_kv = 1 << 50;
    expect_err(&b.build(), Code::DataLoss, &["metadata key/value count"]);
    // An array length no file could hold, with valid bytes around it.
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 62).to_le_bytes());
    expect_err(
        &Builder::new().kv_raw("big", 9, &arr).build(),
        Code::DataLoss,
        &["\"big\"", "array length"],
    );
    // An array of strings claiming more strings than 8-byte prefixes fit.
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&1000u64.to_le_bytes());
    expect_err(
        &Builder::new().kv_raw("toks", 9, &arr).build(),
        Code::DataLoss,
        &["\"toks\"", "count 1000"],
    );
}

#[test]
fn string_length_past_the_end() {
    // A key whose length runs past the end.
    let mut f = Builder::new().kv_u32("k", 1).build();
    f[24..32].copy_from_slice(&1_000_000u64.to_le_bytes());
    expect_err(&f, Code::DataLoss, &["metadata key #0", "string length"]);
    // A string value whose length runs past the end.
    let mut v = 50u64.to_le_bytes().to_vec();
    v.extend_from_slice(b"short");
    let f = Builder::new().kv_raw("name", 8, &v).build();
    let f = &f[..f.len() - (f.len() - 24 - 8 - 4 - 4 - 8 - 5)];
    expect_err(f, Code::DataLoss, &["\"name\""]);
    // A tensor name past the end.
    let mut b = Builder::new();
    b.infos.extend_from_slice(&u64::MAX.to_le_bytes());
    b.n_tensors = 1;
    b.infos.extend_from_slice(&[0; 16]);
    expect_err(&b.build(), Code::DataLoss, &["tensor #0 name"]);
}

#[test]
fn tensor_data_past_the_end() {
    let f = Builder::new().tensor_info("w", &[1024], 0, 0).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "past the end"]);
    // Offset near u64::MAX (aligned): must not wrap.
    let f = Builder::new()
        .tensor("a", &[8], 0, &[0; 32])
        .tensor_info("w", &[8], 0, u64::MAX - 31)
        .build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "past the end"]);
    // The file cut inside the data.
    let f = Builder::new().tensor("w", &[64], 0, &[0; 256]).build();
    expect_err(&f[..f.len() - 1], Code::DataLoss, &["\"w\"", "past the end"]);
}

#[test]
fn unknown_tensor_type() {
    let f = Builder::new().tensor("w", &[4], 4, &[0; 16]).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "unknown tensor type 4"]);
    let f = Builder::new().tensor("w", &[4], 1000, &[0; 16]).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "unknown tensor type 1000"]);
}

#[test]
fn unknown_metadata_type_and_bad_bool() {
    expect_err(
        &Builder::new().kv_raw("x", 13, &[0; 8]).build(),
        Code::DataLoss,
        &["\"x\"", "unknown value type 13"],
    );
    expect_err(&Builder::new().kv_raw("b", 7, &[2]).build(), Code::DataLoss, &["\"b\"", "bool"]);
}

#[test]
fn invalid_utf8_strings() {
    let mut v = 2u64.to_le_bytes().to_vec();
    v.extend_from_slice(&[0xC3, 0x28]);
    expect_err(&Builder::new().kv_raw("s", 8, &v).build(), Code::DataLoss, &["\"s\"", "UTF-8"]);
}

#[test]
fn duplicate_keys_and_tensor_names() {
    let f = Builder::new().kv_u32("a", 1).kv_u32("a", 2).build();
    expect_err(&f, Code::DataLoss, &["\"a\"", "twice"]);
    let f = Builder::new().tensor("w", &[8], 0, &[0; 32]).tensor("w", &[8], 0, &[0; 32]).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "twice"]);
}

#[test]
fn bad_shapes_and_offsets() {
    let f = Builder::new().tensor_info("w", &[1, 1, 1, 1, 1], 0, 0).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "5 dimensions"]);
    let f = Builder::new().tensor_info("w", &[1 << 32, 1 << 32, 4], 0, 0).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "overflows"]);
    let f = Builder::new().tensor("w", &[48], 3, &[0; 40]).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "block size 32"]);
    let f = Builder::new().tensor("a", &[8], 0, &[0; 64]).tensor_info("w", &[8], 0, 16).build();
    expect_err(&f, Code::DataLoss, &["\"w\"", "alignment 32"]);
    let f = Builder::new().tensor("a", &[32], 0, &[0; 128]).tensor_info("w", &[16], 0, 32).build();
    expect_err(&f, Code::DataLoss, &["overlaps"]);
    let f = Builder::new().kv_u32("general.alignment", 48).build();
    expect_err(&f, Code::DataLoss, &["general.alignment is 48"]);
    let f = Builder::new().kv_f32("general.alignment", 32.0).build();
    expect_err(&f, Code::DataLoss, &["general.alignment", "f32"]);
}

#[test]
fn an_empty_tensor_does_not_hide_an_overlap() {
    // a: [0, 256); z: empty at 64; b: [128, 192) lies inside a. Comparing sorted neighbours
    // only, z between a and b used to hide the overlap.
    let mut f = Builder::new()
        .tensor_info("a", &[64], 0, 0)
        .tensor_info("z", &[0], 0, 64)
        .tensor_info("b", &[16], 0, 128)
        .build();
    f.extend_from_slice(&[0; 256]);
    expect_err(
        &f,
        Code::DataLoss,
        &["\"b\" (data [128, 192))", "overlaps", "\"a\" (data [0, 256))"],
    );
    // Empty tensors anywhere (inside others, at the end) are fine on their own.
    let mut f = Builder::new()
        .tensor_info("a", &[64], 0, 0)
        .tensor_info("z", &[0, 4], 0, 64)
        .tensor_info("e", &[0], 2, 256)
        .build();
    f.extend_from_slice(&[0; 256]);
    assert_eq!(Gguf::parse(&f).unwrap().infos().len(), 3);
}

#[test]
fn deeply_nested_arrays_refused() {
    let mut v = vec![];
    for _ in 0..20 {
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    expect_err(
        &Builder::new().kv_raw("deep", 9, &v).build(),
        Code::DataLoss,
        &["\"deep\"", "nested"],
    );
}

#[test]
fn model_config_from_llama_metadata() {
    let f = Builder::new()
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.embedding_length", 64)
        .kv_u32("llama.feed_forward_length", 176)
        .kv_u32("llama.block_count", 2)
        .kv_u32("llama.attention.head_count", 4)
        .kv_u32("llama.attention.head_count_kv", 2)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .kv_u32("llama.context_length", 512)
        .kv_str("llama.rope.scaling.type", "linear")
        .kv_f32("llama.rope.scaling.factor", 2.0)
        .kv_str_array("tokenizer.ggml.tokens", &["a", "b", "c"])
        .tensor("output.weight", &[64, 3], 0, &[0; 768])
        .build();
    let c = rml::model::config::from_gguf(&Gguf::parse(&f).unwrap()).unwrap();
    assert_eq!((c.vocab_size, c.head_dim, c.num_key_value_heads), (3, 16, 2));
    assert_eq!(c.rope_theta, 10_000.0);
    assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 2.0 });
    assert_eq!(c.rms_norm_eps, 1e-5f32 as f64);
    assert!(!c.tie_word_embeddings);
    assert_eq!((c.bos_token_id, c.eos_token_ids.len()), (None, 0));

    let e = rml::model::config::from_gguf(
        &Gguf::parse(&Builder::new().kv_str("general.architecture", "gemma").build()).unwrap(),
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"gemma\""));
    let e = rml::model::config::from_gguf(
        &Gguf::parse(&Builder::new().kv_str("general.architecture", "llama").build()).unwrap(),
    )
    .unwrap_err();
    assert!(e.message().contains("missing metadata \"llama.embedding_length\""), "{e}");
}

#[test]
fn model_config_refuses_hostile_llama_metadata() {
    let base = || {
        Builder::new()
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.embedding_length", 64)
            .kv_u32("llama.feed_forward_length", 176)
            .kv_u32("llama.block_count", 2)
            .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
            .kv_u32("llama.context_length", 512)
            .kv_u32("llama.vocab_size", 3)
    };
    let config = |b: Builder| rml::model::config::from_gguf(&Gguf::parse(&b.build()).unwrap());
    assert_eq!(config(base().kv_u32("llama.attention.head_count", 4)).unwrap().head_dim, 16);
    for (b, code, needle) in [
        (base().kv_u32("llama.attention.head_count", 0), Code::InvalidArgument, "head_count 0"),
        (base().kv_u32("llama.attention.head_count", 5), Code::InvalidArgument, "head_count 5"),
        (
            base()
                .kv_u32("llama.attention.head_count", 4)
                .kv_u32("llama.attention.head_count_kv", 0),
            Code::InvalidArgument,
            "num_key_value_heads 0 does not divide num_attention_heads 4",
        ),
        (
            base()
                .kv_u32("llama.attention.head_count", 4)
                .kv_u32("llama.attention.head_count_kv", 3),
            Code::InvalidArgument,
            "num_key_value_heads 3",
        ),
        (
            base()
                .kv_u32("llama.attention.head_count", 4)
                .kv_u32("llama.attention.value_length", 8),
            Code::Unimplemented,
            "value_length 8",
        ),
        (
            base().kv_u32("llama.attention.head_count", 4).kv_u32("llama.rope.dimension_count", 8),
            Code::Unimplemented,
            "dimension_count 8",
        ),
        (
            base().kv_u32("llama.attention.head_count", 4).kv_f32("llama.rope.freq_base", f32::NAN),
            Code::InvalidArgument,
            "rope_theta NaN",
        ),
        (
            base()
                .kv_u32("llama.attention.head_count", 4)
                .kv_str("llama.rope.scaling.type", "linear")
                .kv_f32("llama.rope.scaling.factor", -1.0),
            Code::InvalidArgument,
            "factor -1",
        ),
        (
            base()
                .kv_u32("llama.attention.head_count", 4)
                .kv_str("llama.rope.scaling.type", "yarn"),
            Code::Unimplemented,
            "\"yarn\"",
        ),
        (
            base().kv_u32("llama.attention.head_count", 4).kv_raw(
                "tokenizer.ggml.eos_token_id",
                5,
                &(-1i32).to_le_bytes(),
            ),
            Code::DataLoss,
            "eos_token_id",
        ),
    ] {
        let e = config(b).unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        assert!(e.message().contains(needle), "{e} lacks {needle:?}");
    }
}

// ------------------------------------------------------------------ the real model

#[path = "common/smollm2.rs"]
mod smollm2_file;

/// The real model's bytes (found or fetched as `rml` does; a failure, never a skip, without it).
fn smollm2() -> Option<Vec<u8>> {
    let path = smollm2_file::smollm2_gguf();
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

#[test]
fn smollm2_tensors() {
    let Some(bytes) = smollm2() else { unreachable!("the finder fetches the model or panics") };
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    let infos = g.infos();
    assert_eq!(infos.len(), 272);
    let count = |d: DType| infos.iter().filter(|t| t.dtype == FileDType::Supported(d)).count();
    assert_eq!((count(DType::Q4_1), count(DType::Q8_0), count(DType::F32)), (210, 1, 61));
    let emb = g.tensor("token_embd.weight").unwrap();
    assert_eq!((emb.dtype, emb.shape.dims()), (DType::Q8_0, &[49152usize, 576][..]));
    let k = g.tensor("blk.0.attn_k.weight").unwrap();
    assert_eq!((k.dtype, k.shape.dims()), (DType::Q4_1, &[192usize, 576][..]));
    assert_eq!(k.data.len(), 192 * 576 / 32 * 20);
    assert!(bytes.as_ptr_range().contains(&k.data.as_ptr()), "no copy");
    assert_eq!(g.tensor("blk.29.ffn_down.weight").unwrap().shape.dims(), &[576, 1536]);
    assert_eq!(g.tensor("output_norm.weight").unwrap().shape.dims(), &[576]);
    assert!(g.info("output.weight").is_none(), "SmolLM2 ties its embeddings");
    // Every name maps to a Hugging Face name.
    use rml::model::arch::ModelFormat;
    for t in infos {
        let spec = &rml::model::arch::llama::SPEC;
        let mapped = spec.map_name(ModelFormat::Gguf, ModelFormat::Safetensors, &t.name);
        assert!(matches!(mapped, Some((_, Some(_)))), "{}", t.name);
    }
}

#[test]
fn smollm2_metadata_and_tokenizer() {
    let Some(bytes) = smollm2() else { unreachable!("the finder fetches the model or panics") };
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.metadata().len(), 33);
    for (k, v) in [
        ("llama.block_count", 30),
        ("llama.context_length", 8192),
        ("llama.embedding_length", 576),
        ("llama.feed_forward_length", 1536),
        ("llama.attention.head_count", 9),
        ("llama.attention.head_count_kv", 3),
        ("llama.vocab_size", 49152),
        ("llama.rope.dimension_count", 64),
        ("general.file_type", 3),
        ("tokenizer.ggml.unknown_token_id", 0),
        ("tokenizer.ggml.padding_token_id", 2),
    ] {
        assert_eq!(g.get_usize(k).unwrap(), Some(v), "{k}");
    }
    assert_eq!(g.get_f64("llama.rope.freq_base").unwrap(), Some(100_000.0));
    assert_eq!(
        g.get_f64("llama.attention.layer_norm_rms_epsilon").unwrap(),
        Some(9.999999747378752e-06)
    );
    assert_eq!(g.tokenizer_model().unwrap(), Some("gpt2"));
    assert_eq!(g.tokenizer_pre().unwrap(), Some("smollm"));
    assert_eq!(g.add_bos_token().unwrap(), Some(false));
    assert_eq!((g.bos_token_id().unwrap(), g.eos_token_id().unwrap()), (Some(1), Some(2)));
    let tokens = g.tokens().unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(&tokens[..3], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
    // The prompt ids of the reference decode to its text (GPT-2 byte-level: 'Ġ' is a space).
    let prompt = [6403, 1980, 253, 655, 28, 665, 436, 253, 1838];
    let text: String = prompt.iter().map(|&i| tokens[i]).collect::<String>().replace('Ġ', " ");
    assert_eq!(text, "Once upon a time, there was a little");
    let merges = g.merges().unwrap();
    assert_eq!(merges.len(), 48900);
    assert_eq!(&merges[..3], ["Ġ t", "Ġ a", "i n"]);
    let types = g.token_types().unwrap();
    assert_eq!((types.len(), &types[..3]), (49152, &[3, 3, 3][..]));
    assert!(g.scores().unwrap().is_none());
    assert!(g.chat_template().unwrap().unwrap().contains("<|im_start|>"));
}

#[test]
fn smollm2_config_matches_config_json() {
    let Some(bytes) = smollm2() else { unreachable!("the finder fetches the model or panics") };
    let g = Gguf::parse(&bytes).unwrap();
    let from_gguf = rml::model::config::from_gguf(&g).unwrap();
    let json = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/smollm2-135m/config.json"
    ))
    .unwrap();
    let mut from_json = parse_config(&json).unwrap();
    assert_eq!(from_gguf.dtype.as_deref(), Some("MOSTLY_Q4_1"));
    from_json.dtype = from_gguf.dtype.clone();
    assert_eq!(from_gguf, from_json);
}

#[test]
fn smollm2_embedding_rows_match_reference() {
    let Some(bytes) = smollm2() else { unreachable!("the finder fetches the model or panics") };
    let g = Gguf::parse(&bytes).unwrap();
    let emb = g.tensor("token_embd.weight").unwrap();
    let refs = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/smollm2-135m/reference.safetensors"
    ))
    .unwrap();
    let st = rml::format::safetensors::SafeTensors::parse(&refs).unwrap();
    let want = st.tensor("hidden.embed_out").unwrap().to_f32_tensor().unwrap();
    let want = want.as_f32().unwrap();
    let row_bytes = 576 / 32 * 34;
    for (p, &id) in [6403usize, 1980, 253, 655, 28, 665, 436, 253, 1838].iter().enumerate() {
        let row = rml::format::TensorView {
            dtype: DType::Q8_0,
            shape: rml::Shape::new(&[576]).unwrap(),
            data: &emb.data[id * row_bytes..(id + 1) * row_bytes],
        };
        let mut out = vec![0f32; 576];
        row.dequantize_into(&mut out).unwrap();
        assert_eq!(out, want[p * 576..(p + 1) * 576], "token {id}");
    }
}

/// Keys live under the file's architecture prefix; a family's extra keys are read, and a key
/// it needs but the file lacks is named; an unknown architecture lists the supported ones.
#[test]
fn model_config_per_architecture_prefix() {
    let gemma = || {
        Builder::new()
            .kv_str("general.architecture", "gemma3")
            .kv_u32("gemma3.embedding_length", 64)
            .kv_u32("gemma3.feed_forward_length", 128)
            .kv_u32("gemma3.block_count", 7)
            .kv_u32("gemma3.attention.head_count", 2)
            .kv_u32("gemma3.attention.head_count_kv", 1)
            .kv_u32("gemma3.attention.key_length", 32)
            .kv_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
            .kv_u32("gemma3.context_length", 512)
            .kv_u32("gemma3.vocab_size", 3)
    };
    let config = |b: Builder| rml::model::config::from_gguf(&Gguf::parse(&b.build()).unwrap());
    let e = config(gemma()).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    assert!(e.message().contains("\"gemma3.attention.sliding_window\""), "{e}");
    let c = config(gemma().kv_u32("gemma3.attention.sliding_window", 16)).unwrap();
    use rml::model::config::LayerKind::{Global as G, Sliding as S};
    assert_eq!(c.arch.name, "Gemma 3");
    assert_eq!(c.layer_types, [S, S, S, S, S, G, S]);
    assert_eq!((c.sliding_window, c.local_rope_theta), (Some(16), Some(10_000.0)));
    assert_eq!(c.query_pre_attn_scalar, Some(32.0));
    assert!(c.tie_word_embeddings, "no output.weight: tied");
    let c = config(
        gemma()
            .kv_u32("gemma3.attention.sliding_window", 16)
            .kv_f32("gemma3.rope.freq_base_swa", 5000.0),
    )
    .unwrap();
    assert_eq!(c.local_rope_theta, Some(5000.0));

    let e = config(Builder::new().kv_str("general.architecture", "phi3")).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(
        e.message().contains("\"phi3\"") && e.message().contains("llama, qwen2, qwen3, gemma3")
    );
    let qwen3 = Builder::new().kv_str("general.architecture", "qwen3");
    let e = config(qwen3).unwrap_err();
    assert!(e.message().contains("missing metadata \"qwen3.embedding_length\""), "{e}");
}
