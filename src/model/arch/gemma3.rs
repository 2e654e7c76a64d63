//! Gemma 3, text only (`Gemma3ForCausalLM`, `model_type` `gemma3_text`).
//!
//! What differs from Llama (transformers' `modeling_gemma3.py`):
//! - every RMSNorm is `x̂ * (1 + w)`; the GGUF converter stores `1 + w` already;
//! - embeddings × `sqrt(hidden_size)` (rounded to f32) on input; the tied head uses them
//!   unscaled;
//! - GeGLU MLP with GELU's tanh approximation;
//! - per-head q/k RMSNorm before RoPE; scores × `query_pre_attn_scalar^-1/2` (default 256);
//! - norms after attention and after the MLP (`post_attention_layernorm`,
//!   `post_feedforward_layernorm`) before each residual add; the MLP's input norm is
//!   `pre_feedforward_layernorm`;
//! - sliding-window layers with their own RoPE base (`rope_local_base_freq` /
//!   `rope_parameters.sliding_attention`, default 10000) alternating with global ones
//!   (`layer_types`, else every `sliding_window_pattern`-th layer, default 6, is global);
//! - final logit soft-capping when `final_logit_softcapping` is set.
//!
//! GGUF (`gemma3`): no key for the layer pattern or `query_pre_attn_scalar`; llama.cpp makes
//! every 6th layer global and scales by `1/sqrt(key_length)`, local RoPE base
//! `gemma3.rope.freq_base_swa` (default 10000). rml does the same.

use super::{
    Activation, ArchSpec, HfDefaults, SlidingRule, TensorNames, GGUF_NAMES, HF_NAMES, LLAMA_LIKE,
};

/// The Gemma 3 family.
pub const SPEC: ArchSpec = ArchSpec {
    name: "Gemma 3",
    hf_model_types: &["gemma3_text"],
    hf_architecture: "Gemma3ForCausalLM",
    gguf_architectures: &["gemma3"],
    hf_activation_key: "hidden_activation",
    activation: Activation::GeluTanh,
    hf_names: TensorNames {
        post_attn_norm: "post_attention_layernorm.weight",
        ffn_norm: "pre_feedforward_layernorm.weight",
        ..HF_NAMES
    },
    gguf_names: GGUF_NAMES,
    qk_norm: true,
    sandwich_norms: true,
    hf_norm_offset: 1.0,
    gguf_norm_offset: 0.0,
    embed_scale_sqrt_hidden: true,
    sliding_rule: SlidingRule::Pattern,
    gguf_sliding_pattern: Some(6),
    gguf_local_rope_theta: Some(10_000.0),
    hf_defaults: HfDefaults {
        tie_word_embeddings: true,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        local_rope_theta: Some(10_000.0),
        max_position_embeddings: 131_072,
        head_dim: Some(256),
        sliding_window: Some(4096),
        sliding_window_pattern: 6,
        max_window_layers: 0,
        query_pre_attn_scalar: Some(256.0),
    },
    ..LLAMA_LIKE
};
