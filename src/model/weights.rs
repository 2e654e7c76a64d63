//! [`Weights`]: a model's tensors, looked up by name in a [`TensorSource`] and checked
//! against the [`ModelConfig`], ready for the kernels.
//!
//! Both containers are understood, with the names and conventions of the config's family
//! ([`crate::model::arch::ArchSpec`]): Hugging Face (`model.layers.3.self_attn.q_proj.weight`)
//! and GGUF / llama.cpp (`blk.3.attn_q.weight`). Matrices stay where the file put them (mmap or
//! `&'static [u8]`) when the kernels take their dtype as it is — aligned f32, f16, bf16, Q8_0,
//! Q4_0, Q4_1; a misaligned f32 matrix is copied once into an aligned block. With
//! [`WeightFormat::Q8_0`], f32 / f16 / bf16 matrices are quantized to Q8_0 at load instead.
//! A decoder built with [`crate::model::DecoderOptions::repack_weights`] (on AVX-512, int8
//! activations) copies the layers' Q5_0 matrices into [`DType::Q5_0x2`], the layout its int8
//! kernel reads fastest; [`Weights::load`] itself never repacks.
//! Norm vectors and biases are small and always widened to f32; norm weights get the family's
//! offset (Gemma's `1 + w`) added at load, so the forward pass multiplies by them as they are.
//!
//! GGUF Llama files store the q/k projection rows permuted (llama.cpp's converter pairs RoPE
//! dimensions `i` and `i + d/2` as adjacent rows). The weights are used as stored and RoPE is
//! applied interleaved ([`RopeLayout::Interleaved`]), which gives the same attention scores as
//! Hugging Face's rotate-half on un-permuted rows;
//! [`crate::model::arch::llama::unpermute_qk_rows`] undoes the permutation for tools that write
//! Hugging Face files.
//!
//! The output head: with `tie_word_embeddings` the embedding is the head and an `lm_head`
//! in the file is ignored (transformers ties them the same way); without it the file's
//! output matrix (`lm_head.weight` / `output.weight`) is required.

use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::error::{Error, Result};
use crate::format::{TensorSource, TensorView};
use crate::mem::place::Place;
use crate::mem::AlignedBlock;
use crate::model::arch::{ArchSpec, ModelFormat, Part, TensorNames};
use crate::model::config::ModelConfig;
use crate::ops::{Matrix, RopeLayout};
use crate::quant::quantize_row_q8_0;
use crate::tensor::DType;

/// How matrices are kept in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// As stored in the file (no copy unless an f32 matrix is misaligned).
    #[default]
    AsStored,
    /// f32 / f16 / bf16 matrices quantized to Q8_0 at load (already-quantized ones kept;
    /// matrices whose rows are not a multiple of 32 long stay as stored).
    Q8_0,
}

/// A tensor's bytes: borrowed from the file, or owned (converted or realigned at load).
#[derive(Debug)]
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBlock),
}

impl Bytes<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) => b,
            Bytes::Owned(b) => b.as_slice(),
        }
    }
}

/// A tensor name kept inline (no heap): up to [`TensorName::CAPACITY`] bytes, longer names
/// cut at a character boundary (they only label messages and lookups).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorName {
    buf: [u8; TensorName::CAPACITY],
    len: u8,
}

impl TensorName {
    /// The longest name kept whole, in bytes.
    pub const CAPACITY: usize = 96;

    /// The name `s` (cut to [`TensorName::CAPACITY`] bytes at a character boundary).
    pub fn new(s: &str) -> Self {
        let mut n = TensorName { buf: [0; Self::CAPACITY], len: 0 };
        let _ = n.write_str(s);
        n
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only whole characters are ever copied in (`write_str`).
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl core::fmt::Write for TensorName {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = Self::CAPACITY - self.len as usize;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        let at = self.len as usize;
        self.buf[at..at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take as u8;
        Ok(())
    }
}

impl core::fmt::Debug for TensorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl core::fmt::Display for TensorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A weight matrix, `rows × k` row-major (PyTorch's `nn.Linear.weight`).
#[derive(Debug)]
pub struct Linear<'a> {
    name: TensorName,
    dtype: DType,
    rows: usize,
    k: usize,
    bytes: Bytes<'a>,
}

impl Linear<'_> {
    /// The kernels' view of the matrix (checked once at load, so this does not fail for a
    /// loaded [`Linear`]).
    ///
    /// # Errors
    ///
    /// As [`Matrix::new`].
    pub fn matrix(&self) -> Result<Matrix<'_>> {
        Matrix::new(self.dtype, self.rows, self.k, self.bytes.as_slice())
    }

    /// The tensor's name in the file.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes of storage.
    pub fn size_bytes(&self) -> usize {
        self.bytes.as_slice().len()
    }

    /// `true` if the bytes are the file's own (not a copy).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.bytes, Bytes::Borrowed(_))
    }
}

/// An f32 vector owned in an aligned block (the norm weights).
#[derive(Debug)]
pub struct Vector {
    block: AlignedBlock,
}

impl Vector {
    fn from_view(
        name: &str,
        view: &TensorView<'_>,
        len: usize,
        offset: f32,
        place: &mut Place<'_>,
    ) -> Result<Self> {
        check_shape(name, view, &[len])?;
        // Norm weights and biases are float vectors in every file the reference tools write
        // (llama.cpp's converter and quantizer never quantize a 1-D tensor); a block dtype here
        // is a damaged file whose bytes would read as plausible but wrong values.
        if view.dtype.is_quantized() {
            return Err(Error::data_loss(format_args!(
                "tensor {name:?}: a norm or bias vector must be F32, F16 or BF16, found {}",
                view.dtype
            )));
        }
        let mut block = place.block(len * 4, name)?;
        let v: &mut [f32] = crate::tensor::cast_slice_mut(block.as_mut_slice());
        view.dequantize_into(v).map_err(|e| e.context(format_args!("tensor {name:?}")))?;
        if offset != 0.0 {
            v.iter_mut().for_each(|x| *x += offset);
        }
        Ok(Vector { block })
    }

    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        crate::tensor::cast_slice(self.block.as_slice())
    }
}

/// One decoder layer's weights. Which optional tensors are present is the family's
/// ([`ArchSpec::qkv_bias`], [`ArchSpec::qk_norm`], [`ArchSpec::sandwich_norms`]).
#[derive(Debug)]
pub struct LayerWeights<'a> {
    /// RMSNorm before attention (`input_layernorm` / `attn_norm`), `[hidden]`.
    pub attn_norm: Vector,
    /// `q_proj` / `attn_q`, `[heads * head_dim, hidden]`.
    pub q: Linear<'a>,
    /// `k_proj` / `attn_k`, `[kv_heads * head_dim, hidden]`.
    pub k: Linear<'a>,
    /// `v_proj` / `attn_v`, `[kv_heads * head_dim, hidden]`.
    pub v: Linear<'a>,
    /// `o_proj` / `attn_output`, `[hidden, heads * head_dim]`.
    pub o: Linear<'a>,
    /// q/k/v biases `[heads * head_dim]`, `[kv_heads * head_dim]` × 2 (Qwen2).
    pub qkv_bias: Option<[Vector; 3]>,
    /// Per-head RMSNorm weights of q and k, `[head_dim]` each (Qwen3, Gemma 3).
    pub qk_norm: Option<[Vector; 2]>,
    /// RMSNorm of the attention output before the residual add, `[hidden]` (Gemma 3).
    pub post_attn_norm: Option<Vector>,
    /// RMSNorm before the MLP (`post_attention_layernorm` in Llama, `pre_feedforward_layernorm`
    /// in Gemma 3; `ffn_norm`), `[hidden]`.
    pub ffn_norm: Vector,
    /// RMSNorm of the MLP output before the residual add, `[hidden]` (Gemma 3).
    pub post_ffn_norm: Option<Vector>,
    /// `gate_proj` / `ffn_gate`, `[intermediate, hidden]`.
    pub gate: Linear<'a>,
    /// `up_proj` / `ffn_up`, `[intermediate, hidden]`.
    pub up: Linear<'a>,
    /// `down_proj` / `ffn_down`, `[hidden, intermediate]`.
    pub down: Linear<'a>,
}

/// Detects the container from the embedding's name under `arch`'s naming.
///
/// # Errors
///
/// [`crate::Code::NotFound`] if neither container's embedding name exists.
pub fn detect_container<'a>(arch: &ArchSpec, src: &dyn TensorSource<'a>) -> Result<ModelFormat> {
    let (hf, gguf) = (arch.hf_names.embedding, arch.gguf_names.embedding);
    if src.tensor(hf).is_ok() {
        Ok(ModelFormat::Safetensors)
    } else if src.tensor(gguf).is_ok() {
        Ok(ModelFormat::Gguf)
    } else {
        Err(Error::not_found(format_args!(
            "no token embedding: neither {hf:?} (Hugging Face) nor {gguf:?} (GGUF) is in the file"
        )))
    }
}

/// The f32 vectors of layer `l` beyond its two norms, in load order: (part, length, norm
/// offset). [`Weights::load_placed`] and [`plan_weights`] both walk this list.
fn layer_vectors(c: &ModelConfig, format: ModelFormat) -> impl Iterator<Item = (Part, usize, f32)> {
    let arch = c.arch;
    let (h, hd) = (c.hidden_size, c.head_dim);
    let (q_rows, kv_rows) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let off = arch.norm_offset(format);
    let bias =
        [(Part::QBias, q_rows, 0.0), (Part::KBias, kv_rows, 0.0), (Part::VBias, kv_rows, 0.0)];
    let qk = [(Part::QNorm, hd, off), (Part::KNorm, hd, off)];
    let post = [(Part::PostAttnNorm, h, off), (Part::PostFfnNorm, h, off)];
    let take = |on: bool, n: usize| if on { n } else { 0 };
    bias.into_iter()
        .take(take(arch.qkv_bias, 3))
        .chain(qk.into_iter().take(take(arch.qk_norm, 2)))
        .chain(post.into_iter().take(take(arch.sandwich_norms, 2)))
}

/// All of a model's weights.
#[derive(Debug)]
pub struct Weights<'a> {
    /// Token embedding, `[vocab, hidden]`.
    pub embedding: Linear<'a>,
    /// The layers, in order.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final RMSNorm, `[hidden]`.
    pub final_norm: Vector,
    /// The output head `[vocab, hidden]`; `None` when tied to the embedding.
    pub lm_head: Option<Linear<'a>>,
    /// The container whose names the file uses.
    pub format: ModelFormat,
    /// How RoPE pairs dimensions for these q/k weights.
    pub rope_layout: RopeLayout,
    /// Divisors of the RoPE inverse frequencies, `[head_dim / 2]` (a Llama 3.x GGUF's
    /// `rope_freqs.weight`, llama.cpp's form of the `llama3` scaling), if the file has them.
    pub rope_freqs: Option<Vector>,
}

fn check_shape(name: &str, view: &TensorView<'_>, want: &[usize]) -> Result<()> {
    if view.shape.dims() != want {
        return Err(Error::invalid_argument(format_args!(
            "tensor {name:?}: shape {:?}, expected {want:?} from the config",
            view.shape.dims()
        )));
    }
    Ok(())
}

/// What loading does with a `rows × k` matrix stored as `dtype` (its bytes at `data`):
/// `Some((dtype, bytes))` when it is converted or copied into a new buffer of that size,
/// `None` when it is used in place. With `repack`, a Q5_0 matrix whose rows are whole pairs
/// of blocks (`k % 64 == 0`) is copied into [`DType::Q5_0x2`] (the same bytes, repacked).
/// [`Weights::load`] and the memory plan both ask this.
///
/// # Errors
///
/// [`crate::Code::ResourceExhausted`] if the converted size overflows.
pub(crate) fn conversion(
    dtype: DType,
    data: *const u8,
    rows: usize,
    k: usize,
    format: WeightFormat,
    repack: bool,
) -> Result<Option<(DType, usize)>> {
    let overflow = || Error::resource_exhausted(format_args!("{rows} x {k} matrix overflows"));
    Ok(match (dtype, format) {
        (DType::F32 | DType::F16 | DType::BF16, WeightFormat::Q8_0)
            if k % DType::Q8_0.block_size() == 0 =>
        {
            let row = DType::Q8_0.row_bytes(k)?;
            Some((DType::Q8_0, row.checked_mul(rows).ok_or_else(overflow)?))
        }
        (DType::F32, _) if data as usize % 4 != 0 => Some((
            DType::F32,
            rows.checked_mul(k).and_then(|n| n.checked_mul(4)).ok_or_else(overflow)?,
        )),
        (DType::Q5_0, _) if repack && k % DType::Q5_0x2.block_size() == 0 => {
            let row = DType::Q5_0x2.row_bytes(k)?;
            Some((DType::Q5_0x2, row.checked_mul(rows).ok_or_else(overflow)?))
        }
        _ => None,
    })
}

fn linear<'s: 'a, 'a>(
    src: &dyn TensorSource<'s>,
    name: &str,
    rows: usize,
    k: usize,
    format: WeightFormat,
    repack: bool,
    place: &mut Place<'a>,
) -> Result<Linear<'a>> {
    let view = src.tensor(name)?;
    check_shape(name, &view, &[rows, k])?;
    let ctx = |e: Error| e.context(format_args!("tensor {name:?}"));
    let (dtype, bytes) =
        match conversion(view.dtype, view.data.as_ptr(), rows, k, format, repack).map_err(ctx)? {
            Some((DType::Q8_0, total)) => {
                let mut block = place.block(total, name)?;
                // Block by block (32 values on the stack): no temporary heap buffer.
                const QK: usize = crate::quant::QK;
                let elem = view.dtype.block_bytes();
                let one = crate::tensor::Shape::new(&[QK])?;
                let mut vals = [0f32; QK];
                let q8 = DType::Q8_0.block_bytes();
                for (b, out) in block.as_mut_slice().chunks_exact_mut(q8).enumerate() {
                    let src = TensorView {
                        dtype: view.dtype,
                        shape: one,
                        data: &view.data[b * QK * elem..(b + 1) * QK * elem],
                    };
                    src.dequantize_into(&mut vals).map_err(ctx)?;
                    quantize_row_q8_0(&vals, out).map_err(ctx)?;
                }
                (DType::Q8_0, Bytes::Owned(block))
            }
            Some((DType::Q5_0x2, total)) => {
                let mut block = place.block(total, name)?;
                crate::quant::q5_0x2::repack(view.data, block.as_mut_slice()).map_err(ctx)?;
                (DType::Q5_0x2, Bytes::Owned(block))
            }
            Some((dt, total)) => {
                let mut block = place.block(total, name)?;
                block.as_mut_slice().copy_from_slice(view.data);
                (dt, Bytes::Owned(block))
            }
            None => (view.dtype, Bytes::Borrowed(view.data)),
        };
    let lin = Linear { name: TensorName::new(name), dtype, rows, k, bytes };
    Matrix::new(lin.dtype, rows, k, lin.bytes.as_slice()).map_err(ctx)?;
    Ok(lin)
}

impl<'a> Weights<'a> {
    /// Looks up and checks every tensor the config calls for.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming a missing tensor; [`crate::Code::InvalidArgument`]
    /// naming a tensor whose shape does not match the config, or whose row length does not fit
    /// its block size; [`crate::Code::Unimplemented`] for a dtype the kernels do not take;
    /// [`crate::Code::ResourceExhausted`] if a copy cannot be allocated; the config's own
    /// [`ModelConfig::validate`] errors.
    pub fn load(
        config: &ModelConfig,
        src: &dyn TensorSource<'a>,
        format: WeightFormat,
    ) -> Result<Self> {
        Self::load_placed(config, src, format, false, &mut Place::heap())
    }

    /// [`Weights::load`] with every buffer it makes (norms, converted matrices) taken from
    /// `place`, in the order [`plan_weights`] counts them; with `repack`, the layers' Q5_0
    /// matrices are repacked ([`conversion`]).
    pub(crate) fn load_placed<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        format: WeightFormat,
        repack: bool,
        place: &mut Place<'a>,
    ) -> Result<Self> {
        config.validate()?;
        let c = config;
        let arch = c.arch;
        let naming = detect_container(arch, src)?;
        let names: &TensorNames = arch.names(naming);
        let offset = arch.norm_offset(naming);
        let (h, q_rows, kv_rows) =
            (c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
        // The embedding (and a tied head) stays as stored: its rows are looked up too.
        let embedding = linear(src, names.embedding, c.vocab_size, h, format, false, place)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(c.num_hidden_layers)
            .map_err(|_| Error::resource_exhausted("layer table"))?;
        for l in 0..c.num_hidden_layers {
            let name = |p| names.layer(l, p);
            let mut lin =
                |p, rows, k| linear(src, name(p).as_str(), rows, k, format, repack, place);
            let (q, k, v, o) = (
                lin(Part::Q, q_rows, h)?,
                lin(Part::K, kv_rows, h)?,
                lin(Part::V, kv_rows, h)?,
                lin(Part::O, h, q_rows)?,
            );
            let (gate, up, down) = (
                lin(Part::Gate, c.intermediate_size, h)?,
                lin(Part::Up, c.intermediate_size, h)?,
                lin(Part::Down, h, c.intermediate_size)?,
            );
            let mut vec = |p, len, off| {
                let n = name(p);
                Vector::from_view(n.as_str(), &src.tensor(n.as_str())?, len, off, place)
            };
            let (attn_norm, ffn_norm) =
                (vec(Part::AttnNorm, h, offset)?, vec(Part::FfnNorm, h, offset)?);
            let mut extra: [Option<Vector>; 7] = Default::default();
            for (slot, (p, len, off)) in extra.iter_mut().zip(layer_vectors(c, naming)) {
                *slot = Some(vec(p, len, off)?);
            }
            let mut extra = extra.into_iter().flatten();
            let mut next = || extra.next().ok_or_else(|| Error::internal("layer vector list"));
            let qkv_bias = if arch.qkv_bias { Some([next()?, next()?, next()?]) } else { None };
            let qk_norm = if arch.qk_norm { Some([next()?, next()?]) } else { None };
            let (post_attn_norm, post_ffn_norm) =
                if arch.sandwich_norms { (Some(next()?), Some(next()?)) } else { (None, None) };
            layers.push(LayerWeights {
                attn_norm,
                q,
                k,
                v,
                o,
                qkv_bias,
                qk_norm,
                post_attn_norm,
                ffn_norm,
                post_ffn_norm,
                gate,
                up,
                down,
            });
        }
        let fnorm = names.final_norm;
        let final_norm = Vector::from_view(fnorm, &src.tensor(fnorm)?, h, offset, place)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            output_view(names, src)?;
            Some(linear(src, names.output, c.vocab_size, h, format, false, place)?)
        };
        let rope_freqs = match rope_freqs_view(names, src)? {
            Some((n, view)) => Some(Vector::from_view(n, &view, c.head_dim / 2, 0.0, place)?),
            None => None,
        };
        let rope_layout = arch.rope_layout(naming);
        Ok(Weights {
            embedding,
            layers,
            final_norm,
            lm_head,
            format: naming,
            rope_layout,
            rope_freqs,
        })
    }

    /// The output head: `lm_head`, or the embedding when tied.
    pub fn output(&self) -> &Linear<'a> {
        self.lm_head.as_ref().unwrap_or(&self.embedding)
    }

    /// Every matrix, in forward order (embedding first, head last if untied).
    pub fn matrices(&self) -> impl Iterator<Item = &Linear<'a>> {
        core::iter::once(&self.embedding)
            .chain(
                self.layers
                    .iter()
                    .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].into_iter()),
            )
            .chain(self.lm_head.iter())
    }

    /// Bytes of weights read to decode one token: every layer matrix, the output head, and
    /// one embedding row.
    pub fn bytes_per_token(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|m| m.size_bytes())
                    .sum::<usize>()
            })
            .sum();
        let e = &self.embedding;
        layers + self.output().size_bytes() + e.size_bytes() / e.rows().max(1)
    }

    /// Bytes the weights occupy (borrowed or owned), norms and biases included.
    pub fn size_bytes(&self) -> usize {
        let vec_bytes = |v: &Vector| v.as_slice().len() * 4;
        let norms = vec_bytes(&self.final_norm)
            + self.rope_freqs.as_ref().map_or(0, vec_bytes)
            + self
                .layers
                .iter()
                .map(|l| {
                    [&l.attn_norm, &l.ffn_norm].into_iter().map(vec_bytes).sum::<usize>()
                        + l.qkv_bias.iter().flatten().map(vec_bytes).sum::<usize>()
                        + l.qk_norm.iter().flatten().map(vec_bytes).sum::<usize>()
                        + [&l.post_attn_norm, &l.post_ffn_norm]
                            .into_iter()
                            .flatten()
                            .map(vec_bytes)
                            .sum::<usize>()
                })
                .sum::<usize>();
        self.matrices().map(|m| m.size_bytes()).sum::<usize>() + norms
    }
}

/// Checks that an untied model's output matrix is in the file.
///
/// # Errors
///
/// [`crate::Code::NotFound`] naming the tensor (and why it is needed) when it is absent.
fn output_view<'a>(names: &TensorNames, src: &dyn TensorSource<'a>) -> Result<TensorView<'a>> {
    src.tensor(names.output).map_err(|e| {
        if e.code() == crate::Code::NotFound {
            Error::not_found(format_args!(
                "tensor {:?} is not in the file, and tie_word_embeddings is false (the output \
                 head is not the embedding)",
                names.output
            ))
        } else {
            e
        }
    })
}

/// The container's `rope_freqs.weight`, if it has one.
fn rope_freqs_view<'a>(
    names: &TensorNames,
    src: &dyn TensorSource<'a>,
) -> Result<Option<(&'static str, TensorView<'a>)>> {
    let Some(n) = names.rope_freqs else { return Ok(None) };
    match src.tensor(n) {
        Ok(view) => Ok(Some((n, view))),
        Err(e) if e.code() == crate::Code::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The buffers [`Weights::load_placed`] makes, in its order: norm vectors (f32 copies) and
/// matrices converted or copied at load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WeightBuffers {
    /// Bytes of the f32 norm vectors.
    pub norms: usize,
    /// Bytes of converted or copied matrices.
    pub converted: usize,
}

/// Counts the buffers loading `config`'s weights makes, calling `each(bytes, n)` for `n`
/// buffers of `bytes` each (in load order, except that without `src` one layer's buffers
/// stand for every layer's, with `n` the layer count). With `src`, each matrix's stored
/// dtype and alignment decide (as [`Weights::load`] will); without, every matrix is taken to
/// be stored as aligned f32 / f16 / bf16 (Hugging Face's files) and the head to be present
/// unless tied, so all layers are alike and the cost does not grow with the layer count.
/// Allocates nothing (names are built inline), apart from what `src` does to report a
/// missing head.
///
/// # Errors
///
/// As [`Weights::load`] for tensors missing or mis-shaped in `src`; overflow as
/// [`crate::Code::ResourceExhausted`].
pub(crate) fn plan_weights<'a>(
    config: &ModelConfig,
    format: WeightFormat,
    repack: bool,
    src: Option<&dyn TensorSource<'a>>,
    mut each: impl FnMut(usize, usize) -> Result<()>,
) -> Result<WeightBuffers> {
    config.validate()?;
    let c = config;
    let naming = match src {
        Some(s) => detect_container(c.arch, s)?,
        None => ModelFormat::Safetensors,
    };
    let names = c.arch.names(naming);
    let (h, q_rows, kv_rows, i) = (
        c.hidden_size,
        c.num_attention_heads * c.head_dim,
        c.num_key_value_heads * c.head_dim,
        c.intermediate_size,
    );
    let mut out = WeightBuffers::default();
    // Bytes loading makes for one matrix (0 when it is used in place).
    let matrix = |name: &str, rows: usize, k: usize, repack: bool| -> Result<usize> {
        let conv = match src {
            Some(s) => {
                let view = s.tensor(name)?;
                check_shape(name, &view, &[rows, k])?;
                conversion(view.dtype, view.data.as_ptr(), rows, k, format, repack)?
            }
            None => conversion(DType::F32, core::ptr::null(), rows, k, format, repack)?,
        };
        Ok(conv.map_or(0, |(_, bytes)| bytes))
    };
    // `n` buffers of `bytes` each.
    let mut add_n = |field: &mut usize, bytes: usize, n: usize| -> Result<()> {
        if bytes != 0 && n != 0 {
            let total = bytes.checked_mul(n).ok_or_else(overflow)?;
            *field = field.checked_add(total).ok_or_else(overflow)?;
            each(bytes, n)?;
        }
        Ok(())
    };
    add_n(&mut out.converted, matrix(names.embedding, c.vocab_size, h, false)?, 1)?;
    let norm = h.checked_mul(4).ok_or_else(overflow)?;
    // Without `src` every layer is alike: plan one and count it `num_hidden_layers` times.
    let (layers, per) = match src {
        Some(_) => (c.num_hidden_layers, 1),
        None => (c.num_hidden_layers.min(1), c.num_hidden_layers),
    };
    let mut add = |field: &mut usize, bytes: usize| add_n(field, bytes, per);
    for l in 0..layers {
        for (p, rows, k) in [
            (Part::Q, q_rows, h),
            (Part::K, kv_rows, h),
            (Part::V, kv_rows, h),
            (Part::O, h, q_rows),
            (Part::Gate, i, h),
            (Part::Up, i, h),
            (Part::Down, h, i),
        ] {
            add(&mut out.converted, matrix(names.layer(l, p).as_str(), rows, k, repack)?)?;
        }
        add(&mut out.norms, norm)?;
        add(&mut out.norms, norm)?;
        for (_, len, _) in layer_vectors(c, naming) {
            add(&mut out.norms, len.checked_mul(4).ok_or_else(overflow)?)?;
        }
    }
    add_n(&mut out.norms, norm, 1)?;
    if !c.tie_word_embeddings {
        if let Some(s) = src {
            output_view(names, s)?;
        }
        add_n(&mut out.converted, matrix(names.output, c.vocab_size, h, false)?, 1)?;
    }
    if let Some(s) = src {
        if rope_freqs_view(names, s)?.is_some() {
            add_n(&mut out.norms, c.head_dim / 2 * 4, 1)?;
        }
    }
    Ok(out)
}

fn overflow() -> Error {
    Error::resource_exhausted("weight buffer sizes overflow usize")
}
