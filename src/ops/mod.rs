//! The layer math on slices: GEMV/GEMM entry points over any weight dtype, the fused products
//! the decoder runs, RMSNorm, RoPE, activations and attention.
//!
//! Shapes: a weight [`Matrix`] is `rows × k`, row-major (one output feature per row, as
//! PyTorch's `nn.Linear.weight`). GEMV computes `y[rows] = W · x[k]`; GEMM computes
//! `Y[n × rows] = X[n × k] · Wᵀ`. Work is split over output rows only, never over K, so
//! results are bit-identical for every schedule and thread count (`docs/architecture.md`,
//! "Contracts" → "Bit-identity"; how work is split: "Threads and schedules").
//!
//! Parallel thresholds: a product runs on the executor only when it has more than one thread
//! and the matrix has at least [`PAR_ROWS_F32`] (64) rows for f32 / f16 / bf16 weights, or
//! [`PAR_ROWS_QUANT`] (32) rows for quantized weights; below that its body runs inline on the
//! calling thread (dispatch would cost more than the rows). The fused products
//! ([`gemm_fused`], and the decoder's gate/up loop) count the rows of all their matrices
//! together and use [`PAR_ROWS_QUANT`] only when every matrix is quantized.
//!
//! The element-wise layer math (RMSNorm, LayerNorm, RoPE, softmax, SiLU / SwiGLU, GELU /
//! GeGLU) and [`attention_head`] work on plain f32 slices on the calling thread;
//! [`attention_layer`] parallelises a layer's attention across heads (and query tiles or cache
//! segments), running inline below 2^15 multiply-adds. Everything here reduces in a fixed
//! order, so results do not
//! depend on how the caller splits the work.
//!
//! Files: `matmul.rs` ([`Matrix`], [`Activations`], [`gemv`], [`gemm`]), `fused.rs`
//! ([`gemm_fused`] and the decoder's gate/up and pre-quantized products), `outliers.rs` (the
//! int8 outlier correction), `vector.rs` ([`dot`], [`axpy`], [`add_assign`]), `norm.rs`
//! (RMSNorm), `rope.rs` (RoPE), `activation.rs` (softmax and the GLUs), `attention.rs`
//! ([`attention_group`], [`attention_head`]; a decoder layer's schedules, [`attention_layer`],
//! in `attention/layer.rs`); for the encoders (`crate::model::encoder`): `layer_norm.rs`
//! ([`layer_norm`], LayerNorm with bias) and `gelu.rs` ([`gelu_erf`]).

mod activation;
mod attention;
mod fused;
mod gelu;
mod layer_norm;
mod matmul;
mod norm;
mod outliers;
mod rope;
mod vector;

pub use activation::{
    expf, geglu_tanh, geglu_tanh_on, gelu_tanh, silu, softcap, softmax, swiglu, swiglu_on,
};
pub(crate) use attention::BidirAttention;
pub use attention::{
    attention_decode, attention_group, attention_group_on, attention_head, attention_layer,
    decode_attention_floats, layer_attention_floats, DecodeRow, DecodeShape, GroupShape, KvRows,
    LayerAttention, ATT_PARTS, KV_SEGMENT, ROW_TILE,
};
pub use fused::gemm_fused;
pub(crate) use fused::{gemm_glu, gemm_q8, GluQuant};
pub use gelu::{bias_gelu_erf, gelu_erf, gelu_erf_in_place};
pub use layer_norm::{layer_norm, layer_norm_in_place};
pub use matmul::{
    dequantize_row, gemm, gemm_with, gemv, scratch_bytes, Activations, Matrix, PAR_ROWS_F32,
    PAR_ROWS_QUANT,
};
pub use norm::{rms_norm, rms_norm_in_place};
pub use outliers::OUTLIER_RATIO;
pub use rope::{rope, rope_cos_sin, rope_inv_freq, RopeLayout};
pub use vector::{add_assign, axpy, dot};

/// Whether `a` is within `tol` of `b`, relative to `1 + |b|` (the unit tests' yardstick).
#[cfg(test)]
fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}
