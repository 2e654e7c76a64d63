//! One forward step of a [`DecoderLM`] over a chunk of tokens: embed → per layer (attention
//! block, MLP block) → final norm and output head. Every buffer comes from the decoder's
//! arena, reset at the start of the step (`docs/architecture.md`, "Contracts" → "Zero
//! allocations per step").

use core::ops::Range;

use super::build::{glu_quant_bytes, ops_align};
use super::{nonfinite_input, AttentionPath, DecoderLM, Hidden, KvCache, KvDtype, Stage};
use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::kernels::flash;
use crate::mem::Arena;
use crate::model::arch::Activation;
use crate::model::config::{LayerKind, ModelConfig};
use crate::model::weights::Linear;
use crate::ops::{self, Activations, KvRows};
use crate::tensor::{cast_slice, cast_slice_mut};

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
pub(super) fn attention_floats(
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

impl DecoderLM<'_> {
    /// One chunk: at most `prefill_chunk` tokens, fitting in the context (checked by the
    /// caller).
    pub(super) fn step<'o>(
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
