//! The memory plan's view of loading: which buffers [`super::Weights::load_placed`] will
//! make and how large they are, counted without loading ([`plan_weights`]).

use crate::error::{Error, Result};
use crate::format::TensorSource;
use crate::model::arch::{ModelFormat, Part};
use crate::model::config::ModelConfig;
use crate::tensor::DType;

use super::tensors::{check_shape, conversion, Repack};
use super::{detect_container, layer_vectors, output_view, rope_freqs_view, WeightFormat};

/// The buffers [`super::Weights::load_placed`] makes, in its order: norm vectors (f32 copies) and
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
/// dtype and alignment decide (as [`super::Weights::load`] will); without, every matrix is taken to
/// be stored as aligned f32 / f16 / bf16 (Hugging Face's files) and the head to be present
/// unless tied, so all layers are alike and the cost does not grow with the layer count.
/// Allocates nothing (names are built inline), apart from what `src` does to report a
/// missing head.
///
/// # Errors
///
/// As [`super::Weights::load`] for tensors missing or mis-shaped in `src`; overflow as
/// [`crate::Code::ResourceExhausted`].
pub(crate) fn plan_weights<'a>(
    config: &ModelConfig,
    format: WeightFormat,
    repack: Repack,
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
    let matrix = |name: &str, rows: usize, k: usize, repack: Repack| -> Result<usize> {
        let conv = match src {
            Some(s) => {
                let view = s.tensor(name)?;
                check_shape(name, &view, &[rows, k])?;
                conversion(view.dtype, view.data.as_ptr(), rows, k, format, repack)?
            }
            None => conversion(DType::F32, core::ptr::null(), rows, k, format, repack)?,
        };
        Ok(conv.map_or(0, |c| c.bytes))
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
    add_n(
        &mut out.converted,
        matrix(
            names.embedding,
            c.vocab_size,
            h,
            if c.tie_word_embeddings { repack } else { Repack::Off },
        )?,
        1,
    )?;
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
        add_n(&mut out.converted, matrix(names.output, c.vocab_size, h, repack)?, 1)?;
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
