//! [`Weights`]: a Llama-family model's tensors, looked up by name in a [`TensorSource`] and
//! checked against the [`ModelConfig`], ready for the kernels.
//!
//! Both naming schemes are understood: Hugging Face (`model.layers.3.self_attn.q_proj.weight`)
//! and GGUF / llama.cpp (`blk.3.attn_q.weight`). Matrices stay where the file put them (mmap or
//! `&'static [u8]`) when the kernels take their dtype as it is — aligned f32, f16, bf16, Q8_0,
//! Q4_0, Q4_1; a misaligned f32 matrix is copied once into an aligned block. With
//! [`WeightFormat::Q8_0`], f32 / f16 / bf16 matrices are quantized to Q8_0 at load instead.
//! Norm vectors are small and always widened to f32.
//!
//! GGUF Llama files store the q/k projection rows permuted (llama.cpp's converter pairs RoPE
//! dimensions `i` and `i + d/2` as adjacent rows). The weights are used as stored and RoPE is
//! applied interleaved ([`RopeLayout::Interleaved`]), which gives the same attention scores as
//! Hugging Face's rotate-half on un-permuted rows; [`crate::format::gguf::unpermute_qk_rows`]
//! undoes the permutation for tools that write Hugging Face files.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::error::{Error, Result};
use crate::format::{TensorSource, TensorView};
use crate::mem::place::Place;
use crate::mem::AlignedBlock;
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
        place: &mut Place<'_>,
    ) -> Result<Self> {
        check_shape(name, view, &[len])?;
        let mut block = place.block(len * 4, name)?;
        view.dequantize_into(crate::tensor::cast_slice_mut(block.as_mut_slice()))
            .map_err(|e| e.context(format_args!("tensor {name:?}")))?;
        Ok(Vector { block })
    }

    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        crate::tensor::cast_slice(self.block.as_slice())
    }
}

/// One decoder layer's weights.
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
    /// RMSNorm before the MLP (`post_attention_layernorm` / `ffn_norm`), `[hidden]`.
    pub ffn_norm: Vector,
    /// `gate_proj` / `ffn_gate`, `[intermediate, hidden]`.
    pub gate: Linear<'a>,
    /// `up_proj` / `ffn_up`, `[intermediate, hidden]`.
    pub up: Linear<'a>,
    /// `down_proj` / `ffn_down`, `[hidden, intermediate]`.
    pub down: Linear<'a>,
}

/// Which file convention the tensor names follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Naming {
    /// Hugging Face `LlamaForCausalLM` names (`model.embed_tokens.weight`, ...).
    HuggingFace,
    /// GGUF / llama.cpp names (`token_embd.weight`, `blk.N.attn_q.weight`, ...); q/k rows
    /// permuted for interleaved RoPE.
    Gguf,
}

impl Naming {
    /// Detects the convention from the embedding's name.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] if neither `model.embed_tokens.weight` nor
    /// `token_embd.weight` exists.
    pub fn detect<'a>(src: &dyn TensorSource<'a>) -> Result<Self> {
        if src.tensor("model.embed_tokens.weight").is_ok() {
            Ok(Naming::HuggingFace)
        } else if src.tensor("token_embd.weight").is_ok() {
            Ok(Naming::Gguf)
        } else {
            Err(Error::not_found(
                "no token embedding: neither \"model.embed_tokens.weight\" (Hugging Face) nor \
                 \"token_embd.weight\" (GGUF) is in the file",
            ))
        }
    }

    /// The name of the token embedding.
    pub fn embedding(self) -> &'static str {
        match self {
            Naming::HuggingFace => "model.embed_tokens.weight",
            Naming::Gguf => "token_embd.weight",
        }
    }

    /// The name of the final norm.
    pub fn final_norm(self) -> &'static str {
        match self {
            Naming::HuggingFace => "model.norm.weight",
            Naming::Gguf => "output_norm.weight",
        }
    }

    /// The name of the output head (absent when tied).
    pub fn lm_head(self) -> &'static str {
        match self {
            Naming::HuggingFace => "lm_head.weight",
            Naming::Gguf => "output.weight",
        }
    }

    /// The name of `part` of layer `l`.
    pub fn layer(self, l: usize, part: Part) -> String {
        String::from(self.layer_name(l, part).as_str())
    }

    /// The name of `part` of layer `l`, without touching the heap.
    pub fn layer_name(self, l: usize, part: Part) -> TensorName {
        let mut n = TensorName::new("");
        let _ = match self {
            Naming::HuggingFace => write!(n, "model.layers.{l}.{}.weight", part.hf()),
            Naming::Gguf => write!(n, "blk.{l}.{}.weight", part.gguf()),
        };
        n
    }
}

/// The tensors of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// RMSNorm before attention.
    AttnNorm,
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Attention output projection.
    O,
    /// RMSNorm before the MLP.
    FfnNorm,
    /// MLP gate projection.
    Gate,
    /// MLP up projection.
    Up,
    /// MLP down projection.
    Down,
}

impl Part {
    /// Every part, in file order.
    pub const ALL: [Part; 9] = [
        Part::AttnNorm,
        Part::Q,
        Part::K,
        Part::V,
        Part::O,
        Part::FfnNorm,
        Part::Gate,
        Part::Up,
        Part::Down,
    ];

    fn hf(self) -> &'static str {
        match self {
            Part::AttnNorm => "input_layernorm",
            Part::Q => "self_attn.q_proj",
            Part::K => "self_attn.k_proj",
            Part::V => "self_attn.v_proj",
            Part::O => "self_attn.o_proj",
            Part::FfnNorm => "post_attention_layernorm",
            Part::Gate => "mlp.gate_proj",
            Part::Up => "mlp.up_proj",
            Part::Down => "mlp.down_proj",
        }
    }

    fn gguf(self) -> &'static str {
        match self {
            Part::AttnNorm => "attn_norm",
            Part::Q => "attn_q",
            Part::K => "attn_k",
            Part::V => "attn_v",
            Part::O => "attn_output",
            Part::FfnNorm => "ffn_norm",
            Part::Gate => "ffn_gate",
            Part::Up => "ffn_up",
            Part::Down => "ffn_down",
        }
    }
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
    /// The naming convention found in the file.
    pub naming: Naming,
    /// How RoPE pairs dimensions for these q/k weights.
    pub rope_layout: RopeLayout,
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
/// `None` when it is used in place. [`Weights::load`] and the memory plan both ask this.
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
        _ => None,
    })
}

fn linear<'s: 'a, 'a>(
    src: &dyn TensorSource<'s>,
    name: &str,
    rows: usize,
    k: usize,
    format: WeightFormat,
    place: &mut Place<'a>,
) -> Result<Linear<'a>> {
    let view = src.tensor(name)?;
    check_shape(name, &view, &[rows, k])?;
    let ctx = |e: Error| e.context(format_args!("tensor {name:?}"));
    let (dtype, bytes) =
        match conversion(view.dtype, view.data.as_ptr(), rows, k, format).map_err(ctx)? {
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
        Self::load_placed(config, src, format, &mut Place::heap())
    }

    /// [`Weights::load`] with every buffer it makes (norms, converted matrices) taken from
    /// `place`, in the order [`plan_weights`] counts them.
    pub(crate) fn load_placed<'s: 'a>(
        config: &ModelConfig,
        src: &dyn TensorSource<'s>,
        format: WeightFormat,
        place: &mut Place<'a>,
    ) -> Result<Self> {
        config.validate()?;
        let naming = Naming::detect(src)?;
        let c = config;
        let (h, q_rows, kv_rows) =
            (c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
        let embedding = linear(src, naming.embedding(), c.vocab_size, h, format, place)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(c.num_hidden_layers)
            .map_err(|_| Error::resource_exhausted("layer table"))?;
        for l in 0..c.num_hidden_layers {
            let name = |p| naming.layer_name(l, p);
            let mut lin = |p, rows, k| linear(src, name(p).as_str(), rows, k, format, place);
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
            let mut vec = |p| {
                let n = name(p);
                Vector::from_view(n.as_str(), &src.tensor(n.as_str())?, h, place)
            };
            let (attn_norm, ffn_norm) = (vec(Part::AttnNorm)?, vec(Part::FfnNorm)?);
            layers.push(LayerWeights { attn_norm, q, k, v, o, ffn_norm, gate, up, down });
        }
        let final_norm =
            Vector::from_view(naming.final_norm(), &src.tensor(naming.final_norm())?, h, place)?;
        let lm_head = if has_lm_head(c, naming, src) {
            Some(linear(src, naming.lm_head(), c.vocab_size, h, format, place)?)
        } else {
            None
        };
        let rope_layout = match naming {
            Naming::HuggingFace => RopeLayout::RotateHalf,
            Naming::Gguf => RopeLayout::Interleaved,
        };
        Ok(Weights { embedding, layers, final_norm, lm_head, naming, rope_layout })
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

    /// Bytes the weights occupy (borrowed or owned), norms included.
    pub fn size_bytes(&self) -> usize {
        let norms = self.final_norm.as_slice().len() * 4
            + self
                .layers
                .iter()
                .map(|l| (l.attn_norm.as_slice().len() + l.ffn_norm.as_slice().len()) * 4)
                .sum::<usize>();
        self.matrices().map(|m| m.size_bytes()).sum::<usize>() + norms
    }
}

/// `true` when the output head is its own matrix: the config does not tie it and the file has
/// it (an untied config without the tensor falls back to the embedding).
fn has_lm_head<'a>(c: &ModelConfig, naming: Naming, src: &dyn TensorSource<'a>) -> bool {
    !c.tie_word_embeddings && src.tensor(naming.lm_head()).is_ok()
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

/// Counts the buffers loading `config`'s weights makes, calling `each(bytes)` per buffer in
/// load order. With `src`, each matrix's stored dtype and alignment decide (as
/// [`Weights::load`] will); without, every matrix is taken to be stored as aligned f32 / f16 /
/// bf16 (Hugging Face's files) and the head to be present unless tied. Allocates nothing
/// (names are built inline), apart from what `src` does to report a missing head.
///
/// # Errors
///
/// As [`Weights::load`] for tensors missing or mis-shaped in `src`; overflow as
/// [`crate::Code::ResourceExhausted`].
pub(crate) fn plan_weights<'a>(
    config: &ModelConfig,
    format: WeightFormat,
    src: Option<&dyn TensorSource<'a>>,
    mut each: impl FnMut(usize) -> Result<()>,
) -> Result<WeightBuffers> {
    config.validate()?;
    let c = config;
    let naming = match src {
        Some(s) => Naming::detect(s)?,
        None => Naming::HuggingFace,
    };
    let (h, q_rows, kv_rows, i) = (
        c.hidden_size,
        c.num_attention_heads * c.head_dim,
        c.num_key_value_heads * c.head_dim,
        c.intermediate_size,
    );
    let mut out = WeightBuffers::default();
    // Bytes loading makes for one matrix (0 when it is used in place).
    let matrix = |name: &str, rows: usize, k: usize| -> Result<usize> {
        let conv = match src {
            Some(s) => {
                let view = s.tensor(name)?;
                check_shape(name, &view, &[rows, k])?;
                conversion(view.dtype, view.data.as_ptr(), rows, k, format)?
            }
            None => conversion(DType::F32, core::ptr::null(), rows, k, format)?,
        };
        Ok(conv.map_or(0, |(_, bytes)| bytes))
    };
    let mut add = |field: &mut usize, bytes: usize| -> Result<()> {
        if bytes != 0 {
            *field = field.checked_add(bytes).ok_or_else(overflow)?;
            each(bytes)?;
        }
        Ok(())
    };
    add(&mut out.converted, matrix(naming.embedding(), c.vocab_size, h)?)?;
    let norm = h.checked_mul(4).ok_or_else(overflow)?;
    for l in 0..c.num_hidden_layers {
        for (p, rows, k) in [
            (Part::Q, q_rows, h),
            (Part::K, kv_rows, h),
            (Part::V, kv_rows, h),
            (Part::O, h, q_rows),
            (Part::Gate, i, h),
            (Part::Up, i, h),
            (Part::Down, h, i),
        ] {
            add(&mut out.converted, matrix(naming.layer_name(l, p).as_str(), rows, k)?)?;
        }
        add(&mut out.norms, norm)?;
        add(&mut out.norms, norm)?;
    }
    add(&mut out.norms, norm)?;
    let head = match src {
        Some(s) => has_lm_head(c, naming, s),
        None => !c.tie_word_embeddings,
    };
    if head {
        add(&mut out.converted, matrix(naming.lm_head(), c.vocab_size, h)?)?;
    }
    Ok(out)
}

fn overflow() -> Error {
    Error::resource_exhausted("weight buffer sizes overflow usize")
}
