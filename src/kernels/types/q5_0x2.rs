//! Q5_0x2's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q5_0x2 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q5_0x2's entries to a table ([`super`]'s type list chains them).

/// [`crate::quant::q5_0x2`]'s pairs for the main product: pair `j` of a row (blocks `2 j`,
/// `2 j + 1`) at `2 j * BYTES`, decoded by [`q5x2_pair`] (one broadcast load, one split, one
/// mask load, one masked add), its two scales at words 0 and 1.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q5_0x2B;

/// Half `H` of each row's pair for the column-block kernels
/// ([`crate::kernels::Kernels::matmul_q8_halves`]): one activation block per row, the pair at
/// the row's start.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q5_0x2H<const H: usize>;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::{Q5_0x2B, Q5_0x2H};
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q5_0x2::{D_OFFSET as X2_D, QH_OFFSET as X2_QH, QS_OFFSET as X2_QS};
    use core::arch::x86_64::*;

    const _: () = assert!(X2_D == 0);

    /// The 64 values of the pair at `p` in element order: the 32 quant bytes broadcast to both
    /// 256-bit halves, low nibbles in the low half (block 0), high nibbles in the high half
    /// (block 1), `16` added where bit `e` of the little-endian u64 at `p + 4` is set.
    ///
    /// # Safety
    ///
    /// 44 readable bytes at `p`; AVX-512 F/BW available, and what `Nb` needs.
    #[inline(always)]
    unsafe fn q5x2_pair<Nb: Nibbles>(p: *const u8) -> __m512i {
        // SAFETY: bytes 4..12 and 12..44 of the pair (caller contract).
        unsafe {
            let z = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(X2_QS).cast()));
            let q = Nb::split::<0b1111_0000>(z);
            let h = _load_mask64(p.add(X2_QH).cast());
            _mm512_mask_add_epi8(q, h, q, opaque512(_mm512_set1_epi8(0x10)))
        }
    }

    /// Half `h` of the pairs at `p0` (low 256 bits) and `p1` (high): 32 values of each in
    /// element order, `16` added where the half's fifth bit (the u32 at `p + 4 + 4 h`) is set.
    ///
    /// # Safety
    ///
    /// 44 readable bytes at `p0` and `p1`, `h < 2`; AVX-512 F/BW available, and what `Nb` needs.
    #[inline(always)]
    unsafe fn q5x2_halves<Nb: Nibbles>(p0: *const u8, p1: *const u8, h: usize) -> __m512i {
        // SAFETY: bytes 4..44 of both pairs (caller contract).
        unsafe {
            let a = _mm256_loadu_si256(p0.add(X2_QS).cast());
            let b = _mm256_loadu_si256(p1.add(X2_QS).cast());
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
            let q = if h == 0 { Nb::split::<0>(z) } else { Nb::split::<0xFF>(z) };
            let h0 = p0.add(X2_QH + 4 * h).cast::<u32>().read_unaligned() as u64;
            let h1 = p1.add(X2_QH + 4 * h).cast::<u32>().read_unaligned() as u64;
            _mm512_mask_add_epi8(q, h0 | h1 << 32, q, opaque512(_mm512_set1_epi8(0x10)))
        }
    }

    /// The word picks of [`pair_scales`]: the scales of pairs 0, 1 (words 0, 1, 22, 23 of the
    /// first vector) and 2, 3 (words 0, 1, 22, 23 of the second, loaded from byte 88).
    static PAIR_IDX: [i16; 32] = [
        0, 1, 22, 23, 32, 33, 54, 55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0,
    ];

    /// The f16 scales of the first `m` blocks (`m` even, `<= 8`) of the pairs at `wb`, lanes
    /// `0..m` (the rest 0): two masked loads that read nothing past the `m / 2` pairs, one
    /// `vpermt2w`.
    ///
    /// # Safety
    ///
    /// `m / 2` whole pairs at `wb`; AVX-512 F/BW available.
    #[inline(always)]
    unsafe fn pair_scales(wb: *const u8, m: usize) -> __m256i {
        // SAFETY: the masked loads cover bytes `< m * 22` only (caller contract).
        unsafe {
            let len = m * Q5_0x2B::BYTES;
            let mask = |n: usize| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
            let z0 = _mm512_maskz_loadu_epi8(mask(len), wb.cast());
            let z1 = _mm512_maskz_loadu_epi8(mask(len.saturating_sub(88)), wb.add(88).cast());
            let idx = _mm512_loadu_si512(PAIR_IDX.as_ptr().cast());
            _mm512_castsi512_si256(_mm512_permutex2var_epi16(z0, idx, z1))
        }
    }

    impl VBlock for Q5_0x2B {
        const BYTES: usize = crate::quant::q5_0x2::HALF_BYTES;
        const MIN: bool = false;
        const PAIRS: bool = true;
        const OFF: i32 = 16;

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // The tiles call this with `blk0` at an even block, the start of its pair, and `blk1`
            // the next block (rows are whole pairs, so a group never ends on a lone block).
            let _ = blk1;
            // SAFETY: the pair at `blk0` is whole (caller contract).
            unsafe { q5x2_pair::<Nb>(blk0) }
        }

        #[inline(always)]
        unsafe fn scales8(wb: *const u8) -> __m256i {
            // SAFETY: four whole pairs at `wb` (caller contract).
            unsafe { pair_scales(wb, 8) }
        }

        #[inline(always)]
        unsafe fn scales_m(wb: *const u8, m: usize) -> __m256i {
            // SAFETY: `m / 2` whole pairs at `wb` (`m` is even: rows are whole pairs).
            unsafe { pair_scales(wb, m) }
        }

        #[inline(always)]
        unsafe fn decode_col2<Nb: Nibbles>(p0: *const u8, p1: *const u8, b: usize) -> __m512i {
            let h = b & 1;
            // SAFETY: block `b` is half `h` of the pair `h * BYTES` before it (caller contract).
            unsafe { q5x2_halves::<Nb>(p0.sub(h * Self::BYTES), p1.sub(h * Self::BYTES), h) }
        }

        #[inline(always)]
        unsafe fn scale_ptr(p: *const u8, b: usize) -> *const u8 {
            let h = b & 1;
            // SAFETY: block `b`'s pair starts `h * BYTES` before `p`; its scale is word `h`.
            unsafe { p.sub(h * Self::BYTES).add(X2_D + 2 * h) }
        }
    }

    impl<const H: usize> VBlock for Q5_0x2H<H> {
        // One block per row: only block 0 (the row's pair) is ever addressed.
        const BYTES: usize = crate::quant::q5_0x2::BYTES;
        const MIN: bool = false;
        const OFF: i32 = 16;

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: whole pairs at both (caller contract).
            unsafe { q5x2_halves::<Nb>(blk0, blk1, H) }
        }

        #[inline(always)]
        unsafe fn scales_m(wb: *const u8, m: usize) -> __m256i {
            debug_assert_eq!(m, 1);
            // SAFETY: the pair at `wb` is whole; its word `H` is the half's scale.
            unsafe { _mm512_castsi512_si256(pick_words(wb.add(X2_D + 2 * H), 2, 1, false)) }
        }

        #[inline(always)]
        unsafe fn scale_ptr(p: *const u8, b: usize) -> *const u8 {
            debug_assert_eq!(b, 0);
            // SAFETY: the pair at `p` is whole; its word `H` is the half's scale.
            unsafe { p.add(X2_D + 2 * H) }
        }
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q5_0x2_q8, Q5_0x2B;
        avx512_q5_0x2_h0, Q5_0x2H<0>;
        avx512_q5_0x2_h1, Q5_0x2H<1>;
    }

    q8_entries! { Avx512Gfni, Avx512Tier<GfniNibbles>, "AVX-512 + GFNI table entry.";
        gfni_q5_0x2_q8, Q5_0x2B;
        gfni_q5_0x2_h0, Q5_0x2H<0>;
        gfni_q5_0x2_h1, Q5_0x2H<1>;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q5_0x2's AVX2 entries (none).
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t
    }

    /// `t` with Q5_0x2's AVX-VNNI entries (none).
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t
    }

    /// `t` with Q5_0x2's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_0x2, super::avx512_q8::avx512_q5_0x2_q8).with_q8_halves(
            DType::Q5_0x2,
            [super::avx512_q8::avx512_q5_0x2_h0, super::avx512_q8::avx512_q5_0x2_h1],
        )
    }

    /// `t` with Q5_0x2's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q5_0x2, super::avx512_q8::gfni_q5_0x2_q8).with_q8_halves(
            DType::Q5_0x2,
            [super::avx512_q8::gfni_q5_0x2_h0, super::avx512_q8::gfni_q5_0x2_h1],
        )
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;

    /// `t` with Q5_0x2's NEON entries (none).
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t
    }

    /// `t` with Q5_0x2's NEON + SDOT entries (none).
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t
    }
}
