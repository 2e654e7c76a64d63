//! Q5_1's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q5_1 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q5_1's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q5_1B;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Q5_1B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl QBlock for Q5_1B {
        type L = BlockQ5_1;
        const OFFSET: i32 = 0;
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
        matmul_q5_1_q8, Q5_1B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Q5_1B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Q5_1B>());

    impl VBlock for Q5_1B {
        vblock_consts!(Q5_1B);
        const OFF: i32 = 0;

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
            // SAFETY: eight 24-byte blocks = 192 bytes; blocks 6, 7 have their scale and minimum
            // at words 72, 73 and 84, 85 = words 0, 1, 12, 13 of the 32 bytes at byte 144.
            unsafe { scales8_tail::<12, true, 144>(wb) }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_q5_1_q8, Q5_1B;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q5_1_q8, Q5_1B;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_q5_1_q8, Q5_1B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ5_1> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract).
            unsafe {
                let blk = row.add(b * crate::quant::q5_1::BYTES);
                bytes_f32::<false>(_mm256_or_si256(
                    crate::kernels::x86_64::nibbles32(blk.add(BlockQ5_1::QS_OFFSET)),
                    crate::kernels::x86_64::fifth_bits(blk.add(BlockQ5_1::QH_OFFSET)),
                ))
            }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const {
                assert!(
                    BlockQ5_1::D_OFFSET + 4 <= crate::quant::q5_1::BYTES
                        && BlockQ5_1::M_OFFSET == BlockQ5_1::D_OFFSET + 2
                )
            };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d` (then `m`).
            unsafe {
                block_scales::<true>(row.add(b * crate::quant::q5_1::BYTES + BlockQ5_1::D_OFFSET))
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const {
                assert!(
                    BlockQ5_1::D_OFFSET + 4 <= crate::quant::q5_1::BYTES
                        && BlockQ5_1::M_OFFSET == BlockQ5_1::D_OFFSET + 2
                )
            };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<true>(
                    row,
                    crate::quant::q5_1::BYTES,
                    BlockQ5_1::D_OFFSET,
                    g,
                    n,
                    out,
                )
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q5_1, BlockQ5_1;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    struct Q5_1W;

    impl W512 for Q5_1W {
        const BYTES: usize = quant::q5_1::BYTES;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q5_1;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_and_m(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract); lane i: nibble + 16 · bit.
            unsafe {
                let blk = row.add(b * Self::BYTES);
                let v = bytes16(blk.add(BlockQ5_1::QS_OFFSET));
                let (m0, m1) = qh_masks(blk.add(BlockQ5_1::QH_OFFSET));
                [add16(lut(v, iota()), m0), add16(lut(_mm512_srli_epi32::<4>(v), iota()), m1)]
            }
        }
    }

    entry!(avx512_q5_1_f32, Q5_1W);
}

/// ggml `block_q5_1`: `q` from the nibbles and the fifth bits.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q5_1B;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Q5_1B;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl QBlock for Q5_1B {
        type L = BlockQ5_1;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's `qh` and `qs` (caller contract: a whole block).
            unsafe { q5_values(blk.add(Self::QH), blk.add(Self::QS)) }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_q5_1_q8_neon, Q5_1B;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_q5_1_q8_sdot, Q5_1B;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q5_1B;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::*;

    decode_once! {
        BlockQ5_1, q_block, Q5_1B;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q5_1, BlockQ5_1;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_1's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_1, super::avx2_f32::matmul_q5_1)
            .with_q8(DType::Q5_1, super::avx2_q8::matmul_q5_1_q8)
    }

    /// `t` with Q5_1's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_1, super::avx512_q8::vnni_q5_1_q8)
    }

    /// `t` with Q5_1's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_1, super::avx512_f32::avx512_q5_1_f32)
            .with_q8(DType::Q5_1, super::avx512_q8::avx512_q5_1_q8)
    }

    /// `t` with Q5_1's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_1, super::avx512_q8::gfni_q5_1_q8)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_1's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q5_1, super::neon_f32::matmul_q5_1)
            .with_q8(DType::Q5_1, super::neon_q8::matmul_q5_1_q8_neon)
    }

    /// `t` with Q5_1's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_1, super::neon_q8::matmul_q5_1_q8_sdot)
    }
}
