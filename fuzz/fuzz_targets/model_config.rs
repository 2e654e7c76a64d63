//! The configuration path of every family rml runs (Llama, Mistral, Qwen2, Qwen3, Gemma 3):
//! input starting with `GGUF` goes through `Gguf::parse` and `model::config::from_gguf`
//! (keys under the file's `general.architecture` prefix), anything else as `config.json`
//! text through `model::config::parse_config`. Checks for an accepted config: it passes its
//! own `validate()`; KV heads divide query heads, the head width is even and non-zero, one
//! layer kind per layer and a non-zero window when a layer slides; then
//! `DecoderLM::memory_plan` (several option sets) and, for GGUF, `memory_plan_for` over the
//! file's own tensors never panic or overflow: an `Error` is fine, and an accepted plan has
//! the KV cache, logits and RoPE sizes the config implies, with totals that fit `usize`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::format::gguf::Gguf;
use rml::format::TensorSource;
use rml::model::config::{LayerKind, ModelConfig};
use rml::model::{DecoderLM, DecoderOptions, MemoryPlan, WeightFormat};
use rml::ops::Activations;
use rml::Code;

fn check_config(c: &ModelConfig) {
    c.validate().expect("an accepted config fails validate()");
    assert!(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0);
    assert!(c.kv_groups() >= 1);
    assert!(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim {}", c.head_dim);
    assert!(c.hidden_size > 0 && c.vocab_size > 0 && c.num_hidden_layers > 0);
    assert_eq!(c.layer_types.len(), c.num_hidden_layers);
    if c.layer_types.contains(&LayerKind::Sliding) {
        assert!(c.sliding_window.is_some_and(|w| w > 0));
    }
    assert!(rml::model::arch::FAMILIES.iter().any(|f| f.name == c.arch.name));
    let _ = c.attention_scale();
    let _ = c.attention_start(c.num_hidden_layers - 1, usize::MAX / 2);
}

fn check_plan(c: &ModelConfig, o: &DecoderOptions, plan: rml::Result<MemoryPlan>) {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            assert!(
                matches!(
                    e.code(),
                    Code::ResourceExhausted
                        | Code::InvalidArgument
                        | Code::NotFound
                        | Code::Unimplemented
                        | Code::DataLoss
                ),
                "{e}"
            );
            return;
        }
    };
    let ctx = o.context_len.unwrap_or(c.max_position_embeddings.min(4096));
    assert_eq!(plan.context_len, ctx);
    assert!(ctx >= 1 && ctx <= c.max_position_embeddings);
    assert_eq!(plan.prefill_chunk, o.prefill_chunk.min(ctx));
    let kv = [2, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, ctx, 4]
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b));
    assert_eq!(Some(plan.kv_cache), kv);
    assert_eq!(Some(plan.logits), c.vocab_size.checked_mul(4));
    let tables = if c.local_rope_theta.is_some() { 2 } else { 1 };
    assert_eq!(plan.rope, c.head_dim / 2 * 4 * tables);
    // Every total fits (these sums are unchecked in MemoryPlan; overflow would panic here).
    assert!(plan.region_bytes_unaligned() >= plan.buffer_bytes());
    assert!(plan.heap_bytes() >= plan.buffer_bytes());
    let _ = plan.to_string();
}

fn options() -> [DecoderOptions; 4] {
    [
        DecoderOptions::default(),
        DecoderOptions { context_len: Some(1), prefill_chunk: 1, ..DecoderOptions::default() },
        DecoderOptions {
            activations: Activations::Int8Plain,
            weight_format: WeightFormat::Q8_0,
            prefill_chunk: usize::MAX,
            ..DecoderOptions::default()
        },
        DecoderOptions { context_len: Some(usize::MAX), ..DecoderOptions::default() },
    ]
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"GGUF") {
        let Ok(g) = Gguf::parse(data) else { return };
        let Ok(c) = rml::model::config::from_gguf(&g) else { return };
        check_config(&c);
        for o in options() {
            check_plan(&c, &o, DecoderLM::memory_plan(&c, &o));
            let src: &dyn TensorSource<'_> = &g;
            check_plan(&c, &o, DecoderLM::memory_plan_for(&c, &o, src));
        }
    } else {
        let Ok(text) = std::str::from_utf8(data) else { return };
        let Ok(c) = rml::model::config::parse_config(text) else { return };
        check_config(&c);
        for o in options() {
            check_plan(&c, &o, DecoderLM::memory_plan(&c, &o));
        }
    }
});
