//! [`Weights`]: a model's tensors, looked up by name in a [`TensorSource`] and checked
//! against the [`ModelConfig`], ready for the kernels.
//!
//! Both containers are understood, with the names and conventions of the config's family
//! ([`crate::model::arch::ArchSpec`]): Hugging Face (`model.layers.3.self_attn.q_proj.weight`)
//! and GGUF / llama.cpp (`blk.3.attn_q.weight`). Matrices stay where the file put them (mmap or
//! `&'static [u8]`) when the kernels take their dtype as it is — aligned f32, f16, bf16, Q8_0,
//! Q4_0, Q4_1; a misaligned f32 matrix is copied once into an aligned block. With
//! [`WeightFormat::Q8_0`], f32 / f16 / bf16 matrices are quantized to Q8_0 at load instead.
//! Norm vectors and biases are small and always widened to f32; norm weights get the family's
//! offset (Gemma's `1 + w`) added at load, so the forward pass multiplies by them as they are.
//!
//! GGUF Llama files store the q/k projection rows permuted (llama.cpp's converter pairs RoPE
//! dimensions `i` and `i + d/2` as adjacent rows). The weights are used as stored and RoPE is
//! applied interleaved ([`RopeLayout::Interleaved`]), which gives the same attention scores as
//! Hugging Face's rotate-half on un-permuted rows; [`crate::model::arch::llama::unpermute_qk_rows`]
//! undoes the permutation for tools that write Hugging Face files.
//!
//! The output head: with `tie_word_embeddings` the embedding is the head and an `lm_head`
//! in the file is ignored (transformers ties them the same way); without it the file's
//! output matrix (`lm_head.weight` / `output.weight`) is required.

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::format::{TensorSource, TensorView};
use crate::kernels::quant::quantize_row_q8_0;
use crate::mem::AlignedBlock;
use crate::model::arch::{ArchSpec, Container, Part, TensorNames};
use crate::model::config::ModelConfig;
use crate::ops::{Matrix, RopeLayout};
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

/// A weight matrix, `rows × k` row-major (PyTorch's `nn.Linear.weight`).
#[derive(Debug)]
pub struct Linear<'a> {
    name: String,
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
        &self.name
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
    fn from_view(name: &str, view: &TensorView<'_>, len: usize, offset: f32) -> Result<Self> {
        check_shape(name, view, &[len])?;
        let mut block = AlignedBlock::try_new(len * 4)?;
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

/// Which container's tensor names a file uses.
pub type Naming = Container;

/// Detects the container from the embedding's name under `arch`'s naming.
///
/// # Errors
///
/// [`crate::Code::NotFound`] if neither container's embedding name exists.
pub fn detect_container<'a>(arch: &ArchSpec, src: &dyn TensorSource<'a>) -> Result<Container> {
    let (hf, gguf) = (arch.hf_names.embedding, arch.gguf_names.embedding);
    if src.tensor(hf).is_ok() {
        Ok(Container::HuggingFace)
    } else if src.tensor(gguf).is_ok() {
        Ok(Container::Gguf)
    } else {
        Err(Error::not_found(format_args!(
            "no token embedding: neither {hf:?} (Hugging Face) nor {gguf:?} (GGUF) is in the file"
        )))
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
    /// The container whose names the file uses.
    pub naming: Naming,
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

fn linear<'a>(
    src: &dyn TensorSource<'a>,
    name: &str,
    rows: usize,
    k: usize,
    format: WeightFormat,
) -> Result<Linear<'a>> {
    let view = src.tensor(name)?;
    check_shape(name, &view, &[rows, k])?;
    let ctx = |e: Error| e.context(format_args!("tensor {name:?}"));
    let (dtype, bytes) = match (view.dtype, format) {
        (DType::F32 | DType::F16 | DType::BF16, WeightFormat::Q8_0) if k % 32 == 0 => {
            let row_bytes = DType::Q8_0.row_bytes(k).map_err(ctx)?;
            let total = row_bytes.checked_mul(rows).ok_or_else(|| {
                Error::resource_exhausted(format_args!("tensor {name:?}: Q8_0 size overflows"))
            })?;
            let mut block = AlignedBlock::try_new(total)?;
            let mut row = Vec::new();
            row.try_reserve_exact(k)
                .map_err(|_| Error::resource_exhausted(format_args!("{k} floats")))?;
            row.resize(k, 0f32);
            let elem = view.dtype.block_bytes();
            for (r, out) in block.as_mut_slice().chunks_exact_mut(row_bytes).enumerate() {
                let one = TensorView {
                    dtype: view.dtype,
                    shape: crate::tensor::Shape::new(&[k])?,
                    data: &view.data[r * k * elem..(r + 1) * k * elem],
                };
                one.dequantize_into(&mut row).map_err(ctx)?;
                quantize_row_q8_0(&row, out).map_err(ctx)?;
            }
            (DType::Q8_0, Bytes::Owned(block))
        }
        (DType::F32, _) if view.data.as_ptr() as usize % 4 != 0 => {
            (DType::F32, Bytes::Owned(AlignedBlock::try_from_slice(view.data)?))
        }
        (dt, _) => (dt, Bytes::Borrowed(view.data)),
    };
    let lin = Linear { name: name.into(), dtype, rows, k, bytes };
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
        config.validate()?;
        let c = config;
        let arch = c.arch;
        let naming = detect_container(arch, src)?;
        let names: &TensorNames = arch.names(naming);
        let offset = arch.norm_offset(naming);
        let (h, hd, q_rows, kv_rows) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads * c.head_dim,
            c.num_key_value_heads * c.head_dim,
        );
        let embedding = linear(src, names.embedding, c.vocab_size, h, format)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(c.num_hidden_layers)
            .map_err(|_| Error::resource_exhausted("layer table"))?;
        for l in 0..c.num_hidden_layers {
            let name = |p| names.layer(l, p);
            let lin = |p, rows, k| linear(src, &name(p), rows, k, format);
            let vec_of =
                |p, len, off| Vector::from_view(&name(p), &src.tensor(&name(p))?, len, off);
            let norm = |p| vec_of(p, h, offset);
            let qkv_bias = if arch.qkv_bias {
                Some([
                    vec_of(Part::QBias, q_rows, 0.0)?,
                    vec_of(Part::KBias, kv_rows, 0.0)?,
                    vec_of(Part::VBias, kv_rows, 0.0)?,
                ])
            } else {
                None
            };
            let qk_norm = if arch.qk_norm {
                Some([vec_of(Part::QNorm, hd, offset)?, vec_of(Part::KNorm, hd, offset)?])
            } else {
                None
            };
            let sandwich = |p| if arch.sandwich_norms { norm(p).map(Some) } else { Ok(None) };
            layers.push(LayerWeights {
                attn_norm: norm(Part::AttnNorm)?,
                q: lin(Part::Q, q_rows, h)?,
                k: lin(Part::K, kv_rows, h)?,
                v: lin(Part::V, kv_rows, h)?,
                o: lin(Part::O, h, q_rows)?,
                qkv_bias,
                qk_norm,
                post_attn_norm: sandwich(Part::PostAttnNorm)?,
                ffn_norm: norm(Part::FfnNorm)?,
                post_ffn_norm: sandwich(Part::PostFfnNorm)?,
                gate: lin(Part::Gate, c.intermediate_size, h)?,
                up: lin(Part::Up, c.intermediate_size, h)?,
                down: lin(Part::Down, h, c.intermediate_size)?,
            });
        }
        let final_norm =
            Vector::from_view(names.final_norm, &src.tensor(names.final_norm)?, h, offset)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            let head = linear(src, names.output, c.vocab_size, h, format).map_err(|e| {
                if e.code() == crate::Code::NotFound {
                    Error::not_found(format_args!(
                        "tensor {:?} is not in the file, and tie_word_embeddings is false \
                         (the output head is not the embedding)",
                        names.output
                    ))
                } else {
                    e
                }
            })?;
            Some(head)
        };
        let rope_freqs = match names.rope_freqs {
            Some(n) => match src.tensor(n) {
                Ok(view) => Some(Vector::from_view(n, &view, hd / 2, 0.0)?),
                Err(e) if e.code() == crate::Code::NotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let rope_layout = arch.rope_layout(naming);
        Ok(Weights { embedding, layers, final_norm, lm_head, naming, rope_layout, rope_freqs })
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
