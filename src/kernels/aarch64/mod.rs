//! aarch64 kernels: the tiers' shared machinery, per tier file, and the tables. NEON
//! (`neon_f32.rs`: the f32-activation lanes and the float weights' decoders; `neon_q8.rs`: the
//! 32-element types' int8 tier ([`neon_q8::QBlock`]), with `SDOT` where the `dotprod`
//! extension is present and a widening-multiply fallback where it is not, and the Q8
//! quantizer; `neon_k.rs`: the K-quants' int8 tier ([`neon_k::KQuant`], [`neon_k::KScales`])
//! on the same two instruction choices). The int8 products run on the kernel frame
//! ([`super::frame`]). Each quantized type's own bodies are in `kernels/types/<type>.rs`; the
//! tables take them through `kernels/types/mod.rs`'s type list.
//!
//! `vdotq_s32` is still unstable, so `SDOT` is inline assembly inside
//! `#[target_feature(enable = "neon,dotprod")]` functions; f16 widening is inline `FCVTL`
//! (the `float16x4_t` intrinsics are unstable too). Entry points are `#[target_feature]`
//! wrappers around `#[inline(always)]` bodies, reachable only through [`super::table`].

use core::arch::aarch64::*;
use core::arch::asm;

use super::types::aarch64 as types;
use super::{Isa, Kernels, SCALAR};
use crate::tensor::DType;

pub(crate) mod neon_f32;
pub(crate) mod neon_k;
pub(crate) mod neon_q8;

/// The aarch64 [`super::frame::Prefetch`]: `PRFM PLDL1KEEP`.
pub(crate) struct NeonPrefetch;

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
pub(crate) const NEON: Kernels = types::neon(
    SCALAR
        .for_isa(Isa::Neon)
        .with_f32(DType::F32, neon_f32::matmul_f32)
        .with_f32(DType::F16, neon_f32::matmul_f16)
        .with_f32(DType::BF16, neon_f32::matmul_bf16)
        .with_quantize_q8(neon_q8::quantize_q8),
);

/// The NEON + `SDOT` table: the int8 entries use `SDOT`, the rest is [`NEON`]'s.
pub(crate) const NEON_DOTPROD: Kernels = types::neon_dotprod(NEON.for_isa(Isa::NeonDotprod));

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
pub(crate) unsafe fn f16_splat(p: *const u8) -> float32x4_t {
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
