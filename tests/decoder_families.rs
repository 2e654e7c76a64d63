//! Every family against transformers' float32 reference (tests/data/tiny-*/, see the README
//! there): Hugging Face folders (prefill logits, the residual stream after every layer,
//! teacher-forced decode logits, greedy tokens) and GGUF files (the F32 tiny-llama against the
//! HF folder's logits; Q8_0 files against their `reference_Q8_0.safetensors`, teacher-forced),
//! plus the errors a family's config can raise.
#![cfg(feature = "std")]

mod decoder_common;

use decoder_common::{argmax, data, leak_aligned, max_abs_diff, Reference};
use rml::format::gguf::Gguf;
use rml::format::safetensors::SafeTensors;
use rml::format::{TensorSource, TensorView};
use rml::model::config::{from_gguf, parse_config, LayerKind, ModelConfig};
use rml::model::{DecoderLM, DecoderOptions, Hidden, Stage};
use rml::ops::Activations;
use rml::{Code, InlineExecutor};

/// The decoder's defaults with f32 activations: these checks compare against reference
/// numbers (or bit patterns) of the exact path.
fn exact() -> DecoderOptions {
    DecoderOptions { activations: Activations::F32, ..DecoderOptions::default() }
}

const TOL: f32 = 1e-4;

fn config(dir: &str, file: &str) -> ModelConfig {
    let path = data(dir).join(file);
    parse_config(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A decoder over the HF folder `dir`'s weights with the config in `config_file` (relative to
/// `dir`).
fn hf_model(dir: &str, config_file: &str) -> DecoderLM<'static> {
    let cfg = config(dir, config_file);
    let st = SafeTensors::parse(leak_aligned(&data(dir).join("model.safetensors"))).unwrap();
    let st: &'static SafeTensors<'static> = Box::leak(Box::new(st));
    DecoderLM::new(&cfg, st, &InlineExecutor, exact()).unwrap()
}

fn gguf_model(path: &str) -> DecoderLM<'static> {
    let g = Gguf::parse(leak_aligned(&data(path))).unwrap();
    let g: &'static Gguf<'static> = Box::leak(Box::new(g));
    let cfg = from_gguf(g).unwrap_or_else(|e| panic!("{path}: {e}"));
    DecoderLM::new(&cfg, g, &InlineExecutor, exact()).unwrap()
}

/// Prefill (every row, and the hidden states when the reference has them) and teacher-forced
/// decode against `r`, within `tol`; greedy tokens equal the reference's.
fn check(what: &str, m: &mut DecoderLM<'_>, r: &Reference, tol: f32) {
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let vocab = m.config().vocab_size;
    let layers = m.config().num_hidden_layers;
    let mut logits = vec![0f32; prompt.len() * vocab];
    let mut hidden: Vec<(Stage, Vec<f32>)> = Vec::new();
    let mut observe = |s: &Hidden<'_>| hidden.push((s.stage, s.data.to_vec()));
    let last = m.forward(&prompt, Some(&mut logits), Some(&mut observe)).unwrap().to_vec();
    let d = max_abs_diff(&logits, &r.f32s("prefill_logits"));
    eprintln!("{what}: prefill logits max abs diff {d:.2e}");
    assert!(d <= tol, "{what}: prefill logits differ by {d}");
    if r.has("hidden.embed_out") {
        for (stage, got) in &hidden {
            let name = match stage {
                Stage::Embedding => "hidden.embed_out".to_string(),
                Stage::Layer(l) => format!("hidden.layer{l}_out"),
                Stage::FinalNorm => "hidden.final_norm_out".to_string(),
            };
            let d = max_abs_diff(got, &r.f32s(&name));
            assert!(d <= tol, "{what}: {name} differs by {d}");
        }
        assert_eq!(hidden.len(), layers + 2, "{what}: stages observed");
    }
    assert_eq!(argmax(&last), generated[0], "{what}: first greedy token");
    let want = r.f32s("decode_logits");
    let mut worst = 0f32;
    for (i, &tok) in generated[..generated.len() - 1].iter().enumerate() {
        let got = m.decode(tok).unwrap();
        let d = max_abs_diff(got, &want[i * vocab..(i + 1) * vocab]);
        worst = worst.max(d);
        assert!(d <= tol, "{what}: decode step {i} differs by {d}");
        assert_eq!(argmax(got), generated[i + 1], "{what}: greedy token {}", i + 1);
    }
    eprintln!("{what}: decode logits max abs diff {worst:.2e}");
}

fn hf_check(dir: &str, config_file: &str) {
    let mut m = hf_model(dir, config_file);
    let r = Reference::open(&data(dir).join("reference.safetensors"));
    check(&format!("{dir} {config_file}"), &mut m, &r, TOL);
}

#[test]
fn qwen2_hf_matches_transformers() {
    let c = config("tiny-qwen2", "config.json");
    assert_eq!(c.arch.name, "Qwen2");
    assert!(c.arch.qkv_bias);
    hf_check("tiny-qwen2", "config.json");
}

#[test]
fn qwen3_hf_matches_transformers() {
    let c = config("tiny-qwen3", "config.json");
    assert_eq!(
        (c.arch.name, c.head_dim, c.num_attention_heads, c.hidden_size),
        ("Qwen3", 64, 8, 256)
    );
    assert!(c.tie_word_embeddings);
    hf_check("tiny-qwen3", "config.json");
}

#[test]
fn gemma3_hf_matches_transformers() {
    let c = config("tiny-gemma3", "config.json");
    assert_eq!(c.arch.name, "Gemma 3");
    let mut kinds = vec![LayerKind::Sliding; 5];
    kinds.push(LayerKind::Global);
    assert_eq!(c.layer_types, kinds);
    assert_eq!((c.sliding_window, c.local_rope_theta), (Some(8), Some(10_000.0)));
    assert_eq!((c.rope_theta, c.query_pre_attn_scalar), (1e6, Some(64.0)));
    hf_check("tiny-gemma3", "config.json");
}

/// query_pre_attn_scalar 256 instead of 64 moves the logits by up to 1.39: the field is read.
#[test]
fn gemma3_reads_query_pre_attn_scalar() {
    let dir = "tiny-gemma3/query_pre_attn_scalar_256";
    let cfg = config(dir, "config.json");
    assert_eq!(cfg.query_pre_attn_scalar, Some(256.0));
    let st = SafeTensors::parse(leak_aligned(&data("tiny-gemma3/model.safetensors"))).unwrap();
    let st: &'static SafeTensors<'static> = Box::leak(Box::new(st));
    let mut m = DecoderLM::new(&cfg, st, &InlineExecutor, exact()).unwrap();
    let r = Reference::open(&data(dir).join("reference.safetensors"));
    check(dir, &mut m, &r, TOL);
}

#[test]
fn llama3_rope_scaling_matches_transformers() {
    hf_check("tiny-llama3", "config.json");
    hf_check("tiny-llama3", "config.transformers4.json");
}

#[test]
fn mistral_sliding_window_matches_transformers() {
    let c = config("tiny-mistral", "config.json");
    assert_eq!((c.arch.name, c.sliding_window), ("Mistral", Some(8)));
    assert_eq!(c.layer_types, [LayerKind::Sliding; 2]);
    hf_check("tiny-mistral", "config.json");
    hf_check("tiny-mistral", "config.transformers4.json");
}

/// Chunked prefill (chunks of 5 < window 8 < prompt 16) equals one prefill: the window is
/// applied across chunk boundaries.
#[test]
fn sliding_window_survives_chunked_prefill() {
    for dir in ["tiny-mistral", "tiny-gemma3"] {
        let r = Reference::open(&data(dir).join("reference.safetensors"));
        let prompt = r.tokens("prompt");
        let cfg = config(dir, "config.json");
        let st = SafeTensors::parse(leak_aligned(&data(dir).join("model.safetensors"))).unwrap();
        let st: &'static SafeTensors<'static> = Box::leak(Box::new(st));
        let opts = DecoderOptions { prefill_chunk: 5, ..exact() };
        let mut m = DecoderLM::new(&cfg, st, &InlineExecutor, opts).unwrap();
        let vocab = cfg.vocab_size;
        let want = r.f32s("prefill_logits");
        let d = max_abs_diff(m.prefill(&prompt).unwrap(), &want[(prompt.len() - 1) * vocab..]);
        assert!(d <= TOL, "{dir}: chunked prefill differs by {d}");
    }
}

/// The F32 GGUF of tiny-llama (q/k rows permuted by llama.cpp's converter) gives the HF
/// folder's logits.
#[test]
fn llama_gguf_f32_equals_the_hf_folder() {
    let mut m = gguf_model("tiny-llama-gguf/tiny-llama-F32.gguf");
    assert_eq!(m.config().arch.name, "Llama");
    let r = Reference::open(&data("tiny-llama/f32/reference.safetensors"));
    check("tiny-llama F32 GGUF vs HF reference", &mut m, &r, 1e-5);
}

fn gguf_check(dir: &str, ty: &str) {
    let path = format!("{dir}/gguf/{dir}-{ty}.gguf");
    let mut m = gguf_model(&path);
    let r = Reference::open(&data(&format!("{dir}/gguf/reference_{ty}.safetensors")));
    check(&path, &mut m, &r, TOL);
}

#[test]
fn qwen2_gguf_q8_0_matches_its_reference() {
    gguf_check("tiny-qwen2", "Q8_0");
}

#[test]
fn qwen3_gguf_q8_0_matches_its_reference() {
    gguf_check("tiny-qwen3", "Q8_0");
}

/// Llama 3's scaling travels as `rope_freqs.weight` in GGUF.
#[test]
fn llama3_gguf_q8_0_with_rope_freqs_matches_its_reference() {
    let m = gguf_model("tiny-llama3/gguf/tiny-llama3-Q8_0.gguf");
    let f = m.weights().rope_freqs.as_ref().expect("rope_freqs.weight read");
    assert_eq!(f.as_slice()[0], 1.0);
    assert_eq!(f.as_slice()[31], 8.0);
    drop(m);
    gguf_check("tiny-llama3", "Q8_0");
}

/// Every family's decoder fits the memory plan exactly: built in a caller's region of
/// `region_bytes` (placement asserts it used exactly that), it gives the heap build's logits.
#[test]
fn every_family_builds_in_its_memory_plan() {
    let dirs = ["tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-llama3", "tiny-mistral"];
    let ggufs = [
        "tiny-qwen2/gguf/tiny-qwen2-Q8_0.gguf",
        "tiny-qwen3/gguf/tiny-qwen3-Q8_0.gguf",
        "tiny-llama3/gguf/tiny-llama3-Q8_0.gguf",
    ];
    let prompt = [5u32, 17, 42, 99, 3, 128, 7, 64, 200, 13];
    let opts = DecoderOptions { context_len: Some(32), ..exact() };
    let mut sources: Vec<(String, ModelConfig, &'static dyn rml::format::TensorSource<'static>)> =
        Vec::new();
    for dir in dirs {
        let st = SafeTensors::parse(leak_aligned(&data(dir).join("model.safetensors"))).unwrap();
        sources.push((dir.into(), config(dir, "config.json"), Box::leak(Box::new(st))));
    }
    for path in ggufs {
        let g = Gguf::parse(leak_aligned(&data(path))).unwrap();
        let g: &'static Gguf<'static> = Box::leak(Box::new(g));
        sources.push((path.into(), from_gguf(g).unwrap(), g));
    }
    for (what, cfg, src) in sources {
        let plan = DecoderLM::memory_plan_for(&cfg, &opts, src).unwrap();
        let region: &'static mut [u8] =
            Box::leak(vec![0u8; plan.region_bytes_unaligned()].into_boxed_slice());
        let mut placed = DecoderLM::new_in(&cfg, src, &InlineExecutor, opts, region).unwrap();
        let mut heap = DecoderLM::new(&cfg, src, &InlineExecutor, opts).unwrap();
        let a = placed.prefill(&prompt).unwrap().to_vec();
        assert_eq!(a, heap.prefill(&prompt).unwrap(), "{what}: placed vs heap logits");
    }
}

/// What a Gemma 3 GGUF cannot say is filled in as llama.cpp does: the 5:1 local/global
/// pattern and `query_pre_attn_scalar` = key_length; its norms are stored as 1 + w (offset 0).
#[test]
fn gemma3_gguf_config_follows_llama_cpp() {
    let g = Gguf::parse(leak_aligned(&data("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf"))).unwrap();
    let c = from_gguf(&g).unwrap();
    let hf = config("tiny-gemma3", "config.json");
    assert_eq!(c.arch.name, "Gemma 3");
    assert_eq!(c.layer_types, hf.layer_types);
    assert_eq!((c.sliding_window, c.local_rope_theta), (Some(8), Some(10_000.0)));
    assert_eq!((c.rope_theta, c.query_pre_attn_scalar), (1e6, Some(64.0)));
    assert_eq!((c.head_dim, c.num_key_value_heads), (hf.head_dim, hf.num_key_value_heads));
    assert!(c.tie_word_embeddings);
    assert_eq!(c.arch.gguf_norm_offset, 0.0);
    assert_eq!(c.arch.hf_norm_offset, 1.0);
}

// ------------------------------------------------------------------------------ errors

fn with(base: &str, edits: &[(&str, Option<&str>)]) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data(base)).unwrap()).unwrap();
    for &(k, val) in edits {
        match val {
            Some(val) => v[k] = serde_json::from_str(val).unwrap(),
            None => {
                v.as_object_mut().unwrap().remove(k);
            }
        }
    }
    v.to_string()
}

#[test]
fn unsupported_architecture_is_named_with_the_supported_ones() {
    let e = parse_config(&with("tiny-qwen2/config.json", &[("model_type", Some("\"phi3\""))]))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    for name in ["\"phi3\"", "llama", "mistral", "qwen2", "qwen3", "gemma3_text"] {
        assert!(e.message().contains(name), "{name} not in: {e}");
    }
}

#[test]
fn tie_word_embeddings_takes_the_family_default() {
    // Qwen3 (tied in the file): absent means false, so the missing lm_head is an error.
    let text = with("tiny-qwen3/config.json", &[("tie_word_embeddings", None)]);
    let cfg = parse_config(&text).unwrap();
    assert!(!cfg.tie_word_embeddings);
    let st = SafeTensors::parse(leak_aligned(&data("tiny-qwen3/model.safetensors"))).unwrap();
    let e = DecoderLM::new(&cfg, &st, &InlineExecutor, exact()).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("lm_head.weight"), "{e}");
    // Gemma 3: absent means true.
    let text = with("tiny-gemma3/config.json", &[("tie_word_embeddings", None)]);
    assert!(parse_config(&text).unwrap().tie_word_embeddings);
    // Llama, Mistral, Qwen2: false.
    for dir in ["tiny-llama3", "tiny-mistral", "tiny-qwen2"] {
        let text = with(&format!("{dir}/config.json"), &[("tie_word_embeddings", None)]);
        assert!(!parse_config(&text).unwrap().tie_word_embeddings, "{dir}");
    }
}

#[test]
fn untied_without_an_output_matrix_names_it() {
    let text = with("tiny-gemma3/config.json", &[("tie_word_embeddings", Some("false"))]);
    let cfg = parse_config(&text).unwrap();
    let st = SafeTensors::parse(leak_aligned(&data("tiny-gemma3/model.safetensors"))).unwrap();
    let e = DecoderLM::new(&cfg, &st, &InlineExecutor, exact()).unwrap_err();
    assert!(e.message().contains("\"lm_head.weight\""), "{e}");
}

/// A tensor source that hides one tensor of a safetensors file.
struct Hiding(&'static SafeTensors<'static>, &'static str);

impl TensorSource<'static> for Hiding {
    fn tensor(&self, name: &str) -> rml::Result<TensorView<'static>> {
        if name == self.1 {
            return Err(rml::Error::not_found(format_args!("tensor {name:?} is not in the model")));
        }
        self.0.tensor(name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.0.tensor_names().into_iter().filter(|n| *n != self.1).collect()
    }
}

/// Issue 13 item 2 on the Llama family (the default before families existed): untied, or
/// `tie_word_embeddings` absent (transformers' Llama reads it as false), without
/// `lm_head.weight` is an error naming it, never the embedding used as the head. Tied with
/// `lm_head.weight` present uses the embedding (`ModelConfig::tie_word_embeddings`).
#[test]
fn llama_untied_without_lm_head_names_it() {
    let st = SafeTensors::parse(leak_aligned(&data("tiny-llama/f32/model.safetensors"))).unwrap();
    let st: &'static SafeTensors<'static> = Box::leak(Box::new(st));
    let src = Hiding(st, "lm_head.weight");
    for tie in [Some("false"), None] {
        let text = with("tiny-llama/f32/config.json", &[("tie_word_embeddings", tie)]);
        let cfg = parse_config(&text).unwrap();
        assert!(!cfg.tie_word_embeddings, "tie_word_embeddings {tie:?}");
        let e = match DecoderLM::new(&cfg, &src, &InlineExecutor, exact()) {
            Ok(_) => panic!("tie_word_embeddings {tie:?} without lm_head.weight was accepted"),
            Err(e) => e,
        };
        assert!(e.message().contains("lm_head.weight"), "{e}");
    }
    // Tied, with lm_head.weight in the file too: accepted (the embedding is the head).
    let text = with("tiny-llama/f32/config.json", &[("tie_word_embeddings", Some("true"))]);
    let cfg = parse_config(&text).unwrap();
    DecoderLM::new(&cfg, st, &InlineExecutor, exact()).unwrap();
}

#[test]
fn zero_kv_heads_names_both_head_counts() {
    let text = with("tiny-qwen2/config.json", &[("num_key_value_heads", Some("0"))]);
    let e = parse_config(&text).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("num_key_value_heads 0"), "{e}");
    assert!(e.message().contains("num_attention_heads 4"), "{e}");
}

#[test]
fn gemma3_activation_and_sliding_settings_are_checked() {
    let text = with("tiny-gemma3/config.json", &[("hidden_activation", Some("\"silu\""))]);
    let e = parse_config(&text).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("hidden_activation") && e.message().contains("silu"), "{e}");
    // Without layer_types: every 6th layer (sliding_window_pattern) is global.
    let text = with(
        "tiny-gemma3/config.json",
        &[("layer_types", None), ("sliding_window_pattern", Some("3"))],
    );
    let c = parse_config(&text).unwrap();
    use LayerKind::{Global as G, Sliding as S};
    assert_eq!(c.layer_types, [S, S, G, S, S, G]);
    let text = with("tiny-gemma3/config.json", &[("sliding_window", Some("null"))]);
    let e = parse_config(&text).unwrap_err();
    assert!(e.message().contains("sliding_window"), "{e}");
}

/// K-quants (ggml's super-blocks, "Quant formats"): Gemma 3 Q4_K_M (norms stored as 1 + w,
/// the 5:1 pattern and query_pre_attn_scalar from llama.cpp's rules) and Qwen2 Q4_K_M.
#[test]
fn gemma3_gguf_q4_k_m_matches_its_reference() {
    gguf_check("tiny-gemma3", "Q4_K_M");
}

#[test]
fn qwen2_gguf_q4_k_m_matches_its_reference() {
    gguf_check("tiny-qwen2", "Q4_K_M");
}
