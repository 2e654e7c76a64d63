//! Qwen3 (`Qwen3ForCausalLM`): Llama's math plus a per-head RMSNorm of queries and keys
//! (`q_norm` / `k_norm`, weight `[head_dim]`, `x̂ * w`) before RoPE, and an explicit
//! `head_dim` (default 128, independent of `hidden_size / num_attention_heads`).
//!
//! GGUF (`qwen3`): `blk.N.attn_{q,k}_norm.weight`, `qwen3.attention.key_length` carries
//! head_dim; no q/k permutation.

use super::{ArchSpec, HfDefaults, SlidingRule, LLAMA_LIKE};

/// The Qwen3 family.
pub const SPEC: ArchSpec = ArchSpec {
    name: "Qwen3",
    hf_model_types: &["qwen3"],
    hf_architecture: "Qwen3ForCausalLM",
    gguf_architectures: &["qwen3"],
    qk_norm: true,
    sliding_rule: SlidingRule::FromMaxWindowLayers,
    hf_defaults: HfDefaults {
        max_position_embeddings: 32768,
        head_dim: Some(128),
        sliding_window: Some(4096),
        max_window_layers: 28,
        ..LLAMA_LIKE.hf_defaults
    },
    ..LLAMA_LIKE
};
