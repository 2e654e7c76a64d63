//! [`Weights`]: a model's tensors, looked up by name in a [`TensorSource`] and checked
//! against the [`ModelConfig`], ready for the kernels.
//!
//! Both containers are understood, with the names and conventions of the config's family
//! ([`crate::model::arch::ArchSpec`]): Hugging Face (`model.layers.3.self_attn.q_proj.weight`)
//! and GGUF / llama.cpp (`blk.3.attn_q.weight`). Matrices stay where the file put them (mmap or
//! `&'static [u8]`) when the kernels take their dtype as it is — aligned f32, f16, bf16, Q8_0,
//! Q4_0, Q4_1; a misaligned f32 matrix is copied once into an aligned block. With
//! [`WeightFormat::Q8_0`], f32 / f16 / bf16 matrices are quantized to Q8_0 at load instead.
//! A decoder built with [`crate::model::DecoderOptions::repack_weights`] (int8 activations)
//! copies its matrices (layers, output head) into the layout the active int8
//! kernels read fastest: Q5_0 into [`crate::tensor::DType::Q5_0x2`] on AVX-512, Q4_0 / Q4_1 /
//! Q5_0 / Q8_0 / Q4_K into the row-interleaved layout of [`crate::kernels::rows8`] on AVX2;
//! with f32 activations it widens Q5_0 and IQ4_NL to Q8_0 on AVX2
//! ([`crate::kernels::Kernels::f32_via_q8_0`]). [`Weights::load`] itself never repacks.
//! Norm vectors and biases are small and always widened to f32; norm weights get the family's
//! offset (Gemma's `1 + w`) added at load, so the forward pass multiplies by them as they are.
//!
//! GGUF Llama files store the q/k projection rows permuted (llama.cpp's converter pairs RoPE
//! dimensions `i` and `i + d/2` as adjacent rows). The weights are used as stored and RoPE is
//! applied interleaved ([`RopeLayout::Interleaved`]), which gives the same attention scores as
//! Hugging Face's rotate-half on un-permuted rows;
//! [`crate::model::arch::llama::unpermute_qk_rows`] undoes the permutation for tools that write
//! Hugging Face files.
//!
//! The output head: with `tie_word_embeddings` the embedding is the head and an `lm_head`
//! in the file is ignored (transformers ties them the same way); without it the file's
//! output matrix (`lm_head.weight` / `output.weight`) is required.
//!
//! By concept: this file walks a family's tensors into [`Weights`]; `tensors` holds the
//! loaded forms ([`Linear`], [`Vector`], [`TensorName`]) and what loading does to one stored
//! matrix; `plan` counts the buffers loading will make, for the memory plan.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::format::{TensorSource, TensorView};
use crate::mem::place::Place;
use crate::model::arch::{ArchSpec, ModelFormat, Part, TensorNames};
use crate::model::config::ModelConfig;
use crate::ops::RopeLayout;

mod plan;
mod tensors;

pub(crate) use plan::plan_weights;
use tensors::linear;
pub(crate) use tensors::Repack;
pub use tensors::{Linear, TensorName, Vector, WeightFormat};

/// One decoder layer's weights. Which optional tensors are present is the family's
/// ([`ArchSpec::qkv_bias`], [`ArchSpec::qk_norm`], [`ArchSpec::sandwich_norms`]).
#[derive(Debug)]
pub struct LayerWeights<'a> {
    /// RMSNorm before attention (`input_layernorm` / `attn_norm`), `[hidden]`.
    pub attn_norm: Vector,
    /// `q_proj` / `attn_q`, `[heads * head_dim, hidden]`.
    pub q: Linear<'a>,
    /// `k_proj` / `attn_k`, `[kv_heads * head_dim, hidden]`.
    pub k: Linear<'a>,
    /// `v_proj` / `attn_v`, `[kv_heads * head_dim, hidden]`.
    pub v: Linear<'a>,
    /// `o_proj` / `attn_output`, `[hidden, heads * head_dim]`.
    pub o: Linear<'a>,
    /// q/k/v biases `[heads * head_dim]`, `[kv_heads * head_dim]` × 2 (Qwen2).
    pub qkv_bias: Option<[Vector; 3]>,
    /// Per-head RMSNorm weights of q and k, `[head_dim]` each (Qwen3, Gemma 3).
    pub qk_norm: Option<[Vector; 2]>,
    /// RMSNorm of the attention output before the residual add, `[hidden]` (Gemma 3).
    pub post_attn_norm: Option<Vector>,
    /// RMSNorm before the MLP (`post_attention_layernorm` in Llama, `pre_feedforward_layernorm`
    /// in Gemma 3; `ffn_norm`), `[hidden]`.
    pub ffn_norm: Vector,
    /// RMSNorm of the MLP output before the residual add, `[hidden]` (Gemma 3).
    pub post_ffn_norm: Option<Vector>,
    /// `gate_proj` / `ffn_gate`, `[intermediate, hidden]`.
    pub gate: Linear<'a>,
    /// `up_proj` / `ffn_up`, `[intermediate, hidden]`.
    pub up: Linear<'a>,
    /// `down_proj` / `ffn_down`, `[hidden, intermediate]`.
    pub down: Linear<'a>,
}

/// Detects the container from the embedding's name under `arch`'s naming.
///
/// # Errors
///
/// [`crate::Code::NotFound`] if neither container's embedding name exists.
pub fn detect_container<'a>(arch: &ArchSpec, src: &dyn TensorSource<'a>) -> Result<ModelFormat> {
    let (hf, gguf) = (arch.hf_names.embedding, arch.gguf_names.embedding);
    if src.tensor(hf).is_ok() {
        Ok(ModelFormat::Safetensors)
    } else if src.tensor(gguf).is_ok() {
        Ok(ModelFormat::Gguf)
    } else {
        Err(Error::not_found(format_args!(
            "no token embedding: neither {hf:?} (Hugging Face) nor {gguf:?} (GGUF) is in the file"
        )))
    }
}

/// The f32 vectors of layer `l` beyond its two norms, in load order: (part, length, norm
/// offset). [`Weights::load_placed`] and [`plan_weights`] both walk this list.
fn layer_vectors(c: &ModelConfig, format: ModelFormat) -> impl Iterator<Item = (Part, usize, f32)> {
    let arch = c.arch;
    let (h, hd) = (c.hidden_size, c.head_dim);
    let (q_rows, kv_rows) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let off = arch.norm_offset(format);
    let bias =
        [(Part::QBias, q_rows, 0.0), (Part::KBias, kv_rows, 0.0), (Part::VBias, kv_rows, 0.0)];
    let qk = [(Part::QNorm, hd, off), (Part::KNorm, hd, off)];
    let post = [(Part::PostAttnNorm, h, off), (Part::PostFfnNorm, h, off)];
    let take = |on: bool, n: usize| if on { n } else { 0 };
    bias.into_iter()
        .take(take(arch.qkv_bias, 3))
        .chain(qk.into_iter().take(take(arch.qk_norm, 2)))
        .chain(post.into_iter().take(take(arch.sandwich_norms, 2)))
}

/// All of a model's weights.
#[derive(Debug)]
pub struct Weights<'a> {
    /// Token embedding, `[vocab, hidden]`.
    pub embedding: Linear<'a>,
    /// The layers, in order.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final RMSNorm, `[hidden]`.
    pub final_norm: Vector,
    /// The output head `[vocab, hidden]`; `None` when tied to the embedding.
    pub lm_head: Option<Linear<'a>>,
    /// The container whose names the file uses.
    pub format: ModelFormat,
    /// How RoPE pairs dimensions for these q/k weights.
    pub rope_layout: RopeLayout,
    /// Divisors of the RoPE inverse frequencies, `[head_dim / 2]` (a Llama 3.x GGUF's
    /// `rope_freqs.weight`, llama.cpp's form of the `llama3` scaling), if the file has them.
    pub rope_freqs: Option<Vector>,
}

impl<'a> Weights<'a> {
    /// Looks up and checks every tensor the config calls for.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming a missing tensor; [`crate::Code::InvalidArgument`]
    /// naming a tensor whose shape does not match the config, or whose row length does not fit
    /// its block size; [`crate::Code::Unimplemented`] for a dtype the kernels do not take;
    /// [`crate::Code::ResourceExhausted`] if a copy cannot be allocated; the config's own
    /// [`ModelConfig::validate`] errors.
    pub fn load(
        config: &ModelConfig,
        src: &dyn TensorSource<'a>,
        format: WeightFormat,
    ) -> Result<Self> {
        Self::load_placed(config, src, format, Repack::Off, &mut Place::heap())
    }

    /// [`Weights::load`] with every buffer it makes (norms, converted matrices) taken from
    /// `place`, in the order [`plan_weights`] counts them; with `repack`, every matrix the
    /// active kernels have a faster layout for, for those activations, is repacked
    /// ([`tensors::conversion`]).
    pub(crate) fn load_placed<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        format: WeightFormat,
        repack: Repack,
        place: &mut Place<'a>,
    ) -> Result<Self> {
        config.validate()?;
        let c = config;
        let arch = c.arch;
        let naming = detect_container(arch, src)?;
        let names: &TensorNames = arch.names(naming);
        let offset = arch.norm_offset(naming);
        let (h, q_rows, kv_rows) =
            (c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
        // A tied embedding is repacked like the layers: it is the output head, a GEMV as
        // large as all the layers together on small models (Gemma 3 270M: 262144 x 640),
        // and its rows are looked up through `ops::dequantize_row`, which reads every
        // layout. An untied one is only looked up: it stays as stored.
        let tied = if c.tie_word_embeddings { repack } else { Repack::Off };
        let embedding = linear(src, names.embedding, c.vocab_size, h, format, tied, place)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(c.num_hidden_layers)
            .map_err(|_| Error::resource_exhausted("layer table"))?;
        for l in 0..c.num_hidden_layers {
            let name = |p| names.layer(l, p);
            let mut lin =
                |p, rows, k| linear(src, name(p).as_str(), rows, k, format, repack, place);
            let (q, k, v, o) = (
                lin(Part::Q, q_rows, h)?,
                lin(Part::K, kv_rows, h)?,
                lin(Part::V, kv_rows, h)?,
                lin(Part::O, h, q_rows)?,
            );
            let (gate, up, down) = (
                lin(Part::Gate, c.intermediate_size, h)?,
                lin(Part::Up, c.intermediate_size, h)?,
                lin(Part::Down, h, c.intermediate_size)?,
            );
            let mut vec = |p, len, off| {
                let n = name(p);
                Vector::from_view(n.as_str(), &src.tensor(n.as_str())?, len, off, place)
            };
            let (attn_norm, ffn_norm) =
                (vec(Part::AttnNorm, h, offset)?, vec(Part::FfnNorm, h, offset)?);
            let mut extra: [Option<Vector>; 7] = Default::default();
            for (slot, (p, len, off)) in extra.iter_mut().zip(layer_vectors(c, naming)) {
                *slot = Some(vec(p, len, off)?);
            }
            let mut extra = extra.into_iter().flatten();
            let mut next = || extra.next().ok_or_else(|| Error::internal("layer vector list"));
            let qkv_bias = if arch.qkv_bias { Some([next()?, next()?, next()?]) } else { None };
            let qk_norm = if arch.qk_norm { Some([next()?, next()?]) } else { None };
            let (post_attn_norm, post_ffn_norm) =
                if arch.sandwich_norms { (Some(next()?), Some(next()?)) } else { (None, None) };
            layers.push(LayerWeights {
                attn_norm,
                q,
                k,
                v,
                o,
                qkv_bias,
                qk_norm,
                post_attn_norm,
                ffn_norm,
                post_ffn_norm,
                gate,
                up,
                down,
            });
        }
        let fnorm = names.final_norm;
        let final_norm = Vector::from_view(fnorm, &src.tensor(fnorm)?, h, offset, place)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            output_view(names, src)?;
            Some(linear(src, names.output, c.vocab_size, h, format, repack, place)?)
        };
        let rope_freqs = match rope_freqs_view(names, src)? {
            Some((n, view)) => Some(Vector::from_view(n, &view, c.head_dim / 2, 0.0, place)?),
            None => None,
        };
        let rope_layout = arch.rope_layout(naming);
        Ok(Weights {
            embedding,
            layers,
            final_norm,
            lm_head,
            format: naming,
            rope_layout,
            rope_freqs,
        })
    }

    /// The output head: `lm_head`, or the embedding when tied.
    pub fn output(&self) -> &Linear<'a> {
        self.lm_head.as_ref().unwrap_or(&self.embedding)
    }

    /// Every matrix, in forward order (embedding first, head last if untied).
    pub fn matrices(&self) -> impl Iterator<Item = &Linear<'a>> {
        core::iter::once(&self.embedding)
            .chain(
                self.layers
                    .iter()
                    .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].into_iter()),
            )
            .chain(self.lm_head.iter())
    }

    /// Bytes of weights read to decode one token: every layer matrix, the output head, and
    /// one embedding row.
    pub fn bytes_per_token(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|m| m.size_bytes())
                    .sum::<usize>()
            })
            .sum();
        let e = &self.embedding;
        layers + self.output().size_bytes() + e.size_bytes() / e.rows().max(1)
    }

    /// Bytes the weights occupy (borrowed or owned), norms and biases included.
    pub fn size_bytes(&self) -> usize {
        let vec_bytes = |v: &Vector| v.as_slice().len() * 4;
        let norms = vec_bytes(&self.final_norm)
            + self.rope_freqs.as_ref().map_or(0, vec_bytes)
            + self
                .layers
                .iter()
                .map(|l| {
                    [&l.attn_norm, &l.ffn_norm].into_iter().map(vec_bytes).sum::<usize>()
                        + l.qkv_bias.iter().flatten().map(vec_bytes).sum::<usize>()
                        + l.qk_norm.iter().flatten().map(vec_bytes).sum::<usize>()
                        + [&l.post_attn_norm, &l.post_ffn_norm]
                            .into_iter()
                            .flatten()
                            .map(vec_bytes)
                            .sum::<usize>()
                })
                .sum::<usize>();
        self.matrices().map(|m| m.size_bytes()).sum::<usize>() + norms
    }
}

/// Checks that an untied model's output matrix is in the file.
///
/// # Errors
///
/// [`crate::Code::NotFound`] naming the tensor (and why it is needed) when it is absent.
fn output_view<'a>(names: &TensorNames, src: &dyn TensorSource<'a>) -> Result<TensorView<'a>> {
    src.tensor(names.output).map_err(|e| {
        if e.code() == crate::Code::NotFound {
            Error::not_found(format_args!(
                "tensor {:?} is not in the file, and tie_word_embeddings is false (the output \
                 head is not the embedding)",
                names.output
            ))
        } else {
            e
        }
    })
}

/// The container's `rope_freqs.weight`, if it has one.
fn rope_freqs_view<'a>(
    names: &TensorNames,
    src: &dyn TensorSource<'a>,
) -> Result<Option<(&'static str, TensorView<'a>)>> {
    let Some(n) = names.rope_freqs else { return Ok(None) };
    match src.tensor(n) {
        Ok(view) => Ok(Some((n, view))),
        Err(e) if e.code() == crate::Code::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
