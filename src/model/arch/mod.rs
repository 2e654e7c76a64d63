//! Model families as data: what differs between Llama, Mistral, Qwen2, Qwen3 and Gemma 3.
//!
//! The decoder ([`crate::model::DecoderLM`]) is one forward pass; a family is an
//! [`ArchSpec`] — tensor names in each container, which optional tensors exist (q/k/v biases,
//! per-head q/k norms, norms after attention and after the MLP), how norm weights are stored,
//! the MLP activation, the RoPE layout of GGUF q/k rows, the embedding scale, the rule that
//! makes layers sliding-window ones, and transformers' defaults for keys a `config.json` may
//! leave out. This module is the only place that names a family; adding one is one file here
//! and one entry in [`FAMILIES`]. Tensor names in both containers, and the mapping between
//! them ([`ArchSpec::map_name`]), are in `names.rs`.
//!
//! Semantics come from transformers' modeling code (`models/<family>/modeling_<family>.py`),
//! GGUF names and conventions from llama.cpp's `convert_hf_to_gguf.py`.

use crate::error::{Error, Result};
use crate::ops::RopeLayout;

pub mod gemma3;
pub mod llama;
pub mod mistral;
mod names;
pub mod qwen2;
pub mod qwen3;

pub use names::{Part, TensorKind, TensorNames, GGUF_NAMES, HF_NAMES};

/// Every family rml runs, in the order error messages list them.
pub const FAMILIES: &[&ArchSpec] =
    &[&llama::SPEC, &mistral::SPEC, &qwen2::SPEC, &qwen3::SPEC, &gemma3::SPEC];

/// The MLP's gate activation: `down(act(gate(x)) * up(x))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// SiLU (`hidden_act: "silu"`): SwiGLU.
    Silu,
    /// GELU, tanh approximation (`"gelu_pytorch_tanh"`): GeGLU.
    GeluTanh,
}

impl Activation {
    /// The name transformers' configs use.
    pub fn hf_name(self) -> &'static str {
        match self {
            Activation::Silu => "silu",
            Activation::GeluTanh => "gelu_pytorch_tanh",
        }
    }
}

/// The container a model's files come in: the one name for it in rml ([`crate::load`]
/// re-exports it; [`crate::load::Container`] is the opened files themselves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelFormat {
    /// A Hugging Face folder (`config.json` + safetensors, one file or shards) or one
    /// safetensors file: Hugging Face tensor names and conventions.
    Safetensors,
    /// A GGUF file: llama.cpp's tensor names, metadata keys and conventions.
    Gguf,
}

/// Which layers attend through a sliding window, when `config.json` has no `layer_types`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingRule {
    /// Never (Llama).
    None,
    /// Every layer, when `sliding_window` is set (Mistral).
    AllLayers,
    /// Layers `max_window_layers..` when `use_sliding_window` is true (Qwen2, Qwen3).
    FromMaxWindowLayers,
    /// Layer `l` is global iff `(l + 1) % sliding_window_pattern == 0`, else sliding (Gemma 3).
    Pattern,
}

/// transformers' defaults for `config.json` keys a family's config class fills in when absent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HfDefaults {
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `rope_theta` (global layers).
    pub rope_theta: f64,
    /// RoPE base of sliding-window layers when the family gives them their own
    /// (`rope_local_base_freq`), else `None` (same RoPE as global layers).
    pub local_rope_theta: Option<f64>,
    /// `max_position_embeddings`.
    pub max_position_embeddings: usize,
    /// `head_dim` (`None`: `hidden_size / num_attention_heads`).
    pub head_dim: Option<usize>,
    /// `sliding_window` when the key is absent (`None`: no window).
    pub sliding_window: Option<usize>,
    /// `sliding_window_pattern` (for [`SlidingRule::Pattern`]).
    pub sliding_window_pattern: usize,
    /// `max_window_layers` (for [`SlidingRule::FromMaxWindowLayers`]).
    pub max_window_layers: usize,
    /// `query_pre_attn_scalar` (`None`: the family scales scores by `1/sqrt(head_dim)`).
    pub query_pre_attn_scalar: Option<f64>,
}

/// A model family: everything the decoder and the config readers need to know about it.
#[derive(Debug, PartialEq)]
pub struct ArchSpec {
    /// The family's name in messages.
    pub name: &'static str,
    /// `model_type` values of its `config.json` (the first is the one rml writes).
    pub hf_model_types: &'static [&'static str],
    /// The `architectures` entry of its `config.json` (transformers' model class).
    pub hf_architecture: &'static str,
    /// `general.architecture` values of its GGUF files (and the prefix of their keys); the
    /// first is the one rml writes (see [`ArchSpec::gguf_architecture`]).
    pub gguf_architectures: &'static [&'static str],
    /// The key of the activation in `config.json` and the activation the family uses.
    pub hf_activation_key: &'static str,
    /// The MLP activation.
    pub activation: Activation,
    /// Names in a Hugging Face folder.
    pub hf_names: TensorNames,
    /// Names in a GGUF file.
    pub gguf_names: TensorNames,
    /// q/k/v projections have biases.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE.
    pub qk_norm: bool,
    /// RMSNorm of the attention output and of the MLP output before each residual add, and
    /// the MLP's own pre-norm ([`Part::PostAttnNorm`], [`Part::PostFfnNorm`]).
    pub sandwich_norms: bool,
    /// Added to every RMSNorm weight read from a Hugging Face folder: 1 for Gemma's
    /// `x̂ * (1 + w)`, 0 for `x̂ * w`.
    pub hf_norm_offset: f32,
    /// The same for GGUF files (llama.cpp's converter already stores Gemma's `1 + w`).
    pub gguf_norm_offset: f32,
    /// GGUF q/k rows are permuted for adjacent-pair RoPE (llama.cpp's `LlamaModel.permute`):
    /// RoPE is applied [`RopeLayout::Interleaved`] on them. Hugging Face folders are always
    /// rotate-half.
    pub gguf_qk_permuted: bool,
    /// Token embeddings are multiplied by `sqrt(hidden_size)` (rounded to f32) on input.
    pub embed_scale_sqrt_hidden: bool,
    /// Which layers use a sliding window when `config.json` does not list `layer_types`.
    pub sliding_rule: SlidingRule,
    /// For GGUF files, which carry no layer pattern: layer `l` is global iff
    /// `(l + 1) % n == 0`, else sliding (llama.cpp's hard-coded Gemma 3 pattern).
    pub gguf_sliding_pattern: Option<usize>,
    /// RoPE base of sliding layers when a GGUF file has no `rope.freq_base_swa` key.
    pub gguf_local_rope_theta: Option<f64>,
    /// transformers' defaults.
    pub hf_defaults: HfDefaults,
}

impl ArchSpec {
    /// Tensor names in `format`.
    pub fn names(&self, format: ModelFormat) -> &TensorNames {
        match format {
            ModelFormat::Safetensors => &self.hf_names,
            ModelFormat::Gguf => &self.gguf_names,
        }
    }

    /// The offset added to norm weights read from `format`.
    pub fn norm_offset(&self, format: ModelFormat) -> f32 {
        match format {
            ModelFormat::Safetensors => self.hf_norm_offset,
            ModelFormat::Gguf => self.gguf_norm_offset,
        }
    }

    /// How RoPE pairs dimensions for q/k weights read from `format`.
    pub fn rope_layout(&self, format: ModelFormat) -> RopeLayout {
        match format {
            ModelFormat::Gguf if self.gguf_qk_permuted => RopeLayout::Interleaved,
            _ => RopeLayout::RotateHalf,
        }
    }

    /// The `general.architecture` rml writes for this family: its own, or `llama` for a family
    /// llama.cpp writes as Llama (Mistral).
    pub fn gguf_architecture(&self) -> &'static str {
        self.gguf_architectures.first().copied().unwrap_or("llama")
    }

    /// The family whose `config.json` says `model_type`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] naming the type and listing the supported ones.
    pub fn from_hf_model_type(model_type: &str) -> Result<&'static ArchSpec> {
        FAMILIES.iter().copied().find(|s| s.hf_model_types.contains(&model_type)).ok_or_else(|| {
            Error::unimplemented(format_args!(
                "model_type {model_type:?} is not supported (supported: {})",
                Supported(|s: &ArchSpec| s.hf_model_types)
            ))
        })
    }

    /// The family of a GGUF file whose `general.architecture` is `arch`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] naming the architecture and listing the supported ones.
    pub fn from_gguf_architecture(arch: &str) -> Result<&'static ArchSpec> {
        FAMILIES.iter().copied().find(|s| s.gguf_architectures.contains(&arch)).ok_or_else(|| {
            Error::unimplemented(format_args!(
                "architecture {arch:?} is not supported (supported: {})",
                Supported(|s: &ArchSpec| s.gguf_architectures)
            ))
        })
    }
}

/// Lists the names `f` gives for every family, comma-separated, for messages.
struct Supported<F>(F);

impl<F: Fn(&ArchSpec) -> &'static [&'static str]> core::fmt::Display for Supported<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut first = true;
        for s in FAMILIES {
            for n in (self.0)(s) {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                f.write_str(n)?;
            }
        }
        Ok(())
    }
}

/// Llama's settings, the base the other families start from (`..LLAMA_LIKE`).
pub const LLAMA_LIKE: ArchSpec = ArchSpec {
    name: "Llama",
    hf_model_types: &["llama"],
    hf_architecture: "LlamaForCausalLM",
    gguf_architectures: &["llama"],
    hf_activation_key: "hidden_act",
    activation: Activation::Silu,
    hf_names: HF_NAMES,
    gguf_names: GGUF_NAMES,
    qkv_bias: false,
    qk_norm: false,
    sandwich_norms: false,
    hf_norm_offset: 0.0,
    gguf_norm_offset: 0.0,
    gguf_qk_permuted: false,
    embed_scale_sqrt_hidden: false,
    sliding_rule: SlidingRule::None,
    gguf_sliding_pattern: None,
    gguf_local_rope_theta: None,
    hf_defaults: HfDefaults {
        tie_word_embeddings: false,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        local_rope_theta: None,
        max_position_embeddings: 2048,
        head_dim: None,
        sliding_window: None,
        sliding_window_pattern: 1,
        max_window_layers: 0,
        query_pre_attn_scalar: None,
    },
};
