//! Loading from disk: Hugging Face folders (single file and sharded), GGUF files, and files
//! that are empty, truncated or inconsistent (clean errors at open, never a fault later).
#![cfg(feature = "std")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rml::format::safetensors::SafeTensors;
use rml::format::{FileDType, TensorSource};
use rml::load::{Model, ModelFormat};
use rml::{Code, DType};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

/// A fresh empty directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "rml-format-load-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn expect_err(r: rml::Result<Model>, code: Code, needles: &[&str]) {
    let e = r.expect_err("bad model was accepted");
    assert_eq!(e.code(), code, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "message {:?} lacks {n:?}", e.message());
    }
}

#[test]
fn hf_folder_single_file() {
    for (dir, dtype) in [("f32", DType::F32), ("bf16", DType::BF16), ("f16", DType::F16)] {
        let m = Model::open(data(&format!("tiny-llama/{dir}"))).unwrap();
        assert_eq!(m.format(), ModelFormat::Safetensors);
        assert_eq!(m.config().hidden_size, 64);
        assert_eq!(m.tensor_infos().len(), 21);
        assert_eq!(m.safetensors_metadata(), [("format".to_string(), "pt".to_string())]);
        assert_eq!(m.metadata_listing().unwrap(), m.safetensors_metadata());
        let q = m.tensor("model.layers.0.self_attn.q_proj.weight").unwrap();
        assert_eq!((q.dtype, q.shape.dims()), (dtype, &[64usize, 64][..]));
        // The view is the file's bytes, at the offset the parser found.
        let raw = std::fs::read(data(&format!("tiny-llama/{dir}/model.safetensors"))).unwrap();
        let st = SafeTensors::parse(&raw).unwrap();
        assert_eq!(q.data, st.raw_bytes("model.layers.0.self_attn.q_proj.weight").unwrap());
        let src = &m;
        assert_eq!(src.tensor_names().len(), 21);
        assert!(src.tensor("nope").is_err());
        assert!(m.gguf().is_none());
    }
}

#[test]
fn hf_folder_sharded() {
    let raw = std::fs::read(data("tiny-llama/f32/model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&raw).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let (a, b) = names.split_at(10);
    let t = TempDir::new();
    std::fs::copy(data("tiny-llama/f32/config.json"), t.path("config.json")).unwrap();
    let mut weight_map = serde_json::Map::new();
    for (shard, part) in
        [("model-00001-of-00002.safetensors", a), ("model-00002-of-00002.safetensors", b)]
    {
        let views: Vec<(String, safetensors::tensor::TensorView)> =
            part.iter().map(|n| (n.clone(), st.tensor(n).unwrap())).collect();
        let bytes = safetensors::serialize(views, None).unwrap();
        std::fs::write(t.path(shard), bytes).unwrap();
        for n in part {
            weight_map.insert(n.clone(), shard.into());
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 503136}, "weight_map": weight_map});
    std::fs::write(t.path("model.safetensors.index.json"), index.to_string()).unwrap();

    let m = Model::open(&t.0).unwrap();
    assert_eq!(m.files().count(), 2);
    assert_eq!(m.tensor_infos().len(), 21);
    for n in &names {
        assert_eq!(m.tensor(n).unwrap().data, st.tensor(n).unwrap().data(), "{n}");
    }

    // An index entry pointing at the wrong shard.
    let mut bad = index.clone();
    bad["weight_map"][&a[0]] = "model-00002-of-00002.safetensors".into();
    std::fs::write(t.path("model.safetensors.index.json"), bad.to_string()).unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["weight_map", &a[0]]);
    // A shard name with a path in it.
    let mut bad = index.clone();
    bad["weight_map"][&a[0]] = "../model-00001-of-00002.safetensors".into();
    std::fs::write(t.path("model.safetensors.index.json"), bad.to_string()).unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["not a plain file name"]);
    // A missing shard.
    let mut bad = index.clone();
    bad["weight_map"][&a[0]] = "model-00003-of-00002.safetensors".into();
    std::fs::write(t.path("model.safetensors.index.json"), bad.to_string()).unwrap();
    expect_err(Model::open(&t.0), Code::Io, &["model-00003-of-00002.safetensors"]);
    // The same tensor in two shards.
    let dup = safetensors::serialize([(a[0].clone(), st.tensor(&a[0]).unwrap())], None).unwrap();
    std::fs::write(t.path("model-00003-of-00002.safetensors"), dup).unwrap();
    let mut bad = index.clone();
    bad["weight_map"][&a[1]] = "model-00003-of-00002.safetensors".into();
    std::fs::write(t.path("model.safetensors.index.json"), bad.to_string()).unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["also in another shard"]);
}

#[test]
fn missing_config_or_weights() {
    let t = TempDir::new();
    expect_err(Model::open(&t.0), Code::NotFound, &["config.json"]);
    std::fs::copy(data("tiny-llama/f32/config.json"), t.path("config.json")).unwrap();
    expect_err(Model::open(&t.0), Code::NotFound, &["model.safetensors"]);
    expect_err(Model::open(t.path("absent.gguf")), Code::Io, &["absent.gguf"]);
}

#[test]
fn empty_and_truncated_files_fail_at_open() {
    let t = TempDir::new();
    std::fs::write(t.path("empty.gguf"), b"").unwrap();
    expect_err(Model::open(t.path("empty.gguf")), Code::DataLoss, &["empty.gguf", "empty"]);

    std::fs::copy(data("tiny-llama/f32/config.json"), t.path("config.json")).unwrap();
    std::fs::write(t.path("model.safetensors"), b"").unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["model.safetensors", "empty"]);

    // The real weights minus their last byte: the last tensor runs past the end.
    let raw = std::fs::read(data("tiny-llama/f32/model.safetensors")).unwrap();
    std::fs::write(t.path("model.safetensors"), &raw[..raw.len() - 1]).unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["model.safetensors", "past the end"]);
    // Cut inside the header.
    std::fs::write(t.path("model.safetensors"), &raw[..100]).unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["model.safetensors", "header length"]);

    // A config that is not a config.
    std::fs::write(t.path("model.safetensors"), &raw).unwrap();
    std::fs::write(t.path("config.json"), b"{\"hidden_size\": 64}").unwrap();
    expect_err(Model::open(&t.0), Code::DataLoss, &["config.json", "missing"]);
}

#[test]
fn special_files_are_refused_without_blocking() {
    // A character device and a FIFO (opening a FIFO for reading would wait for a writer).
    expect_err(Model::open("/dev/null"), Code::InvalidArgument, &["/dev/null", "regular file"]);
    let t = TempDir::new();
    let fifo = t.path("model.gguf");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        expect_err(Model::open(&fifo), Code::InvalidArgument, &["model.gguf", "regular file"]);
    } else {
        eprintln!("SKIP the FIFO case: mkfifo is not available");
    }
    // A shard that is a directory.
    std::fs::copy(data("tiny-llama/f32/config.json"), t.path("config.json")).unwrap();
    std::fs::write(t.path("model.safetensors.index.json"), br#"{"weight_map": {"w": "shard"}}"#)
        .unwrap();
    std::fs::create_dir(t.path("shard")).unwrap();
    expect_err(Model::open(&t.0), Code::InvalidArgument, &["shard", "regular file"]);
}

#[path = "common/smollm2.rs"]
mod smollm2_file;

/// The real model (found or fetched as `rml` does; a failure, never a skip, without it).
fn smollm2_path() -> Option<PathBuf> {
    Some(smollm2_file::smollm2_gguf())
}

#[test]
fn gguf_file_mapped_in_place() {
    let Some(p) = smollm2_path() else { unreachable!("the finder fetches the model or panics") };
    let m = Model::open(&p).unwrap();
    assert_eq!(m.format(), ModelFormat::Gguf);
    assert_eq!(m.config().num_hidden_layers, 30);
    assert!(m.config().tie_word_embeddings);
    assert_eq!(m.tensor_infos().len(), 272);
    let listing = m.metadata_listing().unwrap();
    assert_eq!(listing.len(), 33);
    assert!(listing.contains(&("general.architecture".into(), "string: \"llama\"".into())));
    let tokens = listing.iter().find(|(k, _)| k == "tokenizer.ggml.tokens").unwrap();
    assert!(tokens.1.starts_with("array: [string; 49152] \"<|endoftext|>\""), "{}", tokens.1);
    let g = m.gguf().unwrap().unwrap();
    assert_eq!(g.tokens().unwrap().len(), 49152);
    let q = m.tensor("blk.3.attn_q.weight").unwrap();
    assert_eq!((q.dtype, q.shape.dims()), (DType::Q4_1, &[576usize, 576][..]));
    let info = m.tensor_infos().iter().find(|t| t.name == "blk.3.attn_q.weight").unwrap();
    assert_eq!(info.dtype, FileDType::Supported(DType::Q4_1));
    assert_eq!((info.offset % 32, info.bytes), (0, 576 * 576 / 32 * 20));
}

#[test]
fn truncated_gguf_fails_at_open() {
    let Some(p) = smollm2_path() else { unreachable!("the finder fetches the model or panics") };
    let t = TempDir::new();
    // Keep the header but cut the data: the last tensors run past the end.
    let f = std::fs::File::open(&p).unwrap();
    let len = f.metadata().unwrap().len();
    let mut head = vec![0u8; 4 << 20];
    std::io::Read::read_exact(&mut &f, &mut head).unwrap();
    std::fs::write(t.path("cut.gguf"), &head).unwrap();
    assert!(len > head.len() as u64);
    expect_err(Model::open(t.path("cut.gguf")), Code::DataLoss, &["cut.gguf", "past the end"]);
    // Cut inside the metadata.
    std::fs::write(t.path("cut.gguf"), &head[..1000]).unwrap();
    expect_err(Model::open(t.path("cut.gguf")), Code::DataLoss, &["cut.gguf"]);
}
