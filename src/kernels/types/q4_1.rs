//! Q4_1's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q4_1 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q4_1's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q4_1B;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Q4_1B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl QBlock for Q4_1B {
        type L = BlockQ4_1;
        const OFFSET: i32 = 0;
        const NIBBLES: bool = true;
        const PAIRS: bool = true;
        const PAIR_I16: bool = true;

        #[inline(always)]
        unsafe fn pair_operands(
            bp: *const u8,
            bq: *const u8,
            _h: __m256i,
            xl: __m256i,
            xh: __m256i,
        ) -> [(__m256i, __m256i); 2] {
            // SAFETY: 16 bytes at each block's quants (caller contract).
            unsafe {
                let (lo, hi) = nibble_pairs(bp.add(Self::QS), bq.add(Self::QS));
                [(lo, xl), (hi, xh)]
            }
        }

        #[inline(always)]
        unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
            // SAFETY: 16 bytes at the block's quants (caller contract).
            unsafe { (nibbles32(blk.add(Self::QS)), x) }
        }
    }

    q8_entries! { Avx2, Avx2Tier<Avx2Ops>, "AVX2 table entry.";
        matmul_q4_1_q8, Q4_1B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Q4_1B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Q4_1B>());

    impl VBlock for Q4_1B {
        vblock_consts!(Q4_1B);
        const OFF: i32 = 0;
        const NIB16: Option<usize> = Some(Self::QS);

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: 16 quant bytes in each block (caller contract).
            unsafe { nibbles2::<Nb>(blk0.add(Self::QS), blk1.add(Self::QS)) }
        }

        #[inline(always)]
        unsafe fn scales8(wb: *const u8) -> __m256i {
            // SAFETY: eight 20-byte blocks = 160 readable bytes. Blocks 0..7 have their scale and
            // minimum (words 10 j, 10 j + 1) in the first 128 bytes; block 7's (words 70, 71) are
            // words 6, 7 of the 32 bytes at byte 128.
            unsafe {
                let t = pick_words(wb, 128, 10, true);
                let tail = _mm512_castsi256_si512(_mm256_loadu_si256(wb.add(128).cast()));
                let idx = _mm512_set_epi16(
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 6, 0,
                    0, 0, 0, 0, 0, 0,
                );
                let t = _mm512_mask_permutexvar_epi16(t, 0x8080, idx, tail);
                _mm512_castsi512_si256(t)
            }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_q4_1_q8, Q4_1B;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q4_1_q8, Q4_1B;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_q4_1_q8, Q4_1B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ4_1> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract).
            unsafe { nibbles_block(row.add(b * BlockQ4_1::BYTES + BlockQ4_1::QS_OFFSET)) }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const {
                assert!(
                    BlockQ4_1::D_OFFSET + 4 <= BlockQ4_1::BYTES
                        && BlockQ4_1::M_OFFSET == BlockQ4_1::D_OFFSET + 2
                )
            };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d` (then `m`).
            unsafe { block_scales::<true>(row.add(b * BlockQ4_1::BYTES + BlockQ4_1::D_OFFSET)) }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const {
                assert!(
                    BlockQ4_1::D_OFFSET + 4 <= BlockQ4_1::BYTES
                        && BlockQ4_1::M_OFFSET == BlockQ4_1::D_OFFSET + 2
                )
            };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<true>(row, BlockQ4_1::BYTES, BlockQ4_1::D_OFFSET, g, n, out)
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q4_1, BlockQ4_1;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use core::arch::x86_64::*;

    struct Q4_1W;

    impl W512 for Q4_1W {
        const BYTES: usize = quant::q4_1::BYTES;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q4_1;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_and_m(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract).
            unsafe {
                let v = bytes16(row.add(b * Self::BYTES + 4));
                [lut(v, iota()), _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(v))]
            }
        }
    }

    entry!(avx512_q4_1_f32, Q4_1W);
}

/// ggml `block_q4_1`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q4_1B;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Q4_1B;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl QBlock for Q4_1B {
        type L = BlockQ4_1;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's 16 quant bytes (caller contract).
            unsafe {
                let (lo, hi) = nibbles(blk.add(Self::QS));
                (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
            }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_q4_1_q8_neon, Q4_1B;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_q4_1_q8_sdot, Q4_1B;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {

    use crate::kernels::aarch64::neon_f32::*;
    use crate::kernels::aarch64::*;
    use crate::kernels::frame::f32::*;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl F32Decode<BlockQ4_1> for NeonF32 {
        #[inline(always)]
        unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
            // SAFETY: block `b` in bounds (caller contract); `d * q` is exact, so the fused
            // `m + q * d` rounds once, like the oracle's `d * q + m`.
            unsafe {
                let blk = row.add(b * BlockQ4_1::BYTES);
                let (lo, hi) = nibbles(blk.add(BlockQ4_1::QS_OFFSET), c);
                let (d, m) = (
                    f16_splat(blk.add(BlockQ4_1::D_OFFSET)),
                    f16_splat(blk.add(BlockQ4_1::M_OFFSET)),
                );
                (vfmaq_f32(m, lo, d), vfmaq_f32(m, hi, d))
            }
        }
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q4_1, BlockQ4_1;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_rows {
    use crate::kernels::x86_64::avx2_rows::*;
    use core::arch::x86_64::*;

    /// Q4_1 in the interleaved layout ([`crate::kernels::rows8`]).
    pub(crate) struct R4_1;

    impl RowsType for R4_1 {
        const BYTES: usize = 20;
        const MIN: bool = true;
        type Dec = [__m256i; 8];
        /// 8 activation rows per pass: the 8 decoded registers are made once for twice as
        /// many rows as at 4 (they and a row's temporaries fit in 16 ymm registers).
        const TILE: usize = 8;
        #[inline(always)]
        unsafe fn decode(g: *const u8) -> [__m256i; 8] {
            // SAFETY: the quants at byte 32 of the group-block (caller contract).
            unsafe { nibbles(g.add(32)) }
        }
        #[inline(always)]
        unsafe fn dot(d: &[__m256i; 8], x: *const i8) -> __m256i {
            // SAFETY: forwarded caller contract.
            unsafe { nibble_dot(d, x) }
        }
    }

    rows8_entries! {
        Avx2, avx2_q4_1_rows8, R4_1;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_1's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_1, super::avx2_f32::matmul_q4_1)
            .with_q8(DType::Q4_1, super::avx2_q8::matmul_q4_1_q8)
            .with_q8_rows8(DType::Q4_1, super::avx2_rows::avx2_q4_1_rows8)
    }

    /// `t` with Q4_1's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_1, super::avx512_q8::vnni_q4_1_q8)
    }

    /// `t` with Q4_1's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_1, super::avx512_f32::avx512_q4_1_f32)
            .with_q8(DType::Q4_1, super::avx512_q8::avx512_q4_1_q8)
    }

    /// `t` with Q4_1's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_1, super::avx512_q8::gfni_q4_1_q8)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_1's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_1, super::neon_f32::matmul_q4_1)
            .with_q8(DType::Q4_1, super::neon_q8::matmul_q4_1_q8_neon)
    }

    /// `t` with Q4_1's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_1, super::neon_q8::matmul_q4_1_q8_sdot)
    }
}
