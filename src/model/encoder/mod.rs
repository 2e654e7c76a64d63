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
//!
//! Files: `config.rs` (the configuration from `config.json` or GGUF metadata), `weights.rs`
//! (loading and shape checks), `forward.rs` (the forward pass and pooling), `plan.rs` (the
//! memory plan), `folder.rs` (the sentence-transformers folder and [`Encoder`], feature
//! `tokenizer`), `wordpiece.rs` (the GGUF's WordPiece vocabulary as a tokenizer).

pub mod config;
#[cfg(feature = "tokenizer")]
mod folder;
mod forward;
mod plan;
mod weights;
#[cfg(feature = "tokenizer")]
mod wordpiece;

use alloc::vec::Vec;

pub use config::{EncoderArch, EncoderConfig, HiddenAct, Pooling};
#[cfg(feature = "tokenizer")]
pub use folder::{Embedded, Encoder, EncoderFiles, EncoderOptions};
pub use plan::EncoderMemoryPlan;
#[cfg(feature = "tokenizer")]
pub use wordpiece::wordpiece_from_gguf;

use crate::error::Result;
use crate::mem::AlignedBlock;
use crate::ops::{Activations, Matrix};
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
/// take) unless [`WeightFormat::Q8_0`](crate::model::WeightFormat::Q8_0) asks for them quantized at load; the token embedding
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

impl<'a> EncoderWeights<'a> {
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
}

/// Scales `v` to unit L2 norm: `v / max(‖v‖₂, 1e-12)` (PyTorch's `F.normalize`), the norm
/// summed in f64.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = libm::sqrt(v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>()).max(1e-12);
    for x in v.iter_mut() {
        *x = (*x as f64 / norm) as f32;
    }
}
