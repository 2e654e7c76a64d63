//! [`ModelConfig`]: the hyper-parameters of a decoder, whichever file they came from:
//! Hugging Face `config.json` ([`parse_config`], module [`hf`]) or GGUF metadata under the
//! architecture's key prefix ([`from_gguf`], module [`gguf`]), and written back to both
//! ([`config_json`], [`gguf_metadata`], module [`write`](mod@write)). The family
//! ([`ModelConfig::arch`]) says what the numbers mean.

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::model::arch::ArchSpec;

pub mod gguf;
pub mod hf;
pub mod write;

pub use gguf::from_gguf;
pub use hf::{parse_config, MAX_CONFIG_BYTES};
pub use write::{config_json, gguf_metadata};

/// How a layer attends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Causal attention over every cached position (`"full_attention"`).
    Global,
    /// Causal attention over the last [`ModelConfig::sliding_window`] positions, the query's
    /// own included (`"sliding_attention"`: key `j` visible from query `i` iff
    /// `i - window < j <= i`).
    Sliding,
}

/// RoPE frequency scaling (Hugging Face's `rope_scaling` / `rope_parameters.rope_type`).
///
/// Formulas as in transformers' `modeling_rope_utils.py`: `Linear` divides every inverse
/// frequency by `factor`; `Llama3` keeps high frequencies (wavelength below
/// `original_max_position_embeddings / high_freq_factor`), divides low frequencies
/// (wavelength above `original_max_position_embeddings / low_freq_factor`) by `factor`, and
/// interpolates smoothly in between.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE (`rope_type: "default"` or `rope_scaling: null`).
    None,
    /// Position interpolation: `inv_freq / factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        /// Divisor for the low frequencies.
        factor: f64,
        /// Wavelength threshold (as a divisor of the original context) for low frequencies.
        low_freq_factor: f64,
        /// Wavelength threshold (as a divisor of the original context) for high frequencies.
        high_freq_factor: f64,
        /// The context length the model was pretrained with.
        original_max_position_embeddings: usize,
    },
}

/// Hyper-parameters of a decoder (Hugging Face config semantics of its family).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The model family.
    pub arch: &'static ArchSpec,
    /// Rows of the token embedding and of the output head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's gate/up projections.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA; equal to `num_attention_heads` for plain MHA). Always divides
    /// `num_attention_heads`.
    pub num_key_value_heads: usize,
    /// Width of one head (explicit in the file, else `hidden_size / num_attention_heads`).
    /// Always even (RoPE rotates pairs).
    pub head_dim: usize,
    /// RMSNorm epsilon (added to the mean of squares), as the file stores it.
    pub rms_norm_eps: f64,
    /// RoPE base `theta` (`inv_freq[i] = theta^(-2i/head_dim)`).
    pub rope_theta: f64,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// The longest context the model supports.
    pub max_position_embeddings: usize,
    /// `true` when the output head is the token embedding. Then a `lm_head.weight` in the file
    /// is ignored, as transformers' weight tying does; when `false` the file must hold one.
    pub tie_word_embeddings: bool,
    /// Beginning-of-sequence token id, if the file names one.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token ids (`eos_token_id` may be one id or a list; empty if none).
    pub eos_token_ids: Vec<u32>,
    /// The weights' dtype as the file names it (`"float32"`, `"bfloat16"`; GGUF: the
    /// `general.file_type` name such as `"MOSTLY_Q4_1"`), if any. Informational.
    pub dtype: Option<String>,
    /// How each layer attends (`num_hidden_layers` entries).
    pub layer_types: Vec<LayerKind>,
    /// Positions a [`LayerKind::Sliding`] layer sees (its own included); `None` when no layer
    /// slides.
    pub sliding_window: Option<usize>,
    /// RoPE base of sliding layers (Gemma 3's local base); `None`: the same RoPE as global
    /// layers (`rope_theta` and `rope_scaling`). Local layers are never rescaled.
    pub local_rope_theta: Option<f64>,
    /// Attention scores are scaled by `query_pre_attn_scalar^-1/2` (Gemma); `None`:
    /// `head_dim^-1/2`.
    pub query_pre_attn_scalar: Option<f64>,
    /// Logits become `cap * tanh(logits / cap)` when set (Gemma's
    /// `final_logit_softcapping`).
    pub final_logit_softcapping: Option<f64>,
}

impl ModelConfig {
    /// Query heads per key/value head (`num_attention_heads / num_key_value_heads`).
    ///
    /// # Panics
    ///
    /// If `num_key_value_heads` is 0 (a config that [`ModelConfig::validate`] refuses).
    pub fn kv_groups(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    /// The scale of attention scores: `query_pre_attn_scalar^-1/2`, else `head_dim^-1/2`.
    pub fn attention_scale(&self) -> f32 {
        let d = self.query_pre_attn_scalar.unwrap_or(self.head_dim as f64);
        (1.0 / libm::sqrt(d)) as f32
    }

    /// The keys query position `i` of layer `l` attends to: `start..=i`.
    pub fn attention_start(&self, l: usize, i: usize) -> usize {
        match (self.layer_types.get(l), self.sliding_window) {
            (Some(LayerKind::Sliding), Some(w)) => (i + 1).saturating_sub(w),
            _ => 0,
        }
    }

    /// Checks the invariants the decoder relies on: every size non-zero, every weight matrix
    /// (embedding, q/k/v/o, MLP) small enough that its f32 byte size fits `isize`, KV heads
    /// dividing query heads, an even head width, finite positive `rms_norm_eps` and
    /// `rope_theta`, and positive finite scaling factors; one layer kind per layer, a non-zero
    /// window when a layer slides, positive finite `local_rope_theta`,
    /// `query_pre_attn_scalar` and `final_logit_softcapping` when given.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] naming the field(s) and values.
    pub fn validate(&self) -> Result<()> {
        if self.num_key_value_heads == 0 {
            return Err(Error::invalid_argument(format_args!(
                "num_key_value_heads 0 does not divide num_attention_heads {}",
                self.num_attention_heads
            )));
        }
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if v == 0 {
                return Err(Error::invalid_argument(format_args!("{name} is 0")));
            }
        }
        // Every weight matrix must have an f32 size that a process could address, so that the
        // decoder (and anyone else) can compute sizes from these fields without overflow.
        let h = self.hidden_size;
        let (q, kv) = (self.num_attention_heads, self.num_key_value_heads);
        for (rows, rows_desc) in [
            (Some(self.vocab_size), format_args!("vocab_size {}", self.vocab_size)),
            (
                Some(self.intermediate_size),
                format_args!("intermediate_size {}", self.intermediate_size),
            ),
            (
                q.checked_mul(self.head_dim),
                format_args!("num_attention_heads {q} × head_dim {}", self.head_dim),
            ),
            (
                kv.checked_mul(self.head_dim),
                format_args!("num_key_value_heads {kv} × head_dim {}", self.head_dim),
            ),
        ] {
            let fits = rows
                .and_then(|r| r.checked_mul(h))
                .and_then(|n| n.checked_mul(4))
                .is_some_and(|b| b <= isize::MAX as usize);
            if !fits {
                return Err(Error::invalid_argument(format_args!(
                    "{rows_desc} rows × hidden_size {h}: the f32 weight matrix would not fit in \
                     the address space"
                )));
            }
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return Err(Error::invalid_argument(format_args!(
                "num_key_value_heads {} does not divide num_attention_heads {}",
                self.num_key_value_heads, self.num_attention_heads
            )));
        }
        if self.head_dim % 2 != 0 {
            return Err(Error::invalid_argument(format_args!(
                "head_dim {} is odd (RoPE rotates pairs)",
                self.head_dim
            )));
        }
        for (name, v) in [("rms_norm_eps", self.rms_norm_eps), ("rope_theta", self.rope_theta)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid_argument(format_args!(
                    "{name} {v} is not a positive finite number"
                )));
            }
        }
        let factors: &[(&str, f64)] = match &self.rope_scaling {
            RopeScaling::None => &[],
            RopeScaling::Linear { factor } => &[("factor", *factor)],
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, .. } => &[
                ("factor", *factor),
                ("low_freq_factor", *low_freq_factor),
                ("high_freq_factor", *high_freq_factor),
            ],
        };
        for &(name, v) in factors {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid_argument(format_args!(
                    "rope scaling {name} {v} is not a positive finite number"
                )));
            }
        }
        if let RopeScaling::Llama3 {
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
            ..
        } = self.rope_scaling
        {
            if original_max_position_embeddings == 0 {
                return Err(Error::invalid_argument(
                    "rope scaling original_max_position_embeddings is 0",
                ));
            }
            if high_freq_factor <= low_freq_factor {
                return Err(Error::invalid_argument(format_args!(
                    "rope scaling high_freq_factor {high_freq_factor} is not above \
                     low_freq_factor {low_freq_factor}"
                )));
            }
        }
        if self.layer_types.len() != self.num_hidden_layers {
            return Err(Error::invalid_argument(format_args!(
                "{} layer types for num_hidden_layers {}",
                self.layer_types.len(),
                self.num_hidden_layers
            )));
        }
        if self.layer_types.contains(&LayerKind::Sliding)
            && self.sliding_window.is_none_or(|w| w == 0)
        {
            return Err(Error::invalid_argument(format_args!(
                "sliding-window layers with sliding_window {:?}",
                self.sliding_window
            )));
        }
        for (name, v) in [
            ("local rope_theta", self.local_rope_theta),
            ("query_pre_attn_scalar", self.query_pre_attn_scalar),
            ("final_logit_softcapping", self.final_logit_softcapping),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(Error::invalid_argument(format_args!(
                        "{name} {v} is not a positive finite number"
                    )));
                }
            }
        }
        Ok(())
    }
}
