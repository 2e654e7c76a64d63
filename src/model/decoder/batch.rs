//! [`DecoderBatch`]: several sequences, each with its own KV cache and position, advanced by
//! one forward pass per [`DecoderBatch::step`] — what a server with parallel requests runs
//! each tick (decode tokens of some sequences together with prefill chunks of others).
//!
//! The pass is the crate's one forward pass (`forward.rs`, of which a [`DecoderLM`] step is
//! the one-sequence case): the rows of every entry go through each weight matrix as one GEMM
//! (with int8 activations the tiled int8 kernels read each weight block once for all rows,
//! which is where batching pays: decode is bound by reading the weights), RMSNorm, RoPE and
//! the MLP run row by row, and attention runs entry by entry against that slot's own cache
//! ([`crate::ops::attention_layer`]), the decode tokens of all entries as one parallel loop
//! ([`crate::ops::attention_decode`]: one dispatch per layer, not one per sequence).
//!
//! **Bit-identity per sequence.** Every kernel computes an output row from its own input row
//! in an order that depends neither on the other rows nor on how many there are, activation
//! quantization is per row, and attention reads only the slot's cache. So the logits of
//! every entry are the same bits as [`DecoderLM`] gives for that sequence alone (same
//! options, any executor, any thread count, any prefill chunking), whatever else shares the
//! step (`tests/decoder_batch.rs`).
//!
//! **Memory.** The weights are loaded once and shared; each slot has its own KV cache of
//! `context_len` positions; the scratch arena is sized for [`DecoderBatch::max_step_tokens`]
//! rows and a full-context attention, and the logits hold one row per slot. After
//! construction a step allocates nothing. [`DecoderBatch::memory_plan`] gives every byte
//! before building.

use alloc::vec::Vec;

use super::build::{own_buffers, place_shared, plan};
use super::forward::{forward_pass, Head, Model, Seqs};
use super::{finite_rows, DecoderLM, DecoderOptions, KvCache};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::format::TensorSource;
use crate::mem::place::Place;
use crate::mem::{AlignedBlock, Arena};
use crate::model::config::ModelConfig;
use crate::model::plan::MemoryPlan;
use crate::model::weights::Weights;
use crate::tensor::{cast_slice, cast_slice_mut};

/// One entry of a [`DecoderBatch::step`]: `tokens` to append to the sequence of `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqInput<'t> {
    /// The slot (`0 .. slots()`).
    pub slot: usize,
    /// The tokens (at least one): a prefill chunk or one decode token.
    pub tokens: &'t [u32],
}

/// `slots` sequences sharing one model's weights, each with its own KV cache and position,
/// stepped together; see the module docs.
pub struct DecoderBatch<'a> {
    config: ModelConfig,
    weights: Weights<'a>,
    exec: &'a dyn Executor,
    options: DecoderOptions,
    inv_freq: AlignedBlock,
    kv: Vec<KvCache>,
    positions: Vec<usize>,
    /// One row of `vocab_size` per entry of the last step.
    logits: AlignedBlock,
    /// Entries of the last successful step (0 before the first, and after a failed pass).
    entries: usize,
    arena: Arena,
    max_step: usize,
}

impl core::fmt::Debug for DecoderBatch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DecoderBatch")
            .field("config", &self.config)
            .field("options", &self.options)
            .field("threads", &self.exec.threads())
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

impl<'a> DecoderBatch<'a> {
    /// Loads the weights named by `config` from `src` once (as [`DecoderLM::new`]) and
    /// allocates `slots` KV caches of the context length, the logits and the scratch arena.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::new`]; [`crate::Code::InvalidArgument`] for 0 slots.
    pub fn new<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
        slots: usize,
    ) -> Result<Self> {
        // The options are checked before the weights are loaded.
        own_buffers(config, &options, slots)?;
        let repack = DecoderLM::repacks(&options);
        let weights: Weights<'s> =
            Weights::load_placed(config, src, options.weight_format, repack, &mut Place::heap())?;
        Self::from_weights(config, weights, exec, options, slots)
    }

    /// As [`DecoderBatch::new`] with weights already loaded.
    ///
    /// # Errors
    ///
    /// As [`DecoderBatch::new`], less the weight errors.
    pub fn from_weights(
        config: &ModelConfig,
        weights: Weights<'a>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
        slots: usize,
    ) -> Result<Self> {
        // The kernel choice now: its first call reads `RML_KERNELS`, which allocates.
        crate::kernels::active()?;
        let own = own_buffers(config, &options, slots)?;
        let (ctx, c) = (own.context_len, config);
        let place = &mut Place::heap();
        let mut kv = Vec::new();
        let mut positions = Vec::new();
        kv.try_reserve_exact(slots)
            .and_then(|()| positions.try_reserve_exact(slots))
            .map_err(|_| Error::resource_exhausted("decoder batch slot table"))?;
        for _ in 0..slots {
            let (layers, kv_heads, hd) = (c.num_hidden_layers, c.num_key_value_heads, c.head_dim);
            kv.push(KvCache::placed(layers, kv_heads, hd, ctx, options.kv_dtype, place)?);
            positions.push(0);
        }
        let (logits, arena, inv_freq) = place_shared(config, &weights, &own, place)?;
        Ok(DecoderBatch {
            config: config.clone(),
            weights,
            exec,
            options: DecoderOptions {
                prefill_chunk: options.prefill_chunk.min(ctx),
                context_len: Some(ctx),
                ..options
            },
            inv_freq,
            kv,
            positions,
            logits,
            entries: 0,
            arena,
            max_step: own.prefill_chunk,
        })
    }

    /// The memory a batch of `slots` sequences keeps ([`MemoryPlan`], as
    /// [`DecoderLM::memory_plan`] for weights stored as aligned f32 / f16 / bf16):
    /// `kv_cache` is all slots' caches, `logits` one row per slot, `scratch` the arena of a
    /// step of [`DecoderBatch::max_step_tokens`] rows (reported as `prefill_chunk`), and
    /// `tables` includes the slot table.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::memory_plan`]; [`crate::Code::InvalidArgument`] for 0 slots.
    pub fn memory_plan(
        config: &ModelConfig,
        options: &DecoderOptions,
        slots: usize,
    ) -> Result<MemoryPlan> {
        Self::plan_with(config, options, None, slots)
    }

    /// [`DecoderBatch::memory_plan`] for the weights in `src` (as
    /// [`DecoderLM::memory_plan_for`]).
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::memory_plan_for`]; [`crate::Code::InvalidArgument`] for 0 slots.
    pub fn memory_plan_for<'s>(
        config: &ModelConfig,
        options: &DecoderOptions,
        src: &dyn TensorSource<'s>,
        slots: usize,
    ) -> Result<MemoryPlan> {
        Self::plan_with(config, options, Some(src), slots)
    }

    fn plan_with<'s>(
        config: &ModelConfig,
        options: &DecoderOptions,
        src: Option<&dyn TensorSource<'s>>,
        slots: usize,
    ) -> Result<MemoryPlan> {
        let mut p = plan(config, options, src, slots)?;
        let table = core::mem::size_of::<KvCache>() + core::mem::size_of::<usize>();
        p.tables = slots
            .checked_mul(table)
            .and_then(|t| t.checked_add(p.tables))
            .ok_or_else(|| Error::resource_exhausted("slot table size overflows"))?;
        p.checked()
    }

    /// Sequences the batch holds.
    pub fn slots(&self) -> usize {
        self.kv.len()
    }

    /// The model configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weights (shared by every slot).
    pub fn weights(&self) -> &Weights<'a> {
        &self.weights
    }

    /// The options in force (`context_len` and `prefill_chunk` resolved).
    pub fn options(&self) -> &DecoderOptions {
        &self.options
    }

    /// The executor.
    pub fn executor(&self) -> &'a dyn Executor {
        self.exec
    }

    /// Positions each slot's KV cache holds.
    pub fn context_len(&self) -> usize {
        self.kv[0].capacity()
    }

    /// The most tokens one [`DecoderBatch::step`] takes, summed over its entries: the
    /// resolved [`DecoderOptions::prefill_chunk`], or [`DecoderBatch::slots`] when that is
    /// larger (so one decode token of every slot always fits).
    pub fn max_step_tokens(&self) -> usize {
        self.max_step
    }

    /// Tokens cached in `slot` (the position its next token goes to).
    ///
    /// # Panics
    ///
    /// If `slot >= slots()`.
    pub fn position(&self, slot: usize) -> usize {
        self.positions[slot]
    }

    /// The KV cache of `slot`.
    ///
    /// # Panics
    ///
    /// If `slot >= slots()`.
    pub fn kv_cache(&self, slot: usize) -> &KvCache {
        &self.kv[slot]
    }

    /// Bytes of the per-step scratch arena.
    pub fn scratch_capacity(&self) -> usize {
        self.arena.capacity()
    }

    /// Keeps the first `position` cached tokens of `slot` and forgets the rest (a prefix
    /// cache: the next step continues from there).
    ///
    /// # Errors
    ///
    /// [`crate::Code::OutOfRange`] if `slot >= slots()` or `position` is past the slot's
    /// current position.
    pub fn rewind(&mut self, slot: usize, position: usize) -> Result<()> {
        let slots = self.slots();
        let Some(pos) = self.positions.get_mut(slot) else {
            return Err(Error::out_of_range(format_args!(
                "slot {slot} is out of range: the batch has {slots} slots"
            )));
        };
        if position > *pos {
            return Err(Error::out_of_range(format_args!(
                "cannot rewind slot {slot} to position {position}: only {} cached",
                *pos
            )));
        }
        *pos = position;
        Ok(())
    }

    /// Empties `slot`'s cache (position 0).
    ///
    /// # Panics
    ///
    /// If `slot >= slots()`.
    pub fn reset(&mut self, slot: usize) {
        self.positions[slot] = 0;
    }

    /// Runs one forward pass over every entry of `work`: entry `i` appends `work[i].tokens`
    /// to the sequence of slot `work[i].slot` (at positions `position(slot) ..`), and
    /// [`DecoderBatch::logits`]`(i)` then holds the logits of its last token. Each entry's
    /// logits are bit-identical to [`DecoderLM`] running that sequence alone.
    ///
    /// When an error is returned no position moves. A validation error (all but
    /// [`crate::Code::DataLoss`]) changes nothing; after a failed pass the logits of the
    /// last step are gone (`logits` panics until the next successful step).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for no entries, a slot named twice, an entry with no
    /// tokens, or more than [`DecoderBatch::max_step_tokens`] tokens in all;
    /// [`crate::Code::OutOfRange`] for a slot past [`DecoderBatch::slots`], a token id past
    /// the vocabulary, or an entry that does not fit in its slot's context
    /// (`position(slot) + tokens.len() > context_len()`); [`crate::Code::DataLoss`] for
    /// non-finite values (as [`DecoderLM::forward`]: NaN or infinite weights, or overflowing
    /// activations) in any entry.
    pub fn step(&mut self, work: &[SeqInput<'_>]) -> Result<()> {
        self.check(work)?;
        let DecoderBatch {
            config,
            weights,
            exec,
            options,
            inv_freq,
            kv,
            positions,
            logits,
            entries,
            arena,
            ..
        } = self;
        let model = Model { config, weights, options, inv_freq: cast_slice(inv_freq.as_slice()) };
        let seqs = Seqs { work, positions };
        let vocab = config.vocab_size;
        let rows = &mut cast_slice_mut::<f32>(logits.as_mut_slice())[..work.len() * vocab];
        *entries = 0;
        forward_pass(*exec, &model, arena, kv, seqs, Head::Last(&mut *rows), None)?;
        for i in 0..work.len() {
            finite_rows(&rows[i * vocab..(i + 1) * vocab], vocab, seqs.last_position(i))?;
        }
        for e in work {
            positions[e.slot] += e.tokens.len();
        }
        *entries = work.len();
        Ok(())
    }

    /// The checks of [`DecoderBatch::step`], before anything changes.
    fn check(&self, work: &[SeqInput<'_>]) -> Result<()> {
        if work.is_empty() {
            return Err(Error::invalid_argument("decoder batch step: no entries"));
        }
        let (slots, ctx, vocab) = (self.slots(), self.context_len(), self.config.vocab_size);
        let mut total = 0usize;
        for (i, e) in work.iter().enumerate() {
            let slot = e.slot;
            if slot >= slots {
                return Err(Error::out_of_range(format_args!(
                    "entry {i}: slot {slot} is out of range: the batch has {slots} slots"
                )));
            }
            if work[..i].iter().any(|o| o.slot == slot) {
                return Err(Error::invalid_argument(format_args!(
                    "entry {i}: slot {slot} is named twice in one step"
                )));
            }
            let n = e.tokens.len();
            if n == 0 {
                return Err(Error::invalid_argument(format_args!(
                    "entry {i} (slot {slot}) has no tokens"
                )));
            }
            if let Some(&bad) = e.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(Error::out_of_range(format_args!(
                    "entry {i} (slot {slot}): token id {bad} is past the vocabulary of {vocab}"
                )));
            }
            let pos = self.positions[slot];
            if n > ctx - pos {
                return Err(Error::out_of_range(format_args!(
                    "slot {slot}: context length {ctx} exceeded: {pos} tokens cached + {n} new"
                )));
            }
            total = total.saturating_add(n);
        }
        if total > self.max_step {
            return Err(Error::invalid_argument(format_args!(
                "decoder batch step of {total} tokens: at most {} (max_step_tokens)",
                self.max_step
            )));
        }
        Ok(())
    }

    /// The logits (`vocab_size` floats) of the last token of `work[i]` of the last
    /// successful [`DecoderBatch::step`].
    ///
    /// # Panics
    ///
    /// If the last step had no entry `i` (or failed, or there was none).
    pub fn logits(&self, i: usize) -> &[f32] {
        assert!(
            i < self.entries,
            "DecoderBatch::logits({i}): the last step had {} entries",
            self.entries
        );
        let vocab = self.config.vocab_size;
        &cast_slice::<f32>(self.logits.as_slice())[i * vocab..(i + 1) * vocab]
    }
}
