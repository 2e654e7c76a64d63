//! Q2_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q2_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q2_K's entries to a table ([`super`]'s type list chains them).

/// Q2_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q2K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q2K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    k_block! {
        Q2K, BlockQ2K;
    }

    impl K256 for Q2K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: the reads stay inside the super-block (84 bytes: scales at 0..16, values at
            // 16..80; caller contract).
            unsafe {
                let sb = _mm_loadu_si128(blk.add(BlockQ2K::SCALES_OFFSET).cast());
                let m4 = _mm_set1_epi8(0x0F);
                let sc = _mm256_cvtepu8_epi16(_mm_and_si128(sb, m4));
                let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(sb), m4));
                let q = [
                    _mm256_loadu_si256(blk.add(BlockQ2K::QS_OFFSET).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ2K::QS_OFFSET + 32).cast()),
                ];
                kw16(sc, mins, |h, g| {
                    _mm256_and_si256(
                        _mm256_srl_epi16(q[h], _mm_cvtsi32_si128(2 * g as i32)),
                        _mm256_set1_epi8(3),
                    )
                })
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q2_k_q8k, Q2K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q2_k_q8k, Q2K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q2K;

    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q2K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 84-byte super-block: scales at 0..16, values at 16..80 (caller contract).
            unsafe {
                let sb = _mm_loadu_si128(blk.add(BlockQ2K::SCALES_OFFSET).cast());
                let m4 = _mm_set1_epi8(0x0F);
                let sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m4)));
                let mins = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16::<4>(sb), m4));
                KW {
                    u: values_q2(blk.add(BlockQ2K::QS_OFFSET), None),
                    sc: spread4(sc, &IDX_16),
                    c: mins,
                }
            }
        }

        const SUB32: bool = false;

        #[inline(always)]
        unsafe fn scales4(blk: [*const u8; 4]) -> Scales4 {
            // SAFETY: scales at 0..16 of each super-block (caller contract).
            unsafe {
                let v = load4(blk);
                let m4 = _mm512_set1_epi8(0x0F);
                Scales4 {
                    sc: widen_pairs::<false>(_mm512_and_si512(v, m4)),
                    aux: widen_pairs::<false>(_mm512_and_si512(_mm512_srli_epi16::<4>(v), m4)),
                }
            }
        }

        #[inline(always)]
        unsafe fn values<Nb: Nibbles>(blk: *const u8) -> [__m512i; 4] {
            // SAFETY: values at 16..80 (caller contract).
            unsafe { values_q2(blk.add(BlockQ2K::QS_OFFSET), None) }
        }
    }

    entries! {
        avx512 {
            avx512_q2_k_q8k, Q2K;
        }
        gfni {
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ2K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const HALF_SCALES: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q2_k::BYTES);
                bytes_f32::<false>(q2_unit(blk.add(BlockQ2K::QS_OFFSET), u))
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract). Sub-block `j`: scale
            // `d · (sc_j & 15)`, offset `-(dmin · (sc_j >> 4))` (the oracle's products).
            unsafe {
                let blk = row.add(g * crate::quant::q2_k::BYTES);
                let (d, dmin) = (
                    f16_scalar(blk.add(BlockQ2K::D_OFFSET)),
                    f16_scalar(blk.add(BlockQ2K::M_OFFSET)),
                );
                let sc = _mm_loadu_si128(blk.add(BlockQ2K::SCALES_OFFSET).cast());
                let low = _mm_and_si128(sc, _mm_set1_epi8(0x0F));
                let high = _mm_and_si128(_mm_srli_epi16::<4>(sc), _mm_set1_epi8(0x0F));
                scale16::<false>(low, d, &mut out.s);
                scale16::<false>(high, -dmin, &mut out.m);
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q2_k, BlockQ2K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q2KW;

    impl W512 for Q2KW {
        const BYTES: usize = quant::q2_k::BYTES;
        const HALF_SCALES: bool = true;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q2_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract): 16 scale bytes at 0 (low
            // nibble scale, high nibble min of sub-block j), `d`, `dmin` at 80, 82.
            unsafe {
                let blk = row.add(g * Self::BYTES);
                let sm = bytes16(blk);
                let sc = _mm512_cvtepi32_ps(_mm512_and_si512(sm, _mm512_set1_epi32(15)));
                let mn = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(sm));
                let d = _mm512_set1_ps(crate::kernels::x86_64::f16_at(blk.add(BlockQ2K::D_OFFSET)));
                let dmin =
                    _mm512_set1_ps(crate::kernels::x86_64::f16_at(blk.add(BlockQ2K::M_OFFSET)));
                (_mm512_mul_ps(d, sc), _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, mn)))
            }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe { q2_values(row.add(b / 8 * Self::BYTES + 16), b % 8, two_bits(0.0)) }
        }
    }

    entry!(avx512_q2_k_f32, Q2KW);
}

/// ggml `block_q2_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q2K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q2K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q2K {
        const BYTES: usize = crate::quant::q2_k::BYTES;
        const D_AT: usize = BlockQ2K::D_OFFSET;
        const MINS: bool = true;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: the 64 value bytes at 16..80 (caller contract: a whole super-block).
            unsafe { signed(q2_unit(blk.add(BlockQ2K::QS_OFFSET), u)) }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the 16 scale bytes at 0..16 (caller contract).
            let s = |j: usize| unsafe { *blk.add(BlockQ2K::SCALES_OFFSET + j) } as i32;
            (core::array::from_fn(|j| s(j) & 0x0F), core::array::from_fn(|j| s(j) >> 4))
        }
    }

    impl KScales for Q2K {
        const S32: bool = false;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the 16 scale bytes at 0..16 (caller contract): scale in the low nibble,
            // min in the high one.
            unsafe {
                let v = vld1q_u8(blk.add(BlockQ2K::SCALES_OFFSET));
                let (sc, mn) = (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v));
                let s16 = |v: uint8x16_t| {
                    let (l, h) = (vmovl_u8(vget_low_u8(v)), vmovl_high_u8(v));
                    widen16(vreinterpretq_s16_u16(l), vreinterpretq_s16_u16(h))
                };
                (s16(sc), s16(mn))
            }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q2_k_q8k_neon, Q2K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q2_k_q8k_sdot, Q2K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q2K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q2_k::BlockQ2K;

    decode_once! {
        BlockQ2K, k_unit, Q2K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q2_k, BlockQ2K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q2_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q2_K, super::avx2_f32::matmul_q2_k)
            .with_q8(DType::Q2_K, super::avx2_k::matmul_q2_k_q8k)
    }

    /// `t` with Q2_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q2_K, super::avx2_k::vnni_q2_k_q8k)
    }

    /// `t` with Q2_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q2_K, super::avx512_f32::avx512_q2_k_f32)
            .with_q8(DType::Q2_K, super::avx512_k::avx512_q2_k_q8k)
    }

    /// `t` with Q2_K's AVX-512 + GFNI entries (none).
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q2_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q2_K, super::neon_f32::matmul_q2_k)
            .with_q8(DType::Q2_K, super::neon_k::matmul_q2_k_q8k_neon)
    }

    /// `t` with Q2_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q2_K, super::neon_k::matmul_q2_k_q8k_sdot)
    }
}
