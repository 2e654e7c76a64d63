//! Qwen2 / Qwen2.5 (`Qwen2ForCausalLM`): Llama's math plus biases on the q/k/v projections
//! (not on o_proj).
//!
//! GGUF (`qwen2`): `blk.N.attn_{q,k,v}.bias`; q/k rows are not permuted (llama.cpp uses NEOX
//! RoPE, i.e. rotate-half). transformers' defaults: `max_position_embeddings` 32768, a window
//! only with `use_sliding_window` (layers from `max_window_layers` on).

use super::{ArchSpec, HfDefaults, SlidingRule, LLAMA_LIKE};

/// The Qwen2 family.
pub const SPEC: ArchSpec = ArchSpec {
    name: "Qwen2",
    hf_model_types: &["qwen2"],
    hf_architecture: "Qwen2ForCausalLM",
    gguf_architectures: &["qwen2"],
    qkv_bias: true,
    sliding_rule: SlidingRule::FromMaxWindowLayers,
    hf_defaults: HfDefaults {
        max_position_embeddings: 32768,
        sliding_window: Some(4096),
        max_window_layers: 28,
        ..LLAMA_LIKE.hf_defaults
    },
    ..LLAMA_LIKE
};
