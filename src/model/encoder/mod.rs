//! Encoder models (the BERT family) for sentence embeddings: [`EncoderWeights`] runs a batch
//! of token sequences to one vector per token and pools them to one vector per sequence;
//! `Encoder` (feature `tokenizer`) adds the sentence-transformers folder around it (tokenizer,
//! pooling, normalization, truncation at `max_seq_length`).
//!
//! The forward pass is transformers' `BertModel` in f32 (Devlin et al. 2019, "BERT"):
//! `x = LN_e(word[id] + position[p] + token_type[0])`; per layer
//! `x = LN_1(x + o(attn(q(x), k(x), v(x))))` then `x = LN_2(x + down(gelu(up(x))))`, every
//! projection with its bias, LayerNorm with weight and bias ([`crate::ops::layer_norm`]),
//! GELU with erf ([`crate::ops::gelu_erf`]) or its tanh form. Attention is bidirectional: each
//! token attends to every token of its own sequence, scaled by `1/sqrt(head_dim)`.
//!
//! Batches: the sequences of a batch are packed one after another into one matrix of
//! `Σ len` rows, so every weight is one GEMM over the whole batch ([`crate::ops::gemm_fused`]
//! for q/k/v, [`crate::ops::gemm`] for the others), and attention runs per (sequence, head)
//! over that sequence's rows only. This is exactly a batch padded to its longest sequence with
//! a padding mask (sentence-transformers' and transformers' layout), without the padded rows:
//! a masked key gets probability 0 there, and a padded query row is never pooled.
//!
//! Work is split over output rows (GEMM), (sequence, head) pairs (attention) and rows (GELU);
//! each value is computed by one chunk in a fixed order, so results are bit-identical for every
//! executor and thread count.

pub mod config;
#[cfg(feature = "tokenizer")]
mod folder;

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

pub use config::{EncoderArch, EncoderConfig, HiddenAct, Pooling};
#[cfg(feature = "tokenizer")]
pub use folder::{Embedded, Encoder, EncoderFiles, EncoderOptions};

use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::format::{TensorSource, TensorView};
use crate::mem::AlignedBlock;
use crate::ops::{self, Activations, Matrix};
use crate::tensor::DType;

/// A matrix as the file stores it, or copied into an aligned block when an f32 matrix is not
/// 4-byte aligned.
#[derive(Debug)]
enum MatBytes<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBlock),
}

/// One weight matrix (`rows × k`, PyTorch's `nn.Linear.weight` layout).
#[derive(Debug)]
struct Mat<'a> {
    name: alloc::string::String,
    dtype: DType,
    rows: usize,
    k: usize,
    bytes: MatBytes<'a>,
}

impl Mat<'_> {
    fn matrix(&self) -> Result<Matrix<'_>> {
        let data = match &self.bytes {
            MatBytes::Borrowed(b) => b,
            MatBytes::Owned(b) => b.as_slice(),
        };
        Matrix::new(self.dtype, self.rows, self.k, data).map_err(|e| e.context(&self.name))
    }
}

/// One BERT layer.
#[derive(Debug)]
struct Layer<'a> {
    q: Mat<'a>,
    k: Mat<'a>,
    v: Mat<'a>,
    o: Mat<'a>,
    up: Mat<'a>,
    down: Mat<'a>,
    q_b: Vec<f32>,
    k_b: Vec<f32>,
    v_b: Vec<f32>,
    o_b: Vec<f32>,
    up_b: Vec<f32>,
    down_b: Vec<f32>,
    ln1_w: Vec<f32>,
    ln1_b: Vec<f32>,
    ln2_w: Vec<f32>,
    ln2_b: Vec<f32>,
}

/// An encoder's weights, checked against its [`EncoderConfig`], and its forward pass.
///
/// Matrices stay where the file put them (f32, f16, bf16 or a quantized type the kernels
/// take); the token embedding is read one row at a time; biases, norms and the position and
/// token-type tables are widened to f32.
#[derive(Debug)]
pub struct EncoderWeights<'a> {
    config: EncoderConfig,
    word: Mat<'a>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    ln_w: Vec<f32>,
    ln_b: Vec<f32>,
    layers: Vec<Layer<'a>>,
}

fn check_shape(name: &str, t: &TensorView<'_>, want: &[usize]) -> Result<()> {
    if t.shape.dims() != want {
        return Err(Error::data_loss(format_args!(
            "tensor {name:?} has shape {:?}, the config says {want:?}",
            t.shape.dims()
        )));
    }
    Ok(())
}

fn matrix<'a>(src: &dyn TensorSource<'a>, name: &str, rows: usize, k: usize) -> Result<Mat<'a>> {
    let t = src.tensor(name)?;
    check_shape(name, &t, &[rows, k])?;
    let bytes = if t.dtype == DType::F32 && t.data.as_ptr() as usize % 4 != 0 {
        MatBytes::Owned(AlignedBlock::try_from_slice(t.data).map_err(|e| e.context(name))?)
    } else {
        MatBytes::Borrowed(t.data)
    };
    let m = Mat { name: name.into(), dtype: t.dtype, rows, k, bytes };
    m.matrix()?;
    Ok(m)
}

fn vector(src: &dyn TensorSource<'_>, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
    let t = src.tensor(name)?;
    check_shape(name, &t, dims)?;
    let mut v = vec![0f32; dims.iter().product()];
    t.dequantize_into(&mut v).map_err(|e| e.context(name))?;
    Ok(v)
}

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

fn add_bias(y: &mut [f32], bias: &[f32]) {
    for row in y.chunks_exact_mut(bias.len()) {
        ops::add_assign(row, bias);
    }
}

impl<'a> EncoderWeights<'a> {
    /// Looks the tensors up in `src` by transformers' names (`embeddings.word_embeddings.weight`,
    /// `encoder.layer.N.attention.self.query.weight`, ...; with a `bert.` prefix when the file
    /// was saved from a task model such as `BertForMaskedLM`) and checks their shapes.
    /// The pooler (`pooler.dense`) and task heads are not read.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming a missing tensor; [`crate::Code::DataLoss`] for a shape
    /// that disagrees with the config; [`crate::Code::Unimplemented`] for a dtype the kernels
    /// do not take; the errors of [`EncoderConfig::validate`].
    pub fn load(config: EncoderConfig, src: &dyn TensorSource<'a>) -> Result<Self> {
        config.validate()?;
        let prefix = if src.tensor("embeddings.word_embeddings.weight").is_err()
            && src.tensor("bert.embeddings.word_embeddings.weight").is_ok()
        {
            "bert."
        } else {
            ""
        };
        let n = |s: &str| alloc::format!("{prefix}{s}");
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let word = matrix(src, &n("embeddings.word_embeddings.weight"), config.vocab_size, h)?;
        let position = vector(
            src,
            &n("embeddings.position_embeddings.weight"),
            &[config.max_position_embeddings, h],
        )?;
        let token_type = if config.type_vocab_size > 0 {
            vector(
                src,
                &n("embeddings.token_type_embeddings.weight"),
                &[config.type_vocab_size, h],
            )?
        } else {
            Vec::new()
        };
        let ln_w = vector(src, &n("embeddings.LayerNorm.weight"), &[h])?;
        let ln_b = vector(src, &n("embeddings.LayerNorm.bias"), &[h])?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let p = |s: &str| n(&alloc::format!("encoder.layer.{l}.{s}"));
            layers.push(Layer {
                q: matrix(src, &p("attention.self.query.weight"), h, h)?,
                k: matrix(src, &p("attention.self.key.weight"), h, h)?,
                v: matrix(src, &p("attention.self.value.weight"), h, h)?,
                o: matrix(src, &p("attention.output.dense.weight"), h, h)?,
                up: matrix(src, &p("intermediate.dense.weight"), i, h)?,
                down: matrix(src, &p("output.dense.weight"), h, i)?,
                q_b: vector(src, &p("attention.self.query.bias"), &[h])?,
                k_b: vector(src, &p("attention.self.key.bias"), &[h])?,
                v_b: vector(src, &p("attention.self.value.bias"), &[h])?,
                o_b: vector(src, &p("attention.output.dense.bias"), &[h])?,
                up_b: vector(src, &p("intermediate.dense.bias"), &[i])?,
                down_b: vector(src, &p("output.dense.bias"), &[h])?,
                ln1_w: vector(src, &p("attention.output.LayerNorm.weight"), &[h])?,
                ln1_b: vector(src, &p("attention.output.LayerNorm.bias"), &[h])?,
                ln2_w: vector(src, &p("output.LayerNorm.weight"), &[h])?,
                ln2_b: vector(src, &p("output.LayerNorm.bias"), &[h])?,
            });
        }
        Ok(EncoderWeights { config, word, position, token_type, ln_w, ln_b, layers })
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

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
        let mut spans = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            spans.push(start..start + s.len());
            start += s.len();
        }

        // embeddings
        let word = self.word.matrix()?;
        let mut x = vec![0f32; n * h];
        let rows = seqs.iter().flat_map(|s| s.iter().enumerate());
        for (row, (p, &id)) in x.chunks_exact_mut(h).zip(rows) {
            ops::dequantize_row(&word, id as usize, row);
            ops::add_assign(row, &self.position[p * h..(p + 1) * h]);
            if !self.token_type.is_empty() {
                ops::add_assign(row, &self.token_type[..h]);
            }
            ops::layer_norm_in_place(row, &self.ln_w, &self.ln_b, c.layer_norm_eps);
        }

        let (mut q, mut k, mut v) = (vec![0f32; n * h], vec![0f32; n * h], vec![0f32; n * h]);
        let (mut ctx, mut tmp, mut up) =
            (vec![0f32; n * h], vec![0f32; n * h], vec![0f32; n * inter]);
        let f32_acts = Activations::F32;
        for layer in &self.layers {
            let (wq, wk, wv) = (layer.q.matrix()?, layer.k.matrix()?, layer.v.matrix()?);
            ops::gemm_fused(
                exec,
                None,
                [&wq, &wk, &wv],
                &x,
                n,
                [&mut q, &mut k, &mut v],
                f32_acts,
                &mut [],
            )?;
            add_bias(&mut q, &layer.q_b);
            add_bias(&mut k, &layer.k_b);
            add_bias(&mut v, &layer.v_b);
            self.attention(exec, &spans, &q, &k, &v, &mut ctx);
            ops::gemm(exec, None, &layer.o.matrix()?, &ctx, n, &mut tmp, f32_acts, &mut [])?;
            add_bias(&mut tmp, &layer.o_b);
            for (xr, tr) in x.chunks_exact_mut(h).zip(tmp.chunks_exact(h)) {
                ops::add_assign(xr, tr);
                ops::layer_norm_in_place(xr, &layer.ln1_w, &layer.ln1_b, c.layer_norm_eps);
            }
            ops::gemm(exec, None, &layer.up.matrix()?, &x, n, &mut up, f32_acts, &mut [])?;
            self.bias_act(exec, &mut up, &layer.up_b);
            ops::gemm(exec, None, &layer.down.matrix()?, &up, n, &mut tmp, f32_acts, &mut [])?;
            add_bias(&mut tmp, &layer.down_b);
            for (xr, tr) in x.chunks_exact_mut(h).zip(tmp.chunks_exact(h)) {
                ops::add_assign(xr, tr);
                ops::layer_norm_in_place(xr, &layer.ln2_w, &layer.ln2_b, c.layer_norm_eps);
            }
        }
        Ok(x)
    }

    /// `y = act(y + bias)` row by row, the rows split across `exec`.
    fn bias_act(&self, exec: &dyn Executor, y: &mut [f32], bias: &[f32]) {
        let w = bias.len();
        let rows = y.len() / w;
        let out = SharedOut(y.as_mut_ptr());
        let act = self.config.hidden_act;
        let body = |range: Range<usize>| {
            for r in range {
                // SAFETY: row `r` of `y` (`rows * w` floats) belongs to this chunk alone.
                let row = unsafe { out.slice(r * w, w) };
                ops::add_assign(row, bias);
                match act {
                    HiddenAct::GeluErf => ops::gelu_erf_in_place(row),
                    HiddenAct::GeluTanh => {
                        for e in row.iter_mut() {
                            *e = ops::gelu_tanh(*e);
                        }
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
    /// (`n × hidden`, head `j` in columns `j*d .. (j+1)*d`).
    fn attention(
        &self,
        exec: &dyn Executor,
        spans: &[Range<usize>],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        ctx: &mut [f32],
    ) {
        let (h, heads) = (self.config.hidden_size, self.config.num_heads);
        let d = h / heads;
        let scale = 1.0 / libm::sqrtf(d as f32);
        let out = SharedOut(ctx.as_mut_ptr());
        let body = |items: Range<usize>| {
            let mut keys = Vec::new();
            let mut values = Vec::new();
            let mut scores = Vec::new();
            for item in items {
                let (span, head) = (&spans[item / heads], item % heads);
                let len = span.len();
                let cols = head * d..(head + 1) * d;
                keys.clear();
                values.clear();
                for r in span.clone() {
                    keys.extend_from_slice(&k[r * h..][cols.clone()]);
                    values.extend_from_slice(&v[r * h..][cols.clone()]);
                }
                scores.resize(len, 0f32);
                for r in span.clone() {
                    // SAFETY: row `r`'s columns of head `head` belong to this item alone
                    // (items are distinct (sequence, head) pairs; sequences own distinct rows).
                    let o = unsafe { out.slice(r * h + head * d, d) };
                    let qr = &q[r * h..][cols.clone()];
                    ops::attention_head(qr, &keys, &values, len, scale, &mut scores, o);
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

/// Scales `v` to unit L2 norm: `v / max(‖v‖₂, 1e-12)` (PyTorch's `F.normalize`), the norm
/// summed in f64.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = libm::sqrt(v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>()).max(1e-12);
    for x in v.iter_mut() {
        *x = (*x as f64 / norm) as f32;
    }
}
