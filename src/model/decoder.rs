//! [`DecoderLM`]: the forward pass of every family with a KV cache (design.md §3 "Decoder").
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

use core::ops::Range;

use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::format::TensorSource;
use crate::kernels::flash;
use crate::mem::place::Place;
use crate::mem::{AlignedBlock, Arena};
use crate::model::arch::Activation;
use crate::model::config::{LayerKind, ModelConfig, RopeScaling};
use crate::model::plan::MemoryPlan;
use crate::model::weights::{plan_weights, LayerWeights, Linear, WeightFormat, Weights};
use crate::ops::{self, Activations, KvRows};
use crate::quant::ActFormat;
use crate::tensor::{cast_slice, cast_slice_mut};

/// The context length used when [`DecoderOptions::context_len`] is `None` and the model
/// allows more: `min(max_position_embeddings, DEFAULT_MAX_CONTEXT)`.
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// How a [`DecoderLM`] is built and run.
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
    /// Copy the layers' Q5_0 matrices (rows a multiple of 64 long) into
    /// [`crate::DType::Q5_0x2`] at load, where the active kernels have a SIMD int8 body for it
    /// ([`crate::kernels::Kernels::has_simd_q8`]: the AVX-512 tiers) and the activations are
    /// [`Activations::Int8`] or [`Activations::Int8Plain`]. Costs a copy of those matrices
    /// (counted in [`MemoryPlan`]'s converted bytes; the file's pages are no longer read);
    /// gives the same logits, bit for bit, about 25% faster products on those matrices
    /// (SmolLM2 Q4_K_M's Q5_0 fallbacks). `true` by default with the `std` feature, `false`
    /// without (weights in flash or a fixed region stay in place).
    pub repack_weights: bool,
    /// The most prompt tokens run through the layers at once (bounds the scratch arena).
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
            prefill_chunk: 64,
            schedule: None,
            kv_dtype: KvDtype::F32,
            attention: AttentionPath::Tiled,
        }
    }
}

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

/// The KV cache: keys and values (f32 or f16, [`KvDtype`]) for every layer, KV head and
/// position up to the context length, laid out `[layer][kv_head][position][head_dim]`.
#[derive(Debug)]
pub struct KvCache {
    k: AlignedBlock,
    v: AlignedBlock,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    dtype: KvDtype,
}

impl KvCache {
    /// A zeroed f32 cache for `capacity` positions.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if the size overflows or cannot be allocated.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, capacity: usize) -> Result<Self> {
        Self::with_dtype(layers, kv_heads, head_dim, capacity, KvDtype::F32)
    }

    /// A zeroed cache of `dtype` values for `capacity` positions.
    ///
    /// # Errors
    ///
    /// As [`KvCache::new`].
    pub fn with_dtype(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
    ) -> Result<Self> {
        Self::placed(layers, kv_heads, head_dim, capacity, dtype, &mut Place::heap())
    }

    /// Bytes of the keys (and again of the values) for these dimensions.
    fn half_bytes(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
    ) -> Result<usize> {
        [layers, kv_heads, head_dim, capacity, dtype.bytes()]
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .ok_or_else(|| {
                Error::resource_exhausted(format_args!(
                    "KV cache of {layers} layers x {kv_heads} heads x {capacity} positions \
                     x {head_dim} overflows"
                ))
            })
    }

    fn placed(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
        place: &mut Place<'_>,
    ) -> Result<Self> {
        let bytes = Self::half_bytes(layers, kv_heads, head_dim, capacity, dtype)?;
        Ok(KvCache {
            k: place.block(bytes, "KV cache keys")?,
            v: place.block(bytes, "KV cache values")?,
            kv_heads,
            head_dim,
            capacity,
            dtype,
        })
    }

    /// Positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The element type.
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Bytes of keys plus values.
    pub fn size_bytes(&self) -> usize {
        self.k.len() + self.v.len()
    }

    fn span(&self, layer: usize, head: usize) -> Range<usize> {
        let len = self.capacity * self.head_dim;
        let start = (layer * self.kv_heads + head) * len;
        start..start + len
    }

    fn rows<'s>(&self, block: &'s AlignedBlock, layer: usize, head: usize) -> KvRows<'s> {
        match self.dtype {
            KvDtype::F32 => {
                KvRows::F32(&cast_slice::<f32>(block.as_slice())[self.span(layer, head)])
            }
            KvDtype::F16 => {
                KvRows::F16(&cast_slice::<u16>(block.as_slice())[self.span(layer, head)])
            }
        }
    }

    /// Keys of `layer`, KV head `head`: `capacity × head_dim` values, position-major.
    ///
    /// # Panics
    ///
    /// If `layer` or `head` is out of range.
    pub fn keys(&self, layer: usize, head: usize) -> KvRows<'_> {
        self.rows(&self.k, layer, head)
    }

    /// Values of `layer`, KV head `head`, laid out as [`KvCache::keys`].
    ///
    /// # Panics
    ///
    /// If `layer` or `head` is out of range.
    pub fn values(&self, layer: usize, head: usize) -> KvRows<'_> {
        self.rows(&self.v, layer, head)
    }

    /// Stores `k` and `v` (`kv_heads × head_dim` each) for `layer` at `pos`.
    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let d = self.head_dim;
        for h in 0..self.kv_heads {
            let at = self.span(layer, h).start + pos * d;
            let (ks, vs) = (&k[h * d..(h + 1) * d], &v[h * d..(h + 1) * d]);
            match self.dtype {
                KvDtype::F32 => {
                    cast_slice_mut::<f32>(self.k.as_mut_slice())[at..at + d].copy_from_slice(ks);
                    cast_slice_mut::<f32>(self.v.as_mut_slice())[at..at + d].copy_from_slice(vs);
                }
                KvDtype::F16 => {
                    let to = |dst: &mut [u16], src: &[f32]| {
                        for (o, &x) in dst.iter_mut().zip(src) {
                            *o = half::f16::from_f32(x).to_bits();
                        }
                    };
                    to(&mut cast_slice_mut::<u16>(self.k.as_mut_slice())[at..at + d], ks);
                    to(&mut cast_slice_mut::<u16>(self.v.as_mut_slice())[at..at + d], vs);
                }
            }
        }
    }
}

/// RoPE inverse frequencies of `config`'s global layers (`head_dim / 2` values), with its
/// `rope_scaling` applied as transformers' `modeling_rope_utils.py` does.
///
/// # Panics
///
/// If `out.len() * 2 != config.head_dim`.
pub fn rope_frequencies(config: &ModelConfig, out: &mut [f32]) {
    rope_frequencies_for(config.rope_theta, config.rope_scaling, config.head_dim, out);
}

/// RoPE inverse frequencies for base `theta`, `scaling` and heads of `head_dim`.
///
/// # Panics
///
/// If `out.len() * 2 != head_dim`.
pub fn rope_frequencies_for(theta: f64, scaling: RopeScaling, head_dim: usize, out: &mut [f32]) {
    ops::rope_inv_freq(theta as f32, head_dim, out);
    match scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            for f in out.iter_mut() {
                *f = (*f as f64 / factor) as f32;
            }
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = original_max_position_embeddings as f64;
            let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
            for f in out.iter_mut() {
                let inv = *f as f64;
                let wavelen = 2.0 * core::f64::consts::PI / inv;
                *f = if wavelen < high_wavelen {
                    inv
                } else if wavelen > low_wavelen {
                    inv / factor
                } else {
                    let smooth =
                        (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * inv / factor + smooth * inv
                } as f32;
            }
        }
    }
}

/// A raw pointer shared by the chunks of one `parallel_for`; each chunk touches disjoint
/// elements.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
// SAFETY: only used to write disjoint ranges from different chunks of one parallel_for.
unsafe impl Send for SharedMut {}
// SAFETY: as above.
unsafe impl Sync for SharedMut {}

/// Attention works below this many multiply-adds run inline (dispatch would cost more).
const PAR_ATTENTION_WORK: usize = 1 << 15;

/// The per-head reference path ([`AttentionPath::PerHead`]) splits each head's query rows into
/// this many interleaved parts (row `t` in part `t % ATT_PARTS`), so that heads × parts items
/// balance across threads; each part has its own score row.
const ATT_PARTS: usize = 4;

/// Prefill with [`AttentionPath::Tiled`]: query rows per work item (with all the query heads
/// of one KV head), so each key and value row is read once per `ROW_TILE × group` vectors.
pub const ROW_TILE: usize = 4;

/// Decode with [`AttentionPath::Tiled`]: cache positions per work item. The query heads of one
/// KV head walk each segment `[s * KV_SEGMENT, (s + 1) * KV_SEGMENT)` separately; the
/// segments' running max, sum and output are merged in segment order. The split depends only
/// on positions, so the results are the same for every thread count.
pub const KV_SEGMENT: usize = 256;

/// Floats of arena the attention of a step of `n` rows needs with `ctx` cached positions.
fn attention_floats(
    c: &ModelConfig,
    n: usize,
    ctx: usize,
    path: AttentionPath,
    kv: KvDtype,
) -> Option<usize> {
    let f16 = kv == KvDtype::F16;
    let (nh, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let g = nh / nkv.max(1);
    match path {
        AttentionPath::PerHead => nh.checked_mul(ATT_PARTS.min(n))?.checked_mul(ctx),
        AttentionPath::Tiled => {
            let rows = ROW_TILE.min(n);
            let item = |v: usize| v.checked_mul(2)?.checked_add(flash::scratch_floats(v, hd, f16));
            let prefill = nkv.checked_mul(n.div_ceil(rows))?.checked_mul(item(rows * g)?)?;
            let segs = ctx.div_ceil(KV_SEGMENT);
            let decode = nkv.checked_mul(segs)?.checked_mul(item(g)?.checked_add(g * hd)?)?;
            Some(prefill.max(decode))
        }
    }
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
fn glu_quant_bytes(inter: usize, n: usize, act: Activations) -> usize {
    if act == Activations::F32 {
        return 0;
    }
    [ActFormat::Q8, ActFormat::Q8K]
        .iter()
        .map(|&f| crate::quant::q8_acts_bytes_as(f, inter, n))
        .max()
        .unwrap_or(0)
}

const fn ops_align() -> usize {
    crate::mem::ALIGN
}

fn matmul(
    exec: &dyn Executor,
    schedule: Option<Schedule>,
    w: &Linear<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    act: Activations,
    scratch: &mut [u8],
) -> Result<()> {
    let m = w.matrix()?;
    if n == 1 {
        ops::gemv(exec, schedule, &m, x, y, act, scratch)
    } else {
        ops::gemm(exec, schedule, &m, x, n, y, act, scratch)
    }
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
    /// [`crate::Code::ResourceExhausted`] if the cache or arena cannot be allocated.
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
        Self::plan(config, options, None)
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
        Self::plan(config, options, Some(src))
    }

    /// Whether loading repacks Q5_0 matrices ([`DecoderOptions::repack_weights`]): asked, int8
    /// activations, and a SIMD int8 body for the repacked layout in the active kernels.
    fn repacks(options: &DecoderOptions) -> bool {
        options.repack_weights
            && matches!(options.activations, Activations::Int8 | Activations::Int8Plain)
            && crate::kernels::active().is_ok_and(|k| k.has_simd_q8(crate::DType::Q5_0x2))
    }

    fn plan<'s>(
        config: &ModelConfig,
        options: &DecoderOptions,
        src: Option<&dyn TensorSource<'s>>,
    ) -> Result<MemoryPlan> {
        let mut plan = MemoryPlan::default();
        let repack = Self::repacks(options);
        let w =
            plan_weights(config, options.weight_format, repack, src, |b, n| plan.count_n(b, n))?;
        plan.norms = w.norms;
        plan.converted = w.converted;
        let own = Self::own_buffers(config, options)?;
        for b in [own.kv_cache / 2, own.kv_cache / 2, own.logits, own.scratch, own.rope] {
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

    /// The decoder's own buffers (not the weights'): KV cache, scratch, logits, RoPE table,
    /// with the resolved context length and prefill chunk.
    fn own_buffers(config: &ModelConfig, options: &DecoderOptions) -> Result<MemoryPlan> {
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
        let chunk = options.prefill_chunk.min(ctx);
        let c = config;
        if options.attention == AttentionPath::PerHead && options.kv_dtype != KvDtype::F32 {
            return Err(Error::invalid_argument(
                "the per-head attention path needs an f32 KV cache",
            ));
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
            .ok_or_else(|| Error::resource_exhausted("KV cache size overflows usize"))?;
        let logits = c.vocab_size.checked_mul(4).ok_or_else(|| {
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

    /// Places the decoder's own buffers (sized by [`Self::own_buffers`], in the plan's order)
    /// and assembles the decoder.
    fn build(
        config: &ModelConfig,
        weights: Weights<'a>,
        exec: &'a dyn Executor,
        options: DecoderOptions,
        place: &mut Place<'a>,
    ) -> Result<Self> {
        let own = Self::own_buffers(config, &options)?;
        let (ctx, c) = (own.context_len, config);
        let kv = KvCache::placed(
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            ctx,
            options.kv_dtype,
            place,
        )?;
        let logits = place.block(own.logits, "logits")?;
        let arena = Arena::from_block(place.block(own.scratch, "scratch arena")?);
        let mut inv_freq = place.block(own.rope, "RoPE table")?;
        {
            let half = c.head_dim / 2;
            let f: &mut [f32] = cast_slice_mut(inv_freq.as_mut_slice());
            let (global, local) = f.split_at_mut(half);
            rope_frequencies(config, global);
            if let Some(theta) = c.local_rope_theta {
                rope_frequencies_for(theta, RopeScaling::None, c.head_dim, local);
            }
            // llama.cpp's `rope_freqs.weight`: each inverse frequency divided by its factor.
            if let Some(div) = &weights.rope_freqs {
                for part in f.chunks_exact_mut(half) {
                    for (x, &d) in part.iter_mut().zip(div.as_slice()) {
                        *x /= d;
                    }
                }
            }
        }
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

    /// One chunk: at most `prefill_chunk` tokens, fitting in the context (checked by the
    /// caller).
    fn step<'o>(
        &mut self,
        exec: &dyn Executor,
        tokens: &[u32],
        last: bool,
        all_logits: Option<&mut [f32]>,
        mut observer: Option<&mut (dyn FnMut(&Hidden<'_>) + 'o)>,
    ) -> Result<()> {
        let DecoderLM { config: c, weights: w, options, inv_freq, kv, logits, arena, pos, .. } =
            self;
        let freqs: &[f32] = cast_slice(inv_freq.as_slice());
        let (inv_freq, inv_freq_local) = freqs.split_at(c.head_dim / 2);
        let (n, p0) = (tokens.len(), *pos);
        let (h, nh, nkv, hd) =
            (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let (qd, kvd, inter, half) = (nh * hd, nkv * hd, c.intermediate_size, hd / 2);
        let groups = nh / nkv;
        let eps = c.rms_norm_eps as f32;
        let (act, sched) = (options.activations, options.schedule);
        let (normed, other) = (act.for_normed_input(), act.for_other_input());
        let scale = c.attention_scale();
        let layout = w.rope_layout;
        let act_fn = c.arch.activation;

        arena.reset();
        let arena: &Arena = arena;
        let x = arena.alloc_slice::<f32>(n * h)?;
        let xn = arena.alloc_slice::<f32>(n * h)?;
        let q = arena.alloc_slice::<f32>(n * qd)?;
        let k = arena.alloc_slice::<f32>(n * kvd)?;
        let v = arena.alloc_slice::<f32>(n * kvd)?;
        let att = arena.alloc_slice::<f32>(n * qd)?;
        let gate = arena.alloc_slice::<f32>(n * inter)?;
        let up = arena.alloc_slice::<f32>(n * inter)?;
        let cos = arena.alloc_slice::<f32>(n * half)?;
        let sin = arena.alloc_slice::<f32>(n * half)?;
        let cos_local = arena.alloc_slice::<f32>(n * half)?;
        let sin_local = arena.alloc_slice::<f32>(n * half)?;
        let span = p0 + n;
        let parts = ATT_PARTS.min(n);
        let path = options.attention;
        let f16 = kv.dtype() == KvDtype::F16;
        let att_floats = attention_floats(c, n, span, path, kv.dtype())
            .ok_or_else(|| Error::resource_exhausted("attention scratch size overflows usize"))?;
        let scores = arena.alloc_slice::<f32>(att_floats)?;
        let kern = crate::kernels::active().ok();
        let scratch_len =
            [h, qd, inter].iter().map(|&kk| ops::scratch_bytes(kk, n, act)).max().unwrap_or(0);
        let scratch = arena.alloc_slice_aligned::<u8>(scratch_len, ops_align())?;
        let glu_scratch =
            arena.alloc_slice_aligned::<u8>(glu_quant_bytes(inter, n, act), ops_align())?;
        // The down projection reads the GLU product quantized inside the gate/up loop when it
        // runs int8 (plain) in a format whose blocks tile the product's rows.
        let down_fmt = |m: &ops::Matrix<'_>| {
            let fmt = crate::quant::info(m.dtype()).act?;
            let int8 = other != Activations::F32 && m.dtype().is_quantized();
            (int8 && inter % fmt.block_elems() == 0).then_some(fmt)
        };

        let emb = w.embedding.matrix()?;
        for (t, &tok) in tokens.iter().enumerate() {
            ops::dequantize_row(&emb, tok as usize, &mut x[t * h..(t + 1) * h]);
        }
        if c.arch.embed_scale_sqrt_hidden {
            // transformers: `hidden * torch.tensor(hidden_size ** 0.5, dtype)`, in f32.
            let s = libm::sqrt(h as f64) as f32;
            x.iter_mut().for_each(|v| *v *= s);
        }
        let want_all = all_logits.is_some() || observer.is_some();
        let mut observe = |stage: Stage, data: &[f32]| {
            if let Some(f) = observer.as_deref_mut() {
                f(&Hidden { stage, position: p0, data });
            }
        };
        observe(Stage::Embedding, x);
        for t in 0..n {
            let (c_t, s_t) =
                (&mut cos[t * half..(t + 1) * half], &mut sin[t * half..(t + 1) * half]);
            ops::rope_cos_sin(p0 + t, inv_freq, c_t, s_t);
            if !inv_freq_local.is_empty() {
                let (c_t, s_t) = (
                    &mut cos_local[t * half..(t + 1) * half],
                    &mut sin_local[t * half..(t + 1) * half],
                );
                ops::rope_cos_sin(p0 + t, inv_freq_local, c_t, s_t);
            }
        }

        for (l, lw) in w.layers.iter().enumerate() {
            // Attention block.
            for t in 0..n {
                let r = t * h..(t + 1) * h;
                ops::rms_norm(&x[r.clone()], lw.attn_norm.as_slice(), eps, &mut xn[r]);
            }
            let qkv = [&lw.q.matrix()?, &lw.k.matrix()?, &lw.v.matrix()?];
            ops::gemm_fused(exec, sched, qkv, xn, n, [&mut *q, &mut *k, &mut *v], normed, scratch)
                .map_err(|e| nonfinite_input(e, xn, h, p0))?;
            if let Some([bq, bk, bv]) = &lw.qkv_bias {
                for t in 0..n {
                    ops::add_assign(&mut q[t * qd..(t + 1) * qd], bq.as_slice());
                    ops::add_assign(&mut k[t * kvd..(t + 1) * kvd], bk.as_slice());
                    ops::add_assign(&mut v[t * kvd..(t + 1) * kvd], bv.as_slice());
                }
            }
            if let Some([nq, nk]) = &lw.qk_norm {
                for head in q.chunks_exact_mut(hd) {
                    ops::rms_norm_in_place(head, nq.as_slice(), eps);
                }
                for head in k.chunks_exact_mut(hd) {
                    ops::rms_norm_in_place(head, nk.as_slice(), eps);
                }
            }
            let sliding = c.layer_types[l] == LayerKind::Sliding;
            let (cos_l, sin_l): (&[f32], &[f32]) = if sliding && !inv_freq_local.is_empty() {
                (&*cos_local, &*sin_local)
            } else {
                (&*cos, &*sin)
            };
            for t in 0..n {
                let (c_t, s_t) =
                    (&cos_l[t * half..(t + 1) * half], &sin_l[t * half..(t + 1) * half]);
                ops::rope(&mut q[t * qd..(t + 1) * qd], c_t, s_t, layout);
                ops::rope(&mut k[t * kvd..(t + 1) * kvd], c_t, s_t, layout);
                kv.store(l, p0 + t, &k[t * kvd..(t + 1) * kvd], &v[t * kvd..(t + 1) * kvd]);
            }
            let window = match c.layer_types[l] {
                LayerKind::Sliding => c.sliding_window.unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let work = nh * n * span * hd;
            let par = exec.threads() > 1 && work >= PAR_ATTENTION_WORK;
            let (kv, q, c): (&KvCache, &[f32], &ModelConfig) = (kv, q, c);
            let out = SharedMut(att.as_mut_ptr());
            let sc = SharedMut(scores.as_mut_ptr());
            match path {
                AttentionPath::PerHead => {
                    // Item `i` is head `i / parts`, query rows `t ≡ i % parts (mod parts)`.
                    let heads = |range: Range<usize>| {
                        let (out, sc) = (out, sc);
                        for i in range {
                            let (hq, part) = (i / parts, i % parts);
                            let (KvRows::F32(keys), KvRows::F32(values)) =
                                (kv.keys(l, hq / groups), kv.values(l, hq / groups))
                            else {
                                unreachable!("the per-head path runs on an f32 cache (checked)")
                            };
                            // SAFETY: item `i` owns `scores[i * span .. (i + 1) * span]` and
                            // the output rows `[t * qd + hq * hd, + hd)` of its query rows;
                            // chunks hold disjoint items, and the arena slices outlive the
                            // parallel_for.
                            let s = unsafe {
                                core::slice::from_raw_parts_mut(sc.0.add(i * span), span)
                            };
                            for t in (part..n).step_by(parts) {
                                let at = t * qd + hq * hd;
                                // SAFETY: as above.
                                let o =
                                    unsafe { core::slice::from_raw_parts_mut(out.0.add(at), hd) };
                                let qv = &q[at..at + hd];
                                let (qi, start) = (p0 + t, c.attention_start(l, p0 + t));
                                let (ks, vs) = (&keys[start * hd..], &values[start * hd..]);
                                ops::attention_head(qv, ks, vs, qi + 1 - start, scale, s, o);
                            }
                        }
                    };
                    if par {
                        exec.parallel_for(0..nh * parts, Schedule::Grain(1), &heads);
                    } else {
                        heads(0..nh * parts);
                    }
                }
                AttentionPath::Tiled if n > 1 => {
                    // Item `i` is KV head `i / tiles`, query rows `ROW_TILE * (i % tiles) ..`
                    // with all `groups` query heads of that KV head.
                    let rows = ROW_TILE.min(n);
                    let tiles = n.div_ceil(rows);
                    let per = 2 * rows * groups + flash::scratch_floats(rows * groups, hd, f16);
                    let items = |range: Range<usize>| {
                        let (out, sc) = (out, sc);
                        for i in range {
                            let (g, t0) = (i / tiles, (i % tiles) * rows);
                            let at = t0 * qd + g * groups * hd;
                            // SAFETY: item `i` owns `scores[i * per ..][..per]` (its `ml`,
                            // then its kernel scratch) and the output vectors of its rows and
                            // heads; chunks hold disjoint items; `q` and the cache are only
                            // read; every key a row sees is below `p0 + n <= capacity`.
                            unsafe {
                                let ml = sc.0.add(i * per);
                                let b = flash::Block {
                                    q: q.as_ptr().add(at),
                                    out: out.0.add(at),
                                    row_stride: qd,
                                    rows: rows.min(n - t0),
                                    heads: groups,
                                    d: hd,
                                    keys: kv.keys(l, g).ptr(),
                                    values: kv.values(l, g).ptr(),
                                    pos0: p0 + t0,
                                    window,
                                    clip: (0, usize::MAX),
                                    scale,
                                    ml,
                                    scratch: ml.add(2 * rows * groups),
                                };
                                ops::attention_block(kern, &b);
                                flash::finalize(&b);
                            }
                        }
                    };
                    if par {
                        exec.parallel_for(0..nkv * tiles, Schedule::Grain(1), &items);
                    } else {
                        items(0..nkv * tiles);
                    }
                }
                AttentionPath::Tiled => {
                    // Decode: item `i` is KV head `i / segs`, cache segment
                    // `seg0 + i % segs` of KV_SEGMENT positions, all `groups` query heads;
                    // each writes unnormalized partial outputs, merged below in order.
                    let hi = p0 + 1;
                    let lo = hi.saturating_sub(window);
                    let seg0 = lo / KV_SEGMENT;
                    let segs = (hi - 1) / KV_SEGMENT + 1 - seg0;
                    let part = groups * hd;
                    let per = part + 2 * groups + flash::scratch_floats(groups, hd, f16);
                    let items = |range: Range<usize>| {
                        let partials = sc;
                        for i in range {
                            let (g, s) = (i / segs, seg0 + i % segs);
                            // SAFETY: item `i` owns `scores[i * per ..][..per]` (partial
                            // output, `ml`, kernel scratch); chunks hold disjoint items; `q`
                            // and the cache are only read; keys below `p0 + 1`.
                            unsafe {
                                let base = partials.0.add(i * per);
                                let b = flash::Block {
                                    q: q.as_ptr().add(g * part),
                                    out: base,
                                    row_stride: qd,
                                    rows: 1,
                                    heads: groups,
                                    d: hd,
                                    keys: kv.keys(l, g).ptr(),
                                    values: kv.values(l, g).ptr(),
                                    pos0: p0,
                                    window,
                                    clip: (s * KV_SEGMENT, (s + 1) * KV_SEGMENT),
                                    scale,
                                    ml: base.add(part),
                                    scratch: base.add(part + 2 * groups),
                                };
                                ops::attention_block(kern, &b);
                            }
                        }
                    };
                    if par {
                        exec.parallel_for(0..nkv * segs, Schedule::Grain(1), &items);
                    } else {
                        items(0..nkv * segs);
                    }
                    // Merge each vector's segments in order, then normalize.
                    for g in 0..nkv {
                        for h in 0..groups {
                            let o = &mut att[(g * groups + h) * hd..][..hd];
                            let (mut m, mut lsum) = (f32::NEG_INFINITY, 0f32);
                            for s in 0..segs {
                                let base = (g * segs + s) * per;
                                let ob = &scores[base + h * hd..][..hd];
                                let (mb, lb) =
                                    (scores[base + part + h], scores[base + part + groups + h]);
                                flash::merge(&mut m, &mut lsum, o, mb, lb, ob);
                            }
                            let inv = 1.0 / lsum;
                            o.iter_mut().for_each(|x| *x *= inv);
                        }
                    }
                }
            }
            matmul(exec, sched, &lw.o, att, n, xn, other, scratch)
                .map_err(|e| nonfinite_input(e, att, qd, p0))?;
            if let Some(pn) = &lw.post_attn_norm {
                for row in xn.chunks_exact_mut(h) {
                    ops::rms_norm_in_place(row, pn.as_slice(), eps);
                }
            }
            ops::add_assign(x, xn);
            // MLP block.
            for t in 0..n {
                let r = t * h..(t + 1) * h;
                ops::rms_norm(&x[r.clone()], lw.ffn_norm.as_slice(), eps, &mut xn[r]);
            }
            let gate_up = [&lw.gate.matrix()?, &lw.up.matrix()?];
            let down = lw.down.matrix()?;
            let quant =
                down_fmt(&down).map(|fmt| ops::GluQuant { fmt, scratch: &mut *glu_scratch });
            let gelu = act_fn == Activation::GeluTanh;
            let (g, u) = (&mut *gate, &mut *up);
            let hq = ops::gemm_glu(exec, sched, gate_up, xn, n, g, u, gelu, normed, scratch, quant)
                .map_err(|e| nonfinite_input(e, xn, h, p0))
                .map_err(|e| nonfinite_input(e, gate, inter, p0))?;
            match hq {
                Some(hq) => ops::gemm_q8(exec, sched, &down, &hq, xn),
                None => matmul(exec, sched, &lw.down, gate, n, xn, other, scratch),
            }
            .map_err(|e| nonfinite_input(e, gate, inter, p0))?;
            if let Some(pn) = &lw.post_ffn_norm {
                for row in xn.chunks_exact_mut(h) {
                    ops::rms_norm_in_place(row, pn.as_slice(), eps);
                }
            }
            ops::add_assign(x, xn);
            observe(Stage::Layer(l), x);
        }

        let first = if want_all { 0 } else { n - 1 };
        if !(want_all || last) {
            *pos = p0 + n;
            return Ok(());
        }
        let norm = w.final_norm.as_slice();
        for t in first..n {
            let r = t * h..(t + 1) * h;
            ops::rms_norm(&x[r.clone()], norm, eps, &mut xn[r]);
        }
        observe(Stage::FinalNorm, xn);
        let head = w.output();
        let logits: &mut [f32] = cast_slice_mut(logits.as_mut_slice());
        let vocab = logits.len();
        let cap = c.final_logit_softcapping.map(|c| c as f32);
        match all_logits {
            Some(out) => {
                matmul(exec, sched, head, xn, n, out, act, scratch)
                    .map_err(|e| nonfinite_input(e, xn, h, p0))?;
                if let Some(cap) = cap {
                    ops::softcap(out, cap);
                }
                logits.copy_from_slice(&out[(n - 1) * vocab..]);
            }
            None => {
                matmul(exec, sched, head, &xn[(n - 1) * h..], 1, logits, act, scratch)
                    .map_err(|e| nonfinite_input(e, &xn[(n - 1) * h..], h, p0 + n - 1))?;
                if let Some(cap) = cap {
                    ops::softcap(logits, cap);
                }
            }
        }
        *pos = p0 + n;
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
    // `v * 0.0` is 0 for finite `v` and NaN otherwise, so the sum is finite exactly when
    // every value is: one pass without a branch per element.
    for (r, row) in rows.chunks(width.max(1)).enumerate() {
        if !row.iter().fold(0f32, |acc, &v| acc + v * 0.0).is_finite() {
            return Err(non_finite_at(first + r, "logits"));
        }
    }
    Ok(())
}

/// Maps an int8-path error caused by a non-finite matmul input (`x`, rows of `width`, row `r`
/// at position `p0 + r`) to the documented [`crate::Code::DataLoss`]; other errors pass.
fn nonfinite_input(e: Error, x: &[f32], width: usize, p0: usize) -> Error {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => non_finite_at(p0 + i / width.max(1), "activations"),
        None => e,
    }
}
