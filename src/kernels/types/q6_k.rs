//! Q6_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q6_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q6_K's entries to a table ([`super`]'s type list chains them).

/// Q6_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q6K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q6K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    k_block! {
        Q6K, BlockQ6K;
    }

    impl K256 for Q6K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: the reads stay inside the super-block (210 bytes: low nibbles at 0..128,
            // high pairs at 128..192, scales at 192..208; caller contract).
            unsafe {
                let sc =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(BlockQ6K::SCALES_OFFSET).cast()));
                let m4 = _mm256_set1_epi8(0x0F);
                let ql = [
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 32).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 64).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 96).cast()),
                ];
                let qh = [
                    _mm256_loadu_si256(blk.add(BlockQ6K::QH_OFFSET).cast()),
                    _mm256_loadu_si256(blk.add(BlockQ6K::QH_OFFSET + 32).cast()),
                ];
                // u = q + 32 (0..=63); Σ sc_j Σ (u - 32) x = Σ sc_j Σ u x - 32 Σ sc_j bsum_j
                // (`|32 · sc_j| <= 4096` fits i16).
                let c = _mm256_mullo_epi16(sc, _mm256_set1_epi16(-32));
                // Elements 128 h + 32 g ..: nibble g / 2 of ql[64 h + 32 (g % 2) ..], bits 2 g of
                // qh[32 h ..].
                kw16(sc, c, |h, g| {
                    let l = ql[2 * h + g % 2];
                    let lo = if g < 2 { l } else { _mm256_srli_epi16::<4>(l) };
                    let hb = _mm256_and_si256(
                        _mm256_srl_epi16(qh[h], _mm_cvtsi32_si128(2 * g as i32)),
                        _mm256_set1_epi8(3),
                    );
                    _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16::<4>(hb))
                })
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q6_k_q8k, Q6K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q6_k_q8k, Q6K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q6K;

    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q6K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 210-byte super-block: low nibbles at 0..128, high pairs at 128..192, scales
            // at 192..208 (caller contract).
            unsafe {
                let s8 = _mm_loadu_si128(blk.add(BlockQ6K::SCALES_OFFSET).cast());
                let sc = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(s8));
                KW { u: Self::values::<Nb>(blk), sc: spread4(sc, &IDX_16), c: correction(sc, 32) }
            }
        }

        const SUB32: bool = false;

        #[inline(always)]
        unsafe fn scales4(blk: [*const u8; 4]) -> Scales4 {
            // SAFETY: scales at 192..208 of each super-block (caller contract).
            unsafe {
                let sc = widen_pairs::<true>(load4(blk.map(|p| p.add(BlockQ6K::SCALES_OFFSET))));
                let m = _mm512_set1_epi16(-32);
                Scales4 { sc, aux: [_mm512_mullo_epi16(sc[0], m), _mm512_mullo_epi16(sc[1], m)] }
            }
        }

        #[inline(always)]
        unsafe fn values<Nb: Nibbles>(blk: *const u8) -> [__m512i; 4] {
            // SAFETY: low nibbles at 0..128, high pairs at 128..192 (caller contract).
            unsafe {
                let (m4, m2) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(3));
                // Vector 2 h + i: elements 128 h + 64 i ..: nibble i of ql[64 h ..], bits 2 g of
                // qh[32 h ..] with g = 2 i (low half), 2 i + 1 (high half); u = q + 32.
                let mut u = [_mm512_setzero_si512(); 4];
                for (k, u) in u.iter_mut().enumerate() {
                    let (h, i) = (k / 2, k % 2);
                    let l = _mm512_loadu_si512(blk.add(BlockQ6K::QS_OFFSET + 64 * h).cast());
                    let lo = if i == 0 { l } else { _mm512_srli_epi16::<4>(l) };
                    let hb = both_halves(
                        blk.add(BlockQ6K::QH_OFFSET + 32 * h),
                        4 * i as u16,
                        4 * i as u16 + 2,
                    );
                    let hb = _mm512_and_si512(hb, m2);
                    *u = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi16::<4>(hb));
                }
                u
            }
        }
    }

    entries! {
        avx512 {
            avx512_q6_k_q8k, Q6K;
        }
        gfni {
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ6K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const HALF_SCALES: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract). Unit u = 4 h + g:
            // nibble g / 2 of ql[64 h + 32 (g % 2) ..], bits 2 g of qh[32 h ..], minus 32.
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q6_k::BYTES);
                let (h, g) = (u / 4, u % 4);
                let l =
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 64 * h + 32 * (g % 2)).cast());
                let l = if g < 2 { l } else { _mm256_srli_epi16::<4>(l) };
                let qh = _mm256_loadu_si256(blk.add(BlockQ6K::QH_OFFSET + 32 * h).cast());
                let hb = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g as i32)),
                    _mm256_set1_epi8(3),
                );
                let q = _mm256_or_si256(
                    _mm256_and_si256(l, _mm256_set1_epi8(0x0F)),
                    _mm256_slli_epi16::<4>(hb),
                );
                bytes_f32::<true>(_mm256_sub_epi8(q, _mm256_set1_epi8(32)))
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract): `d · sc_j` (i8 scales).
            unsafe {
                let blk = row.add(g * crate::quant::q6_k::BYTES);
                let d = f16_scalar(blk.add(BlockQ6K::D_OFFSET));
                let sc = _mm_loadu_si128(blk.add(BlockQ6K::SCALES_OFFSET).cast());
                scale16::<true>(sc, d, &mut out.s);
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q6_k, BlockQ6K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q6KW;

    impl W512 for Q6KW {
        const BYTES: usize = quant::q6_k::BYTES;
        const HALF_SCALES: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q6_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract): 16 i8 scales at 192, `d` at
            // 208.
            unsafe {
                let blk = row.add(g * Self::BYTES);
                let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                    blk.add(BlockQ6K::SCALES_OFFSET).cast(),
                )));
                let d = _mm512_set1_ps(crate::kernels::x86_64::f16_at(blk.add(BlockQ6K::D_OFFSET)));
                (_mm512_mul_ps(d, sc), _mm512_setzero_ps())
            }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract). Unit u = 4 h + g:
            // nibble g / 2 of ql[64 h + 32 (g % 2) ..], bits 2 g of qh[32 h ..], minus 32.
            unsafe {
                let (sb, u) = (b / 8, b % 8);
                let blk = row.add(sb * Self::BYTES);
                let (h, g) = (u / 4, u % 4);
                let l =
                    _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 64 * h + 32 * (g % 2)).cast());
                let l = if g < 2 { l } else { _mm256_srli_epi16::<4>(l) };
                let qh = _mm256_loadu_si256(blk.add(BlockQ6K::QH_OFFSET + 32 * h).cast());
                let hb = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g as i32)),
                    _mm256_set1_epi8(3),
                );
                let q = _mm256_or_si256(
                    _mm256_and_si256(l, _mm256_set1_epi8(0x0F)),
                    _mm256_slli_epi16::<4>(hb),
                );
                let q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
                [
                    sbytes_f32(_mm256_castsi256_si128(q)),
                    sbytes_f32(_mm256_extracti128_si256::<1>(q)),
                ]
            }
        }
    }

    entry!(avx512_q6_k_f32, Q6KW);
}

/// ggml `block_q6_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q6K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q6K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q6K {
        const BYTES: usize = crate::quant::q6_k::BYTES;
        const D_AT: usize = BlockQ6K::D_OFFSET;
        const MINS: bool = false;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: low nibbles at 0..128, high pairs at 128..192 (caller contract). Unit
            // `u = 4 h + g`: nibble `g / 2` of `ql[64 h + 32 (g % 2) ..]`, bits `2 g` of
            // `qh[32 h ..]`; `q - 32`.
            unsafe {
                let (h, g) = (u / 4, u % 4);
                let l = blk.add(BlockQ6K::QS_OFFSET + 64 * h + 32 * (g % 2));
                let q = blk.add(BlockQ6K::QH_OFFSET + 32 * h);
                let v = |i: usize| {
                    let lo = bits(vld1q_u8(l.add(16 * i)), 4 * (g / 2), 0x0F);
                    let hi = bits(vld1q_u8(q.add(16 * i)), 2 * g, 3);
                    vorrq_u8(lo, vshlq_n_u8::<4>(hi))
                };
                minus((v(0), v(1)), 32)
            }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the 16 i8 scales at 192..208 (caller contract).
            (
                core::array::from_fn(
                    |j| unsafe { *blk.add(BlockQ6K::SCALES_OFFSET + j) } as i8 as i32
                ),
                [0; 16],
            )
        }
    }

    impl KScales for Q6K {
        const S32: bool = false;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the 16 i8 scales at 192..208 (caller contract).
            unsafe {
                let s = vld1q_s8(blk.add(BlockQ6K::SCALES_OFFSET).cast());
                let z = vdupq_n_s32(0);
                (widen16(vmovl_s8(vget_low_s8(s)), vmovl_high_s8(s)), [z; 4])
            }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q6_k_q8k_neon, Q6K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q6_k_q8k_sdot, Q6K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q6K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q6_k::BlockQ6K;

    decode_once! {
        BlockQ6K, k_unit, Q6K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q6_k, BlockQ6K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q6_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q6_K, super::avx2_f32::matmul_q6_k)
            .with_q8(DType::Q6_K, super::avx2_k::matmul_q6_k_q8k)
    }

    /// `t` with Q6_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q6_K, super::avx2_k::vnni_q6_k_q8k)
    }

    /// `t` with Q6_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q6_K, super::avx512_f32::avx512_q6_k_f32)
            .with_q8(DType::Q6_K, super::avx512_k::avx512_q6_k_q8k)
    }

    /// `t` with Q6_K's AVX-512 + GFNI entries (none).
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q6_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q6_K, super::neon_f32::matmul_q6_k)
            .with_q8(DType::Q6_K, super::neon_k::matmul_q6_k_q8k_neon)
    }

    /// `t` with Q6_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q6_K, super::neon_k::matmul_q6_k_q8k_sdot)
    }
}
