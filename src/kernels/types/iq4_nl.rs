//! IQ4_NL's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for IQ4_NL and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds IQ4_NL's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Iq4NlB;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Iq4NlB;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;

    use crate::quant::iq4_nl::BlockIq4Nl;
    use core::arch::x86_64::*;

    impl QBlock for Iq4NlB {
        type L = BlockIq4Nl;
        const OFFSET: i32 = 0;
        const PAIRS: bool = true;

        #[inline(always)]
        unsafe fn pair_operands(
            bp: *const u8,
            bq: *const u8,
            _h: __m256i,
            xl: __m256i,
            xh: __m256i,
        ) -> [(__m256i, __m256i); 2] {
            // SAFETY: 16 bytes at each block's quants (caller contract); the codebook is 16
            // bytes. Its values are in -127..=113: the sign trick of Q8_0.
            unsafe {
                let (lo, hi) = nibble_pairs(bp.add(Self::QS), bq.add(Self::QS));
                let kv = _mm_loadu_si128(crate::quant::iq4_nl::KVALUES.as_ptr().cast());
                let kv = _mm256_set_m128i(kv, kv);
                [
                    signed_operands(_mm256_shuffle_epi8(kv, lo), xl),
                    signed_operands(_mm256_shuffle_epi8(kv, hi), xh),
                ]
            }
        }

        #[inline(always)]
        unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
            // SAFETY: 16 bytes at the block's quants (caller contract). Codebook values are in
            // -127..=113: the sign trick of Q8_0.
            unsafe { signed_operands(iq4_values32(blk.add(Self::QS)), x) }
        }
    }

    q8_entries! { Avx2, Avx2Tier<Avx2Ops>, "AVX2 table entry.";
        matmul_iq4_nl_q8, Iq4NlB;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Iq4NlB;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Iq4NlB>());

    impl VBlock for Iq4NlB {
        vblock_consts!(Iq4NlB);
        const OFF: i32 = 128;
        const NIB16: Option<usize> = Some(Self::QS);

        #[inline(always)]
        unsafe fn map4(v: __m512i) -> __m512i {
            // SAFETY: the table is 16 bytes; the rest is register-only.
            unsafe {
                let kv = _mm_loadu_si128(KVALUES_128.as_ptr().cast());
                _mm512_shuffle_epi8(_mm512_broadcast_i32x4(kv), v)
            }
        }

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: 16 quant bytes in each block (caller contract); the table is 16 bytes.
            unsafe {
                let kv = _mm_loadu_si128(KVALUES_128.as_ptr().cast());
                _mm512_shuffle_epi8(
                    _mm512_broadcast_i32x4(kv),
                    nibbles2::<Nb>(blk0.add(Self::QS), blk1.add(Self::QS)),
                )
            }
        }

        #[inline(always)]
        unsafe fn scales8(wb: *const u8) -> __m256i {
            // SAFETY: as Q4_0's (the same 18-byte layout up to the codebook).
            unsafe { _mm512_castsi512_si256(pick_words(wb, 128, 9, false)) }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_iq4_nl_q8, Iq4NlB;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_iq4_nl_q8, Iq4NlB;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_iq4_nl_q8, Iq4NlB;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::iq4_nl::BlockIq4Nl;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockIq4Nl> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract): the codebook values.
            unsafe {
                let blk = row.add(b * crate::quant::iq4_nl::BYTES);
                bytes_f32::<true>(crate::kernels::x86_64::iq4_values32(
                    blk.add(BlockIq4Nl::QS_OFFSET),
                ))
            }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const { assert!(BlockIq4Nl::D_OFFSET + 4 <= crate::quant::iq4_nl::BYTES) };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d`.
            unsafe {
                block_scales::<false>(
                    row.add(b * crate::quant::iq4_nl::BYTES + BlockIq4Nl::D_OFFSET),
                )
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const { assert!(BlockIq4Nl::D_OFFSET + 2 <= crate::quant::iq4_nl::BYTES) };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<false>(
                    row,
                    crate::quant::iq4_nl::BYTES,
                    BlockIq4Nl::D_OFFSET,
                    g,
                    n,
                    out,
                )
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_iq4_nl, BlockIq4Nl;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;

    use core::arch::x86_64::*;

    struct Iq4NlW;

    impl W512 for Iq4NlW {
        const BYTES: usize = quant::iq4_nl::BYTES;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_iq4_nl;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_only(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract); the codebook is 16 bytes.
            unsafe {
                let v = bytes16(row.add(b * Self::BYTES + 2));
                let kv = _mm_loadu_si128(quant::iq4_nl::KVALUES.as_ptr().cast());
                let tbl = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(kv));
                [lut(v, tbl), lut(_mm512_srli_epi32::<4>(v), tbl)]
            }
        }
    }

    entry!(avx512_iq4_nl_f32, Iq4NlW);
}

/// ggml `block_iq4_nl`: the codebook values of the nibbles.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Iq4NlB;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Iq4NlB;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::iq4_nl::BlockIq4Nl;

    use core::arch::aarch64::*;

    impl QBlock for Iq4NlB {
        type L = BlockIq4Nl;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's 16 index bytes (caller contract); the codebook is 16 bytes.
            unsafe {
                let kv = vld1q_s8(crate::quant::iq4_nl::KVALUES.as_ptr());
                let (lo, hi) = nibbles(blk.add(Self::QS));
                (vqtbl1q_s8(kv, lo), vqtbl1q_s8(kv, hi))
            }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_iq4_nl_q8_neon, Iq4NlB;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_iq4_nl_q8_sdot, Iq4NlB;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Iq4NlB;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::iq4_nl::BlockIq4Nl;

    decode_once! {
        BlockIq4Nl, q_block, Iq4NlB;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_iq4_nl, BlockIq4Nl;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with IQ4_NL's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::IQ4_NL, super::avx2_f32::matmul_iq4_nl)
            .with_q8(DType::IQ4_NL, super::avx2_q8::matmul_iq4_nl_q8)
            // f32 activations: the Q8_0 body on a widened copy is faster ([`Kernels::f32_via_q8_0`]).
            .with_f32_via_q8_0(DType::IQ4_NL)
    }

    /// `t` with IQ4_NL's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::IQ4_NL, super::avx512_q8::vnni_iq4_nl_q8)
    }

    /// `t` with IQ4_NL's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::IQ4_NL, super::avx512_f32::avx512_iq4_nl_f32)
            .with_q8(DType::IQ4_NL, super::avx512_q8::avx512_iq4_nl_q8)
    }

    /// `t` with IQ4_NL's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::IQ4_NL, super::avx512_q8::gfni_iq4_nl_q8)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with IQ4_NL's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::IQ4_NL, super::neon_f32::matmul_iq4_nl)
            .with_q8(DType::IQ4_NL, super::neon_q8::matmul_iq4_nl_q8_neon)
    }

    /// `t` with IQ4_NL's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::IQ4_NL, super::neon_q8::matmul_iq4_nl_q8_sdot)
    }
}
