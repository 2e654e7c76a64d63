//! [`ModelConfig`] → the two forms rml reads it from: GGUF metadata under the family's key
//! prefix ([`gguf_metadata`], read back by [`super::from_gguf`]) and a Hugging Face
//! `config.json` ([`config_json`], read back by [`super::parse_config`]).
//!
//! GGUF keys are llama.cpp's (`gguf-py`'s `Keys`, as its `convert_hf_to_gguf.py` writes them
//! for `llama`, `qwen2`, `qwen3` and `gemma3`); Mistral is written as `llama`, as llama.cpp
//! does. GGUF cannot say everything a `config.json` can: what it cannot carry is refused by
//! [`gguf_metadata`] (naming the field), except Mistral's sliding window, which llama.cpp drops
//! too (see [`crate::model::arch::mistral`]).
//!
//! Llama 3's `llama3` rope scaling has no llama.cpp key: llama.cpp's converter writes the
//! scaled frequencies as a `rope_freqs.weight` tensor of divisors ([`gguf_rope_freqs`]), which
//! is what llama.cpp and rml run. rml writes that tensor too, and also the scaling's four
//! parameters under its own keys ([`LLAMA3_KEYS`], read back by [`super::gguf::llama3_scaling`])
//! so that a GGUF → folder conversion can write them back into `config.json`. They are not
//! under `{arch}.rope.scaling.*`: llama.cpp reads `rope.scaling.type` (and refuses a type it
//! does not know) and applies `rope.scaling.factor` to every frequency, which would scale the
//! model a second time there.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::{json, Value as Json};

use crate::error::{Error, Result};
use crate::format::write::Value;
use crate::model::config::{LayerKind, ModelConfig, RopeScaling};
use crate::ops::rope_inv_freq;

/// rml's GGUF keys for a `llama3` rope scaling (see the module docs), each holding the
/// `config.json` field of the same name: `factor`, `low_freq_factor`, `high_freq_factor` as
/// f64, `original_max_position_embeddings` as u64.
pub const LLAMA3_KEYS: [&str; 4] = [
    "rml.rope_scaling.llama3.factor",
    "rml.rope_scaling.llama3.low_freq_factor",
    "rml.rope_scaling.llama3.high_freq_factor",
    "rml.rope_scaling.llama3.original_max_position_embeddings",
];

/// The `rope_freqs.weight` tensor a GGUF of `c` carries (`head_dim / 2` f32 values, each the
/// divisor of one RoPE inverse frequency), or `None` unless `c` has `llama3` rope scaling.
/// llama.cpp's converter's formula (`LlamaModel.generate_extra_tensors`) on rml's inverse
/// frequencies ([`rope_inv_freq`]): 1 where the wavelength `2π / f` is below
/// `original_max_position_embeddings / high_freq_factor`, `factor` above
/// `original_max_position_embeddings / low_freq_factor`, and `1 / ((1 - s) / factor + s)` in
/// between, `s = (original_max_position_embeddings / wavelength - low_freq_factor) /
/// (high_freq_factor - low_freq_factor)`; computed in f64, rounded to f32.
pub fn gguf_rope_freqs(c: &ModelConfig) -> Option<Vec<f32>> {
    let RopeScaling::Llama3 {
        factor,
        low_freq_factor: low,
        high_freq_factor: high,
        original_max_position_embeddings: old,
    } = c.rope_scaling
    else {
        return None;
    };
    let mut f = alloc::vec![0f32; c.head_dim / 2];
    rope_inv_freq(c.rope_theta as f32, c.head_dim, &mut f);
    let old = old as f64;
    for x in f.iter_mut() {
        let wavelen = 2.0 * core::f64::consts::PI / *x as f64;
        *x = if wavelen < old / high {
            1.0
        } else if wavelen > old / low {
            factor as f32
        } else {
            let s = (old / wavelen - low) / (high - low);
            (1.0 / ((1.0 - s) / factor + s)) as f32
        };
    }
    Some(f)
}

/// The GGUF metadata of `c`: `general.architecture` ([`crate::model::arch::ArchSpec::gguf_architecture`])
/// and the `{arch}.*` keys [`super::from_gguf`] reads (sizes, heads, head width as
/// `attention.key_length` / `value_length` / `rope.dimension_count`, `rope.freq_base`,
/// `attention.layer_norm_rms_epsilon`, `context_length`, `vocab_size`, linear
/// `rope.scaling.*`; for sliding-window families `attention.sliding_window`,
/// `rope.freq_base_swa`, `final_logit_softcapping`), plus `tokenizer.ggml.bos_token_id` /
/// `eos_token_id` when known, and for `llama3` rope scaling rml's [`LLAMA3_KEYS`] (the file
/// also needs the [`gguf_rope_freqs`] tensor). Keys in sorted order.
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] for what a GGUF file cannot say, naming it: a layer pattern or
/// `query_pre_attn_scalar` other than the family's llama.cpp rule; a sliding window on a
/// family whose GGUF has none other than Mistral; [`crate::Code::InvalidArgument`] for a
/// size above `u32::MAX`.
pub fn gguf_metadata(c: &ModelConfig) -> Result<Vec<(String, Value)>> {
    let a = c.arch.gguf_architecture();
    let cannot = |what: core::fmt::Arguments<'_>| {
        Error::unimplemented(format_args!("GGUF output ({a}): {what} has no GGUF form"))
    };
    let u32v = |v: usize, k: &str| {
        u32::try_from(v).map(Value::U32).map_err(|_| {
            Error::invalid_argument(format_args!("GGUF output: {k} {v} does not fit a u32"))
        })
    };
    let mut m: Vec<(String, Value)> = Vec::new();
    if let RopeScaling::Llama3 {
        factor,
        low_freq_factor,
        high_freq_factor,
        original_max_position_embeddings,
    } = c.rope_scaling
    {
        let [k0, k1, k2, k3] = LLAMA3_KEYS;
        m.push((k0.to_string(), Value::F64(factor)));
        m.push((k1.to_string(), Value::F64(low_freq_factor)));
        m.push((k2.to_string(), Value::F64(high_freq_factor)));
        m.push((k3.to_string(), Value::U64(original_max_position_embeddings as u64)));
    }
    let mut put = |k: &str, v: Value| m.push((alloc::format!("{a}.{k}"), v));
    put("vocab_size", u32v(c.vocab_size, "vocab_size")?);
    put("context_length", u32v(c.max_position_embeddings, "max_position_embeddings")?);
    put("embedding_length", u32v(c.hidden_size, "hidden_size")?);
    put("block_count", u32v(c.num_hidden_layers, "num_hidden_layers")?);
    put("feed_forward_length", u32v(c.intermediate_size, "intermediate_size")?);
    put("attention.head_count", u32v(c.num_attention_heads, "num_attention_heads")?);
    put("attention.head_count_kv", u32v(c.num_key_value_heads, "num_key_value_heads")?);
    put("attention.key_length", u32v(c.head_dim, "head_dim")?);
    put("attention.value_length", u32v(c.head_dim, "head_dim")?);
    put("rope.dimension_count", u32v(c.head_dim, "head_dim")?);
    put("rope.freq_base", Value::F32(c.rope_theta as f32));
    put("attention.layer_norm_rms_epsilon", Value::F32(c.rms_norm_eps as f32));
    if let RopeScaling::Linear { factor } = c.rope_scaling {
        put("rope.scaling.type", Value::Str("linear".to_string()));
        put("rope.scaling.factor", Value::F32(factor as f32));
    }
    match c.arch.gguf_sliding_pattern {
        Some(p) => {
            let rule = (0..c.num_hidden_layers).map(|l| {
                if (l + 1) % p == 0 {
                    LayerKind::Global
                } else {
                    LayerKind::Sliding
                }
            });
            if !rule.eq(c.layer_types.iter().copied()) {
                return Err(cannot(format_args!(
                    "a layer pattern other than every {p}th layer global ({:?})",
                    c.layer_types
                )));
            }
            let w = c.sliding_window.unwrap_or(0);
            put("attention.sliding_window", u32v(w, "sliding_window")?);
            if let Some(t) = c.local_rope_theta {
                put("rope.freq_base_swa", Value::F32(t as f32));
            }
            if let Some(cap) = c.final_logit_softcapping {
                put("final_logit_softcapping", Value::F32(cap as f32));
            }
        }
        None => {
            let slides = c.layer_types.contains(&LayerKind::Sliding);
            if slides && c.arch.gguf_architectures.contains(&a) {
                return Err(cannot(format_args!(
                    "sliding-window layers (sliding_window {:?})",
                    c.sliding_window
                )));
            }
            // Mistral: written as llama without its window, as llama.cpp does.
        }
    }
    if c.arch.hf_defaults.query_pre_attn_scalar.is_some() {
        let rule = if c.num_hidden_layers == 62 {
            c.hidden_size / c.num_attention_heads.max(1)
        } else {
            c.head_dim
        };
        if c.query_pre_attn_scalar != Some(rule as f64) {
            return Err(cannot(format_args!(
                "query_pre_attn_scalar {:?} (GGUF readers use {rule})",
                c.query_pre_attn_scalar
            )));
        }
    }
    m.push(("general.architecture".to_string(), Value::Str(a.to_string())));
    if let Some(b) = c.bos_token_id {
        m.push(("tokenizer.ggml.bos_token_id".to_string(), Value::U32(b)));
    }
    if let Some(&e) = c.eos_token_ids.first() {
        m.push(("tokenizer.ggml.eos_token_id".to_string(), Value::U32(e)));
    }
    m.sort_by(|x, y| x.0.cmp(&y.0));
    Ok(m)
}

/// A Hugging Face `config.json` for `c` (transformers 4 dialect, which transformers 5 reads
/// too): `model_type` and `architectures` of the family, every size, `head_dim`,
/// `rms_norm_eps`, `rope_theta` and `rope_scaling`, the activation under the family's key,
/// `tie_word_embeddings`, BOS/EOS, `layer_types` / `sliding_window` (and Gemma's
/// `rope_local_base_freq`, `query_pre_attn_scalar`, `final_logit_softcapping`), and
/// `torch_dtype` = `dtype`. Reading it with [`super::parse_config`] gives `c` back (but for
/// `dtype`, which is `torch_dtype`).
pub fn config_json(c: &ModelConfig, torch_dtype: &str) -> Json {
    let arch = c.arch;
    let rope_scaling = match c.rope_scaling {
        RopeScaling::None => Json::Null,
        RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position_embeddings,
        }),
    };
    let model_type = arch.hf_model_types.first().copied().unwrap_or("llama");
    let mut o = serde_json::Map::new();
    let mut put = |k: &str, v: Json| {
        o.insert(k.to_string(), v);
    };
    put("architectures", json!([arch.hf_architecture]));
    put("model_type", json!(model_type));
    put(arch.hf_activation_key, json!(arch.activation.hf_name()));
    put("vocab_size", json!(c.vocab_size));
    put("hidden_size", json!(c.hidden_size));
    put("intermediate_size", json!(c.intermediate_size));
    put("num_hidden_layers", json!(c.num_hidden_layers));
    put("num_attention_heads", json!(c.num_attention_heads));
    put("num_key_value_heads", json!(c.num_key_value_heads));
    put("head_dim", json!(c.head_dim));
    put("max_position_embeddings", json!(c.max_position_embeddings));
    put("rms_norm_eps", json!(c.rms_norm_eps));
    put("rope_theta", json!(c.rope_theta));
    put("rope_scaling", rope_scaling);
    put("tie_word_embeddings", json!(c.tie_word_embeddings));
    put("bos_token_id", json!(c.bos_token_id));
    put(
        "eos_token_id",
        match c.eos_token_ids.as_slice() {
            [] => Json::Null,
            [one] => json!(one),
            many => json!(many),
        },
    );
    let kinds: Vec<&str> = c
        .layer_types
        .iter()
        .map(|k| match k {
            LayerKind::Global => "full_attention",
            LayerKind::Sliding => "sliding_attention",
        })
        .collect();
    put("layer_types", json!(kinds));
    put("sliding_window", json!(c.sliding_window));
    if arch.hf_defaults.local_rope_theta.is_some() {
        put("rope_local_base_freq", json!(c.local_rope_theta.unwrap_or(c.rope_theta)));
    }
    if arch.hf_defaults.query_pre_attn_scalar.is_some() {
        put("query_pre_attn_scalar", json!(c.query_pre_attn_scalar));
    }
    if arch.sandwich_norms {
        put("final_logit_softcapping", json!(c.final_logit_softcapping));
    }
    put("torch_dtype", json!(torch_dtype));
    Json::Object(o)
}
