//! Mistral (`MistralForCausalLM`): Llama's math with a sliding window on every layer.
//!
//! `sliding_window` (default 4096, `null` for none): key `j` is visible from query `i` iff
//! `i - window < j <= i` (transformers' `sliding_window_overlay`). A GGUF cannot say that a
//! model is a Mistral: llama.cpp's converter writes `general.architecture = llama` and no
//! window key, so such a file runs as [`super::llama`] (full causal attention, as llama.cpp).

use super::{ArchSpec, HfDefaults, SlidingRule, LLAMA_LIKE};

/// The Mistral family (Hugging Face folders only; its GGUFs say `llama`).
pub const SPEC: ArchSpec = ArchSpec {
    name: "Mistral",
    hf_model_types: &["mistral"],
    hf_architecture: "MistralForCausalLM",
    gguf_architectures: &[],
    // Written to GGUF as Llama, with Llama's q/k row permutation.
    gguf_qk_permuted: true,
    sliding_rule: SlidingRule::AllLayers,
    hf_defaults: HfDefaults {
        max_position_embeddings: 4096 * 32,
        sliding_window: Some(4096),
        ..LLAMA_LIKE.hf_defaults
    },
    ..LLAMA_LIKE
};
