//! Q5_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q5_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q5_K's entries to a table ([`super`]'s type list chains them).

/// Q5_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q5K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q5K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    k_block! {
        Q5K, BlockQ5K;
    }

    impl K256 for Q5K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: 176-byte super-block: scales at 4..16, fifth bits at 16..48, nibbles at
            // 48..176 (caller contract).
            unsafe {
                let qh = _mm256_loadu_si256(blk.add(BlockQ5K::QH_OFFSET).cast());
                // Sub-block j takes bit j of `qh`.
                decode_k4(blk.add(BlockQ5K::SCALES_OFFSET), blk.add(BlockQ5K::QS_OFFSET), |j| {
                    Some(bit_to(qh, j as i32, 4))
                })
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q5_k_q8k, Q5K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q5_k_q8k, Q5K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q5K;

    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q5K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 176-byte super-block: scales at 4..16, fifth bits at 16..48, nibbles at
            // 48..176 (caller contract).
            unsafe {
                decode_k4::<Nb>(
                    blk.add(BlockQ5K::SCALES_OFFSET),
                    blk.add(BlockQ5K::QS_OFFSET),
                    Some(blk.add(BlockQ5K::QH_OFFSET)),
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
            // SAFETY: fifth bits at 16..48, nibbles at 48..176 (caller contract).
            unsafe {
                values_k4::<Nb>(blk.add(BlockQ5K::QS_OFFSET), Some(blk.add(BlockQ5K::QH_OFFSET)))
            }
        }
    }

    entries! {
        avx512 {
            avx512_q5_k_q8k, Q5K;
        }
        gfni {
            gfni_q5_k_q8k, Q5K;
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ5K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract); sub-block `u` takes bit
            // `u` of the 32 bytes at 16.
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q5_k::BYTES);
                let qh = _mm256_loadu_si256(blk.add(BlockQ5K::QH_OFFSET).cast());
                let bit = _mm256_set1_epi8((1u8 << u) as i8);
                let high = _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                    _mm256_set1_epi8(0x10),
                );
                k4_values(blk.add(BlockQ5K::QS_OFFSET), u, high)
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract); Q5_K's `d`, `dmin` and
            // scales sit where Q4_K's do.
            unsafe { k4_scales(row.add(g * crate::quant::q5_k::BYTES), out) }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q5_k, BlockQ5K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q5KW;

    impl W512 for Q5KW {
        const BYTES: usize = quant::q5_k::BYTES;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q5_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract).
            unsafe { k4_scales(row.add(g * Self::BYTES)) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract); unit `u` takes bit `u`
            // of the 32 bytes at 16 as its fifth bit.
            unsafe {
                let (sb, u) = (b / 8, b % 8);
                let blk = row.add(sb * Self::BYTES);
                let q = k4_nibbles(blk.add(BlockQ5K::QS_OFFSET), u);
                let qh = _mm256_loadu_si256(blk.add(BlockQ5K::QH_OFFSET).cast());
                let m = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((1u8 << u) as i8));
                [add16(q[0], m as u16), add16(q[1], (m >> 16) as u16)]
            }
        }
    }

    entry!(avx512_q5_k_f32, Q5KW);
}

/// ggml `block_q5_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q5K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q5K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q5K {
        const BYTES: usize = crate::quant::q5_k::BYTES;
        const D_AT: usize = BlockQ5K::D_OFFSET;
        const MINS: bool = true;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: fifth bits at 16..48, nibbles at 48..176 (caller contract). Unit `u` takes
            // bit `u` of `qh[l]`.
            unsafe {
                let (l0, l1) = k4_unit(blk.add(BlockQ5K::QS_OFFSET), u);
                let (h0, h1) = (
                    vld1q_u8(blk.add(BlockQ5K::QH_OFFSET)),
                    vld1q_u8(blk.add(BlockQ5K::QH_OFFSET + 16)),
                );
                signed((vorrq_u8(l0, bit_to(h0, u, 0x10)), vorrq_u8(l1, bit_to(h1, u, 0x10))))
            }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales(blk.add(BlockQ5K::SCALES_OFFSET)) }
        }
    }

    impl KScales for Q5K {
        const S32: bool = true;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales_i32(blk.add(BlockQ5K::SCALES_OFFSET)) }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q5_k_q8k_neon, Q5K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q5_k_q8k_sdot, Q5K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q5K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q5_k::BlockQ5K;

    decode_once! {
        BlockQ5K, k_unit, Q5K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q5_k, BlockQ5K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_K, super::avx2_f32::matmul_q5_k)
            .with_q8(DType::Q5_K, super::avx2_k::matmul_q5_k_q8k)
    }

    /// `t` with Q5_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_K, super::avx2_k::vnni_q5_k_q8k)
    }

    /// `t` with Q5_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_K, super::avx512_f32::avx512_q5_k_f32)
            .with_q8(DType::Q5_K, super::avx512_k::avx512_q5_k_q8k)
    }

    /// `t` with Q5_K's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_K, super::avx512_k::gfni_q5_k_q8k)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_K, super::neon_f32::matmul_q5_k)
            .with_q8(DType::Q5_K, super::neon_k::matmul_q5_k_q8k_neon)
    }

    /// `t` with Q5_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_K, super::neon_k::matmul_q5_k_q8k_sdot)
    }
}
