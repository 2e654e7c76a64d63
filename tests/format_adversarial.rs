//! Adversarial inputs for every parser: the real fixture files cut at every byte offset of
//! their headers and with every header bit flipped, plus hand-made hostile values (huge
//! counts and lengths, offsets near `u64::MAX`, overflowing shapes, deep nesting, odd JSON
//! numbers, zero and non-finite config values). Whatever the input: no panic, no single
//! allocation far above the input size, and an accepted file hands out views that are
//! inside it and match their shapes. Errors carry a code and name what is wrong.

#[path = "common/largest_alloc.rs"]
mod largest_alloc;

use largest_alloc::largest_allocation;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rml::format::gguf::Gguf;
use rml::format::safetensors::SafeTensors;
use rml::format::{FileDType, TensorSource, TensorView};
use rml::model::config::parse_config;
use rml::{Code, Error};

/// Runs `f` (a parse of `input_len` bytes), failing the test if it panicked (naming `what`) or
/// made a single allocation above `4 * input_len + 64 KiB`: a parser's tables are a small,
/// fixed multiple of the header it walked, never sized by a count the file claims.
fn guarded<T>(what: &dyn std::fmt::Display, input_len: usize, f: impl FnOnce() -> T) -> T {
    let (r, largest) = largest_allocation(|| catch_unwind(AssertUnwindSafe(f)));
    let r = r.unwrap_or_else(|_| panic!("{what}: the parser panicked"));
    assert!(
        largest <= 4 * input_len + (64 << 10),
        "{what}: largest allocation {largest} for a {input_len}-byte input"
    );
    r
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, Error>, code: Code, needles: &[&str]) {
    let e = r.expect_err("hostile input was accepted");
    assert_eq!(e.code(), code, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "message {:?} lacks {n:?}", e.message());
    }
}

fn data(rel: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel))
        .unwrap()
}

/// Uses every tensor of an accepted file the way the decoder would: views inside the file,
/// of the size their shape needs, convertible (small ones) to f32 without error.
fn use_views<'a>(
    names: &[(String, FileDType, usize)],
    src: &dyn TensorSource<'a>,
    file: &[u8],
    convert: bool,
) {
    let range = file.as_ptr_range();
    for (name, dtype, bytes) in names {
        match dtype {
            FileDType::Supported(d) => {
                let v: TensorView<'_> = src.tensor(name).unwrap();
                assert_eq!(v.data.len(), *bytes, "{name}");
                assert_eq!(v.shape.storage_bytes(*d).unwrap(), *bytes, "{name}");
                assert!(v.data.is_empty() || range.contains(&v.data.as_ptr()), "{name}");
                let t = v.to_tensor().unwrap();
                assert_eq!(t.as_bytes(), v.data);
                if convert
                    && v.shape.numel() <= 1 << 16
                    && !matches!(d, rml::DType::I8 | rml::DType::I32 | rml::DType::I64)
                {
                    let mut out = vec![0f32; v.shape.numel()];
                    v.dequantize_into(&mut out).unwrap();
                }
            }
            FileDType::Unsupported(_) => {
                assert_eq!(src.tensor(name).unwrap_err().code(), Code::Unimplemented)
            }
        }
    }
}

// ------------------------------------------------------------------ safetensors

/// Parses `bytes`; if accepted, checks it against the `safetensors` crate and uses every view.
fn st_round(what: &dyn std::fmt::Display, bytes: &[u8]) -> Result<usize, Error> {
    st_round_with(what, bytes, true)
}

/// As [`st_round`]; `convert`: also widen every small accepted tensor to f32.
fn st_round_with(
    what: &dyn std::fmt::Display,
    bytes: &[u8],
    convert: bool,
) -> Result<usize, Error> {
    let r = guarded(what, bytes.len(), || SafeTensors::parse(bytes).map(|st| st.len()));
    if r.is_ok() {
        let st = SafeTensors::parse(bytes).unwrap();
        let theirs = safetensors::SafeTensors::deserialize(bytes)
            .unwrap_or_else(|e| panic!("{what}: rml accepted a file the reference rejects: {e}"));
        assert_eq!(theirs.len(), st.len(), "{what}");
        let mut end = st.data_start();
        for info in st.infos() {
            assert_eq!(info.offset, end, "{what}: {} not contiguous", info.name);
            end += info.bytes;
            assert_eq!(
                theirs.tensor(&info.name).unwrap().data(),
                st.raw_bytes(&info.name).unwrap()
            );
        }
        assert_eq!(end, bytes.len(), "{what}");
        let names: Vec<_> = st.infos().iter().map(|i| (i.name.clone(), i.dtype, i.bytes)).collect();
        use_views(&names, &st, bytes, convert);
    }
    if let Err(e) = &r {
        assert!(!e.message().is_empty(), "{what}: an error without a message");
    }
    r
}

fn st_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn st_header_len(f: &[u8]) -> usize {
    8 + u64::from_le_bytes(f[..8].try_into().unwrap()) as usize
}

#[test]
fn safetensors_fixtures_cut_at_every_header_offset_and_sampled_data_offsets() {
    for rel in ["tiny-llama/f32/model.safetensors", "tiny-llama/bf16/reference.safetensors"] {
        let f = data(rel);
        assert!(st_round(&rel, &f).is_ok());
        let data_start = st_header_len(&f);
        // Every cut inside the header and the first 4 KiB of data, then every 97th byte.
        let cuts = (0..(data_start + 4096).min(f.len())).chain((data_start..f.len()).step_by(97));
        for n in cuts {
            let e = st_round(&format_args!("{rel} cut at {n}"), &f[..n]).unwrap_err();
            assert_eq!(e.code(), Code::DataLoss, "{rel} cut at {n}: {e}");
        }
        // Trailing bytes are refused too.
        let mut long = f.clone();
        long.push(0);
        expect_err(st_round(&rel, &long), Code::DataLoss, &["1 unused bytes"]);
    }
}

#[test]
fn safetensors_fixture_every_header_bit_flipped() {
    let mut f = data("tiny-llama/f16/model.safetensors");
    let data_start = st_header_len(&f);
    let mut accepted = 0;
    for byte in 0..data_start {
        for bit in 0..8 {
            f[byte] ^= 1 << bit;
            let r = st_round_with(&format_args!("flip {byte}.{bit}"), &f, false);
            accepted += usize::from(r.is_ok());
            f[byte] ^= 1 << bit;
        }
    }
    // Flips inside names and padding are harmless; those in numbers and syntax are caught.
    assert!(accepted < data_start * 8 / 2, "{accepted} of {} flips accepted", data_start * 8);
}

#[test]
fn safetensors_hostile_numbers_and_names() {
    let entry = |shape: &str, offsets: &str| {
        format!(r#"{{"w":{{"dtype":"F32","shape":{shape},"data_offsets":{offsets}}}}}"#)
    };
    for (shape, offsets) in [
        ("[-1]", "[0,4]"),
        ("[1.0]", "[0,4]"),
        ("[1e3]", "[0,4]"),
        ("[18446744073709551616]", "[0,4]"),
        ("[\"1\"]", "[0,4]"),
        ("[null]", "[0,4]"),
        ("1", "[0,4]"),
        ("[1]", "[0,-4]"),
        ("[1]", "[0.0,4]"),
        ("[1]", "[0]"),
        ("[1]", "[]"),
        ("[1]", "{}"),
        ("[1]", "[0,18446744073709551616]"),
        ("[1]", "[18446744073709551615,18446744073709551615]"),
    ] {
        let f = st_file(&entry(shape, offsets), &[0; 4]);
        expect_err(st_round(&format_args!("{shape} {offsets}"), &f), Code::DataLoss, &["\"w\""]);
    }
    // Empty and non-ASCII names are names like any other.
    let h = r#"{"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
               "ünï\u0000cødé 🦀":{"dtype":"I8","shape":[2],"data_offsets":[4,6]}}"#;
    let f = st_file(h, &[0; 6]);
    assert_eq!(st_round(&"names", &f).unwrap(), 2);
    let st = SafeTensors::parse(&f).unwrap();
    assert_eq!(st.tensor("").unwrap().data.len(), 4);
    assert_eq!(st.tensor("ünï\0cødé 🦀").unwrap().data.len(), 2);
    // Errors name a hostile name readably (escaped, not raw control characters).
    let h = "{\"a\\u0000\\n\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    expect_err(st_round(&"ctl", &st_file(h, &[0; 4])), Code::DataLoss, &["\"a\\0\\n\""]);
}

#[test]
fn safetensors_many_tiny_tensors_stay_within_a_small_multiple_of_the_input() {
    // The densest header: minimal entries of zero-size tensors. Parsing keeps one fixed-size
    // record per entry, so memory grows with the header, never beyond a small multiple.
    let mut h = String::from("{");
    for i in 0..20_000 {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(r#""{i}":{{"dtype":"I8","shape":[0],"data_offsets":[0,0]}}"#));
    }
    h.push('}');
    let f = st_file(&h, &[]);
    assert_eq!(st_round(&"20k tensors", &f).unwrap(), 20_000);
}

// ------------------------------------------------------------------ GGUF

fn gstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// GGUF bytes built field by field.
#[derive(Clone)]
struct G {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    alignment: usize,
}

impl G {
    fn new() -> Self {
        G { kv: vec![], n_kv: 0, infos: vec![], n_tensors: 0, data: vec![], alignment: 32 }
    }

    fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> Self {
        gstr(&mut self.kv, key.as_bytes());
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    fn info(mut self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Self {
        gstr(&mut self.infos, name.as_bytes());
        self.infos.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ty.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    /// A tensor whose data is appended at the next aligned offset.
    fn tensor(mut self, name: &str, ne: &[u64], ty: u32, bytes: &[u8]) -> Self {
        while self.data.len() % self.alignment != 0 {
            self.data.push(0);
        }
        let off = self.data.len() as u64;
        self.data.extend_from_slice(bytes);
        self.info(name, ne, ty, off)
    }

    fn build(&self) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&3u32.to_le_bytes());
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

fn arr(elem: u32, n: u64, body: &[u8]) -> Vec<u8> {
    let mut v = elem.to_le_bytes().to_vec();
    v.extend_from_slice(&n.to_le_bytes());
    v.extend_from_slice(body);
    v
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small llama GGUF with every metadata type, nested arrays, and tensors of every supported
/// type plus an unsupported one and an empty one; the last tensor ends at the end of the file.
fn small_gguf() -> Vec<u8> {
    let mut strs = vec![];
    for s in ["<s>", "</s>", "a", "b", "ab", "é", "", "c"] {
        gstr(&mut strs, s.as_bytes());
    }
    let mut merges = vec![];
    gstr(&mut merges, b"a b");
    let mut nested = vec![];
    nested.extend_from_slice(&arr(5, 2, &[1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]));
    nested.extend_from_slice(&arr(8, 1, &{
        let mut s = vec![];
        gstr(&mut s, b"x");
        s
    }));
    let mut q8 = half::f16::from_f32(0.25).to_bits().to_le_bytes().to_vec();
    q8.extend((0..32).map(|i| i as u8));
    let mut q4_1 = half::f16::from_f32(0.5).to_bits().to_le_bytes().to_vec();
    q4_1.extend_from_slice(&half::f16::from_f32(-1.0).to_bits().to_le_bytes());
    q4_1.extend((0..16).map(|i| i as u8 * 17));
    let mut q4_0 = half::f16::from_f32(2.0).to_bits().to_le_bytes().to_vec();
    q4_0.extend((0..16).map(|i| 0x80 | i as u8));
    let u32v = |v: u32| v.to_le_bytes().to_vec();
    G::new()
        .kv("general.architecture", 8, &{
            let mut s = vec![];
            gstr(&mut s, b"llama");
            s
        })
        .kv("general.alignment", 4, &u32v(32))
        .kv("llama.embedding_length", 4, &u32v(8))
        .kv("llama.feed_forward_length", 4, &u32v(16))
        .kv("llama.block_count", 4, &u32v(1))
        .kv("llama.attention.head_count", 4, &u32v(2))
        .kv("llama.attention.head_count_kv", 4, &u32v(1))
        .kv("llama.context_length", 4, &u32v(64))
        .kv("llama.attention.layer_norm_rms_epsilon", 6, &1e-5f32.to_le_bytes())
        .kv("llama.rope.freq_base", 6, &10_000f32.to_le_bytes())
        .kv("tokenizer.ggml.model", 8, &{
            let mut s = vec![];
            gstr(&mut s, b"gpt2");
            s
        })
        .kv("tokenizer.ggml.tokens", 9, &arr(8, 8, &strs))
        .kv("tokenizer.ggml.merges", 9, &arr(8, 1, &merges))
        .kv("tokenizer.ggml.token_type", 9, &arr(5, 8, &[1u8, 0, 0, 0].repeat(8)))
        .kv("tokenizer.ggml.scores", 9, &arr(6, 8, &f32s(&[0.5; 8])))
        .kv("tokenizer.ggml.bos_token_id", 4, &u32v(0))
        .kv("tokenizer.ggml.eos_token_id", 4, &u32v(1))
        .kv("tokenizer.ggml.add_bos_token", 7, &[1])
        .kv("x.u8", 0, &[7])
        .kv("x.i8", 1, &[0x80])
        .kv("x.u16", 2, &[1, 2])
        .kv("x.i16", 3, &[0xFF, 0xFF])
        .kv("x.i32", 5, &(-3i32).to_le_bytes())
        .kv("x.u64", 10, &u64::MAX.to_le_bytes())
        .kv("x.i64", 11, &i64::MIN.to_le_bytes())
        .kv("x.f64", 12, &f64::NAN.to_le_bytes())
        .kv("x.bools", 9, &arr(7, 3, &[0, 1, 0]))
        .kv("x.nested", 9, &arr(9, 2, &nested))
        .kv("x.empty", 9, &arr(12, 0, &[]))
        .tensor("token_embd.weight", &[8, 8], 0, &f32s(&[0.5; 64]))
        .tensor("blk.0.attn_q.weight", &[32, 1], 8, &q8)
        .tensor("blk.0.attn_k.weight", &[32, 1], 3, &q4_1)
        .tensor("blk.0.attn_v.weight", &[32, 1], 2, &q4_0)
        .tensor("f16", &[3], 1, &[0, 0x3C, 0, 0xC0, 0xFF, 0x7B])
        .tensor("bf16", &[2], 30, &[0x80, 0x3F, 0, 0])
        .tensor("q6k", &[256], 14, &[0; 210])
        .tensor("empty", &[0, 5], 0, &[])
        .tensor("scalar", &[], 0, &1.5f32.to_le_bytes())
        .tensor("output_norm.weight", &[8], 0, &f32s(&[1.0; 8]))
        .build()
}

/// Parses `bytes`; if accepted, calls every accessor and uses every view.
fn gguf_round(what: &dyn std::fmt::Display, bytes: &[u8], convert: bool) -> Result<usize, Error> {
    let r = guarded(what, bytes.len(), || Gguf::parse(bytes).map(|g| g.infos().len()));
    if r.is_ok() {
        let g = Gguf::parse(bytes).unwrap();
        assert_eq!(g.data_start() % g.alignment(), 0, "{what}");
        guarded(what, bytes.len(), || {
            for (key, value) in g.metadata() {
                let _ = format!("{key} {value}");
                if let Some(a) = value.as_array() {
                    assert_eq!(a.iter().count(), a.len(), "{what}: {key}");
                }
            }
            let _ = g.tokens();
            let _ = g.merges();
            let _ = g.token_types();
            let _ = g.scores();
            let _ = g.bos_token_id();
            let _ = g.eos_token_id();
            let _ = g.add_bos_token();
            let _ = g.chat_template();
            if let Ok(c) = rml::model::config::from_gguf(&g) {
                c.validate().unwrap();
            }
        });
        let mut ends: Vec<(usize, usize)> = vec![];
        for info in g.infos() {
            assert!(info.offset >= g.data_start(), "{what}: {}", info.name);
            assert!(info.offset + info.bytes <= bytes.len(), "{what}: {}", info.name);
            assert_eq!(g.raw_bytes(&info.name).unwrap().len(), info.bytes);
            if info.bytes > 0 {
                ends.push((info.offset, info.offset + info.bytes));
            }
        }
        ends.sort();
        for w in ends.windows(2) {
            assert!(w[0].1 <= w[1].0, "{what}: accepted overlapping tensors {w:?}");
        }
        let names: Vec<_> = g.infos().iter().map(|i| (i.name.clone(), i.dtype, i.bytes)).collect();
        use_views(&names, &g, bytes, convert);
    }
    if let Err(e) = &r {
        assert!(!e.message().is_empty(), "{what}: an error without a message");
    }
    r
}

#[test]
fn gguf_small_file_cut_at_every_offset_and_every_bit_flipped() {
    let f = small_gguf();
    assert_eq!(gguf_round(&"whole", &f, true).unwrap(), 10);
    let g = Gguf::parse(&f).unwrap();
    let c = rml::model::config::from_gguf(&g).unwrap();
    assert_eq!((c.head_dim, c.kv_groups(), c.vocab_size), (4, 2, 8));
    for n in 0..f.len() {
        let e = gguf_round(&format_args!("cut at {n}"), &f[..n], true).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "cut at {n}: {e}");
    }
    let header = g.data_start();
    for byte in 0..header {
        for bit in 0..8 {
            let mut h = f.clone();
            h[byte] ^= 1 << bit;
            let _ = gguf_round(&format_args!("flip {byte}.{bit}"), &h, true);
        }
    }
}

#[path = "common/smollm2.rs"]
mod smollm2_file;

/// The real model's bytes (found or fetched as `rml` does; a failure, never a skip, without it).
fn smollm2() -> Option<Vec<u8>> {
    let path = smollm2_file::smollm2_gguf();
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

#[test]
fn gguf_smollm2_cut_and_flipped_at_sampled_offsets() {
    let Some(f) = smollm2() else { unreachable!("the finder fetches the model or panics") };
    let header = Gguf::parse(&f).unwrap().data_start();
    // A deterministic sample: every byte of the first 512, then ~400 spread over the header
    // (metadata, vocabulary, tensor infos) and a few in the data.
    let mut cuts: Vec<usize> = (0..512).collect();
    cuts.extend((512..header).step_by(header / 200));
    cuts.extend((header..f.len()).step_by(f.len() / 50));
    for &n in &cuts {
        let e = gguf_round(&format_args!("cut at {n}"), &f[..n], false).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "cut at {n}: {e}");
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // The tensor infos sit at the end of the header: flip bits there densely.
    let infos_from = header.saturating_sub(272 * 60);
    let mut g = f[..header + 4096.min(f.len() - header)].to_vec();
    for i in 0..300 {
        let byte = if i < 100 {
            (next() % 512) as usize
        } else if i < 200 {
            infos_from + (next() as usize % (header - infos_from))
        } else {
            next() as usize % header
        };
        let bit = next() % 8;
        // Cut after the header: if the flip is accepted, tensors past the cut must be refused.
        g[byte] ^= 1 << bit;
        let _ = gguf_round(&format_args!("flip {byte}.{bit}"), &g, false);
        g[byte] ^= 1 << bit;
    }
}

#[test]
fn gguf_hostile_alignment() {
    for (ty, v, needle) in [
        (4u32, 0u32.to_le_bytes().to_vec(), "general.alignment is 0"),
        (4, 3u32.to_le_bytes().to_vec(), "general.alignment is 3"),
        (4, (1u32 << 31).to_le_bytes().to_vec(), "general.alignment is 2147483648"),
        (10, 32u64.to_le_bytes().to_vec(), "u64"),
        (8, [3, 0, 0, 0, 0, 0, 0, 0, b'3', b'2', b'!'].to_vec(), "string"),
    ] {
        let f = G::new().kv("general.alignment", ty, &v).build();
        expect_err(gguf_round(&needle, &f, true), Code::DataLoss, &[needle]);
    }
    // Alignment 1: tensors at any offset; misaligned f32 data is copied, never cast.
    let mut g = G::new().kv("general.alignment", 4, &1u32.to_le_bytes());
    g.alignment = 1;
    let f = g.tensor("pad", &[1], 24, &[9]).tensor("w", &[2], 0, &f32s(&[1.5, -2.0])).build();
    let block = rml::mem::AlignedBlock::try_from_slice(&f).unwrap();
    gguf_round(&"align 1", block.as_slice(), true).unwrap();
    let g = Gguf::parse(block.as_slice()).unwrap();
    let w = g.tensor("w").unwrap();
    assert_ne!(w.data.as_ptr() as usize % 4, 0, "the test wants misaligned data");
    assert_eq!(w.to_tensor().unwrap().as_f32().unwrap(), &[1.5, -2.0]);
}

#[test]
fn gguf_hostile_counts_and_shapes() {
    // Arrays of arrays claiming huge counts at every level.
    for n in [u64::MAX, 1 << 40, 1 << 20] {
        let inner = arr(9, n, &[]);
        let f = G::new().kv("deep", 9, &arr(9, 1, &inner)).build();
        expect_err(gguf_round(&n, &f, true), Code::DataLoss, &["\"deep\"", "array length"]);
        let f = G::new().kv("strs", 9, &arr(8, n, &[])).build();
        expect_err(gguf_round(&n, &f, true), Code::DataLoss, &["\"strs\"", "array length"]);
        let f = G::new().kv("s", 8, &n.to_le_bytes()).build();
        expect_err(gguf_round(&n, &f, true), Code::DataLoss, &["\"s\"", "string length"]);
    }
    // Many empty nested arrays: bounded by the bytes, and walked in linear time.
    let mut body = vec![];
    for _ in 0..50_000 {
        body.extend_from_slice(&arr(9, 0, &[]));
    }
    let f = G::new().kv("many", 9, &arr(9, 50_000, &body)).build();
    assert_eq!(gguf_round(&"many", &f, true).unwrap(), 0);
    // Shapes: product overflow, a dimension above i64::MAX, zero dimensions with huge others.
    for ne in [&[u64::MAX][..], &[1 << 63], &[1 << 32, 1 << 32], &[2, 1 << 62, 4]] {
        let f = G::new().info("w", ne, 0, 0).build();
        expect_err(gguf_round(&format_args!("{ne:?}"), &f, true), Code::DataLoss, &["\"w\""]);
    }
    let f = G::new().info("w", &[1 << 62, 0], 0, 0).info("v", &[0, u64::MAX >> 1], 2, 0).build();
    assert_eq!(gguf_round(&"empty huge", &f, true).unwrap(), 2);
    // Quantized rows not a multiple of the block, n_dims far too large.
    let f = G::new().info("q", &[31, 2], 8, 0).build();
    expect_err(gguf_round(&"q", &f, true), Code::DataLoss, &["\"q\"", "block size 32"]);
    let f = G::new().info("w", &[1; 4], 0, 0).build();
    let mut f = f;
    // n_dims patched to u32::MAX.
    let at = 24 + 8 + 1; // after the file header and the name "w"
    f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    expect_err(gguf_round(&"n_dims", &f, true), Code::DataLoss, &["\"w\"", "dimensions"]);
    // Offsets near u64::MAX and unaligned.
    for off in [u64::MAX, u64::MAX - 31, 1 << 63] {
        let f = G::new().info("w", &[8], 0, off).build();
        let r = gguf_round(&off, &f, true);
        assert_eq!(r.unwrap_err().code(), Code::DataLoss);
    }
}

// ------------------------------------------------------------------ config.json

const BASE: &str = r#""vocab_size": 100, "hidden_size": 48, "intermediate_size": 96,
    "num_hidden_layers": 1, "num_attention_heads": 6"#;

fn cfg(extra: &str) -> Result<rml::model::config::ModelConfig, Error> {
    let text =
        if extra.is_empty() { format!("{{{BASE}}}") } else { format!("{{{BASE}, {extra}}}") };
    guarded(&extra, text.len(), || parse_config(&text))
}

/// A config with `key` replaced by `value` (the other required keys kept).
fn cfg_with(key: &str, value: &str) -> Result<rml::model::config::ModelConfig, Error> {
    let mut fields: Vec<(String, String)> = [
        ("vocab_size", "100"),
        ("hidden_size", "48"),
        ("intermediate_size", "96"),
        ("num_hidden_layers", "1"),
        ("num_attention_heads", "6"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    match fields.iter_mut().find(|(k, _)| k == key) {
        Some(f) => f.1 = value.into(),
        None => fields.push((key.into(), value.into())),
    }
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    let text = format!("{{{}}}", body.join(", "));
    guarded(&text, text.len(), || parse_config(&text))
}

#[test]
fn config_zero_negative_fractional_and_huge_sizes() {
    for key in [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ] {
        for (v, code) in [
            ("0", Code::InvalidArgument),
            ("-1", Code::DataLoss),
            ("1.5", Code::DataLoss),
            ("1e3", Code::DataLoss),
            ("\"8\"", Code::DataLoss),
            ("true", Code::DataLoss),
            ("[8]", Code::DataLoss),
            ("18446744073709551616", Code::DataLoss),
            ("1e400", Code::DataLoss),
        ] {
            let e = cfg_with(key, v).expect_err(&format!("{key} = {v} accepted"));
            assert_eq!(e.code(), code, "{key} = {v}: {e}");
            assert!(e.message().contains(key), "{key} = {v}: {e}");
        }
    }
}

#[test]
fn config_heads_that_do_not_fit() {
    // 48 is not a multiple of 5 and no head_dim is given.
    let e = cfg_with("num_attention_heads", "5").unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("48") && e.message().contains('5'), "{e}");
    // With an explicit head_dim the width need not divide (as transformers allows).
    let c = cfg(r#""num_key_value_heads": 3, "head_dim": 10"#).unwrap();
    assert_eq!((c.head_dim, c.kv_groups()), (10, 2));
    let e = cfg(r#""num_key_value_heads": 4"#).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("num_key_value_heads 4") && e.message().contains('6'), "{e}");
    let e = cfg(r#""num_key_value_heads": 12"#).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = cfg(r#""head_dim": 7"#).unwrap_err();
    assert!(e.message().contains("head_dim 7"), "{e}");
}

#[test]
fn config_non_finite_and_non_positive_floats() {
    for key in ["rms_norm_eps", "rope_theta"] {
        for v in ["0", "-1e-5", "0.0", "-0.0", "1e309", "\"1e-5\"", "[1e-5]"] {
            let e = cfg_with(key, v).expect_err(&format!("{key} = {v} accepted"));
            assert!(e.message().contains(key), "{key} = {v}: {e}");
        }
    }
    // JSON has no NaN or Infinity literals.
    for v in ["NaN", "Infinity", "-Infinity", "nan"] {
        assert_eq!(cfg_with("rms_norm_eps", v).unwrap_err().code(), Code::DataLoss, "{v}");
    }
}

#[test]
fn config_rope_scaling_factors() {
    for rs in [
        r#"{"rope_type": "linear", "factor": 0}"#,
        r#"{"rope_type": "linear", "factor": -2.0}"#,
        r#"{"type": "linear", "factor": 0.0}"#,
        r#"{"rope_type": "llama3", "factor": 0, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}"#,
        r#"{"rope_type": "llama3", "factor": 8, "low_freq_factor": -1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}"#,
        r#"{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4, "original_max_position_embeddings": 8192}"#,
        r#"{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 0}"#,
    ] {
        let e = cfg(&format!(r#""rope_scaling": {rs}"#)).expect_err(rs);
        assert_eq!(e.code(), Code::InvalidArgument, "{rs}: {e}");
        assert!(e.message().contains("factor") || e.message().contains("original"), "{e}");
    }
    for (rs, needle) in [
        (r#"{"rope_type": "linear", "factor": "2"}"#, "factor"),
        (r#"{"rope_type": "linear"}"#, "factor"),
        (r#"{"factor": 2}"#, "rope_type"),
        (r#"{"rope_type": 3}"#, "rope_type"),
        (r#""linear""#, "rope_scaling"),
        (r#"[1]"#, "rope_scaling"),
    ] {
        let e = cfg(&format!(r#""rope_scaling": {rs}"#)).expect_err(rs);
        assert_eq!(e.code(), Code::DataLoss, "{rs}: {e}");
        assert!(e.message().contains(needle), "{rs}: {e}");
    }
    for ty in ["dynamic", "yarn", "longrope", ""] {
        let e =
            cfg(&format!(r#""rope_scaling": {{"rope_type": "{ty}", "factor": 2}}"#)).unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);
        assert!(e.message().contains(&format!("{ty:?}")), "{e}");
    }
}

#[test]
fn config_token_ids() {
    for (v, needle) in [
        ("-1", "\"eos_token_id\""),
        ("[2, -1]", "[1]"),
        ("[2, 1.5]", "[1]"),
        ("[2, 4294967296]", "[1]"),
        ("[[2]]", "[0]"),
        ("\"2\"", "\"eos_token_id\""),
        ("{}", "\"eos_token_id\""),
    ] {
        let e = cfg(&format!(r#""eos_token_id": {v}"#)).expect_err(v);
        assert_eq!(e.code(), Code::DataLoss, "{v}: {e}");
        assert!(e.message().contains(needle), "{v}: {e}");
    }
    assert_eq!(cfg(r#""eos_token_id": [2, 3, 2]"#).unwrap().eos_token_ids, [2, 3, 2]);
    assert!(cfg(r#""eos_token_id": []"#).unwrap().eos_token_ids.is_empty());
    assert_eq!(cfg(r#""bos_token_id": 4294967295"#).unwrap().bos_token_id, Some(u32::MAX));
    assert_eq!(cfg(r#""bos_token_id": -3"#).unwrap_err().code(), Code::DataLoss);
}

#[test]
fn config_hostile_documents() {
    for (text, code) in [
        ("", Code::DataLoss),
        ("null", Code::DataLoss),
        ("[]", Code::DataLoss),
        ("\u{feff}{}", Code::DataLoss),
        ("{", Code::DataLoss),
        ("{}", Code::DataLoss),
        ("{\"vocab_size\": 1} {}", Code::DataLoss),
    ] {
        let e = guarded(&text, text.len(), || parse_config(text)).expect_err(text);
        assert_eq!(e.code(), code, "{text:?}: {e}");
    }
    for depth in [200usize, 100_000] {
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let e = cfg(&format!(r#""x": {deep}"#)).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "depth {depth}");
        let deep = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        let e = cfg(&format!(r#""x": {deep}"#)).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "depth {depth}");
    }
    // Unknown keys of any shape, unicode keys and an empty key are ignored.
    let c = cfg(r#""": 1, "ключ": {"a": [null, 1.5, "x"]}, "architectures": ["LlamaForCausalLM"]"#)
        .unwrap();
    assert_eq!(c.vocab_size, 100);
}

#[test]
fn config_every_prefix_of_the_real_files() {
    for rel in ["smollm2-135m/config.json", "tiny-llama/f32/config.json"] {
        let text = String::from_utf8(data(rel)).unwrap();
        parse_config(&text).unwrap();
        // Every cut before the closing brace (a cut trailing newline is still the document).
        let end = text.trim_end().len() - 1;
        for n in (0..=end).filter(|&n| text.is_char_boundary(n)) {
            let r = guarded(&format_args!("{rel} cut at {n}"), n, || parse_config(&text[..n]));
            assert_eq!(r.unwrap_err().code(), Code::DataLoss, "{rel} cut at {n}");
        }
    }
}
