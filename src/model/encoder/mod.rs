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
pub use folder::{wordpiece_from_gguf, Embedded, Encoder, EncoderFiles, EncoderOptions};

use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::format::{TensorSource, TensorView};
use crate::mem::AlignedBlock;
use crate::model::WeightFormat;
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
    /// Bytes loading converts or copies this matrix into (0: used in place).
    planned: usize,
}

impl Mat<'_> {
    /// Bytes this matrix owns (converted or copied at load); 0 when it borrows the file.
    fn owned_bytes(&self) -> usize {
        match &self.bytes {
            MatBytes::Borrowed(_) => 0,
            MatBytes::Owned(b) => b.len(),
        }
    }

    fn matrix(&self) -> Result<Matrix<'_>> {
        let data = match &self.bytes {
            MatBytes::Borrowed(b) => b,
            MatBytes::Owned(b) => b.as_slice(),
        };
        Matrix::new(self.dtype, self.rows, self.k, data).map_err(|e| e.context(&self.name))
    }
}

/// One encoder layer. Absent biases are empty vectors.
#[derive(Debug)]
struct Layer<'a> {
    q: Mat<'a>,
    k: Mat<'a>,
    v: Mat<'a>,
    o: Mat<'a>,
    up: Mat<'a>,
    /// The SwiGLU gate (nomic-bert), `None` for BERT's plain MLP.
    gate: Option<Mat<'a>>,
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
/// take) unless [`WeightFormat::Q8_0`] asks for them quantized at load; the token embedding
/// is read one row at a time; biases, norms and the position and token-type tables are
/// widened to f32.
#[derive(Debug)]
pub struct EncoderWeights<'a> {
    config: EncoderConfig,
    word: Mat<'a>,
    /// Learned absolute positions (`max_position_embeddings × hidden`); empty with RoPE.
    position: Vec<f32>,
    token_type: Vec<f32>,
    ln_w: Vec<f32>,
    ln_b: Vec<f32>,
    layers: Vec<Layer<'a>>,
    /// RoPE inverse frequencies (`head_dim / 2`); empty without RoPE.
    inv_freq: Vec<f32>,
    activations: Activations,
    /// Bytes of the matrices converted or copied at load.
    converted: usize,
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

/// Bytes of a matrix `rows × k` kept under `format` when the file stores it as `dtype`:
/// `Some(bytes)` when loading copies it into a buffer of its own (Q8_0 conversion of an
/// f32 / f16 / bf16 matrix whose rows are a multiple of 32 long, or an f32 matrix whose
/// data is not 4-byte aligned), `None` when it is used in place.
fn converted_bytes(
    dtype: DType,
    rows: usize,
    k: usize,
    aligned: bool,
    format: WeightFormat,
) -> Result<Option<(DType, usize)>> {
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if format == WeightFormat::Q8_0 && float && k % 32 == 0 {
        return Ok(Some((DType::Q8_0, DType::Q8_0.row_bytes(k)? * rows)));
    }
    if dtype == DType::F32 && !aligned {
        return Ok(Some((DType::F32, rows * k * 4)));
    }
    Ok(None)
}

/// How the loader keeps matrices: `format`, and with `dry` (a memory plan) nothing is
/// converted or copied; the bytes that would be are counted in [`Mat::planned`].
#[derive(Clone, Copy)]
struct Keep {
    format: WeightFormat,
    dry: bool,
}

/// Rows `part` of the `rows × k` matrix `name`, kept as `keep` says.
fn matrix_part<'a>(
    src: &dyn TensorSource<'a>,
    name: &str,
    (rows, k): (usize, usize),
    part: Range<usize>,
    keep: Keep,
) -> Result<Mat<'a>> {
    let t = src.tensor(name)?;
    check_shape(name, &t, &[rows, k])?;
    let row_bytes = t.dtype.row_bytes(k).map_err(|e| e.context(name))?;
    let data = &t.data[part.start * row_bytes..part.end * row_bytes];
    let n = part.len();
    let aligned = data.as_ptr() as usize % 4 == 0;
    let conversion = converted_bytes(t.dtype, n, k, aligned, keep.format)?;
    let planned = conversion.map_or(0, |(_, bytes)| bytes);
    let (dtype, bytes) = match conversion {
        None => (t.dtype, MatBytes::Borrowed(data)),
        Some(_) if keep.dry => {
            let m = Mat {
                name: name.into(),
                dtype: t.dtype,
                rows: n,
                k,
                bytes: MatBytes::Borrowed(data),
                planned,
            };
            return Ok(m);
        }
        Some((DType::Q8_0, total)) => {
            let mut block = AlignedBlock::try_new(total).map_err(|e| e.context(name))?;
            let mut src_block = None;
            let src_data = if aligned {
                data
            } else {
                src_block.insert(AlignedBlock::try_from_slice(data)?).as_slice()
            };
            let m = Matrix::new(t.dtype, n, k, src_data).map_err(|e| e.context(name))?;
            let mut row = vec![0f32; k];
            let out_row = DType::Q8_0.row_bytes(k)?;
            for (r, out) in block.as_mut_slice().chunks_exact_mut(out_row).enumerate() {
                ops::dequantize_row(&m, r, &mut row);
                crate::quant::quantize_row_q8_0(&row, out).map_err(|e| e.context(name))?;
            }
            (DType::Q8_0, MatBytes::Owned(block))
        }
        Some((dt, _)) => {
            (dt, MatBytes::Owned(AlignedBlock::try_from_slice(data).map_err(|e| e.context(name))?))
        }
    };
    let m = Mat { name: name.into(), dtype, rows: n, k, bytes, planned };
    m.matrix()?;
    Ok(m)
}

fn matrix<'a>(
    src: &dyn TensorSource<'a>,
    name: &str,
    rows: usize,
    k: usize,
    keep: Keep,
) -> Result<Mat<'a>> {
    matrix_part(src, name, (rows, k), 0..rows, keep)
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
    if bias.is_empty() {
        return;
    }
    for row in y.chunks_exact_mut(bias.len()) {
        ops::add_assign(row, bias);
    }
}

/// What an encoder keeps in memory besides the file's pages (which the weights borrow in
/// place), in bytes: [`EncoderWeights::memory_plan`]. Exact: the loaded weights report
/// [`EncoderWeights::owned_bytes`] = [`EncoderMemoryPlan::weights`], and a batch of the planned
/// shape allocates [`EncoderMemoryPlan::batch`] bytes in [`EncoderWeights::hidden_states`]
/// (tests/encoder.rs counts them with a counting global allocator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EncoderMemoryPlan {
    /// Matrices converted at load ([`WeightFormat::Q8_0`]) or copied (a misaligned f32
    /// matrix).
    pub converted: usize,
    /// The f32 vectors and tables: norms, biases, the position and token-type embeddings,
    /// the RoPE inverse frequencies.
    pub vectors: usize,
    /// Tokens of the planned batch (sequences × longest).
    pub batch_tokens: usize,
    /// The working memory of one batch of that many tokens, alive while it runs:
    /// [`EncoderWeights::hidden_states`]' one f32 arena (the residual stream, q, k, v, the
    /// attention context, a head-major copy of k and v, the attention scores, the MLP's
    /// `intermediate_size`-wide rows (two for a gated MLP), a temporary, the RoPE cosines and
    /// sines of the longest sequence), the sequences' row ranges and, with int8 activations,
    /// their int8 scratch ([`crate::ops::scratch_bytes`]). The returned hidden state is the
    /// arena's first `tokens × hidden` floats, so pooling adds only the pooled vectors.
    pub batch: usize,
}

impl EncoderMemoryPlan {
    /// Bytes the loaded weights hold: `converted + vectors`.
    pub fn weights(&self) -> usize {
        self.converted + self.vectors
    }

    /// Peak bytes while a batch runs: `weights() + batch`.
    pub fn peak(&self) -> usize {
        self.weights() + self.batch
    }
}

/// f32 values of the vectors and tables a family's weights keep (see
/// [`EncoderMemoryPlan::vectors`]).
fn vector_floats(c: &EncoderConfig) -> usize {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let tables = c.type_vocab_size * h + 2 * h;
    match c.arch {
        EncoderArch::Bert => tables + c.max_position_embeddings * h + c.num_layers * (9 * h + i),
        EncoderArch::NomicBert => tables + c.num_layers * 4 * h + c.head_dim() / 2,
    }
}

/// The f32 arena of [`EncoderWeights::hidden_states`] for `tokens` tokens, the longest
/// sequence `longest` long: x, q, k, v, ctx, tmp, k and v head-major (`8 × tokens × hidden`),
/// scores (`heads × tokens`), the MLP rows (`tokens × intermediate`, twice when gated), RoPE
/// cosines and sines (`2 × longest × head_dim / 2`, RoPE only).
fn arena_floats(c: &EncoderConfig, tokens: usize, longest: usize) -> Option<usize> {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let mlp = if c.hidden_act == HiddenAct::SwiGlu { 2 * i } else { i };
    let rope = if c.rope_theta.is_some() { longest.checked_mul(c.head_dim())? } else { 0 };
    tokens.checked_mul(8 * h + c.num_heads + mlp)?.checked_add(rope)
}

/// Bytes [`EncoderWeights::hidden_states`] allocates for a batch: the arena, the row ranges,
/// the int8 scratch.
fn batch_bytes(
    c: &EncoderConfig,
    tokens: usize,
    seqs: usize,
    longest: usize,
    act: Activations,
) -> Result<usize> {
    let overflow = || Error::invalid_argument("batch sizes overflow");
    let arena = arena_floats(c, tokens, longest).ok_or_else(overflow)?;
    let ranges = seqs.checked_mul(core::mem::size_of::<Range<usize>>()).ok_or_else(overflow)?;
    let k = c.hidden_size.max(c.intermediate_size);
    let scratch = ops::scratch_bytes(k, tokens, act);
    arena
        .checked_mul(4)
        .and_then(|a| a.checked_add(ranges)?.checked_add(scratch))
        .ok_or_else(overflow)
}

/// Where a family's tensors are, by name.
#[derive(Clone, Copy)]
enum Names {
    /// transformers' `BertModel` (`prefix` `""` or `"bert."`).
    Bert(&'static str),
    /// Nomic's `NomicBertModel` as saved (`encoder.layers.N.attn.Wqkv`, ...).
    Nomic,
    /// llama.cpp's GGUF names (`token_embd`, `blk.N.attn_q`, ...).
    Gguf,
}

impl<'a> EncoderWeights<'a> {
    /// Looks the tensors up in `src` and checks their shapes, with matrices as stored
    /// ([`EncoderWeights::load_with`] with [`WeightFormat::AsStored`]).
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::load_with`].
    pub fn load(config: EncoderConfig, src: &dyn TensorSource<'a>) -> Result<Self> {
        Self::load_with(config, src, WeightFormat::AsStored)
    }

    /// Looks the tensors up in `src` and checks their shapes; `format` says whether float
    /// matrices are kept as stored or quantized to Q8_0 here (then the products run with
    /// int8 activations, see [`EncoderWeights::with_activations`]).
    ///
    /// Names: BERT by transformers' names (`embeddings.word_embeddings.weight`,
    /// `encoder.layer.N.attention.self.query.weight`, ...; with a `bert.` prefix when the file
    /// was saved from a task model such as `BertForMaskedLM`); nomic-bert by the names its
    /// checkpoints use (`embeddings.word_embeddings.weight`, `emb_ln.*`,
    /// `encoder.layers.N.attn.Wqkv.weight` (q, k, v stacked by rows), `attn.out_proj`,
    /// `mlp.fc11` (up), `mlp.fc12` (gate), `mlp.fc2` (down), `norm1`, `norm2`). The pooler
    /// and task heads are not read.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming a missing tensor; [`crate::Code::DataLoss`] for a shape
    /// that disagrees with the config; [`crate::Code::Unimplemented`] for a dtype the kernels
    /// do not take; the errors of [`EncoderConfig::validate`].
    pub fn load_with(
        config: EncoderConfig,
        src: &dyn TensorSource<'a>,
        format: WeightFormat,
    ) -> Result<Self> {
        let mut w = Self::load_keep(config, src, Keep { format, dry: false })?;
        w.converted = w.matrices().map(|m| m.owned_bytes()).sum();
        Ok(w)
    }

    fn load_keep(config: EncoderConfig, src: &dyn TensorSource<'a>, keep: Keep) -> Result<Self> {
        config.validate()?;
        let format = keep;
        let names = match config.arch {
            _ if src.tensor("token_embd.weight").is_ok() => Names::Gguf,
            EncoderArch::NomicBert => Names::Nomic,
            EncoderArch::Bert => {
                if src.tensor("embeddings.word_embeddings.weight").is_err()
                    && src.tensor("bert.embeddings.word_embeddings.weight").is_ok()
                {
                    Names::Bert("bert.")
                } else {
                    Names::Bert("")
                }
            }
        };
        match names {
            Names::Bert(prefix) => Self::load_bert(&config, src, prefix, format),
            Names::Nomic => Self::load_nomic(&config, src, format),
            Names::Gguf => Self::load_gguf(&config, src, format),
        }
    }

    /// What an encoder keeps in memory besides the file's pages, before it is built: the
    /// weights loaded from `src` under `format` and one batch of at most `batch_seqs`
    /// sequences of at most `longest` tokens each (see [`EncoderMemoryPlan`]). Runs the
    /// loader's checks without converting anything.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::load_with`]; [`crate::Code::InvalidArgument`] for a batch of 0
    /// sequences or 0 tokens, or sizes that overflow.
    pub fn memory_plan(
        config: &EncoderConfig,
        src: &dyn TensorSource<'a>,
        format: WeightFormat,
        activations: Activations,
        batch_seqs: usize,
        longest: usize,
    ) -> Result<EncoderMemoryPlan> {
        if batch_seqs == 0 || longest == 0 {
            return Err(Error::invalid_argument("a memory plan for an empty batch"));
        }
        let dry = Self::load_keep(config.clone(), src, Keep { format, dry: true })?;
        let converted = dry.matrices().map(|m| m.planned).sum();
        let tokens = batch_seqs
            .checked_mul(longest)
            .ok_or_else(|| Error::invalid_argument("batch size overflows"))?;
        let quantized = dry.matrices().skip(1).any(|m| {
            converted_bytes(m.dtype, m.rows, m.k, true, format)
                .ok()
                .flatten()
                .map_or(!matches!(m.dtype, DType::F32 | DType::F16 | DType::BF16), |(d, _)| {
                    d != DType::F32
                })
        });
        let act = if quantized { activations } else { Activations::F32 };
        Ok(EncoderMemoryPlan {
            converted,
            vectors: vector_floats(config) * 4,
            batch_tokens: tokens,
            batch: batch_bytes(config, tokens, batch_seqs, longest, act)?,
        })
    }

    /// Bytes the weights hold besides the file: matrices converted or copied at load, and the
    /// f32 vectors and tables (norms, biases, position and token-type embeddings, RoPE
    /// frequencies); [`EncoderMemoryPlan::weights`] of the plan for the same file.
    pub fn owned_bytes(&self) -> usize {
        let vecs = [&self.position, &self.token_type, &self.ln_w, &self.ln_b, &self.inv_freq];
        let mut floats: usize = vecs.iter().map(|v| v.capacity()).sum();
        for l in &self.layers {
            floats += [
                &l.q_b, &l.k_b, &l.v_b, &l.o_b, &l.up_b, &l.down_b, &l.ln1_w, &l.ln1_b, &l.ln2_w,
                &l.ln2_b,
            ]
            .iter()
            .map(|v| v.capacity())
            .sum::<usize>();
        }
        self.converted + floats * 4
    }

    /// The bytes [`EncoderWeights::hidden_states`] allocates for `seqs` (see
    /// [`EncoderMemoryPlan::batch`]); `None` when the sizes overflow.
    pub fn batch_bytes(&self, seqs: &[&[u32]]) -> Option<usize> {
        let tokens = seqs.iter().map(|s| s.len()).sum();
        let longest = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        batch_bytes(&self.config, tokens, seqs.len(), longest, self.scratch_act()).ok()
    }

    /// The activation setting the int8 scratch is sized for: [`Activations::F32`] (none)
    /// when no product has quantized weights.
    fn scratch_act(&self) -> Activations {
        let quantized = self
            .matrices()
            .skip(1)
            .any(|m| !matches!(m.dtype, DType::F32 | DType::F16 | DType::BF16));
        if quantized {
            self.activations
        } else {
            Activations::F32
        }
    }

    fn empty(config: &EncoderConfig, word: Mat<'a>) -> Self {
        let inv_freq = match config.rope_theta {
            Some(theta) => {
                let mut f = vec![0f32; config.head_dim() / 2];
                ops::rope_inv_freq(theta, config.head_dim(), &mut f);
                f
            }
            None => Vec::new(),
        };
        EncoderWeights {
            config: config.clone(),
            word,
            position: Vec::new(),
            token_type: Vec::new(),
            ln_w: Vec::new(),
            ln_b: Vec::new(),
            layers: Vec::new(),
            inv_freq,
            activations: Activations::F32,
            converted: 0,
        }
    }

    fn load_bert(
        config: &EncoderConfig,
        src: &dyn TensorSource<'a>,
        prefix: &str,
        format: Keep,
    ) -> Result<Self> {
        let n = |s: &str| alloc::format!("{prefix}{s}");
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let word = matrix(
            src,
            &n("embeddings.word_embeddings.weight"),
            config.vocab_size,
            h,
            Keep { format: WeightFormat::AsStored, ..format },
        )?;
        let mut w = Self::empty(config, word);
        w.position = vector(
            src,
            &n("embeddings.position_embeddings.weight"),
            &[config.max_position_embeddings, h],
        )?;
        if config.type_vocab_size > 0 {
            w.token_type = vector(
                src,
                &n("embeddings.token_type_embeddings.weight"),
                &[config.type_vocab_size, h],
            )?;
        }
        w.ln_w = vector(src, &n("embeddings.LayerNorm.weight"), &[h])?;
        w.ln_b = vector(src, &n("embeddings.LayerNorm.bias"), &[h])?;
        for l in 0..config.num_layers {
            let p = |s: &str| n(&alloc::format!("encoder.layer.{l}.{s}"));
            w.layers.push(Layer {
                q: matrix(src, &p("attention.self.query.weight"), h, h, format)?,
                k: matrix(src, &p("attention.self.key.weight"), h, h, format)?,
                v: matrix(src, &p("attention.self.value.weight"), h, h, format)?,
                o: matrix(src, &p("attention.output.dense.weight"), h, h, format)?,
                up: matrix(src, &p("intermediate.dense.weight"), i, h, format)?,
                gate: None,
                down: matrix(src, &p("output.dense.weight"), h, i, format)?,
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
        Ok(w)
    }

    fn load_nomic(
        config: &EncoderConfig,
        src: &dyn TensorSource<'a>,
        format: Keep,
    ) -> Result<Self> {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let word = matrix(
            src,
            "embeddings.word_embeddings.weight",
            config.vocab_size,
            h,
            Keep { format: WeightFormat::AsStored, ..format },
        )?;
        let mut w = Self::empty(config, word);
        if config.type_vocab_size > 0 {
            w.token_type = vector(
                src,
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?;
        }
        w.ln_w = vector(src, "emb_ln.weight", &[h])?;
        w.ln_b = vector(src, "emb_ln.bias", &[h])?;
        for l in 0..config.num_layers {
            let p = |s: &str| alloc::format!("encoder.layers.{l}.{s}");
            let qkv = p("attn.Wqkv.weight");
            w.layers.push(Layer {
                q: matrix_part(src, &qkv, (3 * h, h), 0..h, format)?,
                k: matrix_part(src, &qkv, (3 * h, h), h..2 * h, format)?,
                v: matrix_part(src, &qkv, (3 * h, h), 2 * h..3 * h, format)?,
                o: matrix(src, &p("attn.out_proj.weight"), h, h, format)?,
                up: matrix(src, &p("mlp.fc11.weight"), i, h, format)?,
                gate: Some(matrix(src, &p("mlp.fc12.weight"), i, h, format)?),
                down: matrix(src, &p("mlp.fc2.weight"), h, i, format)?,
                q_b: Vec::new(),
                k_b: Vec::new(),
                v_b: Vec::new(),
                o_b: Vec::new(),
                up_b: Vec::new(),
                down_b: Vec::new(),
                ln1_w: vector(src, &p("norm1.weight"), &[h])?,
                ln1_b: vector(src, &p("norm1.bias"), &[h])?,
                ln2_w: vector(src, &p("norm2.weight"), &[h])?,
                ln2_b: vector(src, &p("norm2.bias"), &[h])?,
            });
        }
        Ok(w)
    }

    fn load_gguf(config: &EncoderConfig, src: &dyn TensorSource<'a>, format: Keep) -> Result<Self> {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let word = matrix(
            src,
            "token_embd.weight",
            config.vocab_size,
            h,
            Keep { format: WeightFormat::AsStored, ..format },
        )?;
        let mut w = Self::empty(config, word);
        if config.rope_theta.is_none() {
            w.position = vector(src, "position_embd.weight", &[config.max_position_embeddings, h])?;
        }
        if config.type_vocab_size > 0 {
            w.token_type = vector(src, "token_types.weight", &[config.type_vocab_size, h])?;
        }
        w.ln_w = vector(src, "token_embd_norm.weight", &[h])?;
        w.ln_b = vector(src, "token_embd_norm.bias", &[h])?;
        let nomic = config.arch == EncoderArch::NomicBert;
        for l in 0..config.num_layers {
            let p = |s: &str| alloc::format!("blk.{l}.{s}");
            let bias = |s: &str, len: usize| -> Result<Vec<f32>> {
                if nomic {
                    Ok(Vec::new())
                } else {
                    vector(src, &p(s), &[len])
                }
            };
            let (q, k, v) = if nomic {
                let qkv = p("attn_qkv.weight");
                (
                    matrix_part(src, &qkv, (3 * h, h), 0..h, format)?,
                    matrix_part(src, &qkv, (3 * h, h), h..2 * h, format)?,
                    matrix_part(src, &qkv, (3 * h, h), 2 * h..3 * h, format)?,
                )
            } else {
                (
                    matrix(src, &p("attn_q.weight"), h, h, format)?,
                    matrix(src, &p("attn_k.weight"), h, h, format)?,
                    matrix(src, &p("attn_v.weight"), h, h, format)?,
                )
            };
            w.layers.push(Layer {
                q,
                k,
                v,
                o: matrix(src, &p("attn_output.weight"), h, h, format)?,
                up: matrix(src, &p("ffn_up.weight"), i, h, format)?,
                gate: if nomic {
                    Some(matrix(src, &p("ffn_gate.weight"), i, h, format)?)
                } else {
                    None
                },
                down: matrix(src, &p("ffn_down.weight"), h, i, format)?,
                q_b: bias("attn_q.bias", h)?,
                k_b: bias("attn_k.bias", h)?,
                v_b: bias("attn_v.bias", h)?,
                o_b: bias("attn_output.bias", h)?,
                up_b: bias("ffn_up.bias", i)?,
                down_b: bias("ffn_down.bias", h)?,
                ln1_w: vector(src, &p("attn_output_norm.weight"), &[h])?,
                ln1_b: vector(src, &p("attn_output_norm.bias"), &[h])?,
                ln2_w: vector(src, &p("layer_output_norm.weight"), &[h])?,
                ln2_b: vector(src, &p("layer_output_norm.bias"), &[h])?,
            });
        }
        Ok(w)
    }

    /// Every matrix, the token embedding first.
    fn matrices(&self) -> impl Iterator<Item = &Mat<'a>> {
        core::iter::once(&self.word).chain(self.layers.iter().flat_map(|l| {
            [&l.q, &l.k, &l.v, &l.o, &l.up, &l.down].into_iter().chain(l.gate.as_ref())
        }))
    }

    /// How activations meet quantized weights in the products ([`Activations::F32`] unless
    /// set; f32 / f16 / bf16 weights always meet f32 activations).
    pub fn with_activations(mut self, activations: Activations) -> Self {
        self.activations = activations;
        self
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
            add_bias(q, &layer.q_b);
            add_bias(k, &layer.k_b);
            add_bias(v, &layer.v_b);
            if half > 0 {
                let pos = seqs.iter().flat_map(|s| 0..s.len());
                for ((qr, kr), p) in q.chunks_exact_mut(h).zip(k.chunks_exact_mut(h)).zip(pos) {
                    let (cs, sn) = (&cos[p * half..][..half], &sin[p * half..][..half]);
                    ops::rope(qr, cs, sn, ops::RopeLayout::RotateHalf);
                    ops::rope(kr, cs, sn, ops::RopeLayout::RotateHalf);
                }
            }
            self.attention(exec, &spans, q, k, v, kv_heads, scores, ctx);
            let o_act = act.for_other_input();
            ops::gemm(exec, None, &layer.o.matrix()?, ctx, n, tmp, o_act, &mut scratch)?;
            add_bias(tmp, &layer.o_b);
            for (xr, tr) in x.chunks_exact_mut(h).zip(tmp.chunks_exact(h)) {
                ops::add_assign(xr, tr);
                ops::layer_norm_in_place(xr, &layer.ln1_w, &layer.ln1_b, c.layer_norm_eps);
            }
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
            add_bias(tmp, &layer.down_b);
            for (xr, tr) in x.chunks_exact_mut(h).zip(tmp.chunks_exact(h)) {
                ops::add_assign(xr, tr);
                ops::layer_norm_in_place(xr, &layer.ln2_w, &layer.ln2_b, c.layer_norm_eps);
            }
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
                if !bias.is_empty() {
                    ops::add_assign(row, bias);
                }
                match act {
                    HiddenAct::GeluErf => ops::gelu_erf_in_place(row),
                    HiddenAct::GeluTanh => {
                        for e in row.iter_mut() {
                            *e = ops::gelu_tanh(*e);
                        }
                    }
                    HiddenAct::SwiGlu => ops::swiglu(row, &up[r * w..(r + 1) * w]),
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
    /// (`n × hidden`, head `j` in columns `j*d .. (j+1)*d`). Each (sequence, head) item first
    /// copies its keys and values into `kv_heads` (`2 × n × hidden`: keys then values, head
    /// `j`'s rows at `j × n × d`, so one item's rows are contiguous) and keeps its scores in
    /// `scores` (`heads × n`, head `j` at `j × n`); items write disjoint parts of all three.
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
        let body = |items: Range<usize>| {
            for item in items {
                let (span, head) = (&spans[item / heads], item % heads);
                let len = span.len();
                let cols = head * d..(head + 1) * d;
                let at = head * n * d + span.start * d;
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

/// Scales `v` to unit L2 norm: `v / max(‖v‖₂, 1e-12)` (PyTorch's `F.normalize`), the norm
/// summed in f64.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = libm::sqrt(v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>()).max(1e-12);
    for x in v.iter_mut() {
        *x = (*x as f64 / norm) as f32;
    }
}
