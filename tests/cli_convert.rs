//! `rml convert`: GGUF or safetensors in, a Hugging Face safetensors folder or a GGUF file out.
//! The tiny model converted f32 → bf16 is byte-identical to transformers' own bf16 save;
//! SmolLM2's GGUF converted to f32 safetensors (q/k rows un-permuted) passes the same
//! teacher-forced checks against transformers as the GGUF itself; every `--dtype` in both
//! containers runs, holds ggml's reference blocks, and is read back by convert itself (to f32,
//! and to the same dtype in the other container).
#![cfg(feature = "cli")]

#[path = "common/cli.rs"]
mod cli;
mod decoder_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use decoder_common::{argmax, data, leak_aligned, max_abs_diff, smollm2_gguf, Reference};
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::load::Model;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::InlineExecutor;

/// The decoder's defaults with f32 activations: these checks compare against reference
/// numbers (or bit patterns) of the exact path.
fn exact() -> DecoderOptions {
    DecoderOptions { activations: Activations::F32, ..DecoderOptions::default() }
}

fn convert(input: &Path, name: &str, dtype: &str) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["convert", input.to_str().unwrap(), out.to_str().unwrap(), "--dtype", dtype])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn tiny_f32_to_bf16_matches_transformers_bytes() {
    let out = convert(&data("tiny-llama/f32"), "convert-tiny-bf16", "bf16");
    let ours = SafeTensors::parse(leak_aligned(&out.join("model.safetensors"))).unwrap();
    let theirs =
        SafeTensors::parse(leak_aligned(&data("tiny-llama/bf16/model.safetensors"))).unwrap();
    let mut names = ours.tensor_names();
    names.sort();
    let mut want = theirs.tensor_names();
    want.sort();
    assert_eq!(names, want);
    for n in names {
        let (a, b) = (ours.tensor(n).unwrap(), theirs.tensor(n).unwrap());
        assert_eq!((a.dtype, a.shape), (b.dtype, b.shape), "{n}");
        assert!(a.data == b.data, "{n}: bytes differ");
    }
    // The written config loads and runs like the original.
    let m = Model::open(&out).unwrap();
    assert_eq!(m.config().num_hidden_layers, 2);
    assert!(!m.config().tie_word_embeddings);
}

#[test]
fn gguf_to_f32_safetensors_matches_transformers() {
    let gguf = smollm2_gguf();
    let out = convert(&gguf, "convert-smollm2-f32", "f32");
    let model = Model::open(&out).unwrap();
    assert!(model.config().tie_word_embeddings);
    assert!(model.tensor("lm_head.weight").is_err());
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let want = r.f32s("decode_logits");
    for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
        let opts = DecoderOptions { context_len: Some(32), activations: act, ..exact() };
        let mut m = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
        assert!(m.weights().matrices().all(|l| l.dtype() == rml::DType::F32 && l.is_borrowed()));
        let logits = m.prefill(&prompt).unwrap();
        let mut worst = max_abs_diff(logits, &r.f32s("prefill_logits_last"));
        let mut agree = usize::from(argmax(logits) == generated[0]);
        for i in 0..16 {
            let logits = m.decode(generated[i]).unwrap();
            worst = worst.max(max_abs_diff(logits, &want[i * 49152..(i + 1) * 49152]));
            agree += usize::from(argmax(logits) == generated[i + 1]);
        }
        eprintln!("SmolLM2 via rml convert (f32), {act:?}: max abs logit diff {worst:.3e}, argmax {agree}/17");
        // f32 weights take f32 activations whatever the mode (int8 applies to quantized ones).
        assert!(worst <= 2e-3, "{act:?}: max abs logit diff {worst}");
        assert_eq!(agree, 17, "{act:?}");
    }
    // The tokenizer came along, with the GGUF's chat template and BOS/EOS spellings in
    // tokenizer_config.json, so the folder chats as the GGUF does.
    assert!(out.join("tokenizer.json").is_file());
    let tok = rml::tokenizer::Tokenizer::from_file(&out.join("tokenizer.json")).unwrap();
    let g = Model::open(&gguf).unwrap();
    let want = g.gguf().unwrap().unwrap().chat_template().unwrap().map(str::to_string);
    assert!(want.is_some());
    assert_eq!(tok.chat_template().map(str::to_string), want);
    assert_eq!(tok.id_to_token(tok.eos_id().unwrap()).as_deref(), Some("<|im_end|>"));
}

/// A folder's tokenizer_config.json (BOS/EOS spellings, special-token settings, the chat
/// template) travels to a folder output as it is: the copy prompts and answers the same.
#[test]
fn folder_to_folder_keeps_the_tokenizer_config() {
    let input = data("tiny-gemma3");
    let out = convert(&input, "convert-gemma3-tokcfg", "f32");
    let read = |p: &Path| std::fs::read(p.join("tokenizer_config.json")).unwrap();
    assert_eq!(read(&out), read(&input));
}

#[test]
fn convert_refuses_a_non_empty_output_and_bad_input() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("convert-busy");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("x"), b"x").unwrap();
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_rml")).args(args).output().unwrap();
    let o = run(&[
        "convert",
        data("tiny-llama/f32").to_str().unwrap(),
        tmp.to_str().unwrap(),
        "--dtype",
        "f32",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
    let o = run(&["convert", "/nonexistent.gguf", "/tmp/never", "--dtype", "f32"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.gguf"));
}

#[test]
fn q8_0_output_is_packed_and_loads_in_place() {
    use rml::model::packed::PackedSource;
    use rml::model::WeightFormat;
    let out = convert(&data("tiny-llama/f32"), "convert-tiny-q8_0", "q8_0");
    let model = Model::open(&out).unwrap();
    // Standard readers see U8 bytes; the metadata marks them.
    let infos = model.tensor_infos();
    let q = infos.iter().find(|t| t.name == "model.layers.0.self_attn.q_proj.weight").unwrap();
    assert_eq!((q.dtype.name(), q.shape.dims()), ("U8", &[64usize, 68][..]));
    assert!(model
        .safetensors_metadata()
        .iter()
        .any(|(k, v)| k == "rml.dtype.model.layers.0.self_attn.q_proj.weight" && v == "Q8_0"));
    // Rows of 176 do not split into blocks: the down projections stay f32.
    let down = infos.iter().find(|t| t.name == "model.layers.0.mlp.down_proj.weight").unwrap();
    assert_eq!(down.dtype.name(), "F32");
    let src = PackedSource::new(&model).unwrap();
    let prompt = Reference::open(&data("tiny-llama/f32/reference.safetensors")).tokens("prompt");
    let mut packed = DecoderLM::new(model.config(), &src, &InlineExecutor, exact()).unwrap();
    for l in packed.weights().matrices() {
        assert!(l.is_borrowed(), "{} was copied", l.name());
        assert_eq!(l.dtype() == rml::DType::Q8_0, l.k() % 32 == 0, "{}", l.name());
    }
    // The same numbers as quantizing the f32 model at load.
    let f32_model = Model::open(data("tiny-llama/f32")).unwrap();
    let opts = DecoderOptions { weight_format: WeightFormat::Q8_0, ..exact() };
    let mut at_load =
        DecoderLM::new(f32_model.config(), &&f32_model, &InlineExecutor, opts).unwrap();
    let a = packed.prefill(&prompt).unwrap().to_vec();
    assert!(a == at_load.prefill(&prompt).unwrap(), "packed Q8_0 differs from Q8_0 at load");
}

/// `rml convert` with `extra` arguments, under umask 022; the output.
fn convert_with(input: &Path, out: &Path, dtype: &str, extra: &[&str]) -> std::process::Output {
    let mut cmd = format!(
        "umask 022; exec '{}' convert '{}' '{}' --dtype {dtype}",
        env!("CARGO_BIN_EXE_rml"),
        input.display(),
        out.display()
    );
    for e in extra {
        cmd.push_str(&format!(" '{e}'"));
    }
    Command::new("sh").args(["-c", &cmd]).output().unwrap()
}

fn fresh(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_file(&p);
    p
}

/// Files directly in `dir` whose name starts with `prefix`.
fn named_like(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect()
}

const DTYPES: [&str; 8] = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"];

/// llama.cpp's `general.file_type` (`LLAMA_FTYPE_MOSTLY_*`) and the matrices' dtype for each
/// `--dtype`.
fn expected(dtype: &str) -> (u32, rml::DType) {
    match dtype {
        "f32" => (0, rml::DType::F32),
        "f16" => (1, rml::DType::F16),
        "q4_0" => (2, rml::DType::Q4_0),
        "q4_1" => (3, rml::DType::Q4_1),
        "q8_0" => (7, rml::DType::Q8_0),
        "q5_0" => (8, rml::DType::Q5_0),
        "q5_1" => (9, rml::DType::Q5_1),
        "bf16" => (32, rml::DType::BF16),
        _ => panic!("{dtype}"),
    }
}

#[test]
fn every_dtype_in_both_containers_reads_back_and_runs() {
    let r = Reference::open(&data("tiny-llama/f32/reference.safetensors"));
    let prompt = r.tokens("prompt");
    let want = r.f32s("prefill_logits");
    let vocab = 256;
    let last = &want[(prompt.len() - 1) * vocab..];
    let source =
        SafeTensors::parse(leak_aligned(&data("tiny-llama/f32/model.safetensors"))).unwrap();
    for dtype in DTYPES {
        for ext in ["", ".gguf"] {
            let out = fresh(&format!("convert-all-{dtype}{ext}"));
            let o = convert_with(&data("tiny-llama/f32"), &out, dtype, &[]);
            assert!(o.status.success(), "{dtype}{ext}: {}", String::from_utf8_lossy(&o.stderr));
            let model = Model::open(&out).unwrap();
            let src = rml::model::packed::PackedSource::new(&model).unwrap();
            // As stored: no repacking (with f32 activations, the AVX2 tier widens Q5_0 to
            // Q8_0 at load; `tests/decoder_gguf_types.rs` checks that).
            let opts = DecoderOptions { repack_weights: false, ..exact() };
            let mut m = DecoderLM::new(model.config(), &src, &InlineExecutor, opts).unwrap();
            // Every matrix has the dtype asked for where its rows split into blocks (the
            // down projections' rows of 176 do not: f32), used in place.
            let (file_type, want_dtype) = expected(dtype);
            for l in m.weights().matrices() {
                assert!(l.is_borrowed(), "{dtype}{ext}: {} was copied", l.name());
                let blocks = l.k() % want_dtype.block_size() == 0;
                let want = if blocks { want_dtype } else { rml::DType::F32 };
                assert_eq!(l.dtype(), want, "{dtype}{ext}: {}", l.name());
                // The blocks are ggml's reference quantizer's (the table's, checked against
                // the gguf package's bytes in tests/quant_vectors.rs) on the source rows
                // (safetensors keeps the source's row order).
                if let (true, "", Some(quantize)) =
                    (blocks, ext, rml::quant::info(want_dtype).quantize)
                {
                    let view = source.tensor(l.name()).unwrap();
                    let mut rows = vec![0f32; view.shape.numel()];
                    view.dequantize_into(&mut rows).unwrap();
                    let rb = want_dtype.row_bytes(l.k()).unwrap();
                    let mut q = vec![0u8; l.rows() * rb];
                    for (x, b) in rows.chunks_exact(l.k()).zip(q.chunks_exact_mut(rb)) {
                        quantize(x, b).unwrap();
                    }
                    assert!(l.matrix().unwrap().data() == q, "{dtype}: {} blocks", l.name());
                }
            }
            if ext == ".gguf" {
                let g = model.gguf().unwrap().unwrap();
                assert_eq!(g.get_u32("general.file_type").unwrap(), Some(file_type), "{dtype}");
            }
            let logits = m.prefill(&prompt).unwrap().to_vec();
            let d = max_abs_diff(&logits, last);
            // Measured on this random model: f32 2e-6, f16 2.5e-3, bf16 3.4e-2, q8_0 5.6e-2,
            // q5_0 0.40, q5_1 0.47, q4_0 0.74, q4_1 1.19 (4- and 5-bit weights; the blocks
            // themselves are checked above, the read-backs below).
            let tol = match dtype {
                "f32" => 1e-4,
                "f16" => 1e-2,
                "bf16" | "q8_0" => 0.1,
                "q5_0" | "q5_1" => 0.5,
                _ => 2.0,
            };
            eprintln!("tiny {dtype}{ext}: max abs logit diff {d:.2e}");
            assert!(d <= tol, "{dtype}{ext}: max abs logit diff {d}");
            // convert reads its own output: back to f32 safetensors, same numbers.
            let back = fresh(&format!("convert-all-{dtype}{ext}-back"));
            let o = convert_with(&out, &back, "f32", &[]);
            assert!(
                o.status.success(),
                "{dtype}{ext} back: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let model2 = Model::open(&back).unwrap();
            let mut m2 =
                DecoderLM::new(model2.config(), &&model2, &InlineExecutor, exact()).unwrap();
            let again = m2.prefill(&prompt).unwrap().to_vec();
            assert!(max_abs_diff(&again, &logits) <= 1e-4, "{dtype}{ext}: read back differs");
            // ... and into the other container in the same dtype: the blocks are carried over
            // as they are (rows moved, not requantized), so the numbers are the same but for
            // the order of RoPE's float operations (interleaved pairs in GGUF).
            let other = if ext.is_empty() { ".gguf" } else { "" };
            let across = fresh(&format!("convert-all-{dtype}{ext}-across{other}"));
            let o = convert_with(&out, &across, dtype, &[]);
            assert!(
                o.status.success(),
                "{dtype}{ext} -> {other}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let model3 = Model::open(&across).unwrap();
            let src3 = rml::model::packed::PackedSource::new(&model3).unwrap();
            let mut m3 = DecoderLM::new(model3.config(), &src3, &InlineExecutor, opts).unwrap();
            for (a, b) in m.weights().matrices().zip(m3.weights().matrices()) {
                assert_eq!(a.dtype(), b.dtype(), "{dtype}{ext} -> {other}: {}", a.name());
            }
            let d3 = max_abs_diff(m3.prefill(&prompt).unwrap(), &logits);
            eprintln!("tiny {dtype}{ext} -> {dtype}{other}: max abs logit diff {d3:.2e}");
            // f16/bf16 from GGUF to safetensors round the f32 norms GGUF keeps (measured
            // 1.9e-3 / 1.7e-2): the dtype's own tolerance.
            let tol = if ext == ".gguf" && dtype.contains("16") { tol } else { 1e-4 };
            assert!(d3 <= tol, "{dtype}{ext} -> {dtype}{other}: logits differ by {d3}");
        }
    }
}

#[test]
fn output_is_atomic_0644_and_the_same_bytes_every_run() {
    for ext in ["", ".gguf"] {
        let (a, b) = (fresh(&format!("convert-det-a{ext}")), fresh(&format!("convert-det-b{ext}")));
        for out in [&a, &b] {
            let o = convert_with(&data("tiny-llama/f32"), out, "q8_0", &[]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let files = |p: &Path| -> Vec<PathBuf> {
            if p.is_dir() {
                let mut v: Vec<_> =
                    std::fs::read_dir(p).unwrap().flatten().map(|e| e.path()).collect();
                v.sort();
                v
            } else {
                vec![p.to_path_buf()]
            }
        };
        let (fa, fb) = (files(&a), files(&b));
        assert_eq!(fa.len(), fb.len());
        assert!(!fa.is_empty());
        for (x, y) in fa.iter().zip(&fb) {
            assert!(
                std::fs::read(x).unwrap() == std::fs::read(y).unwrap(),
                "{} differs",
                x.display()
            );
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(x).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o644, "{}: mode {mode:o}", x.display());
            }
        }
    }
}

/// The tiny model with its final norm stored as F64, which rml cannot convert.
fn tiny_with_f64() -> PathBuf {
    let dir = fresh("convert-f64-in");
    std::fs::create_dir_all(&dir).unwrap();
    let src = data("tiny-llama/f32");
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let norm = st.tensor("model.norm.weight").unwrap();
    let wide: Vec<u8> = norm
        .data()
        .chunks_exact(4)
        .flat_map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())).to_le_bytes())
        .collect();
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(n, _)| n != "model.norm.weight").collect();
    views.push((
        "model.norm.weight".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F64, norm.shape().to_vec(), &wide)
            .unwrap(),
    ));
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    dir
}

#[test]
fn a_failed_convert_leaves_nothing_behind() {
    let input = tiny_with_f64();
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for ext in ["", ".gguf"] {
        let out = fresh(&format!("convert-fails{ext}"));
        let o = convert_with(&input, &out, "f32", &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("model.norm.weight") && err.contains("F64"), "{err}");
        assert!(!out.exists(), "{} exists after a failed convert", out.display());
        let name = out.file_name().unwrap().to_string_lossy().into_owned();
        let left = named_like(parent, &format!(".{name}"));
        assert!(left.is_empty(), "left behind: {left:?}");
        // And a rerun into the same name is not refused.
        let o = convert_with(&data("tiny-llama/f32"), &out, "f32", &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_convert_leaves_nothing_behind() {
    // SmolLM2 to f32: 540 MB, long enough to interrupt in the middle. SIGTERM is sent twice at
    // once, as `timeout` does (to the child, then to its process group): one request.
    let gguf = smollm2_gguf();
    for (sig, times) in [("-INT", 1), ("-TERM", 2), ("-HUP", 1)] {
        let out = fresh("convert-int");
        let parent = out.parent().unwrap().to_path_buf();
        let child = Command::new(env!("CARGO_BIN_EXE_rml"))
            .args(["convert", gguf.to_str().unwrap(), out.to_str().unwrap(), "--dtype", "f32"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        cli::wait_for(300, "convert to start writing model.safetensors", || {
            let started = named_like(&parent, ".convert-int.rml-tmp-").iter().any(|d| {
                std::fs::metadata(d.join("model.safetensors")).is_ok_and(|m| m.len() > 1 << 20)
            });
            started.then_some(())
        });
        for _ in 0..times {
            let k = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
            assert!(k.success());
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(130), "{sig}: {err}");
        assert!(!out.exists());
        let left = named_like(&parent, ".convert-int");
        assert!(left.is_empty(), "{sig}: left behind: {left:?}");
    }
}

#[test]
fn convert_reuses_buffers_from_the_pool() {
    let out = fresh("convert-pool");
    let o = convert_with(&data("tiny-llama/f32"), &out, "q8_0", &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // "buffers: N allocated, M reused": the two layers' equal shapes reuse blocks.
    let at = err.find("buffers: ").unwrap_or_else(|| panic!("no buffer counts in {err}"));
    let nums: Vec<usize> = err[at..]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(2)
        .map(|s| s.parse().unwrap())
        .collect();
    let (misses, reuses) = (nums[0], nums[1]);
    eprintln!("convert tiny q8_0: {misses} buffers allocated, {reuses} reused");
    assert!(reuses > 0 && reuses >= misses, "{err}");
}

#[test]
fn the_doc_comment_and_help_list_every_dtype() {
    let o = Command::new(env!("CARGO_BIN_EXE_rml")).args(["convert", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/rml/convert.rs"))
            .unwrap();
    let doc: String = doc.lines().filter(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    for d in DTYPES {
        assert!(help.contains(d), "--help lacks {d}: {help}");
        assert!(doc.contains(&format!("`{d}`")), "convert.rs's doc comment lacks `{d}`");
    }
}

#[test]
fn gguf_to_q8_0_gguf_keeps_the_tokenizer_and_matches_transformers() {
    let gguf = smollm2_gguf();
    let out = fresh("convert-smollm2-q8_0.gguf");
    let o = convert_with(&gguf, &out, "q8_0", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = Model::open(&out).unwrap();
    let g = model.gguf().unwrap().unwrap();
    assert_eq!(g.get_u32("general.file_type").unwrap(), Some(7));
    assert_eq!(g.tokens().unwrap().len(), 49152);
    assert!(g.chat_template().unwrap().is_some());
    let q = model.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dtype, rml::DType::Q8_0);
    let norm = model.tensor("blk.0.attn_norm.weight").unwrap();
    assert_eq!(norm.dtype, rml::DType::F32);
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let want = r.f32s("decode_logits");
    let opts = DecoderOptions { context_len: Some(32), ..exact() };
    let mut m = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
    let logits = m.prefill(&prompt).unwrap();
    let mut worst = max_abs_diff(logits, &r.f32s("prefill_logits_last"));
    let mut agree = usize::from(argmax(logits) == generated[0]);
    for i in 0..16 {
        let logits = m.decode(generated[i]).unwrap();
        worst = worst.max(max_abs_diff(logits, &want[i * 49152..(i + 1) * 49152]));
        agree += usize::from(argmax(logits) == generated[i + 1]);
    }
    eprintln!(
        "SmolLM2 Q4_1 -> Q8_0 GGUF (rml convert): max abs logit diff {worst:.3}, argmax {agree}/17"
    );
    // Requantizing Q4_1 to Q8_0 adds Q8_0's rounding on top of the Q4_1 weights the reference
    // used; measured max diff above.
    assert!(agree >= 16, "argmax {agree}/17");
}

/// The prefill logits of the model at `path` on `prompt`, f32 activations.
fn prefill(path: &Path, prompt: &[u32]) -> Vec<f32> {
    let model = Model::open(path).unwrap();
    let src = rml::model::packed::PackedSource::new(&model).unwrap();
    let mut m = DecoderLM::new(model.config(), &src, &InlineExecutor, exact()).unwrap();
    m.prefill(prompt).unwrap().to_vec()
}

/// The tensor names of the model at `path`, sorted.
fn tensor_names(path: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        Model::open(path).unwrap().tensor_infos().iter().map(|t| t.name.clone()).collect();
    v.sort();
    v
}

#[test]
fn families_beyond_llama_keep_every_tensor_and_run() {
    // Gemma 3 (q/k norms, norms after attention and after the MLP) and Qwen3 (q/k norms)
    // GGUFs, and Qwen2 (q/k/v biases) and Qwen3 folders: nothing the loader asks for is lost.
    let prompt = [1u32, 5, 9, 2, 7];
    for (rel, ext) in [
        ("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf", ".gguf"),
        ("tiny-qwen3/gguf/tiny-qwen3-Q8_0.gguf", ".gguf"),
        ("tiny-qwen2", ""),
        ("tiny-qwen3", ""),
    ] {
        let input = data(rel);
        let want = prefill(&input, &prompt);
        let family = rel.split('/').next().unwrap();
        for dtype in ["f32", "q4_0"] {
            let out = fresh(&format!("convert-{family}-{dtype}{ext}"));
            let o = convert_with(&input, &out, dtype, &[]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{family} {dtype}: {err}");
            assert!(!err.contains("skipped"), "{family} {dtype}: {err}");
            let mut names = tensor_names(&input);
            if Model::open(&input).unwrap().config().tie_word_embeddings {
                names.retain(|n| n != "lm_head.weight" && n != "output.weight");
            }
            assert_eq!(tensor_names(&out), names, "{family} {dtype}");
            assert_eq!(
                Model::open(&out).unwrap().config().arch.name,
                Model::open(&input).unwrap().config().arch.name
            );
            let got = prefill(&out, &prompt);
            let d = max_abs_diff(&got, &want);
            eprintln!("{family} -> {dtype}{ext}: max abs logit diff {d:.2e}");
            // f32 holds the input's weights exactly (dequantized); q4_0 only has to run.
            if dtype == "f32" {
                assert!(d <= 1e-3, "{family} {dtype}: logits differ by {d}");
            } else {
                assert!(got.iter().all(|x| x.is_finite()), "{family} {dtype}");
            }
        }
    }
    // The GGUF keeps its tokenizer: `rml generate` runs the converted Gemma.
    let out = fresh("convert-gemma3-generate.gguf");
    let o = convert_with(&data("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf"), &out, "q4_0", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = cli::rml(&["generate", "-m", out.to_str().unwrap(), "-p", "hi", "-n", "3"]);
    assert!(o.status.success(), "{}", cli::stderr(&o));
}

/// Fails unless `o` is a one-line exit-1 error containing every one of `needles`, naming no
/// temporary, and nothing named like `out` was left beside it.
fn refused(o: &std::process::Output, out: &Path, needles: &[&str]) {
    cli::one_line_error(o, needles[0]);
    let err = cli::stderr(o);
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
    assert!(!err.contains("rml-tmp"), "names the temporary: {err}");
    assert!(!out.exists(), "{} exists", out.display());
    if let Some(parent) = out.parent().filter(|p| p.is_dir()) {
        let name = out.file_name().unwrap().to_string_lossy().into_owned();
        let left = named_like(parent, &format!(".{name}"));
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

#[test]
fn convert_refuses_up_front_what_it_cannot_write() {
    // A folder with a tokenizer.json into a GGUF: the GGUF would have no tokenizer.
    let dir = cli::tiny_dir("convert-tok-folder", None);
    let out = fresh("convert-tok-folder.gguf");
    let o = convert_with(&dir, &out, "q4_1", &[]);
    refused(&o, &out, &["no tokenizer", "write a folder instead"]);
    // The same folder into a folder keeps it.
    let out = fresh("convert-tok-folder-out");
    let o = convert_with(&dir, &out, "q4_1", &[]);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    assert!(out.join("tokenizer.json").is_file());
    // ... and a GGUF inside the folder finds it beside.
    let inside = dir.join("inside.gguf");
    let o = convert_with(&dir, &inside, "q4_1", &[]);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let o = cli::rml(&["generate", "-m", inside.to_str().unwrap(), "-p", "hi", "-n", "2"]);
    assert!(o.status.success(), "{}", cli::stderr(&o));

    // An output folder that does not exist: named as given, before any work.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("convert-no-such-dir/x.gguf");
    let _ = std::fs::remove_dir_all(out.parent().unwrap());
    let o = convert_with(&data("tiny-llama/f32"), &out, "f32", &[]);
    refused(&o, &out, &[out.to_str().unwrap(), "does not exist"]);
    // ... or is a file.
    let file = fresh("convert-a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = file.join("x.gguf");
    let o = convert_with(&data("tiny-llama/f32"), &out, "f32", &[]);
    refused(&o, &out, &[out.to_str().unwrap(), "is not a folder"]);
    // llama.cpp's Llama 3 GGUF holds its rope scaling as rope_freqs.weight divisors only, which
    // do not say config.json's parameters: refused into a folder in one line naming the
    // tensor and both paths (convert_roundtrip.rs round-trips rml's own Llama 3 GGUF).
    let out = fresh("convert-llama3-folder");
    let input = data("tiny-llama3/gguf/tiny-llama3-Q8_0.gguf");
    let o = convert_with(&input, &out, "f32", &[]);
    refused(
        &o,
        &out,
        &["rope_freqs.weight", "low_freq_factor", input.to_str().unwrap(), out.to_str().unwrap()],
    );
    // A GGUF name ending in '/' (a file cannot): refused before writing.
    let out = PathBuf::from(format!("{}/", fresh("convert-slash.gguf").display()));
    let o = convert_with(&data("tiny-llama/f32"), &out, "f32", &["--format", "gguf"]);
    refused(&o, &out, &["ends with '/'"]);

    // A SentencePiece vocabulary from GGUF has no tokenizer.json form: the error names the
    // output, not the temporary.
    let out = fresh("convert-spm-folder");
    let o = convert_with(&data("tiny-llama-gguf/tiny-llama-F32.gguf"), &out, "f32", &[]);
    let tok = out.join("tokenizer.json");
    refused(&o, &out, &[tok.to_str().unwrap(), "SentencePiece", "tokenizer.ggml.model", ".gguf"]);

    // Gemma 3 from GGUF into a folder: its SentencePiece vocabulary has no tokenizer.json form
    // (convert_roundtrip.rs converts it with a tokenizer.json beside the GGUF).
    let out = fresh("convert-gemma3-folder");
    let o = convert_with(&data("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf"), &out, "bf16", &[]);
    refused(&o, &out, &["SentencePiece", ".gguf"]);
}

/// The tiny Gemma 3 in Q4_0 generates byte tokens that split UTF-8 characters; streaming them
/// once panicked slicing inside a U+FFFD after the text window moved (`TextStream::push`).
#[test]
fn streaming_split_utf8_from_a_converted_model_does_not_panic() {
    let out = convert(&data("tiny-gemma3"), "stream-q4_0", "q4_0");
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["generate", "-m", out.to_str().unwrap(), "-p", "hi", "-n", "8", "-t", "1"])
        .args(["--temperature", "0"])
        .env("RML_TUNE", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("hi"), "{err}");
}
