//! Tensor names in each container ([`TensorNames`]: Hugging Face's [`HF_NAMES`], llama.cpp's
//! [`GGUF_NAMES`]), what a name is to the loader ([`TensorKind`]), and the mapping of a
//! family's names from one container to the other ([`ArchSpec::map_name`]), which
//! `rml convert` uses.

use core::fmt::Write as _;

use super::{ArchSpec, ModelFormat};
use crate::model::weights::TensorName;

/// The tensors of one decoder layer (which of them a family has is in its [`ArchSpec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// RMSNorm before attention.
    AttnNorm,
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Attention output projection.
    O,
    /// Query bias (`ArchSpec::qkv_bias`).
    QBias,
    /// Key bias.
    KBias,
    /// Value bias.
    VBias,
    /// Per-head RMSNorm of the queries (`ArchSpec::qk_norm`).
    QNorm,
    /// Per-head RMSNorm of the keys.
    KNorm,
    /// RMSNorm of the attention output before the residual add (`ArchSpec::sandwich_norms`).
    PostAttnNorm,
    /// RMSNorm before the MLP.
    FfnNorm,
    /// RMSNorm of the MLP output before the residual add (`ArchSpec::sandwich_norms`).
    PostFfnNorm,
    /// MLP gate projection.
    Gate,
    /// MLP up projection.
    Up,
    /// MLP down projection.
    Down,
}

/// Tensor names in one container. Layer tensors are `{layer_prefix}{l}.{part}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorNames {
    /// Token embedding.
    pub embedding: &'static str,
    /// Final norm.
    pub final_norm: &'static str,
    /// Output head (absent when tied).
    pub output: &'static str,
    /// Precomputed RoPE frequency divisors (llama.cpp's `rope_freqs.weight`), if the container
    /// can carry them.
    pub rope_freqs: Option<&'static str>,
    /// Prefix of layer tensors, followed by the layer number and a dot.
    pub layer_prefix: &'static str,
    /// The suffix of each [`Part`] (after `{prefix}{l}.`).
    pub attn_norm: &'static str,
    /// See [`Part::Q`].
    pub q: &'static str,
    /// See [`Part::K`].
    pub k: &'static str,
    /// See [`Part::V`].
    pub v: &'static str,
    /// See [`Part::O`].
    pub o: &'static str,
    /// See [`Part::QBias`].
    pub q_bias: &'static str,
    /// See [`Part::KBias`].
    pub k_bias: &'static str,
    /// See [`Part::VBias`].
    pub v_bias: &'static str,
    /// See [`Part::QNorm`].
    pub q_norm: &'static str,
    /// See [`Part::KNorm`].
    pub k_norm: &'static str,
    /// See [`Part::PostAttnNorm`].
    pub post_attn_norm: &'static str,
    /// See [`Part::FfnNorm`].
    pub ffn_norm: &'static str,
    /// See [`Part::PostFfnNorm`].
    pub post_ffn_norm: &'static str,
    /// See [`Part::Gate`].
    pub gate: &'static str,
    /// See [`Part::Up`].
    pub up: &'static str,
    /// See [`Part::Down`].
    pub down: &'static str,
}

impl TensorNames {
    /// The full name of `part` in layer `l` (built inline, no heap).
    pub fn layer(&self, l: usize, part: Part) -> TensorName {
        let s = match part {
            Part::AttnNorm => self.attn_norm,
            Part::Q => self.q,
            Part::K => self.k,
            Part::V => self.v,
            Part::O => self.o,
            Part::QBias => self.q_bias,
            Part::KBias => self.k_bias,
            Part::VBias => self.v_bias,
            Part::QNorm => self.q_norm,
            Part::KNorm => self.k_norm,
            Part::PostAttnNorm => self.post_attn_norm,
            Part::FfnNorm => self.ffn_norm,
            Part::PostFfnNorm => self.post_ffn_norm,
            Part::Gate => self.gate,
            Part::Up => self.up,
            Part::Down => self.down,
        };
        let mut n = TensorName::new("");
        let _ = write!(n, "{}{l}.{s}", self.layer_prefix);
        n
    }
}

/// Hugging Face names (`LlamaForCausalLM` and the families that copy it).
pub const HF_NAMES: TensorNames = TensorNames {
    embedding: "model.embed_tokens.weight",
    final_norm: "model.norm.weight",
    output: "lm_head.weight",
    rope_freqs: None,
    layer_prefix: "model.layers.",
    attn_norm: "input_layernorm.weight",
    q: "self_attn.q_proj.weight",
    k: "self_attn.k_proj.weight",
    v: "self_attn.v_proj.weight",
    o: "self_attn.o_proj.weight",
    q_bias: "self_attn.q_proj.bias",
    k_bias: "self_attn.k_proj.bias",
    v_bias: "self_attn.v_proj.bias",
    q_norm: "self_attn.q_norm.weight",
    k_norm: "self_attn.k_norm.weight",
    // Llama's `post_attention_layernorm` is the norm before the MLP (`ffn_norm` below);
    // Gemma renames these two (see gemma3.rs).
    post_attn_norm: "post_attention_norm.weight",
    ffn_norm: "post_attention_layernorm.weight",
    post_ffn_norm: "post_feedforward_layernorm.weight",
    gate: "mlp.gate_proj.weight",
    up: "mlp.up_proj.weight",
    down: "mlp.down_proj.weight",
};

/// llama.cpp's GGUF names (`LLM_TENSOR_NAMES` / `gguf-py`'s `MODEL_TENSORS`).
pub const GGUF_NAMES: TensorNames = TensorNames {
    embedding: "token_embd.weight",
    final_norm: "output_norm.weight",
    output: "output.weight",
    rope_freqs: Some("rope_freqs.weight"),
    layer_prefix: "blk.",
    attn_norm: "attn_norm.weight",
    q: "attn_q.weight",
    k: "attn_k.weight",
    v: "attn_v.weight",
    o: "attn_output.weight",
    q_bias: "attn_q.bias",
    k_bias: "attn_k.bias",
    v_bias: "attn_v.bias",
    q_norm: "attn_q_norm.weight",
    k_norm: "attn_k_norm.weight",
    post_attn_norm: "post_attention_norm.weight",
    ffn_norm: "ffn_norm.weight",
    post_ffn_norm: "post_ffw_norm.weight",
    gate: "ffn_gate.weight",
    up: "ffn_up.weight",
    down: "ffn_down.weight",
};

impl Part {
    /// Every part, in declaration order.
    pub const ALL: [Part; 16] = [
        Part::AttnNorm,
        Part::Q,
        Part::K,
        Part::V,
        Part::O,
        Part::QBias,
        Part::KBias,
        Part::VBias,
        Part::QNorm,
        Part::KNorm,
        Part::PostAttnNorm,
        Part::FfnNorm,
        Part::PostFfnNorm,
        Part::Gate,
        Part::Up,
        Part::Down,
    ];
}

/// What a tensor is to a family's loader, whatever its container calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// The token embedding.
    Embedding,
    /// The final RMSNorm weight.
    FinalNorm,
    /// The output head (absent from files whose head is tied to the embedding).
    Output,
    /// llama.cpp's RoPE frequency divisors (`rope_freqs.weight`; GGUF only).
    RopeFreqs,
    /// `Part` of layer `usize`.
    Layer(usize, Part),
}

impl TensorKind {
    /// Whether it is an RMSNorm weight (the final norm, or a layer's attention, MLP,
    /// post-attention, post-MLP or per-head q/k norm): the tensors
    /// [`ArchSpec::norm_offset`] applies to.
    pub fn is_norm(self) -> bool {
        matches!(
            self,
            TensorKind::FinalNorm
                | TensorKind::Layer(
                    _,
                    Part::AttnNorm
                        | Part::FfnNorm
                        | Part::PostAttnNorm
                        | Part::PostFfnNorm
                        | Part::QNorm
                        | Part::KNorm
                )
        )
    }

    /// Whether it is a query or key projection (the rows GGUF permutes where
    /// [`ArchSpec::gguf_qk_permuted`]).
    pub fn is_qk(self) -> bool {
        matches!(self, TensorKind::Layer(_, Part::Q | Part::K))
    }
}

impl TensorNames {
    /// What the tensor `name` is in this container, or `None` for a name no loader asks for
    /// (a layer number is read in its shortest decimal form: `blk.01.…` is not layer 1).
    pub fn kind(&self, name: &str) -> Option<TensorKind> {
        if name == self.embedding {
            return Some(TensorKind::Embedding);
        }
        if name == self.final_norm {
            return Some(TensorKind::FinalNorm);
        }
        if name == self.output {
            return Some(TensorKind::Output);
        }
        if self.rope_freqs == Some(name) {
            return Some(TensorKind::RopeFreqs);
        }
        let (layer, _) = name.strip_prefix(self.layer_prefix)?.split_once('.')?;
        let l = layer.parse::<usize>().ok()?;
        Part::ALL
            .into_iter()
            .find(|&p| self.layer(l, p).as_str() == name)
            .map(|p| TensorKind::Layer(l, p))
    }

    /// The name of `kind` in this container, or `None` where it has none (`rope_freqs` in a
    /// Hugging Face folder).
    pub fn name(&self, kind: TensorKind) -> Option<TensorName> {
        match kind {
            TensorKind::Embedding => Some(TensorName::new(self.embedding)),
            TensorKind::FinalNorm => Some(TensorName::new(self.final_norm)),
            TensorKind::Output => Some(TensorName::new(self.output)),
            TensorKind::RopeFreqs => self.rope_freqs.map(TensorName::new),
            TensorKind::Layer(l, p) => Some(self.layer(l, p)),
        }
    }
}

impl ArchSpec {
    /// The tensor `name` of this family in container `from`, as container `to` names it
    /// (the family's tables, [`ArchSpec::names`], read both ways): `None` when no loader of
    /// the family asks for `name`; `Some((kind, None))` when `to` has no name for it
    /// (`rope_freqs.weight` into a Hugging Face folder). `from == to` gives the name back.
    pub fn map_name(
        &self,
        from: ModelFormat,
        to: ModelFormat,
        name: &str,
    ) -> Option<(TensorKind, Option<TensorName>)> {
        let kind = self.names(from).kind(name)?;
        Some((kind, self.names(to).name(kind)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{gemma3, llama, FAMILIES};
    use super::*;
    use ModelFormat::{Gguf, Safetensors as Hf};

    /// The mapped name as a string, `None` when unknown or without a name in `to`.
    fn map(spec: &ArchSpec, from: ModelFormat, to: ModelFormat, name: &str) -> Option<TensorName> {
        spec.map_name(from, to, name).and_then(|(_, n)| n)
    }

    #[test]
    fn every_name_maps_both_ways_for_every_family() {
        for spec in FAMILIES {
            for (from, to) in [(Gguf, Hf), (Hf, Gguf)] {
                let (src, dst) = (spec.names(from), spec.names(to));
                for part in Part::ALL {
                    let n = src.layer(17, part);
                    let (kind, out) = spec.map_name(from, to, n.as_str()).unwrap();
                    assert_eq!(kind, TensorKind::Layer(17, part), "{}: {n}", spec.name);
                    let out = out.unwrap();
                    assert_eq!(out, dst.layer(17, part));
                    assert_eq!(kind.is_qk(), matches!(part, Part::Q | Part::K));
                    assert_eq!(map(spec, to, from, out.as_str()), Some(n), "{}: back", spec.name);
                    assert_eq!(map(spec, from, from, n.as_str()), Some(n));
                }
                for (kind, a, b) in [
                    (TensorKind::Embedding, src.embedding, dst.embedding),
                    (TensorKind::FinalNorm, src.final_norm, dst.final_norm),
                    (TensorKind::Output, src.output, dst.output),
                ] {
                    assert_eq!(spec.map_name(from, to, a), Some((kind, Some(TensorName::new(b)))));
                    assert_eq!(spec.map_name(to, from, b), Some((kind, Some(TensorName::new(a)))));
                }
            }
        }
    }

    #[test]
    fn names_of_one_family() {
        let l = &llama::SPEC;
        assert_eq!(
            map(l, Gguf, Hf, "blk.12.attn_k.weight").unwrap().as_str(),
            "model.layers.12.self_attn.k_proj.weight"
        );
        assert_eq!(map(l, Hf, Gguf, "model.norm.weight").unwrap().as_str(), "output_norm.weight");
        assert_eq!(map(l, Gguf, Hf, "output.weight").unwrap().as_str(), "lm_head.weight");
        let g = &gemma3::SPEC;
        assert_eq!(
            map(g, Gguf, Hf, "blk.3.post_ffw_norm.weight").unwrap().as_str(),
            "model.layers.3.post_feedforward_layernorm.weight"
        );
        assert_eq!(
            map(g, Hf, Gguf, "model.layers.3.pre_feedforward_layernorm.weight").unwrap().as_str(),
            "blk.3.ffn_norm.weight"
        );
        // rope_freqs has no Hugging Face name.
        assert_eq!(l.map_name(Gguf, Hf, "rope_freqs.weight"), Some((TensorKind::RopeFreqs, None)));
        assert_eq!(l.map_name(Hf, Gguf, "rope_freqs.weight"), None);
        // Names no loader asks for.
        for n in [
            "model.layers.x.mlp.up_proj.weight",
            "model.layers.01.mlp.up_proj.weight",
            "model.layers.1.mlp.up_proj",
            "pooler.dense.weight",
            "blk.3.attn_q.weight",
        ] {
            assert_eq!(l.map_name(Hf, Gguf, n), None, "{n}");
        }
    }

    #[test]
    fn norms_and_qk() {
        let t = |n| HF_NAMES.kind(n).unwrap();
        assert!(t("model.norm.weight").is_norm());
        assert!(t("model.layers.0.input_layernorm.weight").is_norm());
        assert!(t("model.layers.0.self_attn.k_norm.weight").is_norm());
        assert!(!t("model.layers.0.self_attn.q_proj.bias").is_norm());
        assert!(!t("model.embed_tokens.weight").is_norm());
        assert!(t("model.layers.0.self_attn.q_proj.weight").is_qk());
        assert!(!t("model.layers.0.self_attn.v_proj.weight").is_qk());
    }
}
