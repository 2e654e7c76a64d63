//! GGUF metadata → [`ModelConfig`], with the keys under the file's architecture prefix
//! (`llama.embedding_length`, `qwen3.attention.key_length`, `gemma3.rope.freq_base_swa`, ...),
//! as llama.cpp's converter writes them (`gguf-py`'s `Keys`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::format::gguf::Gguf;
use crate::model::arch::{ArchSpec, GGUF_NAMES};
use crate::model::config::{LayerKind, ModelConfig, RopeScaling};

/// The [`ModelConfig`] of a GGUF file, from `{arch}.*` metadata where `{arch}` is
/// `general.architecture`: `embedding_length`, `feed_forward_length`, `block_count`,
/// `attention.head_count`, `attention.layer_norm_rms_epsilon`, `context_length` (required),
/// `attention.head_count_kv` (default: head count), `attention.key_length` (default:
/// embedding / heads), `rope.freq_base` (default 10000), `vocab_size` (default: the number of
/// `tokenizer.ggml.tokens`, else `token_embd.weight`'s rows), `rope.scaling.type` /
/// `rope.scaling.factor` (`none` or `linear`), and for families with sliding-window layers
/// `attention.sliding_window` (required), `rope.freq_base_swa` (default: the family's, 10000
/// for Gemma 3) and `final_logit_softcapping`. Tied embeddings when `output.weight` is absent;
/// BOS/EOS from `tokenizer.ggml.*`; `dtype` from `general.file_type`. GGUF carries no layer
/// pattern and no `query_pre_attn_scalar`: the family's llama.cpp rule is used (Gemma 3:
/// layer `l` global iff `l % 6 == 5`; scores scaled by `1/sqrt(key_length)`, or
/// `1/sqrt(embedding_length / head_count)` for the 62-layer 27B). A `rope_freqs.weight`
/// tensor (Llama 3.x) is read by the weights, not here.
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] for an architecture rml does not run (named, with the
/// supported ones), a rope scaling type other than none/linear, `rope.dimension_count`
/// differing from the head width (partial rotary), or `attention.value_length` differing from
/// it; [`crate::Code::DataLoss`] naming a missing or mistyped key; the errors of
/// [`ModelConfig::validate`]. Messages start with `GGUF:`.
pub fn from_gguf(g: &Gguf<'_>) -> Result<ModelConfig> {
    from_gguf_inner(g)
        .map_err(|e| if e.message().starts_with("GGUF") { e } else { e.context("GGUF") })
}

fn from_gguf_inner(g: &Gguf<'_>) -> Result<ModelConfig> {
    let arch_name = g.architecture()?;
    let arch: &'static ArchSpec = ArchSpec::from_gguf_architecture(arch_name)?;
    let key = |k: &str| alloc::format!("{arch_name}.{k}");
    let opt_usize = |k: &str| g.get_usize(&key(k));
    let opt_f64 = |k: &str| g.get_f64(&key(k));
    let missing = |k: &str| Error::data_loss(format_args!("missing metadata {:?}", key(k)));
    let req = |k: &str| opt_usize(k)?.ok_or_else(|| missing(k));
    let hidden_size = req("embedding_length")?;
    let num_attention_heads = req("attention.head_count")?;
    let num_hidden_layers = req("block_count")?;
    let num_key_value_heads = opt_usize("attention.head_count_kv")?.unwrap_or(num_attention_heads);
    let per_head = |what: &str| {
        if num_attention_heads == 0 || hidden_size % num_attention_heads != 0 {
            return Err(Error::invalid_argument(format_args!(
                "{} {hidden_size} is not a multiple of {} {num_attention_heads}{what}",
                key("embedding_length"),
                key("attention.head_count")
            )));
        }
        Ok(hidden_size / num_attention_heads)
    };
    let head_dim = match opt_usize("attention.key_length")? {
        Some(h) => h,
        None => per_head("")?,
    };
    if let Some(v) = opt_usize("attention.value_length")? {
        if v != head_dim {
            return Err(Error::unimplemented(format_args!(
                "{} {v} differs from the key width {head_dim} (rml's attention uses one head \
                 width)",
                key("attention.value_length")
            )));
        }
    }
    if let Some(rot) = opt_usize("rope.dimension_count")? {
        if rot != head_dim {
            return Err(Error::unimplemented(format_args!(
                "{} {rot} differs from the head width {head_dim} (partial rotary embeddings)",
                key("rope.dimension_count")
            )));
        }
    }
    let rope_scaling = match g.get_str(&key("rope.scaling.type"))? {
        None | Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear {
            factor: opt_f64("rope.scaling.factor")?
                .ok_or_else(|| missing("rope.scaling.factor"))?,
        },
        Some(other) => {
            return Err(Error::unimplemented(format_args!(
                "{} {other:?} is not supported (none, linear are)",
                key("rope.scaling.type")
            )))
        }
    };
    let vocab_size = match opt_usize("vocab_size")? {
        Some(v) => v,
        None => match g.get_array("tokenizer.ggml.tokens")? {
            Some(a) => a.len(),
            None => match g.info(GGUF_NAMES.embedding) {
                Some(t) => t.shape.dims().first().copied().unwrap_or(0),
                None => return Err(Error::data_loss("no vocabulary size found")),
            },
        },
    };
    let dtype = g.get_usize("general.file_type")?.map(|ft| match ft {
        0 => String::from("ALL_F32"),
        1 => String::from("MOSTLY_F16"),
        2 => String::from("MOSTLY_Q4_0"),
        3 => String::from("MOSTLY_Q4_1"),
        7 => String::from("MOSTLY_Q8_0"),
        32 => String::from("MOSTLY_BF16"),
        n => alloc::format!("file_type {n}"),
    });

    // Sliding-window layers: llama.cpp's fixed pattern for the family.
    let mut layer_types = Vec::new();
    let (mut sliding_window, mut local_rope_theta, mut query_pre_attn_scalar) = (None, None, None);
    if let Some(p) = arch.gguf_sliding_pattern {
        for l in 0..num_hidden_layers.min(1 << 16) {
            layer_types.push(if (l + 1) % p == 0 { LayerKind::Global } else { LayerKind::Sliding });
        }
        sliding_window = Some(opt_usize("attention.sliding_window")?.ok_or_else(|| {
            Error::data_loss(format_args!(
                "missing metadata {:?} ({} has sliding-window layers)",
                key("attention.sliding_window"),
                arch.name
            ))
        })?);
        local_rope_theta = opt_f64("rope.freq_base_swa")?.or(arch.gguf_local_rope_theta);
    } else {
        layer_types.resize(num_hidden_layers.min(1 << 16), LayerKind::Global);
    }
    if arch.hf_defaults.query_pre_attn_scalar.is_some() {
        // llama.cpp: 1/sqrt(key_length), except Gemma 3 27B (62 layers): hidden / heads.
        query_pre_attn_scalar = Some(if num_hidden_layers == 62 {
            per_head(" (Gemma 3 27B scales by their ratio)")? as f64
        } else {
            head_dim as f64
        });
    }
    let final_logit_softcapping =
        if arch.sandwich_norms { opt_f64("final_logit_softcapping")? } else { None };

    let cfg = ModelConfig {
        arch,
        vocab_size,
        hidden_size,
        intermediate_size: req("feed_forward_length")?,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: opt_f64("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| missing("attention.layer_norm_rms_epsilon"))?,
        rope_theta: opt_f64("rope.freq_base")?.unwrap_or(10_000.0),
        rope_scaling,
        max_position_embeddings: req("context_length")?,
        tie_word_embeddings: g.info(GGUF_NAMES.output).is_none(),
        bos_token_id: g.bos_token_id()?,
        eos_token_ids: g.eos_token_id()?.into_iter().collect(),
        dtype,
        layer_types,
        sliding_window,
        local_rope_theta,
        query_pre_attn_scalar,
        final_logit_softcapping,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The `llama3` rope scaling rml wrote into a GGUF file under
/// [`super::write::LLAMA3_KEYS`] (all four keys), or `None` when the file has none of them
/// (llama.cpp's own files: their `rope_freqs.weight` divisors do not say the parameters).
/// [`from_gguf`] does not read these keys: in a GGUF the scaling is applied through the
/// `rope_freqs.weight` tensor, which the weights read; a conversion to `config.json` needs
/// them.
///
/// # Errors
///
/// [`crate::Code::DataLoss`] naming a key that is missing (when another is present) or not a
/// number.
pub fn llama3_scaling(g: &Gguf<'_>) -> Result<Option<RopeScaling>> {
    let [k0, k1, k2, k3] = super::write::LLAMA3_KEYS;
    let keys = super::write::LLAMA3_KEYS;
    if keys.iter().all(|k| g.get(k).is_none()) {
        return Ok(None);
    }
    let missing = |k: &str| Error::data_loss(format_args!("GGUF: {k} is missing"));
    let f = |k: &str| g.get_f64(k)?.ok_or_else(|| missing(k));
    Ok(Some(RopeScaling::Llama3 {
        factor: f(k0)?,
        low_freq_factor: f(k1)?,
        high_freq_factor: f(k2)?,
        original_max_position_embeddings: g.get_usize(k3)?.ok_or_else(|| missing(k3))?,
    }))
}
