//! [`MemoryPlan`]: every byte a [`DecoderLM`](crate::model::DecoderLM) keeps, known before it
//! is built (`docs/architecture.md`, "Contracts" → "Memory plan").
//!
//! A decoder owns, besides the weights it borrows in place: the KV cache (keys and values),
//! the per-step scratch arena, the logits, the RoPE inverse-frequency table, f32 copies of the
//! norm vectors, and any matrices converted at load (f32 / f16 / bf16 → Q8_0 with
//! [`WeightFormat::Q8_0`](crate::model::WeightFormat), or a misaligned f32 matrix copied).
//! Each is one 64-byte aligned buffer. The plan adds them up without allocating; the
//! constructors size every buffer from the same functions, so the plan and the build cannot
//! drift (tests/memory_plan.rs checks the heap build against a counting global allocator).
//!
//! Two builds use it:
//! - [`DecoderLM::new`](crate::model::DecoderLM::new): each buffer is its own heap block;
//!   the global allocator gives [`MemoryPlan::heap_bytes`] in all.
//! - [`DecoderLM::new_in`](crate::model::DecoderLM::new_in): every buffer is carved from the
//!   caller's region (a linker-placed `static`, say) of at least
//!   [`MemoryPlan::region_bytes`] bytes when 64-byte aligned; only the small
//!   [`MemoryPlan::tables`] come from the heap. Decoding allocates nothing in either build.
//!
//! A global allocator is still needed at init: the layer table, the decoder's copy of the
//! config's lists and the file parsers (safetensors header, GGUF metadata, `config.json`)
//! allocate. The MCU firmware (features/mcu) gives them a fixed heap (its peak and what stays
//! allocated for the tiny Llama are in docs/perf/notes-ops-decoder.md) and checks that
//! prefill and decode never call the allocator.

use core::fmt;

use crate::error::{Error, Result};
use crate::mem::place::round_up;
use crate::mem::ALLOC_OVERHEAD;

/// The memory a decoder keeps, in bytes (see the module docs). Each byte field is the exact
/// size of its buffer(s) before alignment padding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemoryPlan {
    /// Positions the KV cache holds (the resolved `context_len`).
    pub context_len: usize,
    /// Tokens per prefill chunk (the resolved `prefill_chunk`); for a
    /// [`DecoderBatch`](crate::model::DecoderBatch), the most tokens of one step
    /// (`max_step_tokens`).
    pub prefill_chunk: usize,
    /// KV cache: `2 × layers × kv_heads × context_len × head_dim × 4` (two buffers, keys and
    /// values).
    pub kv_cache: usize,
    /// The per-step scratch arena (activations of one prefill chunk, attention scores over the
    /// context, int8-quantized activations when those are used).
    pub scratch: usize,
    /// The logits of the last token: `vocab_size × 4`.
    pub logits: usize,
    /// RoPE inverse frequencies: `head_dim / 2 × 4`.
    pub rope: usize,
    /// f32 copies of the norm vectors (`2 × layers + 1` of `hidden_size × 4`) and of the
    /// family's other vectors: q/k/v biases, per-head q/k norms, post-norms, a GGUF's
    /// `rope_freqs.weight`.
    pub norms: usize,
    /// Matrices converted (→ Q8_0) or copied (misaligned f32) at load.
    pub converted: usize,
    /// Number of separate non-empty buffers above.
    pub buffers: usize,
    /// Bytes that round each buffer up to a multiple of 64 when they are packed into one
    /// region.
    pub padding: usize,
    /// Heap bytes that are not buffers, taken from the global allocator by both builds: the
    /// layer table (`layers × size_of::<LayerWeights>()`) and the decoder's copy of the
    /// config's lists (`eos_token_ids`, `dtype`, `layer_types`).
    pub tables: usize,
}

impl MemoryPlan {
    /// The bytes of all buffers, without padding.
    pub fn buffer_bytes(&self) -> usize {
        self.kv_cache + self.scratch + self.logits + self.rope + self.norms + self.converted
    }

    /// The size of a 64-byte aligned region that holds every buffer: [`Self::buffer_bytes`]
    /// plus [`Self::padding`]. A region that does not start on a 64-byte boundary needs up to
    /// 63 bytes more ([`Self::region_bytes_unaligned`]).
    pub fn region_bytes(&self) -> usize {
        self.buffer_bytes() + self.padding
    }

    /// A region size that suffices wherever it starts: [`Self::region_bytes`] + 63.
    pub fn region_bytes_unaligned(&self) -> usize {
        self.region_bytes() + crate::mem::ALIGN - 1
    }

    /// Everything [`DecoderLM::new`](crate::model::DecoderLM::new) takes from the global
    /// allocator (with rml's default allocation backend): each buffer plus
    /// [`ALLOC_OVERHEAD`] for its alignment and header, and the [`Self::tables`].
    pub fn heap_bytes(&self) -> usize {
        self.buffer_bytes() + self.buffers * ALLOC_OVERHEAD + self.tables
    }

    /// Counts one buffer of `bytes` in [`Self::buffers`] and [`Self::padding`] (nothing for an
    /// empty one); the byte field it belongs to is the caller's to add.
    pub(crate) fn count(&mut self, bytes: usize) -> Result<()> {
        self.count_n(bytes, 1)
    }

    /// [`Self::count`] for `n` buffers of `bytes` each.
    pub(crate) fn count_n(&mut self, bytes: usize, n: usize) -> Result<()> {
        if bytes == 0 || n == 0 {
            return Ok(());
        }
        let rounded = round_up(bytes).ok_or_else(overflow)?;
        self.buffers = self.buffers.checked_add(n).ok_or_else(overflow)?;
        let pad = (rounded - bytes).checked_mul(n).ok_or_else(overflow)?;
        self.padding = self.padding.checked_add(pad).ok_or_else(overflow)?;
        Ok(())
    }

    /// `self` if every total (the heap one included, and a region's 63 bytes of slack) fits
    /// in `usize`.
    pub(crate) fn checked(self) -> Result<Self> {
        [self.kv_cache, self.scratch, self.logits, self.rope, self.norms, self.converted]
            .iter()
            .try_fold(0usize, |a, &b| a.checked_add(b))
            .and_then(|b| b.checked_add(self.padding))
            .and_then(|b| b.checked_add(self.buffers.checked_mul(ALLOC_OVERHEAD)?))
            .and_then(|b| b.checked_add(self.tables))
            .and_then(|b| b.checked_add(crate::mem::ALIGN))
            .ok_or_else(overflow)?;
        Ok(self)
    }
}

fn overflow() -> Error {
    Error::resource_exhausted("decoder memory plan overflows usize")
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KV cache {} + scratch {} + logits {} + rope {} + norms {} + converted weights {} \
             = {} bytes in {} buffers, + {} padding = region {} bytes (heap build {} bytes; \
             tables {} bytes on the heap; context {}, prefill chunk {})",
            self.kv_cache,
            self.scratch,
            self.logits,
            self.rope,
            self.norms,
            self.converted,
            self.buffer_bytes(),
            self.buffers,
            self.padding,
            self.region_bytes(),
            self.heap_bytes(),
            self.tables,
            self.context_len,
            self.prefill_chunk,
        )
    }
}
