//! Hugging Face `config.json` → [`ModelConfig`], for every family in
//! [`crate::model::arch::FAMILIES`] (chosen by `model_type`; absent means `"llama"`).
//!
//! Three dialects are read (as transformers writes them):
//! - transformers 5: `"rope_parameters": {"rope_theta": .., "rope_type": "default" | "linear"
//!   | "llama3", ..scaling fields}` (Gemma 3: one such object per layer type,
//!   `"full_attention"` and `"sliding_attention"`) and `"dtype"`;
//! - transformers 4: top-level `"rope_theta"` (Gemma 3 also `"rope_local_base_freq"`),
//!   `"rope_scaling": null | {"rope_type" (or `"type"`): .., ..}` and `"dtype"`;
//! - older files: as transformers 4 but `"torch_dtype"`.
//!
//! Absent optional keys take the family's transformers defaults
//! ([`crate::model::arch::HfDefaults`]): `num_key_value_heads` = `num_attention_heads`,
//! `head_dim` (Llama, Mistral, Qwen2: `hidden_size / num_attention_heads`; Qwen3 128; Gemma 3
//! 256), `rms_norm_eps`, `rope_theta`, `max_position_embeddings`, `tie_word_embeddings`
//! (false for Llama, Mistral, Qwen2, Qwen3; true for Gemma 3), `sliding_window`,
//! `query_pre_attn_scalar`. `null` counts as absent. Which layers slide: `layer_types` when
//! given, else the family's rule ([`crate::model::arch::SlidingRule`]).
//! Unknown keys are ignored; a key given twice at the top level is an error. An unknown
//! `model_type`, an activation other than the family's, `attention_bias` / `mlp_bias` set
//! where the family has none, Gemma's `attn_logit_softcapping` and
//! `use_bidirectional_attention` are [`crate::Code::Unimplemented`]: the decoder would compute
//! something else.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::arch::{ArchSpec, SlidingRule};
use crate::model::config::{LayerKind, ModelConfig, RopeScaling};

/// The largest `config.json` accepted, in bytes (real ones are about 1 KB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The most decoder layers a `config.json` may declare (the GGUF path has the same cap).
pub const MAX_LAYERS: usize = 1 << 16;

/// Parses a `config.json` text into a validated [`ModelConfig`].
///
/// # Errors
///
/// - [`crate::Code::DataLoss`]: not a JSON object, a key given twice, a required key
///   (`vocab_size`, `hidden_size`, `intermediate_size`, `num_hidden_layers`,
///   `num_attention_heads`) missing, or a value of the wrong type (the key is named);
/// - [`crate::Code::Unimplemented`]: a `model_type` rml does not run (named, with the
///   supported ones), a `rope_type` other than default/linear/llama3 (named), or a setting
///   described in the module docs;
/// - [`crate::Code::InvalidArgument`]: values that do not fit together (KV heads not dividing
///   query heads — both named —, an odd or underived `head_dim`, zero sizes, a
///   `layer_types` entry that is not a layer type; see [`ModelConfig::validate`]);
/// - [`crate::Code::ResourceExhausted`]: text longer than [`MAX_CONFIG_BYTES`].
pub fn parse_config(text: &str) -> Result<ModelConfig> {
    parse_config_inner(text).map_err(|e| e.context("config.json"))
}

fn parse_config_inner(text: &str) -> Result<ModelConfig> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Error::resource_exhausted(format_args!(
            "{} bytes is above the limit of {MAX_CONFIG_BYTES}",
            text.len()
        )));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let mut in_value = None;
    let obj = de
        .deserialize_map(TopLevel { in_value: &mut in_value })
        .and_then(|o| de.end().map(|()| o))
        .map_err(|e| match &in_value {
            Some(key) => Error::data_loss(format_args!("{key:?}: not valid JSON: {e}")),
            None => Error::data_loss(format_args!("not a valid JSON object: {e}")),
        })?;
    let c = Obj { map: &obj, path: "" };

    let arch: &'static ArchSpec =
        ArchSpec::from_hf_model_type(c.opt_str("model_type")?.unwrap_or("llama"))?;
    let d = &arch.hf_defaults;
    let want_act = arch.activation.hf_name();
    if let Some(act) = c.opt_str(arch.hf_activation_key)? {
        if act != want_act {
            return Err(Error::unimplemented(format_args!(
                "{} {act:?} is not supported for {} (only {want_act:?})",
                arch.hf_activation_key, arch.name
            )));
        }
    }
    for key in ["attention_bias", "mlp_bias"] {
        if c.opt_bool(key)? == Some(true) {
            return Err(Error::unimplemented(format_args!(
                "{key} = true is not supported for {}",
                arch.name
            )));
        }
    }
    if c.get("attn_logit_softcapping").is_some() {
        return Err(Error::unimplemented("attn_logit_softcapping is not supported"));
    }
    if c.opt_bool("use_bidirectional_attention")? == Some(true) {
        return Err(Error::unimplemented("use_bidirectional_attention = true is not supported"));
    }

    let hidden_size = c.req_uint("hidden_size")?;
    let num_attention_heads = c.req_uint("num_attention_heads")?;
    let num_hidden_layers = c.req_uint("num_hidden_layers")?;
    let num_key_value_heads = c.opt_uint("num_key_value_heads")?.unwrap_or(num_attention_heads);
    let head_dim = match c.opt_uint("head_dim")?.or(d.head_dim) {
        Some(h) => h,
        None => {
            if num_attention_heads == 0 || hidden_size % num_attention_heads != 0 {
                return Err(Error::invalid_argument(format_args!(
                    "no head_dim given and hidden_size {hidden_size} is not a multiple of \
                     num_attention_heads {num_attention_heads}"
                )));
            }
            hidden_size / num_attention_heads
        }
    };

    // RoPE: transformers 5 nests everything in `rope_parameters` (per layer type for
    // Gemma 3); older files keep `rope_theta` at the top level and the scaling in
    // `rope_scaling`.
    let mut local_rope_theta = d.local_rope_theta;
    let (rope_theta, rope_scaling) = match c.opt_obj("rope_parameters")? {
        Some(rp) => match rp.opt_obj("full_attention")? {
            Some(full) => {
                if let Some(local) = rp.opt_obj("sliding_attention")? {
                    if rope_scaling(&local, false)? != RopeScaling::None {
                        return Err(Error::unimplemented(
                            "rope_parameters.sliding_attention: rope scaling on sliding layers \
                             is not supported",
                        ));
                    }
                    if let Some(t) = local.opt_f64("rope_theta")? {
                        local_rope_theta = Some(t);
                    }
                }
                let theta = full.opt_f64("rope_theta")?.unwrap_or(d.rope_theta);
                (theta, rope_scaling(&full, false)?)
            }
            None => {
                let theta = rp.opt_f64("rope_theta")?.unwrap_or(d.rope_theta);
                (theta, rope_scaling(&rp, false)?)
            }
        },
        None => {
            let theta = c.opt_f64("rope_theta")?.unwrap_or(d.rope_theta);
            if local_rope_theta.is_some() {
                if let Some(t) = c.opt_f64("rope_local_base_freq")? {
                    local_rope_theta = Some(t);
                }
            }
            let scaling = match c.opt_obj("rope_scaling")? {
                Some(rs) => rope_scaling(&rs, true)?,
                None => RopeScaling::None,
            };
            (theta, scaling)
        }
    };

    // Which layers slide, and how far.
    let window_key = c.opt_uint("sliding_window")?;
    let window = if c.map.contains_key("sliding_window") { window_key } else { d.sliding_window };
    let layer_types = match c.get("layer_types") {
        Some(Value::Array(items)) => {
            let mut kinds = Vec::with_capacity(items.len().min(num_hidden_layers));
            for (i, v) in items.iter().enumerate() {
                kinds.push(match v.as_str() {
                    Some("full_attention") => LayerKind::Global,
                    Some("sliding_attention") => LayerKind::Sliding,
                    _ => {
                        return Err(Error::invalid_argument(format_args!(
                            "\"layer_types\"[{i}]: expected \"full_attention\" or \
                             \"sliding_attention\""
                        )))
                    }
                });
                if kinds.len() > num_hidden_layers {
                    break;
                }
            }
            kinds
        }
        Some(v) => return Err(c.wrong("layer_types", "a list of layer types", v)),
        None => {
            let slide = |l: usize| match arch.sliding_rule {
                SlidingRule::None => Ok(false),
                SlidingRule::AllLayers => Ok(window.is_some()),
                SlidingRule::FromMaxWindowLayers => {
                    let on = c.opt_bool("use_sliding_window")?.unwrap_or(false);
                    let from = c.opt_uint("max_window_layers")?.unwrap_or(d.max_window_layers);
                    Ok(on && window.is_some() && l >= from)
                }
                SlidingRule::Pattern => {
                    let p =
                        c.opt_uint("sliding_window_pattern")?.unwrap_or(d.sliding_window_pattern);
                    if p == 0 {
                        return Err(Error::invalid_argument("sliding_window_pattern is 0"));
                    }
                    Ok((l + 1) % p != 0)
                }
            };
            // One entry per layer is built below: refuse a count no model has before
            // allocating for it (a 200-byte config.json asked for 10^15 layers).
            if num_hidden_layers > MAX_LAYERS {
                return Err(Error::invalid_argument(format_args!(
                    "num_hidden_layers {num_hidden_layers} is above rml's limit of {MAX_LAYERS}"
                )));
            }
            let mut kinds = Vec::with_capacity(num_hidden_layers);
            for l in 0..num_hidden_layers {
                kinds.push(if slide(l)? { LayerKind::Sliding } else { LayerKind::Global });
            }
            kinds
        }
    };
    let any_sliding = layer_types.contains(&LayerKind::Sliding);
    if any_sliding && window.is_none() {
        return Err(Error::invalid_argument(
            "\"layer_types\" has sliding_attention layers but \"sliding_window\" is null",
        ));
    }

    let eos_token_ids = match c.get("eos_token_id") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut ids = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                ids.push(token_id(v).ok_or_else(|| {
                    Error::data_loss(format_args!(
                        "\"eos_token_id\"[{i}]: expected a token id, found {}",
                        kind(v)
                    ))
                })?);
            }
            ids
        }
        Some(v) => Vec::from([token_id(v).ok_or_else(|| {
            Error::data_loss(format_args!(
                "\"eos_token_id\": expected a token id or a list of them, found {}",
                kind(v)
            ))
        })?]),
    };
    let bos_token_id = match c.get("bos_token_id") {
        None => None,
        Some(v) => Some(token_id(v).ok_or_else(|| {
            Error::data_loss(format_args!(
                "\"bos_token_id\": expected a token id, found {}",
                kind(v)
            ))
        })?),
    };
    let dtype = match c.opt_str("dtype")? {
        Some(d) => Some(String::from(d)),
        None => c.opt_str("torch_dtype")?.map(String::from),
    };
    let query_pre_attn_scalar = match d.query_pre_attn_scalar {
        Some(default) => Some(c.opt_f64("query_pre_attn_scalar")?.unwrap_or(default)),
        None => None,
    };
    let final_logit_softcapping =
        if arch.sandwich_norms { c.opt_f64("final_logit_softcapping")? } else { None };

    let cfg = ModelConfig {
        arch,
        vocab_size: c.req_uint("vocab_size")?,
        hidden_size,
        intermediate_size: c.req_uint("intermediate_size")?,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: c.opt_f64("rms_norm_eps")?.unwrap_or(d.rms_norm_eps),
        rope_theta,
        rope_scaling,
        max_position_embeddings: c
            .opt_uint("max_position_embeddings")?
            .unwrap_or(d.max_position_embeddings),
        tie_word_embeddings: c.opt_bool("tie_word_embeddings")?.unwrap_or(d.tie_word_embeddings),
        bos_token_id,
        eos_token_ids,
        dtype,
        sliding_window: if any_sliding { window } else { None },
        local_rope_theta: if any_sliding { local_rope_theta } else { None },
        layer_types,
        query_pre_attn_scalar,
        final_logit_softcapping,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Reads the scaling described by `o` (`rope_parameters` or `rope_scaling`). In
/// `rope_scaling` the type key is required; in `rope_parameters` its absence means default.
fn rope_scaling(o: &Obj<'_>, type_required: bool) -> Result<RopeScaling> {
    let ty = match o.opt_str("rope_type")? {
        Some(t) => Some(t),
        None => o.opt_str("type")?,
    };
    let ty = match ty {
        Some(t) => t,
        None if type_required => {
            return Err(Error::data_loss(format_args!("{}: missing \"rope_type\"", o.path)))
        }
        None => "default",
    };
    match ty {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear { factor: o.req_f64("factor")? }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: o.req_f64("factor")?,
            low_freq_factor: o.req_f64("low_freq_factor")?,
            high_freq_factor: o.req_f64("high_freq_factor")?,
            original_max_position_embeddings: o.req_uint("original_max_position_embeddings")?,
        }),
        other => Err(Error::unimplemented(format_args!(
            "{}: rope type {other:?} is not supported (default, linear, llama3 are)",
            o.path
        ))),
    }
}

/// A token id: a non-negative integer that fits u32.
fn token_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}

/// A short description of a JSON value's kind for messages (never the whole value).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|x| x < 0) => "a negative number",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON object with typed, named accessors; `null` reads as absent.
struct Obj<'m> {
    map: &'m Map<String, Value>,
    /// Where the object sits (`""` for the top level, `"rope_scaling"` ...), for messages.
    path: &'static str,
}

impl<'m> Obj<'m> {
    fn get(&self, key: &str) -> Option<&'m Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            alloc::format!("{key:?}")
        } else {
            alloc::format!("{}.{key}", self.path)
        }
    }

    fn wrong(&self, key: &str, want: &str, v: &Value) -> Error {
        Error::data_loss(format_args!("{}: expected {want}, found {}", self.name(key), kind(v)))
    }

    fn missing(&self, key: &str) -> Error {
        if self.path.is_empty() {
            Error::data_loss(format_args!("missing {key:?}"))
        } else {
            Error::data_loss(format_args!("{}: missing {key:?}", self.path))
        }
    }

    fn opt_uint(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    fn req_uint(&self, key: &str) -> Result<usize> {
        self.opt_uint(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.wrong(key, "a number", v)),
        }
    }

    fn req_f64(&self, key: &str) -> Result<f64> {
        self.opt_f64(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.wrong(key, "true or false", v)),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'m str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.wrong(key, "a string", v)),
        }
    }

    fn opt_obj(&self, key: &'static str) -> Result<Option<Obj<'m>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj { map, path: key })),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }
}

/// The top-level object, refusing a key given twice (serde_json's `Map` would keep the last).
struct TopLevel<'k> {
    /// The key whose value is being read, so that a syntax error inside it (a number out of
    /// range, nesting too deep) can name the key.
    in_value: &'k mut Option<String>,
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            *self.in_value = Some(key.clone());
            let value: Value = access.next_value()?;
            *self.in_value = None;
            if map.contains_key(&key) {
                return Err(de::Error::custom(format_args!("key {key:?} is given twice")));
            }
            map.insert(key, value);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"{"vocab_size": 256, "hidden_size": 64, "intermediate_size": 176,
        "num_hidden_layers": 2, "num_attention_heads": 4"#;

    #[test]
    fn minimal_takes_llama_defaults() {
        let c = parse_config(&alloc::format!("{MIN}}}")).unwrap();
        assert_eq!(c.arch.name, "Llama");
        assert_eq!(c.layer_types, [LayerKind::Global; 2]);
        assert_eq!(c.sliding_window, None);
        assert_eq!(c.num_key_value_heads, 4);
        assert_eq!(c.head_dim, 16);
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert_eq!(c.rope_theta, 10_000.0);
        assert_eq!(c.rope_scaling, RopeScaling::None);
        assert_eq!(c.max_position_embeddings, 2048);
        assert!(!c.tie_word_embeddings);
        assert_eq!(c.bos_token_id, None);
        assert!(c.eos_token_ids.is_empty());
        assert_eq!(c.dtype, None);
    }

    #[test]
    fn duplicate_top_level_key_refused() {
        let e = parse_config(&alloc::format!("{MIN}, \"hidden_size\": 32}}")).unwrap_err();
        assert_eq!(e.code(), crate::Code::DataLoss);
        assert!(e.message().contains("hidden_size"), "{e}");
    }
}
