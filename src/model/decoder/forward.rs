//! The one forward pass of the crate: a set of sequences, each with its own KV cache and
//! position, run through the layers together — embed → per layer (attention block, MLP block)
//! → final norm and output head. The rows of every sequence go through each weight matrix as
//! one GEMM (GEMV for a single row); RMSNorm, RoPE, the biases and the MLP are row-wise;
//! attention runs per sequence against its own cache ([`ops::attention_layer`]; the one-row
//! entries, decode tokens, together as one set of work items, [`ops::attention_decode`]). A
//! [`DecoderLM`](super::DecoderLM) step is the one-sequence case, a
//! [`DecoderBatch`](super::DecoderBatch) step the general one. Since every kernel computes
//! each output row from its own input row in a fixed order, a sequence's logits are the same
//! bits whichever other sequences share its pass.
//!
//! Every buffer comes from the caller's arena, reset at the start of the pass
//! (`docs/architecture.md`, "Contracts" → "Zero allocations per step").

use super::build::{glu_quant_bytes, ops_align};
use super::{
    nonfinite_input, AttentionPath, DecoderOptions, Hidden, KvCache, KvDtype, SeqInput, Stage,
};
use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::mem::Arena;
use crate::model::arch::Activation;
use crate::model::config::{LayerKind, ModelConfig};
use crate::model::weights::{Linear, Weights};
use crate::ops::{self, Activations};

/// Floats of arena the attention of a step of `n` rows needs with `ctx` cached positions
/// ([`ops::layer_attention_floats`] for this config, path and cache type).
pub(super) fn attention_floats(
    c: &ModelConfig,
    n: usize,
    ctx: usize,
    path: AttentionPath,
    kv: KvDtype,
) -> Option<usize> {
    let (nh, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let per_head = path == AttentionPath::PerHead;
    ops::layer_attention_floats(nh, nkv, hd, n, ctx, per_head, kv == KvDtype::F16)
}

/// The most one-row entries whose attention runs as one [`ops::attention_decode`] call (a
/// bound for the stack table of them).
const DECODE_GROUP: usize = 16;

#[allow(clippy::too_many_arguments)]
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

/// What every sequence of a pass shares: the model and the options it runs with.
pub(super) struct Model<'m, 'a> {
    pub config: &'m ModelConfig,
    pub weights: &'m Weights<'a>,
    pub options: &'m DecoderOptions,
    /// The RoPE table (`head_dim / 2` global frequencies, then the sliding layers' own when
    /// the config has a local base).
    pub inv_freq: &'m [f32],
}

/// The sequences of a pass: entry `i` appends `work[i].tokens` to slot `work[i].slot`, whose
/// cache is `kv[slot]` and whose next position is `positions[slot]`. Rows are numbered
/// through the entries in order.
#[derive(Clone, Copy)]
pub(super) struct Seqs<'w, 't> {
    pub work: &'w [SeqInput<'t>],
    pub positions: &'w [usize],
}

impl Seqs<'_, '_> {
    /// Rows of the pass (tokens of all entries).
    pub fn rows(&self) -> usize {
        self.work.iter().map(|e| e.tokens.len()).sum()
    }

    /// Each entry with its first row and first position.
    pub fn entries(&self) -> impl Iterator<Item = (usize, usize, &SeqInput<'_>)> + '_ {
        self.work.iter().scan(0usize, |row, e| {
            let r0 = *row;
            *row += e.tokens.len();
            Some((r0, self.positions[e.slot], e))
        })
    }

    /// The position of row `r` in its sequence (`r` past the rows: past the last one).
    pub fn position(&self, r: usize) -> usize {
        let mut last = 0;
        for (r0, p0, e) in self.entries() {
            if r < r0 + e.tokens.len() {
                return p0 + (r - r0);
            }
            last = p0 + e.tokens.len();
        }
        last
    }

    /// The position of the last row of entry `i`.
    pub fn last_position(&self, i: usize) -> usize {
        let e = &self.work[i];
        self.positions[e.slot] + e.tokens.len() - 1
    }
}

/// Which logits a pass computes.
pub(super) enum Head<'o> {
    /// None (a prefill chunk before the last).
    Skip,
    /// The last row of each entry, into `work.len() × vocab_size` floats.
    Last(&'o mut [f32]),
    /// Every row into `all` (`rows × vocab_size`), and the last row's again into `last`.
    All { all: &'o mut [f32], last: &'o mut [f32] },
}

/// One forward pass over `seqs` (validated by the caller: slots in range and distinct,
/// tokens non-empty and in the vocabulary, every sequence fitting in its cache, the rows
/// within what `arena` was sized for). Writes the new keys and values into the caches at the
/// sequences' positions and the logits `head` asks for; moves no position (the caller does,
/// on success). `observer` sees the hidden states of all rows, its `position` being that of
/// the first entry.
///
/// # Errors
///
/// [`crate::Code::DataLoss`] for a non-finite matmul input (int8 activations) naming the
/// row's position; [`crate::Code::ResourceExhausted`] if the arena is too small.
pub(super) fn forward_pass<'o>(
    exec: &dyn Executor,
    model: &Model<'_, '_>,
    arena: &mut Arena,
    kv: &mut [KvCache],
    seqs: Seqs<'_, '_>,
    head: Head<'_>,
    mut observer: Option<&mut (dyn FnMut(&Hidden<'_>) + 'o)>,
) -> Result<()> {
    let Model { config: c, weights: w, options, inv_freq: freqs } = *model;
    let (inv_freq, inv_freq_local) = freqs.split_at(c.head_dim / 2);
    let n = seqs.rows();
    let p_first = seqs.work.first().map_or(0, |e| seqs.positions[e.slot]);
    let (h, nh, nkv, hd) =
        (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let (qd, kvd, inter, half) = (nh * hd, nkv * hd, c.intermediate_size, hd / 2);
    let eps = c.rms_norm_eps as f32;
    let (act, sched) = (options.activations, options.schedule);
    let (normed, other) = (act.for_normed_input(), act.for_other_input());
    let scale = c.attention_scale();
    let layout = w.rope_layout;
    let act_fn = c.arch.activation;
    let at = |r: usize| seqs.position(r);

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
    let path = options.attention;
    let kv_dtype = options.kv_dtype;
    let scratch_len =
        [h, qd, inter].iter().map(|&kk| ops::scratch_bytes(kk, n, act)).max().unwrap_or(0);
    let scratch = arena.alloc_slice_aligned::<u8>(scratch_len, ops_align())?;
    let glu_scratch =
        arena.alloc_slice_aligned::<u8>(glu_quant_bytes(inter, n, act), ops_align())?;
    // The attention scratch: what the largest entry needs alone (the arena is sized for
    // that), or, when the arena has room, what all one-row entries need together (their
    // attention then runs as one set of work items, `ops::attention_decode`).
    let overflow = || Error::resource_exhausted("attention scratch size overflows usize");
    let (mut att_floats, mut decode_floats) = (0, 0usize);
    for (_, p0, e) in seqs.entries() {
        let len = e.tokens.len();
        let f = attention_floats(c, len, p0 + len, path, kv_dtype).ok_or_else(overflow)?;
        att_floats = att_floats.max(f);
        if len == 1 && path == AttentionPath::Tiled {
            let d = ops::decode_attention_floats(nh, nkv, hd, p0, kv_dtype == KvDtype::F16);
            decode_floats = d.and_then(|d| decode_floats.checked_add(d)).ok_or_else(overflow)?;
        }
    }
    let free = arena.capacity().saturating_sub(arena.used().next_multiple_of(4)) / 4;
    let scores = arena.alloc_slice::<f32>(att_floats.max(decode_floats.min(free)))?;
    // The down projection reads the GLU product quantized inside the gate/up loop when it
    // runs int8 (plain) in a format whose blocks tile the product's rows.
    let down_fmt = |m: &ops::Matrix<'_>| {
        let fmt = crate::quant::info(m.dtype()).act?;
        let int8 = other != Activations::F32 && m.dtype().is_quantized();
        (int8 && inter % fmt.block_elems() == 0).then_some(fmt)
    };

    let emb = w.embedding.matrix()?;
    let tokens = seqs.work.iter().flat_map(|e| e.tokens.iter());
    for (t, &tok) in tokens.enumerate() {
        ops::dequantize_row(&emb, tok as usize, &mut x[t * h..(t + 1) * h]);
    }
    if c.arch.embed_scale_sqrt_hidden {
        // transformers: `hidden * torch.tensor(hidden_size ** 0.5, dtype)`, in f32.
        let s = libm::sqrt(h as f64) as f32;
        x.iter_mut().for_each(|v| *v *= s);
    }
    let observed = observer.is_some();
    let mut observe = |stage: Stage, data: &[f32]| {
        if let Some(f) = observer.as_deref_mut() {
            f(&Hidden { stage, position: p_first, data });
        }
    };
    observe(Stage::Embedding, x);
    for (r0, p0, e) in seqs.entries() {
        for i in 0..e.tokens.len() {
            let t = r0 + i;
            let (c_t, s_t) =
                (&mut cos[t * half..(t + 1) * half], &mut sin[t * half..(t + 1) * half]);
            ops::rope_cos_sin(p0 + i, inv_freq, c_t, s_t);
            if !inv_freq_local.is_empty() {
                let (c_t, s_t) = (
                    &mut cos_local[t * half..(t + 1) * half],
                    &mut sin_local[t * half..(t + 1) * half],
                );
                ops::rope_cos_sin(p0 + i, inv_freq_local, c_t, s_t);
            }
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
            .map_err(|e| nonfinite_input(e, xn, h, &at))?;
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
        for (r0, p0, e) in seqs.entries() {
            let cache = &mut kv[e.slot];
            for i in 0..e.tokens.len() {
                let t = r0 + i;
                let (c_t, s_t) =
                    (&cos_l[t * half..(t + 1) * half], &sin_l[t * half..(t + 1) * half]);
                ops::rope(&mut q[t * qd..(t + 1) * qd], c_t, s_t, layout);
                ops::rope(&mut k[t * kvd..(t + 1) * kvd], c_t, s_t, layout);
                cache.store(l, p0 + i, &k[t * kvd..(t + 1) * kvd], &v[t * kvd..(t + 1) * kvd]);
            }
        }
        let window = match c.layer_types[l] {
            LayerKind::Sliding => c.sliding_window,
            _ => None,
        };
        // One-row entries in groups of up to DECODE_GROUP whose scratch fits in `scores`
        // (each fits alone), the others one by one.
        let dshape = ops::DecodeShape { heads: nh, kv_heads: nkv, head_dim: hd, window, scale };
        let (keys, values) = kv[0].layer(l);
        let empty = ops::DecodeRow { row: 0, pos: 0, keys, values, capacity: 0 };
        let mut group = [empty; DECODE_GROUP];
        let (mut grouped, mut need) = (0, 0);
        for (r0, p0, e) in seqs.entries() {
            let (cache, rows) = (&kv[e.slot], e.tokens.len());
            if rows == 1 && path == AttentionPath::Tiled {
                let f = ops::decode_attention_floats(nh, nkv, hd, p0, kv_dtype == KvDtype::F16)
                    .ok_or_else(overflow)?;
                if grouped == DECODE_GROUP || need + f > scores.len() {
                    ops::attention_decode(exec, &dshape, &group[..grouped], q, scores, att);
                    (grouped, need) = (0, 0);
                }
                let (keys, values) = cache.layer(l);
                let capacity = cache.capacity();
                group[grouped] = ops::DecodeRow { row: r0, pos: p0, keys, values, capacity };
                (grouped, need) = (grouped + 1, need + f);
                continue;
            }
            let shape = ops::LayerAttention {
                rows,
                pos0: p0,
                heads: nh,
                kv_heads: nkv,
                head_dim: hd,
                capacity: cache.capacity(),
                window,
                scale,
                per_head: path == AttentionPath::PerHead,
            };
            let (keys, values) = cache.layer(l);
            let span = r0 * qd..(r0 + rows) * qd;
            ops::attention_layer(
                exec,
                &shape,
                &q[span.clone()],
                keys,
                values,
                scores,
                &mut att[span],
            );
        }
        if grouped > 0 {
            ops::attention_decode(exec, &dshape, &group[..grouped], q, scores, att);
        }
        matmul(exec, sched, &lw.o, att, n, xn, other, scratch)
            .map_err(|e| nonfinite_input(e, att, qd, &at))?;
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
        let quant = down_fmt(&down).map(|fmt| ops::GluQuant { fmt, scratch: &mut *glu_scratch });
        let gelu = act_fn == Activation::GeluTanh;
        let (g, u) = (&mut *gate, &mut *up);
        let hq = ops::gemm_glu(exec, sched, gate_up, xn, n, g, u, gelu, normed, scratch, quant)
            .map_err(|e| nonfinite_input(e, xn, h, &at))
            .map_err(|e| nonfinite_input(e, gate, inter, &at))?;
        match hq {
            Some(hq) => ops::gemm_q8(exec, sched, &down, &hq, xn),
            None => matmul(exec, sched, &lw.down, gate, n, xn, other, scratch),
        }
        .map_err(|e| nonfinite_input(e, gate, inter, &at))?;
        if let Some(pn) = &lw.post_ffn_norm {
            for row in xn.chunks_exact_mut(h) {
                ops::rms_norm_in_place(row, pn.as_slice(), eps);
            }
        }
        ops::add_assign(x, xn);
        observe(Stage::Layer(l), x);
    }

    if matches!(head, Head::Skip) && !observed {
        return Ok(());
    }
    let norm = w.final_norm.as_slice();
    let cap = c.final_logit_softcapping.map(|c| c as f32);
    let out = w.output();
    // Every row normalized in place when the observer sees them or all logits are asked for.
    let norm_all = observed || matches!(head, Head::All { .. });
    if norm_all {
        for t in 0..n {
            let r = t * h..(t + 1) * h;
            ops::rms_norm(&x[r.clone()], norm, eps, &mut xn[r]);
        }
        observe(Stage::FinalNorm, xn);
    }
    let logits = match head {
        Head::Skip => return Ok(()),
        Head::All { all, last } => {
            matmul(exec, sched, out, xn, n, all, act, scratch)
                .map_err(|e| nonfinite_input(e, xn, h, &at))?;
            if let Some(cap) = cap {
                ops::softcap(all, cap);
            }
            let vocab = last.len();
            last.copy_from_slice(&all[(n - 1) * vocab..]);
            return Ok(());
        }
        Head::Last(logits) => logits,
    };
    // Row `i` of `xn` becomes entry `i`'s last row, normalized.
    for (i, (r0, _, e)) in seqs.entries().enumerate() {
        let t = r0 + e.tokens.len() - 1;
        if norm_all {
            // Row `i` <= its last row `t`, and the last rows increase with `i`, so no row is
            // overwritten before it is copied.
            xn.copy_within(t * h..(t + 1) * h, i * h);
        } else {
            ops::rms_norm(&x[t * h..(t + 1) * h], norm, eps, &mut xn[i * h..(i + 1) * h]);
        }
    }
    let m = seqs.work.len();
    let last_at = |i: usize| seqs.last_position(i);
    matmul(exec, sched, out, &xn[..m * h], m, logits, act, scratch)
        .map_err(|e| nonfinite_input(e, &xn[..m * h], h, &last_at))?;
    if let Some(cap) = cap {
        ops::softcap(logits, cap);
    }
    Ok(())
}
