//! Q5_0's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q5_0 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q5_0's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q5_0B;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Q5_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl QBlock for Q5_0B {
        type L = BlockQ5_0;
        const OFFSET: i32 = 16;
        const PAIRS: bool = true;
        const PAIR_I16: bool = true;
        const HEADS: bool = true;

        #[inline(always)]
        unsafe fn pair_operands(
            bp: *const u8,
            bq: *const u8,
            h: __m256i,
            xl: __m256i,
            xh: __m256i,
        ) -> [(__m256i, __m256i); 2] {
            // SAFETY: each block's 16 bytes of quants (caller contract); the fifth bits are in
            // the heads.
            unsafe {
                let (lo, hi) = nibble_pairs(bp.add(Self::QS), bq.add(Self::QS));
                let (fl, fh) = fifth_bit_pairs(h, Self::QH);
                [(_mm256_or_si256(lo, fl), xl), (_mm256_or_si256(hi, fh), xh)]
            }
        }

        #[inline(always)]
        unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
            // SAFETY: the block's 4 bytes of fifth bits and 16 of quants (caller contract).
            unsafe {
                (_mm256_or_si256(nibbles32(blk.add(Self::QS)), fifth_bits(blk.add(Self::QH))), x)
            }
        }
    }

    q8_entries! { Avx2, Avx2Tier<Avx2Ops>, "AVX2 table entry.";
        matmul_q5_0_q8, Q5_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Q5_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Q5_0B>());

    impl VBlock for Q5_0B {
        vblock_consts!(Q5_0B);
        const OFF: i32 = 16;

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: the fifth bits and 16 quant bytes of each block (caller contract).
            unsafe {
                let (qs, qh) = (Self::QS, Self::QH);
                q5_values2::<Nb>(blk0.add(qs), blk1.add(qs), blk0.add(qh), blk1.add(qh))
            }
        }

        #[inline(always)]
        unsafe fn scales8(wb: *const u8) -> __m256i {
            // SAFETY: eight 22-byte blocks = 176 bytes; blocks 6, 7 have their scales at words
            // 66, 77 = words 2, 13 of the 32 bytes at byte 128.
            unsafe { scales8_tail::<11, false, 128>(wb) }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_q5_0_q8, Q5_0B;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q5_0_q8, Q5_0B;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_q5_0_q8, Q5_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ5_0> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract): `q - 16`, as the nibble or'ed
            // with `0xF0` (-16 as i8) where the fifth bit is clear (nibble + 16 · bit - 16).
            unsafe {
                let blk = row.add(b * crate::quant::q5_0::BYTES);
                let q = _mm256_or_si256(
                    crate::kernels::x86_64::nibbles32(blk.add(BlockQ5_0::QS_OFFSET)),
                    _mm256_andnot_si256(
                        crate::kernels::x86_64::fifth_mask(blk.add(BlockQ5_0::QH_OFFSET)),
                        _mm256_set1_epi8(-16),
                    ),
                );
                bytes_f32::<true>(q)
            }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const { assert!(BlockQ5_0::D_OFFSET + 4 <= crate::quant::q5_0::BYTES) };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d`.
            unsafe {
                block_scales::<false>(row.add(b * crate::quant::q5_0::BYTES + BlockQ5_0::D_OFFSET))
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const { assert!(BlockQ5_0::D_OFFSET + 2 <= crate::quant::q5_0::BYTES) };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<false>(
                    row,
                    crate::quant::q5_0::BYTES,
                    BlockQ5_0::D_OFFSET,
                    g,
                    n,
                    out,
                )
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q5_0, BlockQ5_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q5_0W;

    impl W512 for Q5_0W {
        const BYTES: usize = quant::q5_0::BYTES;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q5_0;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_only(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract); lane i: nibble + 16 · bit - 16.
            unsafe {
                let blk = row.add(b * Self::BYTES);
                let v = bytes16(blk.add(BlockQ5_0::QS_OFFSET));
                let (m0, m1) = qh_masks(blk.add(BlockQ5_0::QH_OFFSET));
                let tbl = _mm512_sub_ps(iota(), _mm512_set1_ps(16.0));
                [add16(lut(v, tbl), m0), add16(lut(_mm512_srli_epi32::<4>(v), tbl), m1)]
            }
        }
    }

    entry!(avx512_q5_0_f32, Q5_0W);
}

/// ggml `block_q5_0`: `q - 16` from the nibbles and the fifth bits.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q5_0B;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Q5_0B;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl QBlock for Q5_0B {
        type L = BlockQ5_0;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's `qh` and `qs` (caller contract: a whole block).
            // Σ (q - 16) x = Σ q x - 16 Σ x: the oracle's integer exactly.
            unsafe {
                let (a, b) = q5_values(blk.add(Self::QH), blk.add(Self::QS));
                let s = vdupq_n_s8(16);
                (vsubq_s8(a, s), vsubq_s8(b, s))
            }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_q5_0_q8_neon, Q5_0B;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_q5_0_q8_sdot, Q5_0B;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q5_0B;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::*;

    decode_once! {
        BlockQ5_0, q_block, Q5_0B;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q5_0, BlockQ5_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_rows {
    use crate::kernels::x86_64::avx2_rows::*;
    use core::arch::x86_64::*;

    /// Q5_0 in the interleaved layout ([`crate::kernels::rows8`]).
    pub(crate) struct R5_0;

    impl RowsType for R5_0 {
        const BYTES: usize = 22;
        const OFFSET: i32 = 16;
        type Dec = [__m256i; 8];
        #[inline(always)]
        unsafe fn decode(g: *const u8) -> [__m256i; 8] {
            // SAFETY: the fifth bits at byte 16 and the quants at byte 48 of the group-block
            // (caller contract).
            unsafe {
                let (h, q) = (_mm256_loadu_si256(g.add(16).cast()), g.add(48));
                let (l0, h0) = chunk5::<0, 4>(q, h);
                let (l1, h1) = chunk5::<1, 3>(q, h);
                let (l2, h2) = chunk5::<2, 2>(q, h);
                let (l3, h3) = chunk5::<3, 1>(q, h);
                [l0, l1, l2, l3, h0, h1, h2, h3]
            }
        }
        /// Four `vpmaddubsw` lanes of 5-bit values (at most `4 · 2 · 31 · 127 = 31496`) add up in
        /// i16, the low and the high halves each, then one `vpmaddwd` per half.
        #[inline(always)]
        unsafe fn dot(d: &[__m256i; 8], x: *const i8) -> __m256i {
            // SAFETY: 32 bytes at `x` (caller contract); the rest is register-only.
            unsafe {
                let p = |i: usize| _mm256_maddubs_epi16(d[i], bcast(x, i));
                let a =
                    _mm256_add_epi16(_mm256_add_epi16(p(0), p(1)), _mm256_add_epi16(p(2), p(3)));
                let b =
                    _mm256_add_epi16(_mm256_add_epi16(p(4), p(5)), _mm256_add_epi16(p(6), p(7)));
                let one = _mm256_set1_epi16(1);
                _mm256_add_epi32(_mm256_madd_epi16(a, one), _mm256_madd_epi16(b, one))
            }
        }
    }

    rows8_entries! {
        Avx2, avx2_q5_0_rows8, R5_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_0's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_0, super::avx2_f32::matmul_q5_0)
            .with_q8(DType::Q5_0, super::avx2_q8::matmul_q5_0_q8)
            .with_q8_rows8(DType::Q5_0, super::avx2_rows::avx2_q5_0_rows8)
            // f32 activations: the Q8_0 body on a widened copy is faster ([`Kernels::f32_via_q8_0`]).
            .with_f32_via_q8_0(DType::Q5_0)
    }

    /// `t` with Q5_0's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_0, super::avx512_q8::vnni_q5_0_q8)
    }

    /// `t` with Q5_0's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_0, super::avx512_f32::avx512_q5_0_f32)
            .with_q8(DType::Q5_0, super::avx512_q8::avx512_q5_0_q8)
    }

    /// `t` with Q5_0's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_0, super::avx512_q8::gfni_q5_0_q8)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_0's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_0, super::neon_f32::matmul_q5_0)
            .with_q8(DType::Q5_0, super::neon_q8::matmul_q5_0_q8_neon)
    }

    /// `t` with Q5_0's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_0, super::neon_q8::matmul_q5_0_q8_sdot)
    }
}
