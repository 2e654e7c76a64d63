//! Construction of a [`DecoderLM`] and its [`MemoryPlan`]: the decoder's own buffers (KV
//! cache, scratch arena, logits, RoPE table) are sized by the same functions for the plan and
//! for the build, so the two cannot drift (`docs/architecture.md`, "Contracts" → "Memory
//! plan").

use super::forward::attention_floats;
use super::rope::fill_table;
use super::{AttentionPath, DecoderLM, DecoderOptions, KvCache, KvDtype, DEFAULT_MAX_CONTEXT};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::format::TensorSource;
use crate::mem::place::Place;
use crate::mem::{AlignedBlock, Arena};
use crate::model::config::{LayerKind, ModelConfig};
use crate::model::plan::MemoryPlan;
use crate::model::weights::{plan_weights, LayerWeights, Repack, Weights};
use crate::ops::{self, Activations};
use crate::quant::ActFormat;
use crate::tensor::cast_slice_mut;

/// Bytes of arena scratch one forward step of `n` tokens needs with `ctx` cached positions.
fn arena_bytes(
    c: &ModelConfig,
    n: usize,
    ctx: usize,
    act: Activations,
    path: AttentionPath,
    kv: KvDtype,
) -> Option<usize> {
    let (h, qd, kvd, i) = (
        c.hidden_size,
        c.num_attention_heads * c.head_dim,
        c.num_key_value_heads * c.head_dim,
        c.intermediate_size,
    );
    let floats = [
        n.checked_mul(h)?,          // x
        n.checked_mul(h)?,          // xn
        n.checked_mul(qd)?,         // q
        n.checked_mul(kvd)?,        // k
        n.checked_mul(kvd)?,        // v
        n.checked_mul(qd)?,         // attention output
        n.checked_mul(i)?,          // gate
        n.checked_mul(i)?,          // up
        n.checked_mul(c.head_dim)?, // cos and sin (head_dim / 2 each)
        n.checked_mul(c.head_dim)?, // the same for sliding layers
        attention_floats(c, n, ctx, path, kv)?.max(attention_floats(c, 1, ctx, path, kv)?), // attention
    ];
    let mut total = 0usize;
    for f in floats {
        total = total.checked_add(f.checked_mul(4)?.checked_add(ops_align())?)?;
    }
    let scratch = [h, qd, i]
        .iter()
        .map(|&k| ops::scratch_bytes(k, n, act).max(ops::scratch_bytes(k, 1, act)))
        .max()
        .unwrap_or(0);
    let glu = glu_quant_bytes(i, n.max(1), act);
    total.checked_add(scratch)?.checked_add(glu)?.checked_add(3 * ops_align())
}

/// Bytes of arena for the MLP product quantized inside the gate/up loop (`ops::gemm_glu`):
/// `n` rows of `inter` in the larger of the two int8 formats; 0 for f32 activations.
pub(super) fn glu_quant_bytes(inter: usize, n: usize, act: Activations) -> usize {
    if act == Activations::F32 {
        return 0;
    }
    [ActFormat::Q8, ActFormat::Q8K]
        .iter()
        .map(|&f| crate::quant::q8_acts_bytes_as(f, inter, n))
        .max()
        .unwrap_or(0)
}

pub(super) const fn ops_align() -> usize {
    crate::mem::ALIGN
}

/// The [`MemoryPlan`] of a decoder of `slots` sequences (1: a [`DecoderLM`]); the caller
/// adds its own tables.
pub(super) fn plan<'s>(
    config: &ModelConfig,
    options: &DecoderOptions,
    src: Option<&dyn TensorSource<'s>>,
    slots: usize,
) -> Result<MemoryPlan> {
    let mut plan = MemoryPlan::default();
    let repack = DecoderLM::repacks(options);
    let w = plan_weights(config, options.weight_format, repack, src, |b, n| plan.count_n(b, n))?;
    plan.norms = w.norms;
    plan.converted = w.converted;
    let own = own_buffers(config, options, slots)?;
    // Keys and values of each slot, then the shared buffers, in the order they are placed.
    plan.count_n(own.kv_cache / slots / 2, 2 * slots)?;
    for b in [own.logits, own.scratch, own.rope] {
        plan.count(b)?;
    }
    let c = config;
    let config_lists = c.eos_token_ids.len() * 4
        + c.dtype.as_ref().map_or(0, |d| d.len())
        + c.layer_types.len() * core::mem::size_of::<LayerKind>();
    let table = c.num_hidden_layers.checked_mul(core::mem::size_of::<LayerWeights<'_>>());
    MemoryPlan {
        context_len: own.context_len,
        prefill_chunk: own.prefill_chunk,
        kv_cache: own.kv_cache,
        scratch: own.scratch,
        logits: own.logits,
        rope: own.rope,
        tables: table
            .and_then(|t| t.checked_add(config_lists))
            .ok_or_else(|| Error::resource_exhausted("layer table size overflows"))?,
        ..plan
    }
    .checked()
}

/// The decoder's own buffers (not the weights') for `slots` sequences: KV caches (one per
/// slot), scratch for one step, logits (one row per slot), RoPE table, with the resolved
/// context length (per slot) and the most tokens of one step (the resolved prefill chunk,
/// or `slots` when larger) as `prefill_chunk`.
pub(super) fn own_buffers(
    config: &ModelConfig,
    options: &DecoderOptions,
    slots: usize,
) -> Result<MemoryPlan> {
    config.validate()?;
    let max = config.max_position_embeddings;
    let ctx = options.context_len.unwrap_or(max.min(DEFAULT_MAX_CONTEXT));
    if ctx == 0 || ctx > max {
        return Err(Error::invalid_argument(format_args!(
            "context length {ctx} is not in 1..={max} (max_position_embeddings)"
        )));
    }
    if options.prefill_chunk == 0 {
        return Err(Error::invalid_argument("prefill_chunk is 0"));
    }
    if slots == 0 {
        return Err(Error::invalid_argument("a decoder batch needs at least one slot"));
    }
    let chunk = options.prefill_chunk.min(ctx).max(slots);
    let c = config;
    if options.attention == AttentionPath::PerHead && options.kv_dtype != KvDtype::F32 {
        return Err(Error::invalid_argument("the per-head attention path needs an f32 KV cache"));
    }
    let half = KvCache::half_bytes(
        c.num_hidden_layers,
        c.num_key_value_heads,
        c.head_dim,
        ctx,
        options.kv_dtype,
    )?;
    let kv_cache = half
        .checked_mul(2)
        .and_then(|b| b.checked_mul(slots))
        .ok_or_else(|| Error::resource_exhausted("KV cache size overflows usize"))?;
    let logits =
        c.vocab_size.checked_mul(4).and_then(|b| b.checked_mul(slots)).ok_or_else(|| {
            Error::resource_exhausted(format_args!("vocab_size {} overflows", c.vocab_size))
        })?;
    let scratch =
        arena_bytes(c, chunk, ctx, options.activations, options.attention, options.kv_dtype)
            .ok_or_else(|| Error::resource_exhausted("decoder scratch size overflows usize"))?;
    Ok(MemoryPlan {
        context_len: ctx,
        prefill_chunk: chunk,
        kv_cache,
        scratch,
        logits,
        // Global frequencies, then the sliding layers' own when they have a base.
        rope: c.head_dim / 2 * 4 * if c.local_rope_theta.is_some() { 2 } else { 1 },
        ..MemoryPlan::default()
    })
}

/// Places the buffers every decoder has once, whatever its slots (after the KV caches, in the
/// plan's order): the logits, the scratch arena and the RoPE table (filled).
pub(super) fn place_shared<'a>(
    config: &ModelConfig,
    weights: &Weights<'_>,
    own: &MemoryPlan,
    place: &mut Place<'a>,
) -> Result<(AlignedBlock, Arena, AlignedBlock)> {
    let logits = place.block(own.logits, "logits")?;
    let arena = Arena::from_block(place.block(own.scratch, "scratch arena")?);
    let mut inv_freq = place.block(own.rope, "RoPE table")?;
    fill_table(config, weights.rope_freqs.as_ref(), cast_slice_mut(inv_freq.as_mut_slice()));
    Ok((logits, arena, inv_freq))
}

impl<'a> DecoderLM<'a> {
    /// Loads the weights named by `config` from `src` (repacking Q5_0 matrices as
    /// [`DecoderOptions::repack_weights`] says) and allocates the KV cache, logits and
    /// scratch arena. The decoder borrows the weights' bytes (`'s`) and the executor for `'a`.
    ///
    /// # Errors
    ///
    /// Everything [`Weights::load`] reports; [`crate::Code::InvalidArgument`] for a context
    /// length of 0 or past `max_position_embeddings`, or a `prefill_chunk` of 0;
    /// [`crate::Code::ResourceExhausted`] if the cache or arena cannot be allocated; as
    /// [`crate::kernels::active`] if `RML_KERNELS` is invalid.
    pub fn new<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
    ) -> Result<Self> {
        let repack = Self::repacks(&options);
        let weights: Weights<'s> =
            Weights::load_placed(config, src, options.weight_format, repack, &mut Place::heap())?;
        Self::from_weights(config, weights, exec, options)
    }

    /// As [`DecoderLM::new`] with weights already loaded.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::new`], less the weight errors.
    pub fn from_weights(
        config: &ModelConfig,
        weights: Weights<'a>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
    ) -> Result<Self> {
        Self::build(config, weights, exec, options, &mut Place::heap())
    }

    /// As [`DecoderLM::new`], but every buffer of the [memory plan](MemoryPlan) — KV cache,
    /// scratch arena, logits, RoPE table, norm copies, converted matrices — is carved from
    /// `region` (e.g. a firmware `static`), which the decoder borrows. Only the plan's
    /// [`MemoryPlan::tables`] (the layer table and the config's lists) come from the global
    /// allocator; no step allocates afterwards.
    ///
    /// `region` needs [`DecoderLM::memory_plan_for`]`(config, &options, src)`'s
    /// [`MemoryPlan::region_bytes`] bytes past its first 64-byte boundary.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] naming the bytes needed and given if `region` is too
    /// small (nothing is written then); otherwise as [`DecoderLM::new`].
    pub fn new_in<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
        region: &'a mut [u8],
    ) -> Result<Self> {
        let plan = Self::memory_plan_for(config, &options, src)?;
        let skip = region.as_ptr().align_offset(crate::mem::ALIGN);
        let need = plan.region_bytes();
        if skip.checked_add(need).is_none_or(|n| n > region.len()) {
            return Err(Error::resource_exhausted(format_args!(
                "memory region of {} bytes is too small: the decoder needs {need} bytes from a \
                 64-byte boundary ({skip} bytes in), {} in all ({plan})",
                region.len(),
                skip.saturating_add(need),
            )));
        }
        let mut place = Place::region(region);
        let repack = Self::repacks(&options);
        let weights = Weights::load_placed(config, src, options.weight_format, repack, &mut place)?;
        let lm = Self::build(config, weights, exec, options, &mut place)?;
        debug_assert_eq!(place.used(), need, "memory plan and placement disagree");
        Ok(lm)
    }

    /// The memory a decoder for `config` and `options` keeps ([`MemoryPlan`]), computed
    /// without allocating, for weights stored as aligned f32 / f16 / bf16 with an output head
    /// unless tied (Hugging Face's files). For quantized or misaligned files use
    /// [`DecoderLM::memory_plan_for`], which asks the file.
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::new`] for a bad config, context length or `prefill_chunk`;
    /// [`crate::Code::ResourceExhausted`] if a size overflows.
    pub fn memory_plan(config: &ModelConfig, options: &DecoderOptions) -> Result<MemoryPlan> {
        plan(config, options, None, 1)
    }

    /// [`DecoderLM::memory_plan`] for the weights in `src`: each matrix's stored dtype and
    /// alignment decide whether loading converts or copies it, exactly as
    /// [`DecoderLM::new`] will. Allocates nothing itself (a source may, to report a missing
    /// tensor).
    ///
    /// # Errors
    ///
    /// As [`DecoderLM::memory_plan`]; [`crate::Code::NotFound`] /
    /// [`crate::Code::InvalidArgument`] as [`Weights::load`] for missing or mis-shaped tensors.
    pub fn memory_plan_for<'s>(
        config: &ModelConfig,
        options: &DecoderOptions,
        src: &dyn TensorSource<'s>,
    ) -> Result<MemoryPlan> {
        plan(config, options, Some(src), 1)
    }

    /// What loading does to the matrices ([`DecoderOptions::repack_weights`]): when asked,
    /// with int8 activations [`Repack::Int8`] where the active kernels have a SIMD int8 body
    /// for a repacked layout (Q5_0x2, or a row-interleaved layout,
    /// [`crate::kernels::rows8`]); with f32 activations [`Repack::F32`] where they run some
    /// dtype's f32 product faster widened to Q8_0
    /// ([`crate::kernels::Kernels::f32_via_q8_0`]). [`Repack::Off`] otherwise (and for the
    /// mixed mode, whose matrices run in both).
    pub(super) fn repacks(options: &DecoderOptions) -> Repack {
        let Ok(k) = crate::kernels::active() else { return Repack::Off };
        if !options.repack_weights {
            return Repack::Off;
        }
        match options.activations {
            Activations::Int8 | Activations::Int8Plain
                if k.has_simd_q8(crate::DType::Q5_0x2)
                    || crate::kernels::rows8::TYPES
                        .iter()
                        .any(|&d| k.matmul_q8_rows8(d).is_some()) =>
            {
                Repack::Int8
            }
            Activations::F32 if k.widens_any_for_f32() => Repack::F32,
            _ => Repack::Off,
        }
    }

    /// Places the decoder's own buffers (sized by [`own_buffers`], in the plan's order)
    /// and assembles the decoder.
    fn build(
        config: &ModelConfig,
        weights: Weights<'a>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
        place: &mut Place<'a>,
    ) -> Result<Self> {
        // The kernel choice now, not in the first step: its first call reads `RML_KERNELS`
        // (allocating), and a bad value is reported here.
        crate::kernels::active()?;
        let own = own_buffers(config, &options, 1)?;
        let (ctx, c) = (own.context_len, config);
        let kv = KvCache::placed(
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            ctx,
            options.kv_dtype,
            place,
        )?;
        let (logits, arena, inv_freq) = place_shared(config, &weights, &own, place)?;
        Ok(DecoderLM {
            config: config.clone(),
            weights,
            exec,
            options: DecoderOptions {
                prefill_chunk: own.prefill_chunk,
                context_len: Some(ctx),
                ..options
            },
            inv_freq,
            kv,
            logits,
            arena,
            pos: 0,
        })
    }
}
