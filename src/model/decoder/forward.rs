//! One forward step of a [`DecoderLM`] over a chunk of tokens: embed → per layer (attention
//! block, MLP block) → final norm and output head. Every buffer comes from the decoder's
//! arena, reset at the start of the step (`docs/architecture.md`, "Contracts" → "Zero
//! allocations per step").

use super::build::{glu_quant_bytes, ops_align};
use super::{nonfinite_input, AttentionPath, DecoderLM, Hidden, KvDtype, Stage};
use crate::error::{Error, Result};
use crate::exec::{Executor, Schedule};
use crate::mem::Arena;
use crate::model::arch::Activation;
use crate::model::config::{LayerKind, ModelConfig};
use crate::model::weights::Linear;
use crate::ops::{self, Activations};
use crate::tensor::{cast_slice, cast_slice_mut};

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
        let path = options.attention;
        let att_floats = attention_floats(c, n, span, path, kv.dtype())
            .ok_or_else(|| Error::resource_exhausted("attention scratch size overflows usize"))?;
        let scores = arena.alloc_slice::<f32>(att_floats)?;
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
            let shape = ops::LayerAttention {
                rows: n,
                pos0: p0,
                heads: nh,
                kv_heads: nkv,
                head_dim: hd,
                capacity: kv.capacity(),
                window: match c.layer_types[l] {
                    LayerKind::Sliding => c.sliding_window,
                    _ => None,
                },
                scale,
                per_head: path == AttentionPath::PerHead,
            };
            let (keys, values) = kv.layer(l);
            ops::attention_layer(exec, &shape, q, keys, values, scores, att);
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
