//! Q3_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q3_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q3_K's entries to a table ([`super`]'s type list chains them).

/// Q3_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q3K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q3K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    k_block! {
        Q3K, BlockQ3K;
    }

    impl K256 for Q3K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: the reads stay inside the super-block (110 bytes: high bits at 0..32, low
            // pairs at 32..96, scales at 96..108; caller contract).
            unsafe {
                let sc = q3_scales16(blk.add(BlockQ3K::SCALES_OFFSET));
                let hm = _mm256_loadu_si256(blk.add(BlockQ3K::QH_OFFSET).cast());
                let q = [
                    _mm256_loadu_si256(blk.add(BlockQ3K::QS_OFFSET).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ3K::QS_OFFSET + 32).cast()),
                ];
                // u = low | high << 2 = q + 4 (0..=7); Σ sc_j Σ (u - 4) x = Σ sc_j Σ u x
                // - 4 Σ sc_j bsum_j.
                let c = _mm256_mullo_epi16(sc, _mm256_set1_epi16(-4));
                kw16(sc, c, |h, g| {
                    let low = _mm256_and_si256(
                        _mm256_srl_epi16(q[h], _mm_cvtsi32_si128(2 * g as i32)),
                        _mm256_set1_epi8(3),
                    );
                    _mm256_or_si256(low, bit_to(hm, (4 * h + g) as i32, 2))
                })
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q3_k_q8k, Q3K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q3_k_q8k, Q3K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q3K;
    use crate::kernels::x86_64::avx2_k::q3_scales16;
    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q3K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 110-byte super-block: high bits at 0..32, low pairs at 32..96, scales at
            // 96..108 (caller contract).
            unsafe {
                let sc = _mm512_zextsi256_si512(q3_scales16(blk.add(BlockQ3K::SCALES_OFFSET)));
                // u = q + 4.
                let u = values_q2(blk.add(BlockQ3K::QS_OFFSET), Some(blk.add(BlockQ3K::QH_OFFSET)));
                KW { u, sc: spread4(sc, &IDX_16), c: correction(sc, 4) }
            }
        }

        const SUB32: bool = false;

        #[inline(always)]
        unsafe fn scales4(blk: [*const u8; 4]) -> Scales4 {
            // SAFETY: bytes 92..108 of each super-block (caller contract); as q3_scales16 per lane.
            unsafe {
                let bc = |x: __m128i| _mm512_broadcast_i32x4(x);
                let t = _mm512_bsrli_epi128::<4>(load4(
                    blk.map(|p| p.add(BlockQ3K::SCALES_OFFSET - 4)),
                ));
                let lo = _mm512_unpacklo_epi64(t, _mm512_srli_epi16::<4>(t));
                let lo = _mm512_and_si512(lo, _mm512_set1_epi8(0x0F));
                let c = _mm512_shuffle_epi8(
                    t,
                    bc(_mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11)),
                );
                let hi =
                    _mm512_slli_epi32::<4>(_mm512_srlv_epi32(c, bc(_mm_setr_epi32(0, 2, 4, 6))));
                let hi = _mm512_and_si512(hi, _mm512_set1_epi8(0x30));
                let s8 = _mm512_sub_epi8(_mm512_or_si512(lo, hi), _mm512_set1_epi8(32));
                let sc = widen_pairs::<true>(s8);
                let m = _mm512_set1_epi16(-4);
                Scales4 { sc, aux: [_mm512_mullo_epi16(sc[0], m), _mm512_mullo_epi16(sc[1], m)] }
            }
        }

        #[inline(always)]
        unsafe fn values<Nb: Nibbles>(blk: *const u8) -> [__m512i; 4] {
            // SAFETY: high bits at 0..32, low pairs at 32..96 (caller contract).
            unsafe { values_q2(blk.add(BlockQ3K::QS_OFFSET), Some(blk.add(BlockQ3K::QH_OFFSET))) }
        }
    }

    entries! {
        avx512 {
            avx512_q3_k_q8k, Q3K;
        }
        gfni {
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ3K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const HALF_SCALES: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract): `low + 4 high - 4`.
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q3_k::BYTES);
                let hm = _mm256_loadu_si256(blk.add(BlockQ3K::QH_OFFSET).cast());
                let bit = _mm256_set1_epi8((1u8 << u) as i8);
                let high = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                let high = _mm256_and_si256(high, _mm256_set1_epi8(4));
                let q = _mm256_sub_epi8(
                    _mm256_or_si256(q2_unit(blk.add(BlockQ3K::QS_OFFSET), u), high),
                    _mm256_set1_epi8(4),
                );
                bytes_f32::<true>(q)
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract): `d · sc_j`.
            unsafe {
                let blk = row.add(g * crate::quant::q3_k::BYTES);
                let sc = crate::quant::q3_k::scales_q3(core::slice::from_raw_parts(
                    blk.add(BlockQ3K::SCALES_OFFSET),
                    12,
                ));
                let d = f16_scalar(blk.add(BlockQ3K::D_OFFSET));
                scale16::<true>(_mm_loadu_si128(sc.as_ptr().cast()), d, &mut out.s);
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q3_k, BlockQ3K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q3KW;

    impl W512 for Q3KW {
        const BYTES: usize = quant::q3_k::BYTES;
        const HALF_SCALES: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q3_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract): packed scales at 96..108,
            // `d` at 108.
            unsafe {
                let blk = row.add(g * Self::BYTES);
                let sc = quant::q3_k::scales_q3(core::slice::from_raw_parts(
                    blk.add(BlockQ3K::SCALES_OFFSET),
                    12,
                ));
                let sc =
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc.as_ptr().cast())));
                let d = _mm512_set1_ps(crate::kernels::x86_64::f16_at(blk.add(BlockQ3K::D_OFFSET)));
                (_mm512_mul_ps(d, sc), _mm512_setzero_ps())
            }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract). Value
            // `low + 4 high - 4`, `high` bit `u` of the 32 bytes at 0.
            unsafe {
                let (sb, u) = (b / 8, b % 8);
                let blk = row.add(sb * Self::BYTES);
                let q = q2_values(blk.add(BlockQ3K::QS_OFFSET), u, two_bits(4.0));
                let hm = _mm256_loadu_si256(blk.add(BlockQ3K::QH_OFFSET).cast());
                let m = _mm256_test_epi8_mask(hm, _mm256_set1_epi8((1u8 << u) as i8));
                let four = _mm512_set1_ps(4.0);
                [
                    _mm512_mask_add_ps(q[0], m as u16, q[0], four),
                    _mm512_mask_add_ps(q[1], (m >> 16) as u16, q[1], four),
                ]
            }
        }
    }

    entry!(avx512_q3_k_f32, Q3KW);
}

/// ggml `block_q3_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q3K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q3K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q3_k::scales_q3;
    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q3K {
        const BYTES: usize = crate::quant::q3_k::BYTES;
        const D_AT: usize = BlockQ3K::D_OFFSET;
        const MINS: bool = false;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: high bits at 0..32, low pairs at 32..96 (caller contract). Element
            // `32 u + l` has its high bit in bit `u` of `hmask[l]`; `q = low + 4 high - 4`.
            unsafe {
                let (l0, l1) = q2_unit(blk.add(BlockQ3K::QS_OFFSET), u);
                let (h0, h1) = (
                    vld1q_u8(blk.add(BlockQ3K::QH_OFFSET)),
                    vld1q_u8(blk.add(BlockQ3K::QH_OFFSET + 16)),
                );
                minus((vorrq_u8(l0, bit_to(h0, u, 4)), vorrq_u8(l1, bit_to(h1, u, 4))), 4)
            }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the 12 packed scale bytes at 96..108 (caller contract).
            let sc = scales_q3(unsafe {
                core::slice::from_raw_parts(blk.add(BlockQ3K::SCALES_OFFSET), 12)
            });
            (sc.map(i32::from), [0; 16])
        }
    }

    impl KScales for Q3K {
        const S32: bool = false;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the 12 packed scale bytes at 96..108 (caller contract). [`scales_q3`] in
            // lanes: the words `a`, `b` (bytes 0..8) give the low four bits (the nibbles of `a`,
            // `b`, then their high nibbles), word `c` (bytes 8..12) bits 4, 5: two bits of each
            // byte, shifted by 0, 2, 4, 6 for the four words.
            unsafe {
                let sp = blk.add(BlockQ3K::SCALES_OFFSET);
                let ab = vld1_u8(sp);
                let lo = vcombine_u8(vand_u8(ab, vdup_n_u8(0x0F)), vshr_n_u8::<4>(ab));
                let c = vdupq_n_u32(sp.add(8).cast::<u32>().read_unaligned());
                const SHIFTS: [i32; 4] = [0, -2, -4, -6];
                let c = vreinterpretq_u8_u32(vshlq_u32(c, vld1q_s32(SHIFTS.as_ptr())));
                let hi = vshlq_n_u8::<4>(vandq_u8(c, vdupq_n_u8(3)));
                let s = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
                let z = vdupq_n_s32(0);
                (widen16(vmovl_s8(vget_low_s8(s)), vmovl_high_s8(s)), [z; 4])
            }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q3_k_q8k_neon, Q3K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q3_k_q8k_sdot, Q3K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q3K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q3_k::BlockQ3K;

    decode_once! {
        BlockQ3K, k_unit, Q3K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q3_k, BlockQ3K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q3_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q3_K, super::avx2_f32::matmul_q3_k)
            .with_q8(DType::Q3_K, super::avx2_k::matmul_q3_k_q8k)
    }

    /// `t` with Q3_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q3_K, super::avx2_k::vnni_q3_k_q8k)
    }

    /// `t` with Q3_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q3_K, super::avx512_f32::avx512_q3_k_f32)
            .with_q8(DType::Q3_K, super::avx512_k::avx512_q3_k_q8k)
    }

    /// `t` with Q3_K's AVX-512 + GFNI entries (none).
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q3_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q3_K, super::neon_f32::matmul_q3_k)
            .with_q8(DType::Q3_K, super::neon_k::matmul_q3_k_q8k_neon)
    }

    /// `t` with Q3_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q3_K, super::neon_k::matmul_q3_k_q8k_sdot)
    }
}
