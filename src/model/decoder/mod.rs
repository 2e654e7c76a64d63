//! [`DecoderLM`]: the forward pass of every family with a KV cache.
//!
//! Hugging Face semantics of the config's family ([`crate::model::arch`]), computed in f32:
//! token embedding (× `sqrt(hidden)` for Gemma); per layer
//! `x += P_a(o(attn(rope(N_q(q(n(x)))), rope(N_k(k(n(x)))), v(n(x)))))` then
//! `x += P_m(down(act(gate(n'(x))) * up(n'(x))))` with RMSNorms `n`, `n'`, optional per-head
//! q/k norms `N_q`, `N_k` (Qwen3, Gemma 3), optional q/k/v biases (Qwen2), optional post-norms
//! `P_a`, `P_m` (Gemma 3; identity otherwise) and `act` SiLU or GELU-tanh; a final RMSNorm,
//! the output head (the embedding when tied) and, when the config sets it, logit soft-capping
//! `cap * tanh(z / cap)`. Attention is causal, scaled by `1/sqrt(head_dim)` (or
//! `query_pre_attn_scalar^-1/2`), with grouped KV heads (KV head `j` serves query heads
//! `j*g .. j*g+g`); sliding-window layers see the last `sliding_window` positions. RoPE
//! rotates with `inv_freq = theta^(-2i/d)`, optionally rescaled (`linear`, `llama3`, or a
//! GGUF's `rope_freqs.weight` divisors); sliding layers may have their own base.
//!
//! Sliding windows use the full-length cache and a window on the keys read: every layer
//! keeps `context_len` positions and a sliding layer's query at position `i` reads keys
//! `i + 1 - window ..= i`. A ring cache of `window` positions per sliding layer would save
//! `(context_len - window) × kv_heads × head_dim × 8` bytes per sliding layer (Gemma 3 270M at
//! 4096 positions, window 512: 15 of 18 layers × 3584 × 1 × 256 × 8 B = 110 MB of 151 MB); rml
//! keeps one cache layout so that rewinding and chunked prefill need no special cases.
//!
//! Memory: the KV cache (f32, or f16 with [`DecoderOptions::kv_dtype`];
//! `[layer][kv_head][position][head_dim]`) and the logits are
//! allocated once for the context length; every per-step buffer comes from an [`Arena`] sized
//! at construction and reset at each step. After construction, [`DecoderLM::decode`] and
//! [`DecoderLM::prefill`] allocate nothing (with the inline executor or a thread pool).
//!
//! Parallelism: matrix products split over output rows ([`crate::ops::gemv`] /
//! [`crate::ops::gemm`]; q/k/v as one loop with [`crate::ops::gemm_fused`]; gate/up as one
//! loop whose chunks also apply the GLU to their rows and, when `down` runs int8, quantize
//! their blocks of the product for it, so neither runs on the calling thread afterwards),
//! attention ([`AttentionPath::Tiled`], [`crate::ops::attention_group`]) over KV heads, each
//! item running all the query heads that share the KV head, with (prefill) tiles of
//! [`ROW_TILE`] query rows or (decode) segments of [`KV_SEGMENT`] cache positions, merged in
//! segment order afterwards. Each output element is computed by one chunk in a fixed order
//! (the segments depend on positions only), so logits are bit-identical for every executor,
//! thread count and schedule.
//!
//! Files: `options.rs` ([`DecoderOptions`], [`KvDtype`], [`AttentionPath`]), `kv_cache.rs`
//! ([`KvCache`]), `rope.rs` (the RoPE inverse-frequency tables), `build.rs` (construction and
//! the [`MemoryPlan`]), `forward.rs` (the one forward pass: a set of sequences, each with its
//! own cache, embed → per layer attention + MLP → head; a [`DecoderLM`] step is its
//! one-sequence case), `batch.rs` ([`DecoderBatch`]: several sequences stepped together,
//! each bit-identical to running alone).
//! The contracts these keep — bit-identity, zero allocations per step, the memory plan,
//! errors instead of panics — are `docs/architecture.md`'s "Contracts"; how the work is split
//! across threads, its "Threads and schedules"; the families, its "Models".

mod batch;
mod build;
mod forward;
mod kv_cache;
mod options;
mod rope;

use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::mem::{AlignedBlock, Arena};
use crate::model::config::ModelConfig;
#[cfg(doc)]
use crate::model::plan::MemoryPlan;
use crate::model::weights::Weights;
use crate::tensor::{cast_slice, cast_slice_mut};
use forward::{forward_pass, Head, Model, Seqs};

pub use crate::ops::{KV_SEGMENT, ROW_TILE};
pub use batch::{DecoderBatch, SeqInput};
pub use kv_cache::KvCache;
pub use options::{AttentionPath, DecoderOptions, KvDtype, DEFAULT_MAX_CONTEXT};
pub use rope::{rope_frequencies, rope_frequencies_for};

/// Where in the forward pass a [`Hidden`] snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The token embeddings (the residual stream entering layer 0).
    Embedding,
    /// The residual stream leaving layer `i`.
    Layer(usize),
    /// After the final RMSNorm (the input of the output head).
    FinalNorm,
}

/// A snapshot of the hidden states of a run of tokens, handed to the observer of
/// [`DecoderLM::forward`].
#[derive(Clone, Copy, Debug)]
pub struct Hidden<'s> {
    /// Where it was taken.
    pub stage: Stage,
    /// Position of the first row.
    pub position: usize,
    /// `rows × hidden_size` values, one row per token.
    pub data: &'s [f32],
}

/// A decoder of any supported family with its KV cache; see the module docs.
pub struct DecoderLM<'a> {
    config: ModelConfig,
    weights: Weights<'a>,
    exec: &'a dyn Executor,
    options: DecoderOptions,
    inv_freq: AlignedBlock,
    kv: KvCache,
    logits: AlignedBlock,
    arena: Arena,
    pos: usize,
}

impl core::fmt::Debug for DecoderLM<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DecoderLM")
            .field("config", &self.config)
            .field("options", &self.options)
            .field("threads", &self.exec.threads())
            .field("position", &self.pos)
            .finish_non_exhaustive()
    }
}

impl<'a> DecoderLM<'a> {
    /// The model configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Weights<'a> {
        &self.weights
    }

    /// The options in force (`context_len` resolved).
    pub fn options(&self) -> &DecoderOptions {
        &self.options
    }

    /// Positions the KV cache holds.
    pub fn context_len(&self) -> usize {
        self.kv.capacity()
    }

    /// Tokens in the cache (the position the next token goes to).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The executor.
    pub fn executor(&self) -> &'a dyn Executor {
        self.exec
    }

    /// Runs later steps on `exec` (results stay bit-identical).
    pub fn set_executor(&mut self, exec: &'a dyn Executor) {
        self.exec = exec;
    }

    /// Sets the schedule of the matrix products (`None`: the executor's default).
    pub fn set_schedule(&mut self, schedule: Option<Schedule>) {
        self.options.schedule = schedule;
    }

    /// The KV cache.
    pub fn kv_cache(&self) -> &KvCache {
        &self.kv
    }

    /// Bytes of the per-step scratch arena.
    pub fn scratch_capacity(&self) -> usize {
        self.arena.capacity()
    }

    /// The logits of the last token run (zeros before the first run).
    pub fn logits(&self) -> &[f32] {
        cast_slice(self.logits.as_slice())
    }

    /// Empties the cache (position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Forgets every cached position from `position` on.
    ///
    /// # Errors
    ///
    /// [`crate::Code::OutOfRange`] if `position` is past the current position.
    pub fn rewind(&mut self, position: usize) -> Result<()> {
        if position > self.pos {
            return Err(Error::out_of_range(format_args!(
                "cannot rewind to position {position}: only {} cached",
                self.pos
            )));
        }
        self.pos = position;
        Ok(())
    }

    /// Runs `tokens` (the prompt) through the model after what is cached, in chunks of up to
    /// `prefill_chunk` tokens with matrix-matrix products, and returns the logits of the last
    /// one (`vocab_size` floats).
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::forward`].
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.forward(tokens, None, None)
    }

    /// Runs one token through the model (matrix-vector products) and returns its logits.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::forward`].
    pub fn decode(&mut self, token: u32) -> Result<&[f32]> {
        self.forward(core::slice::from_ref(&token), None, None)
    }

    /// The general step: runs `tokens` at positions `position() ..`, appends them to the cache
    /// and returns the logits of the last one. With `all_logits` (`tokens.len() ×
    /// vocab_size` floats) every token's logits are written there; with `observer`, it is
    /// called with the hidden states of each chunk after the embedding, after every layer and
    /// after the final norm.
    ///
    /// When an error is returned the position is unchanged, whichever prefill chunk failed:
    /// nothing of these tokens stays cached (the KV rows they wrote lie past the position and
    /// are overwritten by the next step). [`DecoderLM::logits`] (and `all_logits`) may then
    /// hold partial results.
    ///
    /// Non-finite values (a NaN or infinite weight, or activations that overflow) are the same
    /// error with f32 and int8 activations: [`crate::Code::DataLoss`] naming the position.
    /// With f32 activations the returned logits are checked (a NaN anywhere upstream reaches
    /// them); with int8 activations the quantizer meets it first, at a matmul input.
    ///
    /// # Errors
    ///
    /// [`crate::Code::OutOfRange`] if the tokens do not fit in the context
    /// (`position() + tokens.len() > context_len()`) or a token id is past the vocabulary;
    /// [`crate::Code::InvalidArgument`] for no tokens or an `all_logits` of the wrong length;
    /// [`crate::Code::DataLoss`] for non-finite values, as above.
    pub fn forward(
        &mut self,
        tokens: &[u32],
        all_logits: Option<&mut [f32]>,
        observer: Option<&mut dyn FnMut(&Hidden<'_>)>,
    ) -> Result<&[f32]> {
        self.forward_with(self.exec, tokens, all_logits, observer)
    }

    /// [`DecoderLM::decode`] on another executor for this one step (e.g. the auto-tuner's
    /// candidate pools); results are bit-identical to any other executor's.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::forward`].
    pub fn decode_with(&mut self, exec: &dyn Executor, token: u32) -> Result<&[f32]> {
        self.forward_with(exec, core::slice::from_ref(&token), None, None)
    }

    /// [`DecoderLM::forward`] on `exec` instead of the decoder's own executor.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::forward`].
    pub fn forward_with(
        &mut self,
        exec: &dyn Executor,
        tokens: &[u32],
        mut all_logits: Option<&mut [f32]>,
        mut observer: Option<&mut dyn FnMut(&Hidden<'_>)>,
    ) -> Result<&[f32]> {
        let vocab = self.config.vocab_size;
        if tokens.is_empty() {
            return Err(Error::invalid_argument("forward: no tokens"));
        }
        let ctx = self.kv.capacity();
        if tokens.len() > ctx - self.pos {
            return Err(Error::out_of_range(format_args!(
                "context length {ctx} exceeded: {} tokens cached + {} new",
                self.pos,
                tokens.len()
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::out_of_range(format_args!(
                "token id {bad} is past the vocabulary of {vocab}"
            )));
        }
        if let Some(out) = &all_logits {
            if out.len() != tokens.len() * vocab {
                return Err(Error::invalid_argument(format_args!(
                    "forward: all_logits has {} floats, want {} tokens x {vocab}",
                    out.len(),
                    tokens.len()
                )));
            }
        }
        let chunk = self.options.prefill_chunk;
        let chunks = tokens.len().div_ceil(chunk);
        let start = self.pos;
        for (i, part) in tokens.chunks(chunk).enumerate() {
            let rows = all_logits
                .as_deref_mut()
                .map(|out| &mut out[i * chunk * vocab..(i * chunk + part.len()) * vocab]);
            let p0 = self.pos;
            let stepped = self.step(exec, part, i + 1 == chunks, rows, observer.as_deref_mut());
            let checked = stepped.and_then(|()| match &all_logits {
                Some(out) => {
                    finite_rows(&out[i * chunk * vocab..][..part.len() * vocab], vocab, p0)
                }
                None if i + 1 == chunks => finite_rows(self.logits(), vocab, p0 + part.len() - 1),
                None => Ok(()),
            });
            if let Err(e) = checked {
                self.pos = start;
                return Err(e);
            }
        }
        Ok(self.logits())
    }
}

impl DecoderLM<'_> {
    /// One chunk: at most `prefill_chunk` tokens, fitting in the context (checked by the
    /// caller): the one-sequence case of the forward pass (`forward.rs`). `last`: the last
    /// chunk of the call (the logits are computed only then, unless all are asked for).
    fn step<'o>(
        &mut self,
        exec: &dyn Executor,
        tokens: &[u32],
        last: bool,
        all_logits: Option<&mut [f32]>,
        observer: Option<&mut (dyn FnMut(&Hidden<'_>) + 'o)>,
    ) -> Result<()> {
        let DecoderLM { config, weights, options, inv_freq, kv, logits, arena, pos, .. } = self;
        let model = Model { config, weights, options, inv_freq: cast_slice(inv_freq.as_slice()) };
        let work = [SeqInput { slot: 0, tokens }];
        let seqs = Seqs { work: &work, positions: core::slice::from_ref(pos) };
        let logits: &mut [f32] = cast_slice_mut(logits.as_mut_slice());
        let head = match (all_logits, last) {
            (Some(all), _) => Head::All { all, last: logits },
            (None, true) => Head::Last(logits),
            (None, false) => Head::Skip,
        };
        forward_pass(exec, &model, arena, core::slice::from_mut(kv), seqs, head, observer)?;
        *pos += tokens.len();
        Ok(())
    }
}

/// The error for non-finite values met at `position` (see [`DecoderLM::forward`]).
#[cold]
fn non_finite_at(position: usize, what: &str) -> Error {
    Error::data_loss(format_args!(
        "non-finite value (NaN or infinity) in the {what} at position {position}: the weights \
         hold NaN or infinity, or the activations overflowed"
    ))
}

/// Checks rows of `width` values for NaN/infinity; row `r` is position `first + r`.
fn finite_rows(rows: &[f32], width: usize, first: usize) -> Result<()> {
    // `v * 0.0` is 0 for finite `v` and NaN otherwise, so a sum of them is finite exactly
    // when every value is, in whatever order it is taken: one pass without a branch per
    // element, in 16 independent sums (which the compiler keeps in one vector register; a
    // single running sum would be one dependent add per element).
    for (r, row) in rows.chunks(width.max(1)).enumerate() {
        let mut acc = [0f32; 16];
        let mut chunks = row.chunks_exact(16);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v * 0.0;
            }
        }
        let tail = chunks.remainder().iter().fold(0f32, |a, &v| a + v * 0.0);
        if !(acc.iter().sum::<f32>() + tail).is_finite() {
            return Err(non_finite_at(first + r, "logits"));
        }
    }
    Ok(())
}

/// Maps an int8-path error caused by a non-finite matmul input (`x`, rows of `width`, row `r`
/// at position `position(r)`) to the documented [`crate::Code::DataLoss`]; other errors pass.
fn nonfinite_input(e: Error, x: &[f32], width: usize, position: &dyn Fn(usize) -> usize) -> Error {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => non_finite_at(position(i / width.max(1)), "activations"),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    /// Every row with a NaN or an infinity anywhere (in the 16-wide sums or the tail) is
    /// found, the first such row named; large finite values pass.
    #[test]
    fn finite_rows_names_the_first_row_with_a_non_finite_value() {
        // Two whole chunks of 16 and a tail of 5 per row.
        let width = 37;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in 0..3 * width {
                let mut rows = vec![-1.5f32; 3 * width];
                rows[at] = bad;
                let e = finite_rows(&rows, width, 10).unwrap_err();
                assert_eq!(e.code(), crate::Code::DataLoss);
                let want = format!("at position {}:", 10 + at / width);
                assert!(format!("{e}").contains(&want), "{e} (value at {at})");
            }
        }
        assert!(finite_rows(&vec![f32::MAX; 3 * width], width, 0).is_ok());
        assert!(finite_rows(&[], width, 0).is_ok());
    }
}
