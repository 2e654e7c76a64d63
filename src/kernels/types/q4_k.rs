//! Q4_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q4_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q4_K's entries to a table ([`super`]'s type list chains them).

/// Q4_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q4K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q4K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;

    k_block! {
        Q4K, BlockQ4K;
    }

    impl K256 for Q4K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: 144-byte super-block: scales at 4..16, values at 16..144 (caller contract).
            unsafe {
                decode_k4(blk.add(BlockQ4K::SCALES_OFFSET), blk.add(BlockQ4K::QS_OFFSET), |_| None)
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q4_k_q8k, Q4K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q4_k_q8k, Q4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q4K;

    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q4K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 144-byte super-block: scales at 4..16, values at 16..144 (caller contract).
            unsafe {
                decode_k4::<Nb>(
                    blk.add(BlockQ4K::SCALES_OFFSET),
                    blk.add(BlockQ4K::QS_OFFSET),
                    None,
                )
            }
        }

        const SUB32: bool = true;

        #[inline(always)]
        unsafe fn scales4(blk: [*const u8; 4]) -> Scales4 {
            // SAFETY: forwarded caller contract.
            unsafe { k4_scales4(blk) }
        }

        #[inline(always)]
        unsafe fn values<Nb: Nibbles>(blk: *const u8) -> [__m512i; 4] {
            // SAFETY: values at 16..144 (caller contract).
            unsafe { values_k4::<Nb>(blk.add(BlockQ4K::QS_OFFSET), None) }
        }
    }

    entries! {
        avx512 {
            avx512_q4_k_q8k, Q4K;
        }
        gfni {
            gfni_q4_k_q8k, Q4K;
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ4K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q4_k::BYTES);
                k4_values(blk.add(BlockQ4K::QS_OFFSET), u, _mm256_setzero_si256())
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract).
            unsafe { k4_scales(row.add(g * crate::quant::q4_k::BYTES), out) }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q4_k, BlockQ4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;

    use core::arch::x86_64::*;

    struct Q4KW;

    impl W512 for Q4KW {
        const BYTES: usize = quant::q4_k::BYTES;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q4_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract).
            unsafe { k4_scales(row.add(g * Self::BYTES)) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe { k4_nibbles(row.add(b / 8 * Self::BYTES + 16), b % 8) }
        }
    }

    entry!(avx512_q4_k_f32, Q4KW);
}

/// ggml `block_q4_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q4K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q4K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q4K {
        const BYTES: usize = crate::quant::q4_k::BYTES;
        const D_AT: usize = BlockQ4K::D_OFFSET;
        const MINS: bool = true;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: the nibbles at 16..144 (caller contract).
            unsafe { signed(k4_unit(blk.add(BlockQ4K::QS_OFFSET), u)) }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales(blk.add(BlockQ4K::SCALES_OFFSET)) }
        }
    }

    impl KScales for Q4K {
        const S32: bool = true;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales_i32(blk.add(BlockQ4K::SCALES_OFFSET)) }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q4_k_q8k_neon, Q4K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q4_k_q8k_sdot, Q4K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q4K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q4_k::BlockQ4K;

    decode_once! {
        BlockQ4K, k_unit, Q4K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q4_k, BlockQ4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::avx2_f32::matmul_q4_k)
            .with_q8(DType::Q4_K, super::avx2_k::matmul_q4_k_q8k)
    }

    /// `t` with Q4_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::avx2_k::vnni_q4_k_q8k)
    }

    /// `t` with Q4_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::avx512_f32::avx512_q4_k_f32)
            .with_q8(DType::Q4_K, super::avx512_k::avx512_q4_k_q8k)
    }

    /// `t` with Q4_K's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::avx512_k::gfni_q4_k_q8k)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::neon_f32::matmul_q4_k)
            .with_q8(DType::Q4_K, super::neon_k::matmul_q4_k_q8k_neon)
    }

    /// `t` with Q4_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::neon_k::matmul_q4_k_q8k_sdot)
    }
}
