//! [`EncoderConfig`]: an encoder's `config.json` (transformers' `BertConfig` fields), and the
//! sentence-transformers settings around it ([`Pooling`]).
//!
//! Read for BERT: `model_type` / `architectures`, `vocab_size`, `hidden_size`,
//! `num_hidden_layers`, `num_attention_heads`, `intermediate_size`, `hidden_act`,
//! `layer_norm_eps`, `max_position_embeddings`, `type_vocab_size`, `position_embedding_type`.
//!
//! For nomic-bert (`model_type` `"nomic_bert"`) the same fields in transformers' spelling
//! (`NomicBertConfig`: `hidden_act` `"silu"`, `head_dim`, `rope_parameters.rope_theta` or
//! `rope_theta`) or in the spelling of Nomic's own config (the one nomic-embed-text ships for
//! its remote code: `n_embd`, `n_layer`, `n_head`, `n_inner`, `n_positions`,
//! `layer_norm_epsilon`, `activation_function` `"swiglu"`, `rotary_emb_base`); the options of
//! Nomic's code that change the math (`rotary_emb_fraction` ≠ 1, `rotary_emb_interleaved`,
//! `rotary_scaling_factor`, `rotary_emb_scale_base`, `qkv_proj_bias`, `mlp_fc1_bias`,
//! `mlp_fc2_bias`, `prenorm`, `use_rms_norm`, `parallel_block`) are refused unless they are at
//! the values nomic-embed-text uses.
//!
//! From a GGUF ([`EncoderConfig::from_gguf`], llama.cpp's converter's keys for
//! `general.architecture` `bert` / `nomic-bert`): `{arch}.embedding_length`, `.block_count`,
//! `.attention.head_count`, `.feed_forward_length`, `.attention.layer_norm_epsilon`,
//! `.context_length`, `.rope.freq_base` (nomic-bert), `tokenizer.ggml.token_type_count`, the
//! vocabulary's length, and `{arch}.pooling_type` ([`Pooling::from_gguf`]). The GGUF does not
//! say the MLP's activation: BERT GGUFs are taken to use GELU with erf (transformers'
//! `"gelu"`, what BERT, MiniLM, bge, gte and e5 name), nomic-bert SwiGLU.
//!
//! A config of a decoder (a family [`crate::model::arch`] runs, or any `*ForCausalLM`) is
//! refused with a message naming its architecture; so are encoders rml does not run (RoBERTa,
//! ...).

use alloc::string::{String, ToString};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::format::gguf::Gguf;

/// The largest `config.json` read, in bytes.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The encoder families rml runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EncoderArch {
    /// BERT (`model_type` `"bert"`, `BertModel`): learned absolute position and token-type
    /// embeddings, post-LayerNorm, q/k/v/o and MLP with biases. all-MiniLM, bge, gte and e5
    /// are BERTs.
    Bert,
    /// nomic-bert (`model_type` `"nomic_bert"`, nomic-embed-text): BERT's post-LayerNorm
    /// layout with RoPE (rotate-half) instead of position embeddings, a fused q/k/v matrix,
    /// a SwiGLU MLP (`down(silu(gate(x)) * up(x))`) and no biases.
    NomicBert,
}

/// The MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HiddenAct {
    /// `"gelu"`: GELU with erf ([`crate::ops::gelu_erf`]).
    GeluErf,
    /// `"gelu_new"`, `"gelu_pytorch_tanh"`: the tanh approximation ([`crate::ops::gelu_tanh`]).
    GeluTanh,
    /// SwiGLU (nomic-bert's `"silu"` / `"swiglu"`): `silu(gate(x)) * up(x)`, a gated MLP
    /// with two input matrices ([`crate::ops::swiglu`]).
    SwiGlu,
}

/// How a sentence's token vectors become one vector (sentence-transformers' `Pooling`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The mean over the sentence's tokens (padding excluded): `pooling_mode_mean_tokens`,
    /// and what sentence-transformers uses when a folder has no pooling config.
    #[default]
    Mean,
    /// The first token's vector (`[CLS]`): `pooling_mode_cls_token`.
    Cls,
    /// The last token's vector: `pooling_mode_lasttoken`.
    Last,
}

/// An encoder's shape and numerics.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    /// The family.
    pub arch: EncoderArch,
    /// Rows of the token embedding.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Transformer layers.
    pub num_layers: usize,
    /// Attention heads (`hidden_size / num_heads` wide each).
    pub num_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// The MLP's activation.
    pub hidden_act: HiddenAct,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f32,
    /// Rows of the position embedding: the longest sequence the model takes, in tokens.
    pub max_position_embeddings: usize,
    /// Rows of the token-type embedding (0: none).
    pub type_vocab_size: usize,
    /// RoPE base (`theta`) for families with rotary positions (nomic-bert); `None` for learned
    /// absolute positions (BERT).
    pub rope_theta: Option<f32>,
}

fn field<'v>(m: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    m.get(key).filter(|v| !v.is_null())
}

fn usize_field(m: &Map<String, Value>, key: &str) -> Result<usize> {
    let v = field(m, key).ok_or_else(|| Error::data_loss(format_args!("no {key:?}")))?;
    v.as_u64()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| Error::data_loss(format_args!("{key:?} is not a whole number: {v}")))
}

/// The first of `keys` that is present (transformers' spelling, then another).
fn usize_any(m: &Map<String, Value>, keys: &[&str]) -> Result<usize> {
    let key = keys.iter().find(|k| field(m, k).is_some()).unwrap_or(&keys[0]);
    usize_field(m, key)
}

fn f64_any(m: &Map<String, Value>, keys: &[&str]) -> Result<Option<f64>> {
    for key in keys {
        if let Some(v) = field(m, key) {
            return v
                .as_f64()
                .filter(|e| e.is_finite() && *e >= 0.0)
                .map(Some)
                .ok_or_else(|| Error::data_loss(format_args!("{key:?} is {v}")));
        }
    }
    Ok(None)
}

fn str_field<'v>(m: &'v Map<String, Value>, key: &str) -> Result<Option<&'v str>> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(Error::data_loss(format_args!("{key:?} is not a string: {v}"))),
    }
}

/// The refusal for a config that is not a BERT: names its architecture and says what it is.
fn not_an_encoder(model_type: &str, arch: &str) -> Error {
    let both = if arch.is_empty() {
        alloc::format!("model_type {model_type:?}")
    } else {
        alloc::format!("{arch} (model_type {model_type:?})")
    };
    let decoder = arch.ends_with("ForCausalLM")
        || arch.ends_with("LMHeadModel")
        || crate::model::arch::ArchSpec::from_hf_model_type(model_type).is_ok();
    if decoder {
        Error::invalid_argument(format_args!(
            "{both} is a decoder (a text-generation model); embeddings need an encoder such as \
             BertModel (model_type \"bert\"): run this one with `rml generate`"
        ))
    } else {
        Error::unimplemented(format_args!(
            "{both} is not an encoder rml runs (supported: BertModel, model_type \"bert\"; \
             NomicBertModel, model_type \"nomic_bert\")"
        ))
    }
}

impl EncoderConfig {
    /// Parses a `config.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a decoder's config (naming its architecture);
    /// [`crate::Code::Unimplemented`] for another architecture, an activation other than GELU,
    /// or a `position_embedding_type` other than `"absolute"`; [`crate::Code::DataLoss`] for
    /// malformed JSON, a missing or non-numeric field, zero sizes, or a hidden size that is not
    /// a multiple of the head count; [`crate::Code::ResourceExhausted`] for a text over
    /// [`MAX_CONFIG_BYTES`].
    pub fn from_json(text: &str) -> Result<Self> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(Error::resource_exhausted(format_args!(
                "config.json is {} bytes, above the limit of {MAX_CONFIG_BYTES}",
                text.len()
            )));
        }
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::data_loss(format_args!("config.json: {e}")))?;
        let m = v.as_object().ok_or_else(|| Error::data_loss("config.json is not an object"))?;
        let model_type = str_field(m, "model_type")?.unwrap_or("");
        let arch = match field(m, "architectures") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or(""),
            _ => "",
        };
        let is_bert = model_type == "bert" || (model_type.is_empty() && arch.starts_with("Bert"));
        let is_nomic =
            model_type == "nomic_bert" || (model_type.is_empty() && arch.starts_with("NomicBert"));
        if is_nomic {
            return Self::nomic_from_map(m);
        }
        if !is_bert {
            return Err(not_an_encoder(model_type, arch));
        }
        let hidden_act = match str_field(m, "hidden_act")?.unwrap_or("gelu") {
            "gelu" => HiddenAct::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" => HiddenAct::GeluTanh,
            other => {
                return Err(Error::unimplemented(format_args!(
                    "hidden_act {other:?} is not supported (supported: gelu, gelu_new, \
                     gelu_pytorch_tanh)"
                )))
            }
        };
        match str_field(m, "position_embedding_type")?.unwrap_or("absolute") {
            "absolute" => {}
            other => {
                return Err(Error::unimplemented(format_args!(
                    "position_embedding_type {other:?} is not supported (supported: absolute)"
                )))
            }
        }
        let c = EncoderConfig {
            arch: EncoderArch::Bert,
            vocab_size: usize_field(m, "vocab_size")?,
            hidden_size: usize_field(m, "hidden_size")?,
            num_layers: usize_field(m, "num_hidden_layers")?,
            num_heads: usize_field(m, "num_attention_heads")?,
            intermediate_size: usize_field(m, "intermediate_size")?,
            hidden_act,
            layer_norm_eps: f64_any(m, &["layer_norm_eps"])?.unwrap_or(1e-12) as f32,
            max_position_embeddings: usize_field(m, "max_position_embeddings")?,
            type_vocab_size: match field(m, "type_vocab_size") {
                None => 0,
                Some(_) => usize_field(m, "type_vocab_size")?,
            },
            rope_theta: None,
        };
        c.validate()?;
        Ok(c)
    }

    /// A nomic-bert config, in transformers' or Nomic's spelling (see the module docs).
    fn nomic_from_map(m: &Map<String, Value>) -> Result<Self> {
        let act = str_field(m, "hidden_act")?.or(str_field(m, "activation_function")?);
        match act.unwrap_or("silu") {
            "silu" | "swiglu" => {}
            other => {
                return Err(Error::unimplemented(format_args!(
                    "nomic_bert with activation {other:?} is not supported (supported: silu / \
                     swiglu)"
                )))
            }
        }
        // Nomic's options that change the math, at the values nomic-embed-text uses.
        let flag = |key: &str, want: bool| -> Result<()> {
            match field(m, key) {
                None => Ok(()),
                Some(Value::Bool(b)) if *b == want => Ok(()),
                Some(v) => Err(Error::unimplemented(format_args!(
                    "nomic_bert with {key:?} = {v} is not supported (supported: {want})"
                ))),
            }
        };
        for key in ["rotary_emb_interleaved", "qkv_proj_bias", "mlp_fc1_bias", "mlp_fc2_bias"] {
            flag(key, false)?;
        }
        for key in ["prenorm", "use_rms_norm", "parallel_block", "causal"] {
            flag(key, false)?;
        }
        if let Some(f) = f64_any(m, &["rotary_emb_fraction"])? {
            if f != 1.0 {
                return Err(Error::unimplemented(format_args!(
                    "nomic_bert with rotary_emb_fraction {f} (partial RoPE) is not supported"
                )));
            }
        }
        if field(m, "rotary_scaling_factor").is_some() {
            return Err(Error::unimplemented(
                "nomic_bert with rotary_scaling_factor (dynamic NTK RoPE) is not supported",
            ));
        }
        if field(m, "rotary_emb_scale_base").is_some() {
            return Err(Error::unimplemented(
                "nomic_bert with rotary_emb_scale_base (xPos) is not supported",
            ));
        }
        let params = match field(m, "rope_parameters") {
            Some(Value::Object(p)) => Some(p),
            Some(v) => return Err(Error::data_loss(format_args!("\"rope_parameters\" is {v}"))),
            None => None,
        };
        if let Some(p) = params {
            match str_field(p, "rope_type")?.unwrap_or("default") {
                "default" => {}
                other => {
                    return Err(Error::unimplemented(format_args!(
                        "rope_type {other:?} is not supported (supported: default)"
                    )))
                }
            }
        }
        let theta = match params.map(|p| f64_any(p, &["rope_theta"])).transpose()?.flatten() {
            Some(t) => Some(t),
            None => f64_any(m, &["rope_theta", "rotary_emb_base"])?,
        }
        .unwrap_or(1000.0);
        if theta <= 0.0 {
            return Err(Error::data_loss(format_args!("rope theta is {theta}")));
        }
        let c = EncoderConfig {
            arch: EncoderArch::NomicBert,
            vocab_size: usize_field(m, "vocab_size")?,
            hidden_size: usize_any(m, &["hidden_size", "n_embd"])?,
            num_layers: usize_any(m, &["num_hidden_layers", "n_layer"])?,
            num_heads: usize_any(m, &["num_attention_heads", "n_head"])?,
            intermediate_size: usize_any(m, &["intermediate_size", "n_inner"])?,
            hidden_act: HiddenAct::SwiGlu,
            layer_norm_eps: f64_any(m, &["layer_norm_eps", "layer_norm_epsilon"])?.unwrap_or(1e-12)
                as f32,
            max_position_embeddings: usize_any(m, &["max_position_embeddings", "n_positions"])?,
            type_vocab_size: match field(m, "type_vocab_size") {
                None => 0,
                Some(_) => usize_field(m, "type_vocab_size")?,
            },
            rope_theta: Some(theta as f32),
        };
        if field(m, "head_dim").is_some() {
            let d = usize_field(m, "head_dim")?;
            if c.num_heads == 0 || d * c.num_heads != c.hidden_size {
                return Err(Error::unimplemented(format_args!(
                    "head_dim {d} × {} heads is not hidden_size {} (not supported)",
                    c.num_heads, c.hidden_size
                )));
            }
        }
        c.validate()?;
        if c.head_dim() % 2 != 0 {
            return Err(Error::data_loss(format_args!(
                "head_dim {} is odd: RoPE rotates pairs",
                c.head_dim()
            )));
        }
        Ok(c)
    }

    /// The config of a llama.cpp BERT GGUF (`general.architecture` `bert` or `nomic-bert`; see
    /// the module docs for the keys).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a decoder's architecture (naming it);
    /// [`crate::Code::Unimplemented`] for another encoder (`jina-bert-v2`, ...), or a causal
    /// one (`{arch}.attention.causal` true); [`crate::Code::DataLoss`] for a missing or
    /// malformed key, or sizes [`EncoderConfig::validate`] refuses.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self> {
        let arch_name = g.architecture()?;
        let arch = match arch_name {
            "bert" => EncoderArch::Bert,
            "nomic-bert" => EncoderArch::NomicBert,
            other => {
                return Err(
                    if crate::model::arch::ArchSpec::from_gguf_architecture(other).is_ok() {
                        Error::invalid_argument(format_args!(
                            "general.architecture = {other} is a decoder (a text-generation \
                         model); embeddings need an encoder such as BERT: run this one with \
                         `rml generate`"
                        ))
                    } else {
                        Error::unimplemented(format_args!(
                            "general.architecture = {other} is not an encoder rml runs \
                         (supported: bert, nomic-bert)"
                        ))
                    },
                )
            }
        };
        let key = |k: &str| alloc::format!("{arch_name}.{k}");
        let need = |k: &str| -> Result<usize> {
            let k = key(k);
            g.get_usize(&k)?.ok_or_else(|| Error::data_loss(format_args!("GGUF: no {k:?}")))
        };
        if g.get_bool(&key("attention.causal"))? == Some(true) {
            return Err(Error::unimplemented(format_args!(
                "{} = true: a causal encoder is not supported",
                key("attention.causal")
            )));
        }
        let vocab_size = match g.get_array("tokenizer.ggml.tokens")? {
            Some(a) => a.len(),
            None => return Err(Error::data_loss("GGUF: no tokenizer.ggml.tokens")),
        };
        let eps = g.get_f64(&key("attention.layer_norm_epsilon"))?.unwrap_or(1e-12);
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::data_loss(format_args!("layer_norm_epsilon is {eps}")));
        }
        let c = EncoderConfig {
            arch,
            vocab_size,
            hidden_size: need("embedding_length")?,
            num_layers: need("block_count")?,
            num_heads: need("attention.head_count")?,
            intermediate_size: need("feed_forward_length")?,
            hidden_act: match arch {
                EncoderArch::Bert => HiddenAct::GeluErf,
                EncoderArch::NomicBert => HiddenAct::SwiGlu,
            },
            layer_norm_eps: eps as f32,
            max_position_embeddings: need("context_length")?,
            type_vocab_size: g.get_usize("tokenizer.ggml.token_type_count")?.unwrap_or(0),
            rope_theta: match arch {
                EncoderArch::Bert => None,
                EncoderArch::NomicBert => {
                    let t = g.get_f64(&key("rope.freq_base"))?.unwrap_or(1000.0);
                    if !(t.is_finite() && t > 0.0) {
                        return Err(Error::data_loss(format_args!("rope.freq_base is {t}")));
                    }
                    Some(t as f32)
                }
            },
        };
        c.validate()?;
        if c.rope_theta.is_some() && c.head_dim() % 2 != 0 {
            return Err(Error::data_loss(format_args!(
                "head_dim {} is odd: RoPE rotates pairs",
                c.head_dim()
            )));
        }
        Ok(c)
    }

    /// Checks the sizes against each other.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for a zero size, a hidden size that is not a multiple of the
    /// head count, or sizes whose products overflow.
    pub fn validate(&self) -> Result<()> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, v) in sizes {
            if v == 0 {
                return Err(Error::data_loss(format_args!("{name} is 0")));
            }
        }
        if self.hidden_size % self.num_heads != 0 {
            return Err(Error::data_loss(format_args!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_heads
            )));
        }
        let rows = self.vocab_size.max(self.max_position_embeddings).max(self.intermediate_size);
        if rows.checked_mul(self.hidden_size).and_then(|v| v.checked_mul(4)).is_none() {
            return Err(Error::data_loss("sizes overflow"));
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }
}

impl Pooling {
    /// The pooling a llama.cpp GGUF asks for in `{general.architecture}.pooling_type`
    /// (llama.cpp's `LLAMA_POOLING_TYPE_*`: 1 mean, 2 CLS, 3 last); `None` when the key is
    /// absent.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] for 0 (none: per-token embeddings) and 4 (rank, a
    /// reranker's head); [`crate::Code::DataLoss`] for another value.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Option<Self>> {
        let key = alloc::format!("{}.pooling_type", g.architecture()?);
        match g.get_u32(&key)? {
            None => Ok(None),
            Some(1) => Ok(Some(Pooling::Mean)),
            Some(2) => Ok(Some(Pooling::Cls)),
            Some(3) => Ok(Some(Pooling::Last)),
            Some(v @ (0 | 4)) => Err(Error::unimplemented(format_args!(
                "{key} = {v} ({}) is not supported (supported: 1 mean, 2 cls, 3 last)",
                if v == 0 { "none: per-token embeddings" } else { "rank: a reranker" }
            ))),
            Some(v) => Err(Error::data_loss(format_args!("{key} = {v} is not a pooling type"))),
        }
    }

    /// The pooling a sentence-transformers `1_Pooling/config.json` asks for.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for malformed JSON; [`crate::Code::Unimplemented`] for max,
    /// mean-sqrt-len or weighted-mean pooling, several modes at once (their concatenation), or
    /// none.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::data_loss(format_args!("pooling config: {e}")))?;
        let m = v.as_object().ok_or_else(|| Error::data_loss("pooling config is not an object"))?;
        let on = |key: &str| m.get(key).and_then(Value::as_bool).unwrap_or(false);
        for key in [
            "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens",
            "pooling_mode_weightedmean_tokens",
        ] {
            if on(key) {
                return Err(Error::unimplemented(format_args!(
                    "{key} is not supported (supported: mean, cls, lasttoken pooling)"
                )));
            }
        }
        let modes = [
            ("pooling_mode_mean_tokens", Pooling::Mean),
            ("pooling_mode_cls_token", Pooling::Cls),
            ("pooling_mode_lasttoken", Pooling::Last),
        ];
        let mut chosen = modes.iter().filter(|(k, _)| on(k));
        match (chosen.next(), chosen.next()) {
            (Some((_, p)), None) => Ok(*p),
            (None, _) => match m.get("pooling_mode").and_then(Value::as_str) {
                Some("mean") => Ok(Pooling::Mean),
                Some("cls") => Ok(Pooling::Cls),
                Some("lasttoken") => Ok(Pooling::Last),
                other => Err(Error::unimplemented(format_args!(
                    "the pooling config sets no supported mode ({})",
                    other.map_or_else(|| "none set".to_string(), |o| alloc::format!("{o:?}"))
                ))),
            },
            (Some(_), Some(_)) => Err(Error::unimplemented(
                "several pooling modes at once (their concatenation) are not supported",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Code;

    const MINILM: &str = r#"{"architectures": ["BertModel"], "hidden_act": "gelu",
        "hidden_size": 384, "intermediate_size": 1536, "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
        "num_hidden_layers": 6, "position_embedding_type": "absolute", "type_vocab_size": 2,
        "vocab_size": 30522}"#;

    #[test]
    fn reads_a_bert_config() {
        let c = EncoderConfig::from_json(MINILM).unwrap();
        assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.head_dim()), (384, 6, 12, 32));
        assert_eq!((c.intermediate_size, c.vocab_size, c.type_vocab_size), (1536, 30522, 2));
        assert_eq!(c.hidden_act, HiddenAct::GeluErf);
        assert_eq!(c.layer_norm_eps, 1e-12);
    }

    #[test]
    fn refuses_decoders_naming_them() {
        let e = EncoderConfig::from_json(
            r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("LlamaForCausalLM") && e.message().contains("decoder"), "{e}");
        let e = EncoderConfig::from_json(r#"{"model_type": "roberta"}"#).unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);
        assert!(e.message().contains("roberta"), "{e}");
    }

    #[test]
    fn refuses_bad_fields() {
        let bad = MINILM.replace("\"gelu\"", "\"relu\"");
        assert_eq!(EncoderConfig::from_json(&bad).unwrap_err().code(), Code::Unimplemented);
        let bad = MINILM.replace("\"num_attention_heads\": 12", "\"num_attention_heads\": 7");
        assert_eq!(EncoderConfig::from_json(&bad).unwrap_err().code(), Code::DataLoss);
        let bad = MINILM.replace("\"hidden_size\": 384", "\"hidden_size\": -1");
        assert_eq!(EncoderConfig::from_json(&bad).unwrap_err().code(), Code::DataLoss);
        let bad = MINILM.replace("\"absolute\"", "\"relative_key\"");
        assert_eq!(EncoderConfig::from_json(&bad).unwrap_err().code(), Code::Unimplemented);
        assert_eq!(EncoderConfig::from_json("[1]").unwrap_err().code(), Code::DataLoss);
    }

    #[test]
    fn reads_nomic_configs_in_both_spellings() {
        // transformers' NomicBertConfig
        let hf = r#"{"architectures": ["NomicBertModel"], "model_type": "nomic_bert",
            "hidden_act": "silu", "hidden_size": 32, "head_dim": 8, "intermediate_size": 48,
            "layer_norm_eps": 1e-12, "max_position_embeddings": 128, "num_attention_heads": 4,
            "num_hidden_layers": 2, "rope_parameters": {"rope_theta": 1000.0,
            "rope_type": "default"}, "type_vocab_size": 2, "vocab_size": 384}"#;
        let c = EncoderConfig::from_json(hf).unwrap();
        assert_eq!(c.arch, EncoderArch::NomicBert);
        assert_eq!((c.hidden_size, c.num_heads, c.intermediate_size), (32, 4, 48));
        assert_eq!((c.hidden_act, c.rope_theta), (HiddenAct::SwiGlu, Some(1000.0)));
        // Nomic's own (nomic-embed-text-v1.5's field names and values)
        let nomic = r#"{"model_type": "nomic_bert", "activation_function": "swiglu",
            "n_embd": 768, "n_head": 12, "n_inner": 3072, "n_layer": 12, "n_positions": 8192,
            "layer_norm_epsilon": 1e-12, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
            "rotary_emb_interleaved": false, "qkv_proj_bias": false, "mlp_fc1_bias": false,
            "mlp_fc2_bias": false, "prenorm": false, "rotary_scaling_factor": null,
            "type_vocab_size": 2, "vocab_size": 30528}"#;
        let c = EncoderConfig::from_json(nomic).unwrap();
        assert_eq!(
            (c.hidden_size, c.num_layers, c.head_dim(), c.max_position_embeddings),
            (768, 12, 64, 8192)
        );
        assert_eq!(c.rope_theta, Some(1000.0));
        for (from, to) in [
            ("\"rotary_emb_fraction\": 1.0", "\"rotary_emb_fraction\": 0.5"),
            ("\"qkv_proj_bias\": false", "\"qkv_proj_bias\": true"),
            ("\"prenorm\": false", "\"prenorm\": true"),
            ("\"rotary_scaling_factor\": null", "\"rotary_scaling_factor\": 2.0"),
            ("\"swiglu\"", "\"gelu\""),
        ] {
            let bad = nomic.replace(from, to);
            assert_ne!(bad, nomic);
            let e = EncoderConfig::from_json(&bad).unwrap_err();
            assert_eq!(e.code(), Code::Unimplemented, "{to}: {e}");
        }
        let bad = hf.replace("\"head_dim\": 8", "\"head_dim\": 16");
        assert_eq!(EncoderConfig::from_json(&bad).unwrap_err().code(), Code::Unimplemented);
    }

    #[test]
    fn pooling_modes() {
        let p = |s: &str| Pooling::from_json(s);
        assert_eq!(p(r#"{"pooling_mode_mean_tokens": true}"#).unwrap(), Pooling::Mean);
        assert_eq!(p(r#"{"pooling_mode_cls_token": true}"#).unwrap(), Pooling::Cls);
        assert_eq!(p(r#"{"pooling_mode_lasttoken": true}"#).unwrap(), Pooling::Last);
        assert_eq!(p(r#"{"pooling_mode": "cls"}"#).unwrap(), Pooling::Cls);
        let two = r#"{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true}"#;
        assert_eq!(p(two).unwrap_err().code(), Code::Unimplemented);
        assert_eq!(
            p(r#"{"pooling_mode_max_tokens": true}"#).unwrap_err().code(),
            Code::Unimplemented
        );
        assert_eq!(p("{}").unwrap_err().code(), Code::Unimplemented);
    }
}
