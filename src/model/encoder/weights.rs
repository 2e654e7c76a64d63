//! Loading an encoder's weights: tensor lookup by family naming (transformers' BERT,
//! Nomic's nomic-bert, llama.cpp's GGUF), shape checks, and matrices kept as stored or
//! converted at load ([`WeightFormat`]).

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::config::{EncoderArch, EncoderConfig};
use super::{EncoderWeights, Layer, Mat, MatBytes};
use crate::error::{Error, Result};
use crate::format::{TensorSource, TensorView};
use crate::mem::AlignedBlock;
use crate::model::WeightFormat;
use crate::ops::{self, Activations, Matrix};
use crate::tensor::DType;

pub(super) fn check_shape(name: &str, t: &TensorView<'_>, want: &[usize]) -> Result<()> {
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
pub(super) fn converted_bytes(
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
pub(super) struct Keep {
    pub(super) format: WeightFormat,
    pub(super) dry: bool,
}

/// Rows `part` of the `rows × k` matrix `name`, kept as `keep` says.
pub(super) fn matrix_part<'a>(
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

pub(super) fn matrix<'a>(
    src: &dyn TensorSource<'a>,
    name: &str,
    rows: usize,
    k: usize,
    keep: Keep,
) -> Result<Mat<'a>> {
    matrix_part(src, name, (rows, k), 0..rows, keep)
}

pub(super) fn vector(src: &dyn TensorSource<'_>, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
    let t = src.tensor(name)?;
    check_shape(name, &t, dims)?;
    let mut v = vec![0f32; dims.iter().product()];
    t.dequantize_into(&mut v).map_err(|e| e.context(name))?;
    Ok(v)
}

/// Where a family's tensors are, by name.
#[derive(Clone, Copy)]
pub(super) enum Names {
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

    pub(super) fn load_keep(
        config: EncoderConfig,
        src: &dyn TensorSource<'a>,
        keep: Keep,
    ) -> Result<Self> {
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
}
