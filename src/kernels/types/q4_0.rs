//! Q4_0's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q4_0 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q4_0's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q4_0B;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Q4_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl QBlock for Q4_0B {
        type L = BlockQ4_0;
        const OFFSET: i32 = 8;
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
        matmul_q4_0_q8, Q4_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Q4_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Q4_0B>());

    impl VBlock for Q4_0B {
        vblock_consts!(Q4_0B);
        const OFF: i32 = 8;
        const NIB16: Option<usize> = Some(Self::QS);

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: 16 quant bytes in each block (caller contract).
            unsafe { nibbles2::<Nb>(blk0.add(Self::QS), blk1.add(Self::QS)) }
        }

        #[inline(always)]
        unsafe fn scales8(wb: *const u8) -> __m256i {
            // SAFETY: eight 18-byte blocks = 144 readable bytes; the scales are words 0, 9, .., 63.
            unsafe { _mm512_castsi512_si256(pick_words(wb, 128, 9, false)) }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_q4_0_q8, Q4_0B;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q4_0_q8, Q4_0B;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_q4_0_q8, Q4_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ4_0> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract): `q - 8` (exact).
            unsafe {
                nibbles_block(row.add(b * BlockQ4_0::BYTES + BlockQ4_0::QS_OFFSET))
                    .map(|q| _mm256_sub_ps(q, _mm256_set1_ps(8.0)))
            }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const { assert!(BlockQ4_0::D_OFFSET + 4 <= BlockQ4_0::BYTES) };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d`.
            unsafe { block_scales::<false>(row.add(b * BlockQ4_0::BYTES + BlockQ4_0::D_OFFSET)) }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const { assert!(BlockQ4_0::D_OFFSET + 2 <= BlockQ4_0::BYTES) };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<false>(row, BlockQ4_0::BYTES, BlockQ4_0::D_OFFSET, g, n, out)
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q4_0, BlockQ4_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use core::arch::x86_64::*;

    struct Q4_0W;

    impl W512 for Q4_0W {
        const BYTES: usize = quant::q4_0::BYTES;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q4_0;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_only(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract); lane i: nibble - 8.
            unsafe {
                let v = bytes16(row.add(b * Self::BYTES + 2));
                let tbl = _mm512_sub_ps(iota(), _mm512_set1_ps(8.0));
                [lut(v, tbl), lut(_mm512_srli_epi32::<4>(v), tbl)]
            }
        }
    }

    entry!(avx512_q4_0_f32, Q4_0W);
}

/// ggml `block_q4_0`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q4_0B;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Q4_0B;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl QBlock for Q4_0B {
        type L = BlockQ4_0;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's 16 quant bytes (caller contract).
            unsafe {
                let (lo, hi) = nibbles(blk.add(Self::QS));
                let eight = vdupq_n_s8(8);
                (vsubq_s8(vreinterpretq_s8_u8(lo), eight), vsubq_s8(vreinterpretq_s8_u8(hi), eight))
            }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_q4_0_q8_neon, Q4_0B;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_q4_0_q8_sdot, Q4_0B;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {

    use crate::kernels::aarch64::neon_f32::*;
    use crate::kernels::aarch64::*;
    use crate::kernels::frame::f32::*;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl F32Decode<BlockQ4_0> for NeonF32 {
        #[inline(always)]
        unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
            // SAFETY: block `b` in bounds (caller contract); `(q - 8) * d` is exact.
            unsafe {
                let blk = row.add(b * BlockQ4_0::BYTES);
                let (lo, hi) = nibbles(blk.add(BlockQ4_0::QS_OFFSET), c);
                let (d, eight) = (f16_splat(blk.add(BlockQ4_0::D_OFFSET)), vdupq_n_f32(8.0));
                (vmulq_f32(vsubq_f32(lo, eight), d), vmulq_f32(vsubq_f32(hi, eight), d))
            }
        }
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q4_0, BlockQ4_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_rows {
    use crate::kernels::x86_64::avx2_rows::*;
    use core::arch::x86_64::*;

    /// Q4_0 in the interleaved layout ([`crate::kernels::rows8`]).
    pub(crate) struct R4_0;

    impl RowsType for R4_0 {
        const BYTES: usize = 18;
        const OFFSET: i32 = 8;
        type Dec = [__m256i; 8];
        /// 8 activation rows per pass: the 8 decoded registers are made once for twice as
        /// many rows as at 4 (they and a row's temporaries fit in 16 ymm registers).
        const TILE: usize = 8;
        #[inline(always)]
        unsafe fn decode(g: *const u8) -> [__m256i; 8] {
            // SAFETY: the quants at byte 16 of the group-block (caller contract).
            unsafe { nibbles(g.add(16)) }
        }
        #[inline(always)]
        unsafe fn dot(d: &[__m256i; 8], x: *const i8) -> __m256i {
            // SAFETY: forwarded caller contract.
            unsafe { nibble_dot(d, x) }
        }
    }

    rows8_entries! {
        Avx2, avx2_q4_0_rows8, R4_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_0's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_0, super::avx2_f32::matmul_q4_0)
            .with_q8(DType::Q4_0, super::avx2_q8::matmul_q4_0_q8)
            .with_q8_rows8(DType::Q4_0, super::avx2_rows::avx2_q4_0_rows8)
    }

    /// `t` with Q4_0's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_0, super::avx512_q8::vnni_q4_0_q8)
    }

    /// `t` with Q4_0's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_0, super::avx512_f32::avx512_q4_0_f32)
            .with_q8(DType::Q4_0, super::avx512_q8::avx512_q4_0_q8)
    }

    /// `t` with Q4_0's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_0, super::avx512_q8::gfni_q4_0_q8)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_0's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_0, super::neon_f32::matmul_q4_0)
            .with_q8(DType::Q4_0, super::neon_q8::matmul_q4_0_q8_neon)
    }

    /// `t` with Q4_0's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_0, super::neon_q8::matmul_q4_0_q8_sdot)
    }
}
