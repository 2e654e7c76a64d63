//! How a [`DecoderLM`](super::DecoderLM) is built and run: [`DecoderOptions`] and the choices
//! it names ([`KvDtype`], [`AttentionPath`]).

#[cfg(doc)]
use super::{KV_SEGMENT, ROW_TILE};
use crate::exec::Schedule;
#[cfg(doc)]
use crate::model::plan::MemoryPlan;
use crate::model::weights::WeightFormat;
use crate::ops::Activations;

/// The context length used when [`DecoderOptions::context_len`] is `None` and the model
/// allows more: `min(max_position_embeddings, DEFAULT_MAX_CONTEXT)`.
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// How a [`DecoderLM`](super::DecoderLM) is built and run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderOptions {
    /// Positions the KV cache holds; `None`: `min(max_position_embeddings, 4096)`.
    pub context_len: Option<usize>,
    /// How activations meet quantized weights: [`Activations::Int8`] by default (int8 with
    /// outlier-block correction on the RMS-normalized inputs: q/k/v, gate/up and the output
    /// head; plain int8 for o and down, see [`Activations::for_other_input`]),
    /// [`Activations::F32`] for exact results, [`Activations::Int8Plain`] (ggml's scheme,
    /// fastest), or [`Activations::Mixed`] (f32 for q/k/v and gate/up, plain int8 for the
    /// rest). f32/f16/bf16 weights always meet f32 activations.
    pub activations: Activations,
    /// Keep weights as stored, or quantize float matrices to Q8_0 at load.
    pub weight_format: WeightFormat,
    /// Copy the matrices into the layout the active kernels' int8 products read
    /// fastest, where the activations are [`Activations::Int8`] or
    /// [`Activations::Int8Plain`]: Q5_0 matrices (rows a multiple of 64 long) into
    /// [`crate::DType::Q5_0x2`] where the kernels have a SIMD int8 body for it
    /// ([`crate::kernels::Kernels::has_simd_q8`]: the AVX-512 tiers); Q4_0, Q4_1, Q5_0,
    /// Q8_0 and Q4_K matrices of a multiple of 8 rows into the row-interleaved layout
    /// ([`crate::kernels::rows8`]) where they have a kernel for it
    /// ([`crate::kernels::Kernels::matmul_q8_rows8`]: the AVX2 and AVX-VNNI tiers). The
    /// output head is repacked too, and so is the embedding when tied to it (its rows are
    /// then looked up through [`crate::ops::dequantize_row`], which reads every layout; an
    /// untied embedding stays as stored). Costs a copy of
    /// those matrices (counted in [`MemoryPlan`]'s converted bytes; the file's pages are no
    /// longer read); gives the same logits, bit for bit, and faster products on those
    /// matrices (SmolLM2 Q4_K_M's Q5_0 fallbacks on AVX-512, figures in
    /// `docs/perf/notes-ops-decoder.md`; every matrix of those types on AVX2, Gemma 3 270M's
    /// tied Q8_0 head included). With [`Activations::F32`], the matrices of the types the
    /// active kernels' f32 products run faster as Q8_0 are widened to it instead
    /// ([`crate::kernels::Kernels::f32_via_q8_0`]: Q5_0 and IQ4_NL on AVX2 and AVX-VNNI;
    /// the same values, and with the factored order of both bodies the same logits; 34 bytes
    /// per 32 weights instead of 22 or 18). [`Activations::Mixed`] repacks nothing. `true`
    /// by default with the `std` feature, `false` without (weights in flash or a fixed region
    /// stay in place).
    pub repack_weights: bool,
    /// The most prompt tokens run through the layers at once (bounds the scratch arena, which
    /// grows linearly with it). 128 by default: against 64, a 2,048-token prefill runs 2-6 %
    /// faster on the AVX2 tier (fewer passes over the weights and fewer dispatches) for
    /// about 2 MiB more arena on a 135M model and 10 MiB on a 1B one
    /// (docs/perf/2026-12-07-session8-limits.md). The logits do not depend on it.
    pub prefill_chunk: usize,
    /// Schedule for the matrix products; `None` uses the executor's default.
    pub schedule: Option<Schedule>,
    /// Element type of the KV cache: f32 (exact, the default) or IEEE f16 (half the memory
    /// and half the bytes attention reads per token; keys and values rounded to nearest-even
    /// when stored, widened exactly when read).
    pub kv_dtype: KvDtype,
    /// Which attention code runs: the grouped, tiled kernel (default) or the per-head
    /// reference it replaced (slow; kept as the test oracle, f32 cache only).
    pub attention: AttentionPath,
}

/// Element type of the KV cache ([`DecoderOptions::kv_dtype`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvDtype {
    /// 4 bytes per value (exact).
    #[default]
    F32,
    /// IEEE binary16, 2 bytes per value (round to nearest even when stored).
    F16,
}

impl KvDtype {
    /// Bytes per stored value.
    pub const fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }

    /// `"f32"` or `"f16"`.
    pub const fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
        }
    }
}

/// The attention code a decoder runs ([`DecoderOptions::attention`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// [`crate::ops::attention_group`]'s kernel: the query heads of one KV head (and in
    /// prefill a tile of [`ROW_TILE`] query rows) walk the cache together in tiles of keys
    /// with an online softmax; decode splits the cache into segments of [`KV_SEGMENT`]
    /// positions merged in order.
    #[default]
    Tiled,
    /// [`crate::ops::attention_head`] per query head and row (all scores, softmax, weighted
    /// sum): the reference for tests. Needs [`KvDtype::F32`].
    PerHead,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions {
            context_len: None,
            activations: Activations::Int8,
            weight_format: WeightFormat::AsStored,
            repack_weights: cfg!(feature = "std"),
            prefill_chunk: 128,
            schedule: None,
            kv_dtype: KvDtype::F32,
            attention: AttentionPath::Tiled,
        }
    }
}
