//! The encoder's forward pass: embeddings, the layers (one GEMM per weight over the packed
//! batch, attention per sequence and head), pooling and normalization.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::config::{HiddenAct, Pooling};
use super::plan::arena_floats;
use super::{l2_normalize, EncoderWeights};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::ops;

/// A raw pointer shared by the chunks of a parallel loop, each writing its own elements.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the loops below write disjoint elements from different chunks and read none that
// another chunk writes.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The slice `[start, start + len)` of the buffer.
    ///
    /// # Safety
    ///
    /// The range is inside the buffer and no other live reference covers it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        // SAFETY: in bounds and unaliased (caller contract).
        unsafe { core::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Runs `body` over rows `0..rows`, split across `exec` when it has several threads (each
/// row's arithmetic is the same whichever chunk runs it).
fn for_rows(exec: &dyn Executor, rows: usize, body: &(dyn Fn(Range<usize>) + Sync)) {
    if exec.threads() > 1 && rows > 1 {
        exec.parallel_for(0..rows, exec.schedule(), body);
    } else {
        body(0..rows);
    }
}

/// `x = LN(x + (t + bias))` row by row (`bias` may be empty; `t` gets the bias added),
/// LayerNorm with weight `w`, bias `b`, `eps`; the rows split across `exec`.
#[allow(clippy::too_many_arguments)]
fn residual_norm(
    exec: &dyn Executor,
    x: &mut [f32],
    t: &mut [f32],
    bias: &[f32],
    w: &[f32],
    b: &[f32],
    eps: f32,
) {
    let h = w.len();
    let (xp, tp) = (SharedOut(x.as_mut_ptr()), SharedOut(t.as_mut_ptr()));
    for_rows(exec, x.len() / h, &|range: Range<usize>| {
        for r in range {
            // SAFETY: row `r` of `x` and of `t` (as long as `x`) belongs to this chunk alone.
            let (xr, tr) = unsafe { (xp.slice(r * h, h), tp.slice(r * h, h)) };
            if !bias.is_empty() {
                ops::add_assign(tr, bias);
            }
            ops::add_assign(xr, tr);
            ops::layer_norm_in_place(xr, w, b, eps);
        }
    });
}

impl EncoderWeights<'_> {
    /// The last hidden state of a batch: for sequences `seqs` (token ids, each
    /// `1..=max_position_embeddings` long, token type 0), their token vectors one after
    /// another, `Σ len × hidden_size` floats, sequence `s` at rows `offset(s) .. offset(s) +
    /// len(s)` (transformers' `last_hidden_state` without the padded rows).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for an empty batch, an empty sequence, one longer than
    /// `max_position_embeddings` or an id outside the vocabulary; the errors of the matrix
    /// products ([`crate::ops::gemm`]).
    pub fn hidden_states(&self, exec: &dyn Executor, seqs: &[&[u32]]) -> Result<Vec<f32>> {
        let c = &self.config;
        if seqs.is_empty() {
            return Err(Error::invalid_argument("an empty batch"));
        }
        for (s, ids) in seqs.iter().enumerate() {
            if ids.is_empty() || ids.len() > c.max_position_embeddings {
                return Err(Error::invalid_argument(format_args!(
                    "sequence {s} has {} tokens; the model takes 1 to {}",
                    ids.len(),
                    c.max_position_embeddings
                )));
            }
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= c.vocab_size) {
                return Err(Error::invalid_argument(format_args!(
                    "sequence {s}: token id {id} is outside the vocabulary of {}",
                    c.vocab_size
                )));
            }
        }
        let (h, inter) = (c.hidden_size, c.intermediate_size);
        let n: usize = seqs.iter().map(|s| s.len()).sum();
        let longest = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut spans = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            spans.push(start..start + s.len());
            start += s.len();
        }

        // One arena (EncoderMemoryPlan::batch): x first, so that it is returned in place.
        let total = arena_floats(c, n, longest)
            .ok_or_else(|| Error::invalid_argument("the batch is too large"))?;
        let mut arena = vec![0f32; total];
        let gated = c.hidden_act == HiddenAct::SwiGlu;
        let (x, rest) = arena.split_at_mut(n * h);
        let (q, rest) = rest.split_at_mut(n * h);
        let (k, rest) = rest.split_at_mut(n * h);
        let (v, rest) = rest.split_at_mut(n * h);
        let (ctx, rest) = rest.split_at_mut(n * h);
        let (tmp, rest) = rest.split_at_mut(n * h);
        let (kv_heads, rest) = rest.split_at_mut(2 * n * h);
        let (scores, rest) = rest.split_at_mut(c.num_heads * n);
        let (up, rest) = rest.split_at_mut(n * inter);
        let (gate, rest) = rest.split_at_mut(if gated { n * inter } else { 0 });
        let half = self.inv_freq.len();
        let (cos, sin) = rest.split_at_mut(longest * half);
        let (mut up, mut gate) = (up, gate);

        // embeddings
        let word = self.word.matrix()?;
        let rows = seqs.iter().flat_map(|s| s.iter().enumerate());
        for (row, (p, &id)) in x.chunks_exact_mut(h).zip(rows) {
            ops::dequantize_row(&word, id as usize, row);
            if !self.position.is_empty() {
                ops::add_assign(row, &self.position[p * h..(p + 1) * h]);
            }
            if !self.token_type.is_empty() {
                ops::add_assign(row, &self.token_type[..h]);
            }
            ops::layer_norm_in_place(row, &self.ln_w, &self.ln_b, c.layer_norm_eps);
        }

        // RoPE: cosines and sines of positions 0 .. the longest sequence
        if half > 0 {
            for p in 0..longest {
                let r = p * half..(p + 1) * half;
                ops::rope_cos_sin(p, &self.inv_freq, &mut cos[r.clone()], &mut sin[r]);
            }
        }

        let act = self.activations;
        let mut scratch = vec![0u8; ops::scratch_bytes(h.max(inter), n, self.scratch_act())];
        for layer in &self.layers {
            let (wq, wk, wv) = (layer.q.matrix()?, layer.k.matrix()?, layer.v.matrix()?);
            ops::gemm_fused(
                exec,
                None,
                [&wq, &wk, &wv],
                x,
                n,
                [&mut *q, &mut *k, &mut *v],
                act,
                &mut scratch,
            )?;
            // Biases and RoPE, row by row.
            let (qp, kp, vp) =
                (SharedOut(q.as_mut_ptr()), SharedOut(k.as_mut_ptr()), SharedOut(v.as_mut_ptr()));
            let (cos, sin, sp) = (&*cos, &*sin, &spans[..]);
            for_rows(exec, n, &|range: Range<usize>| {
                for r in range {
                    // SAFETY: row `r` of `q`, `k`, `v` (`n × h` each) belongs to this chunk.
                    let (qr, kr, vr) =
                        unsafe { (qp.slice(r * h, h), kp.slice(r * h, h), vp.slice(r * h, h)) };
                    for (y, b) in [(&mut *qr, &layer.q_b), (&mut *kr, &layer.k_b), (vr, &layer.v_b)]
                    {
                        if !b.is_empty() {
                            ops::add_assign(y, b);
                        }
                    }
                    if half > 0 {
                        // Row `r`'s position in its sequence.
                        let p = r - sp[sp.partition_point(|s| s.end <= r)].start;
                        let (cs, sn) = (&cos[p * half..][..half], &sin[p * half..][..half]);
                        ops::rope(qr, cs, sn, ops::RopeLayout::RotateHalf);
                        ops::rope(kr, cs, sn, ops::RopeLayout::RotateHalf);
                    }
                }
            });
            self.attention(exec, &spans, q, k, v, kv_heads, scores, ctx);
            let o_act = act.for_other_input();
            ops::gemm(exec, None, &layer.o.matrix()?, ctx, n, tmp, o_act, &mut scratch)?;
            residual_norm(exec, x, tmp, &layer.o_b, &layer.ln1_w, &layer.ln1_b, c.layer_norm_eps);
            match &layer.gate {
                None => {
                    let w_up = layer.up.matrix()?;
                    ops::gemm(exec, None, &w_up, x, n, up, act, &mut scratch)?;
                    self.bias_act(exec, up, &layer.up_b, &[]);
                }
                Some(g) => {
                    let (w_up, w_gate) = (layer.up.matrix()?, g.matrix()?);
                    ops::gemm_fused(
                        exec,
                        None,
                        [&w_up, &w_gate],
                        x,
                        n,
                        [&mut *up, &mut *gate],
                        act,
                        &mut scratch,
                    )?;
                    // gate ← silu(gate) * up, then `up` names the product for `down`.
                    self.bias_act(exec, gate, &layer.up_b, up);
                    core::mem::swap(&mut up, &mut gate);
                }
            }
            let down_act = act.for_other_input();
            ops::gemm(exec, None, &layer.down.matrix()?, up, n, tmp, down_act, &mut scratch)?;
            residual_norm(
                exec,
                x,
                tmp,
                &layer.down_b,
                &layer.ln2_w,
                &layer.ln2_b,
                c.layer_norm_eps,
            );
        }
        arena.truncate(n * h);
        Ok(arena)
    }

    /// `y = act(y + bias)` row by row (`bias` may be empty), or for the gated MLP (`up`
    /// not empty, `y` the gate) `y = silu(y) * up`; the rows split across `exec`.
    fn bias_act(&self, exec: &dyn Executor, y: &mut [f32], bias: &[f32], up: &[f32]) {
        let w = self.config.intermediate_size;
        let rows = y.len() / w;
        let out = SharedOut(y.as_mut_ptr());
        let act = self.config.hidden_act;
        let body = |range: Range<usize>| {
            for r in range {
                // SAFETY: row `r` of `y` (`rows * w` floats) belongs to this chunk alone.
                let row = unsafe { out.slice(r * w, w) };
                match act {
                    HiddenAct::GeluErf => ops::bias_gelu_erf(row, bias),
                    HiddenAct::GeluTanh => {
                        if !bias.is_empty() {
                            ops::add_assign(row, bias);
                        }
                        for e in row.iter_mut() {
                            *e = ops::gelu_tanh(*e);
                        }
                    }
                    HiddenAct::SwiGlu => {
                        if !bias.is_empty() {
                            ops::add_assign(row, bias);
                        }
                        ops::swiglu(row, &up[r * w..(r + 1) * w])
                    }
                }
            }
        };
        if exec.threads() > 1 && rows > 1 {
            exec.parallel_for(0..rows, exec.schedule(), &body);
        } else {
            body(0..rows);
        }
    }

    /// Bidirectional attention of every sequence (`spans`: its rows) and head, into `ctx`
    /// (`n × hidden`, head `j` in columns `j*d .. (j+1)*d`). Where the kernels have a body for
    /// the shape ([`ops::BidirAttention`]: AVX-512, heads a multiple of 16 wide, sequences of
    /// up to 512 tokens) each (sequence, head) item runs as two small products around the
    /// softmax, its keys transposed into its part of `kv_heads`. Otherwise each item first
    /// copies its keys and values into `kv_heads` (`2 × n × hidden`: keys then values, head
    /// `j`'s rows at `j × n × d`, so one item's rows are contiguous) and runs
    /// [`ops::attention_head`] per query row with its scores in `scores` (`heads × n`, head `j`
    /// at `j × n`). Items write disjoint parts of all three.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        exec: &dyn Executor,
        spans: &[Range<usize>],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        kv_heads: &mut [f32],
        scores: &mut [f32],
        ctx: &mut [f32],
    ) {
        let (h, heads) = (self.config.hidden_size, self.config.num_heads);
        let d = h / heads;
        let n = q.len() / h;
        let scale = 1.0 / libm::sqrtf(d as f32);
        let out = SharedOut(ctx.as_mut_ptr());
        let kv = SharedOut(kv_heads.as_mut_ptr());
        let sc = SharedOut(scores.as_mut_ptr());
        let longest = spans.iter().map(|s| s.len()).max().unwrap_or(0);
        let fast = ops::BidirAttention::for_shape(d, longest);
        let body = |items: Range<usize>| {
            for item in items {
                let (span, head) = (&spans[item / heads], item % heads);
                let len = span.len();
                let cols = head * d..(head + 1) * d;
                let at = head * n * d + span.start * d;
                if let Some(f) = &fast {
                    let first = span.start * h + head * d;
                    // SAFETY: the item's rows of head `head` (`len` rows of `d` floats, `h`
                    // apart, from `first`) are inside `q`, `k`, `v` (`n × h` each) and `ctx`,
                    // whose columns of this head in these rows belong to this item alone, as
                    // do the `len × d` floats of the key copy at `at` (its scratch); `len` is
                    // at most `longest` and `d` the one `for_shape` took.
                    unsafe {
                        let (qp, kp) = (q.as_ptr().add(first), k.as_ptr().add(first));
                        let (vp, o) = (v.as_ptr().add(first), out.0.add(first));
                        f.run(qp, kp, vp, o, h, len, d, scale, kv.slice(at, len * d));
                    }
                    continue;
                }
                // SAFETY: this item's rows of head `head` in the head-major copies (keys at
                // `at`, values `n × h` further) and its scores belong to it alone: items are
                // distinct (sequence, head) pairs and sequences own distinct rows.
                let (keys, values, s) = unsafe {
                    (
                        kv.slice(at, len * d),
                        kv.slice(n * h + at, len * d),
                        sc.slice(head * n + span.start, len),
                    )
                };
                for (j, r) in span.clone().enumerate() {
                    keys[j * d..(j + 1) * d].copy_from_slice(&k[r * h..][cols.clone()]);
                    values[j * d..(j + 1) * d].copy_from_slice(&v[r * h..][cols.clone()]);
                }
                for r in span.clone() {
                    // SAFETY: row `r`'s columns of head `head` belong to this item alone.
                    let o = unsafe { out.slice(r * h + head * d, d) };
                    let qr = &q[r * h..][cols.clone()];
                    ops::attention_head(qr, keys, values, len, scale, s, o);
                }
            }
        };
        let items = spans.len() * heads;
        if exec.threads() > 1 && items > 1 {
            exec.parallel_for(0..items, exec.schedule(), &body);
        } else {
            body(0..items);
        }
    }

    /// One vector per sequence: the hidden states of [`EncoderWeights::hidden_states`] pooled
    /// (`pooling`) and, with `normalize`, scaled to unit L2 norm (`v / max(‖v‖, 1e-12)`, as
    /// PyTorch's `F.normalize`). Mean pooling sums in f64.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::hidden_states`].
    pub fn embed_ids(
        &self,
        exec: &dyn Executor,
        seqs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let hidden = self.hidden_states(exec, seqs)?;
        let h = self.config.hidden_size;
        let mut start = 0;
        let mut out = Vec::with_capacity(seqs.len());
        for s in seqs {
            let rows = &hidden[start * h..(start + s.len()) * h];
            start += s.len();
            let mut e = match pooling {
                Pooling::Cls => rows[..h].to_vec(),
                Pooling::Last => rows[rows.len() - h..].to_vec(),
                Pooling::Mean => {
                    let mut sum = vec![0f64; h];
                    for row in rows.chunks_exact(h) {
                        for (a, &x) in sum.iter_mut().zip(row) {
                            *a += x as f64;
                        }
                    }
                    sum.iter().map(|&a| (a / s.len() as f64) as f32).collect()
                }
            };
            if normalize {
                l2_normalize(&mut e);
            }
            out.push(e);
        }
        Ok(out)
    }
}
