//! x86_64 kernels: AVX2 + FMA + F16C (`avx2_f32.rs`: f32 / f16 / bf16 / quantized weights
//! with f32 activations; `avx2_q8.rs`: int8 activations and Q8 quantization for the
//! 32-element types; `avx2_k.rs`: int8 activations for the K-quants), and the tiers built on
//! AVX2's table: AVX-VNNI and AVX-512 (`avx512_q8.rs`: Q8_0 / Q4_0 / Q4_1 int8 kernels on
//! `vpdpbusd`); `attention.rs`: the AVX2 loops of [`crate::ops::attention_head`].
//!
//! Compiled only where SSE2 is a target feature (not on the soft-float
//! `x86_64-unknown-none`); the entry points are `#[target_feature]` wrappers around
//! `#[inline(always)]` bodies and are reachable only through [`super::table`] after detection.

use super::{Isa, Kernels, SCALAR};
use crate::tensor::DType;

pub(crate) mod attention;
mod avx2_f32;
mod avx2_k;
mod avx2_q8;
mod avx512_q8;

/// The AVX2 table: every entry with an AVX2 body overridden, the rest scalar.
pub(crate) const AVX2: Kernels = SCALAR
    .for_isa(Isa::Avx2)
    .with_f32(DType::F32, avx2_f32::matmul_f32)
    .with_f32(DType::F16, avx2_f32::matmul_f16)
    .with_f32(DType::BF16, avx2_f32::matmul_bf16)
    .with_f32(DType::Q8_0, avx2_f32::matmul_q8_0)
    .with_f32(DType::Q4_0, avx2_f32::matmul_q4_0)
    .with_f32(DType::Q4_1, avx2_f32::matmul_q4_1)
    .with_q8(DType::Q8_0, avx2_q8::matmul_q8_0_q8)
    .with_q8(DType::Q4_0, avx2_q8::matmul_q4_0_q8)
    .with_q8(DType::Q4_1, avx2_q8::matmul_q4_1_q8)
    .with_q8(DType::Q5_0, avx2_q8::matmul_q5_0_q8)
    .with_q8(DType::Q5_1, avx2_q8::matmul_q5_1_q8)
    .with_q8(DType::IQ4_NL, avx2_q8::matmul_iq4_nl_q8)
    .with_q8(DType::Q4_K, avx2_k::matmul_q4_k_q8k)
    .with_q8(DType::Q5_K, avx2_k::matmul_q5_k_q8k)
    .with_q8(DType::Q6_K, avx2_k::matmul_q6_k_q8k)
    .with_quantize_q8(avx2_q8::quantize_q8);

/// The AVX-VNNI table: AVX2's, with the int8 kernels on the 256-bit `vpdpbusd`.
pub(crate) const AVX_VNNI: Kernels = AVX2
    .for_isa(Isa::AvxVnni)
    .with_q8(DType::Q8_0, avx512_q8::vnni_q8_0_q8)
    .with_q8(DType::Q4_0, avx512_q8::vnni_q4_0_q8)
    .with_q8(DType::Q4_1, avx512_q8::vnni_q4_1_q8);

/// The AVX-512 table: AVX2's, with the int8 kernels on 512-bit `vpdpbusd` (four weight rows
/// per activation load).
pub(crate) const AVX512: Kernels = AVX2
    .for_isa(Isa::Avx512)
    .with_q8(DType::Q8_0, avx512_q8::avx512_q8_0_q8)
    .with_q8(DType::Q4_0, avx512_q8::avx512_q4_0_q8)
    .with_q8(DType::Q4_1, avx512_q8::avx512_q4_1_q8);

use core::arch::x86_64::*;

/// The fixed horizontal sum `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, the same
/// tree as [`super::scalar::hsum8`].
///
/// # Safety
///
/// AVX must be available (callers are `#[target_feature(enable = "avx2,...")]`).
#[inline(always)]
unsafe fn hsum_ps(v: __m256) -> f32 {
    // SAFETY: register-only AVX/SSE3 intrinsics; AVX is available (caller contract).
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// `-1` × 8 then `0` × 8: loading 8 lanes at `8 - len` gives a mask of `len` lanes.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// A lane mask selecting the first `len <= 8` lanes.
///
/// # Safety
///
/// AVX must be available; `len <= 8`.
#[inline(always)]
unsafe fn mask(len: usize) -> __m256i {
    // SAFETY: `8 - len <= 8`, so 8 lanes from there stay inside `MASKS`.
    unsafe { _mm256_loadu_si256(MASKS.as_ptr().add(8 - len).cast()) }
}
