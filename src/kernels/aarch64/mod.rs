//! aarch64 kernels: NEON (`neon_f32.rs`: f32 / f16 / bf16 / every quantized type with f32
//! activations; `neon_q8.rs`: the 32-element types with int8 activations, with `SDOT` where
//! the `dotprod` extension is present and a widening-multiply fallback where it is not, and
//! the Q8 quantizer; `neon_k.rs`: the K-quants' decoders and their int8 product with Q8_K
//! activations, on the same two instruction choices). The int8 products run on the kernel
//! frame ([`super::frame`]).
//!
//! `vdotq_s32` is still unstable, so `SDOT` is inline assembly inside
//! `#[target_feature(enable = "neon,dotprod")]` functions; f16 widening is inline `FCVTL`
//! (the `float16x4_t` intrinsics are unstable too). Entry points are `#[target_feature]`
//! wrappers around `#[inline(always)]` bodies, reachable only through [`super::table`].

use core::arch::aarch64::*;
use core::arch::asm;

use super::{Isa, Kernels, SCALAR};
use crate::tensor::DType;

mod neon_f32;
mod neon_k;
mod neon_q8;

/// The aarch64 [`super::frame::Prefetch`]: `PRFM PLDL1KEEP`.
pub(super) struct NeonPrefetch;

impl super::frame::Prefetch for NeonPrefetch {
    #[inline(always)]
    unsafe fn line(p: *const u8) {
        // SAFETY: `PRFM` is a hint: it reads nothing architecturally and never faults,
        // whatever the address.
        unsafe {
            asm!(
                "prfm pldl1keep, [{p}]",
                p = in(reg) p,
                options(nostack, preserves_flags, readonly)
            );
        }
    }
}

/// The NEON table (no `dotprod`): every entry with a NEON body overridden, the rest scalar.
pub(crate) const NEON: Kernels = SCALAR
    .for_isa(Isa::Neon)
    .with_f32(DType::F32, neon_f32::matmul_f32)
    .with_f32(DType::F16, neon_f32::matmul_f16)
    .with_f32(DType::BF16, neon_f32::matmul_bf16)
    .with_f32(DType::Q8_0, neon_f32::matmul_q8_0)
    .with_f32(DType::Q4_0, neon_f32::matmul_q4_0)
    .with_f32(DType::Q4_1, neon_f32::matmul_q4_1)
    .with_f32(DType::Q5_0, neon_f32::matmul_q5_0)
    .with_f32(DType::Q5_1, neon_f32::matmul_q5_1)
    .with_f32(DType::IQ4_NL, neon_f32::matmul_iq4_nl)
    .with_f32(DType::Q2_K, neon_f32::matmul_q2_k)
    .with_f32(DType::Q3_K, neon_f32::matmul_q3_k)
    .with_f32(DType::Q4_K, neon_f32::matmul_q4_k)
    .with_f32(DType::Q5_K, neon_f32::matmul_q5_k)
    .with_f32(DType::Q6_K, neon_f32::matmul_q6_k)
    .with_q8(DType::Q8_0, neon_q8::matmul_q8_0_q8_neon)
    .with_q8(DType::Q4_0, neon_q8::matmul_q4_0_q8_neon)
    .with_q8(DType::Q4_1, neon_q8::matmul_q4_1_q8_neon)
    .with_q8(DType::Q5_0, neon_q8::matmul_q5_0_q8_neon)
    .with_q8(DType::Q5_1, neon_q8::matmul_q5_1_q8_neon)
    .with_q8(DType::IQ4_NL, neon_q8::matmul_iq4_nl_q8_neon)
    .with_q8(DType::Q2_K, neon_k::matmul_q2_k_q8k_neon)
    .with_q8(DType::Q3_K, neon_k::matmul_q3_k_q8k_neon)
    .with_q8(DType::Q4_K, neon_k::matmul_q4_k_q8k_neon)
    .with_q8(DType::Q5_K, neon_k::matmul_q5_k_q8k_neon)
    .with_q8(DType::Q6_K, neon_k::matmul_q6_k_q8k_neon)
    .with_quantize_q8(neon_q8::quantize_q8);

/// The NEON + `SDOT` table: the int8 entries use `SDOT`, the rest is [`NEON`]'s.
pub(crate) const NEON_DOTPROD: Kernels = NEON
    .for_isa(Isa::NeonDotprod)
    .with_q8(DType::Q8_0, neon_q8::matmul_q8_0_q8_sdot)
    .with_q8(DType::Q4_0, neon_q8::matmul_q4_0_q8_sdot)
    .with_q8(DType::Q4_1, neon_q8::matmul_q4_1_q8_sdot)
    .with_q8(DType::Q5_0, neon_q8::matmul_q5_0_q8_sdot)
    .with_q8(DType::Q5_1, neon_q8::matmul_q5_1_q8_sdot)
    .with_q8(DType::IQ4_NL, neon_q8::matmul_iq4_nl_q8_sdot)
    .with_q8(DType::Q2_K, neon_k::matmul_q2_k_q8k_sdot)
    .with_q8(DType::Q3_K, neon_k::matmul_q3_k_q8k_sdot)
    .with_q8(DType::Q4_K, neon_k::matmul_q4_k_q8k_sdot)
    .with_q8(DType::Q5_K, neon_k::matmul_q5_k_q8k_sdot)
    .with_q8(DType::Q6_K, neon_k::matmul_q6_k_q8k_sdot);

/// Four f16 (bits) widened to f32 with `FCVTL` (exact).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn cvt_f16x4(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only base-ARMv8 AdvSIMD instruction.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {i:v}.4h",
            o = lateout(vreg) out,
            i = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}

/// The f16 at `p` broadcast to 4 f32 lanes.
///
/// # Safety
///
/// 2 readable bytes at `p`; NEON available.
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> float32x4_t {
    // SAFETY: 2 bytes readable (caller contract).
    unsafe { cvt_f16x4(vdup_n_u16(p.cast::<u16>().read_unaligned())) }
}

/// The f16 at `p` as f32.
///
/// # Safety
///
/// 2 readable bytes at `p`; NEON available.
#[inline(always)]
unsafe fn f16_scalar(p: *const u8) -> f32 {
    // SAFETY: forwarded caller contract.
    unsafe { vgetq_lane_f32::<0>(f16_splat(p)) }
}
