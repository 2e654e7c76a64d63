//! The encoder's memory plan ([`EncoderMemoryPlan`]): what the loaded weights own and what
//! one batch allocates, computed before building.

use core::ops::Range;

use super::config::{EncoderArch, EncoderConfig, HiddenAct};
use super::weights::{converted_bytes, Keep};
use super::EncoderWeights;
use crate::error::{Error, Result};
use crate::format::TensorSource;
use crate::model::WeightFormat;
use crate::ops::{self, Activations};
use crate::tensor::DType;

/// What an encoder keeps in memory besides the file's pages (which the weights borrow in
/// place), in bytes: [`EncoderWeights::memory_plan`]. Exact: the loaded weights report
/// [`EncoderWeights::owned_bytes`] = [`EncoderMemoryPlan::weights`], and a batch of the planned
/// shape allocates [`EncoderMemoryPlan::batch`] bytes in [`EncoderWeights::hidden_states`]
/// (tests/encoder.rs counts them with a counting global allocator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EncoderMemoryPlan {
    /// Matrices converted at load ([`WeightFormat::Q8_0`]) or copied (a misaligned f32
    /// matrix).
    pub converted: usize,
    /// The f32 vectors and tables: norms, biases, the position and token-type embeddings,
    /// the RoPE inverse frequencies.
    pub vectors: usize,
    /// Tokens of the planned batch (sequences × longest).
    pub batch_tokens: usize,
    /// The working memory of one batch of that many tokens, alive while it runs:
    /// [`EncoderWeights::hidden_states`]' one f32 arena (the residual stream, q, k, v, the
    /// attention context, a head-major copy of k and v, the attention scores, the MLP's
    /// `intermediate_size`-wide rows (two for a gated MLP), a temporary, the RoPE cosines and
    /// sines of the longest sequence), the sequences' row ranges and, with int8 activations,
    /// their int8 scratch ([`crate::ops::scratch_bytes`]). The returned hidden state is the
    /// arena's first `tokens × hidden` floats, so pooling adds only the pooled vectors.
    pub batch: usize,
}

impl EncoderMemoryPlan {
    /// Bytes the loaded weights hold: `converted + vectors`.
    pub fn weights(&self) -> usize {
        self.converted + self.vectors
    }

    /// Peak bytes while a batch runs: `weights() + batch`.
    pub fn peak(&self) -> usize {
        self.weights() + self.batch
    }
}

/// f32 values of the vectors and tables a family's weights keep (see
/// [`EncoderMemoryPlan::vectors`]).
pub(super) fn vector_floats(c: &EncoderConfig) -> usize {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let tables = c.type_vocab_size * h + 2 * h;
    match c.arch {
        EncoderArch::Bert => tables + c.max_position_embeddings * h + c.num_layers * (9 * h + i),
        EncoderArch::NomicBert => tables + c.num_layers * 4 * h + c.head_dim() / 2,
    }
}

/// The f32 arena of [`EncoderWeights::hidden_states`] for `tokens` tokens, the longest
/// sequence `longest` long: x, q, k, v, ctx, tmp, k and v head-major (`8 × tokens × hidden`),
/// scores (`heads × tokens`), the MLP rows (`tokens × intermediate`, twice when gated), RoPE
/// cosines and sines (`2 × longest × head_dim / 2`, RoPE only).
pub(super) fn arena_floats(c: &EncoderConfig, tokens: usize, longest: usize) -> Option<usize> {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let mlp = if c.hidden_act == HiddenAct::SwiGlu { 2 * i } else { i };
    let rope = if c.rope_theta.is_some() { longest.checked_mul(c.head_dim())? } else { 0 };
    tokens.checked_mul(8 * h + c.num_heads + mlp)?.checked_add(rope)
}

/// Bytes [`EncoderWeights::hidden_states`] allocates for a batch: the arena, the row ranges,
/// the int8 scratch.
pub(super) fn batch_bytes(
    c: &EncoderConfig,
    tokens: usize,
    seqs: usize,
    longest: usize,
    act: Activations,
) -> Result<usize> {
    let overflow = || Error::invalid_argument("batch sizes overflow");
    let arena = arena_floats(c, tokens, longest).ok_or_else(overflow)?;
    let ranges = seqs.checked_mul(core::mem::size_of::<Range<usize>>()).ok_or_else(overflow)?;
    let k = c.hidden_size.max(c.intermediate_size);
    let scratch = ops::scratch_bytes(k, tokens, act);
    arena
        .checked_mul(4)
        .and_then(|a| a.checked_add(ranges)?.checked_add(scratch))
        .ok_or_else(overflow)
}

impl<'a> EncoderWeights<'a> {
    /// What an encoder keeps in memory besides the file's pages, before it is built: the
    /// weights loaded from `src` under `format` and one batch of at most `batch_seqs`
    /// sequences of at most `longest` tokens each (see [`EncoderMemoryPlan`]). Runs the
    /// loader's checks without converting anything.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::load_with`]; [`crate::Code::InvalidArgument`] for a batch of 0
    /// sequences or 0 tokens, or sizes that overflow.
    pub fn memory_plan(
        config: &EncoderConfig,
        src: &dyn TensorSource<'a>,
        format: WeightFormat,
        activations: Activations,
        batch_seqs: usize,
        longest: usize,
    ) -> Result<EncoderMemoryPlan> {
        if batch_seqs == 0 || longest == 0 {
            return Err(Error::invalid_argument("a memory plan for an empty batch"));
        }
        let dry = Self::load_keep(config.clone(), src, Keep { format, dry: true })?;
        let converted = dry.matrices().map(|m| m.planned).sum();
        let tokens = batch_seqs
            .checked_mul(longest)
            .ok_or_else(|| Error::invalid_argument("batch size overflows"))?;
        let quantized = dry.matrices().skip(1).any(|m| {
            converted_bytes(m.dtype, m.rows, m.k, true, format)
                .ok()
                .flatten()
                .map_or(!matches!(m.dtype, DType::F32 | DType::F16 | DType::BF16), |(d, _)| {
                    d != DType::F32
                })
        });
        let act = if quantized { activations } else { Activations::F32 };
        Ok(EncoderMemoryPlan {
            converted,
            vectors: vector_floats(config) * 4,
            batch_tokens: tokens,
            batch: batch_bytes(config, tokens, batch_seqs, longest, act)?,
        })
    }

    /// Bytes the weights hold besides the file: matrices converted or copied at load, and the
    /// f32 vectors and tables (norms, biases, position and token-type embeddings, RoPE
    /// frequencies); [`EncoderMemoryPlan::weights`] of the plan for the same file.
    pub fn owned_bytes(&self) -> usize {
        let vecs = [&self.position, &self.token_type, &self.ln_w, &self.ln_b, &self.inv_freq];
        let mut floats: usize = vecs.iter().map(|v| v.capacity()).sum();
        for l in &self.layers {
            floats += [
                &l.q_b, &l.k_b, &l.v_b, &l.o_b, &l.up_b, &l.down_b, &l.ln1_w, &l.ln1_b, &l.ln2_w,
                &l.ln2_b,
            ]
            .iter()
            .map(|v| v.capacity())
            .sum::<usize>();
        }
        self.converted + floats * 4
    }

    /// The bytes [`EncoderWeights::hidden_states`] allocates for `seqs` (see
    /// [`EncoderMemoryPlan::batch`]); `None` when the sizes overflow.
    pub fn batch_bytes(&self, seqs: &[&[u32]]) -> Option<usize> {
        let tokens = seqs.iter().map(|s| s.len()).sum();
        let longest = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        batch_bytes(&self.config, tokens, seqs.len(), longest, self.scratch_act()).ok()
    }

    /// The activation setting the int8 scratch is sized for: [`Activations::F32`] (none)
    /// when no product has quantized weights.
    pub(super) fn scratch_act(&self) -> Activations {
        let quantized = self
            .matrices()
            .skip(1)
            .any(|m| !matches!(m.dtype, DType::F32 | DType::F16 | DType::BF16));
        if quantized {
            self.activations
        } else {
            Activations::F32
        }
    }
}
