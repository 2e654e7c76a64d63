//! `rml convert`: GGUF or safetensors in, a Hugging Face safetensors folder out. The tiny
//! model converted f32 → bf16 is byte-identical to transformers' own bf16 save; SmolLM2's GGUF
//! converted to f32 safetensors (q/k rows un-permuted) passes the same teacher-forced checks
//! against transformers as the GGUF itself.
#![cfg(feature = "cli")]

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
    let Some(gguf) = smollm2_gguf() else { return };
    let out = convert(&gguf, "convert-smollm2-f32", "f32");
    let model = Model::open(&out).unwrap();
    assert!(model.config().tie_word_embeddings);
    assert!(model.tensor("lm_head.weight").is_err());
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let want = r.f32s("decode_logits");
    for act in [Activations::F32, Activations::Int8] {
        let opts =
            DecoderOptions { context_len: Some(32), activations: act, ..DecoderOptions::default() };
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
    // The tokenizer came along.
    assert!(out.join("tokenizer.json").is_file());
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
    let mut packed =
        DecoderLM::new(model.config(), &src, &InlineExecutor, DecoderOptions::default()).unwrap();
    for l in packed.weights().matrices() {
        assert!(l.is_borrowed(), "{} was copied", l.name());
        assert_eq!(l.dtype() == rml::DType::Q8_0, l.k() % 32 == 0, "{}", l.name());
    }
    // The same numbers as quantizing the f32 model at load.
    let f32_model = Model::open(data("tiny-llama/f32")).unwrap();
    let opts = DecoderOptions { weight_format: WeightFormat::Q8_0, ..DecoderOptions::default() };
    let mut at_load =
        DecoderLM::new(f32_model.config(), &&f32_model, &InlineExecutor, opts).unwrap();
    let a = packed.prefill(&prompt).unwrap().to_vec();
    assert!(a == at_load.prefill(&prompt).unwrap(), "packed Q8_0 differs from Q8_0 at load");
}
