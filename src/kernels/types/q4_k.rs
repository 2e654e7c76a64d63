//! Q4_K's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q4_K and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q4_K's entries to a table ([`super`]'s type list chains them).

/// Q4_K.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q4K;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_k {
    use super::Q4K;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;

    k_block! {
        Q4K, BlockQ4K;
    }

    impl K256 for Q4K {
        #[inline(always)]
        unsafe fn decode(blk: *const u8) -> KW {
            // SAFETY: 144-byte super-block: scales at 4..16, values at 16..144 (caller contract).
            unsafe {
                decode_k4(blk.add(BlockQ4K::SCALES_OFFSET), blk.add(BlockQ4K::QS_OFFSET), |_| None)
            }
        }
    }

    q8_entries! { k: Avx2, Avx2K<Avx2Ops>, "AVX2 table entry, activations in Q8_K.";
        matmul_q4_k_q8k, Q4K;
    }

    q8_entries! { k: AvxVnni, Avx2K<VexOps>, "AVX-VNNI table entry, activations in Q8_K.";
        vnni_q4_k_q8k, Q4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_k {
    use super::Q4K;

    use crate::kernels::x86_64::avx512_k::*;
    use crate::kernels::x86_64::*;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl K512 for Q4K {
        #[inline(always)]
        unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW {
            // SAFETY: 144-byte super-block: scales at 4..16, values at 16..144 (caller contract).
            unsafe {
                decode_k4::<Nb>(
                    blk.add(BlockQ4K::SCALES_OFFSET),
                    blk.add(BlockQ4K::QS_OFFSET),
                    None,
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
            // SAFETY: values at 16..144 (caller contract).
            unsafe { values_k4::<Nb>(blk.add(BlockQ4K::QS_OFFSET), None) }
        }
    }

    entries! {
        avx512 {
            avx512_q4_k_q8k, Q4K;
        }
        gfni {
            gfni_q4_k_q8k, Q4K;
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ4K> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const MIN: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe {
                let (sb, u) = unit(b);
                let blk = row.add(sb * crate::quant::q4_k::BYTES);
                k4_values(blk.add(BlockQ4K::QS_OFFSET), u, _mm256_setzero_si256())
            }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
            // SAFETY: super-block `g` is in bounds (caller contract).
            unsafe { k4_scales(row.add(g * crate::quant::q4_k::BYTES), out) }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q4_k, BlockQ4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;

    use core::arch::x86_64::*;

    struct Q4KW;

    impl W512 for Q4KW {
        const BYTES: usize = quant::q4_k::BYTES;
        const MIN: bool = true;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q4_k;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, _n: usize) -> (__m512, __m512) {
            // SAFETY: super-block `g` is in bounds (caller contract).
            unsafe { k4_scales(row.add(g * Self::BYTES)) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: super-block `b / 8` is in bounds (caller contract).
            unsafe { k4_nibbles(row.add(b / 8 * Self::BYTES + 16), b % 8) }
        }
    }

    entry!(avx512_q4_k_f32, Q4KW);
}

/// ggml `block_q4_K`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q4K;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_k {
    use super::Q4K;
    use crate::kernels::aarch64::neon_k::*;
    use crate::kernels::aarch64::neon_q8::{Sdot, Widen};

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl KQuant for Q4K {
        const BYTES: usize = crate::quant::q4_k::BYTES;
        const D_AT: usize = BlockQ4K::D_OFFSET;
        const MINS: bool = true;

        #[inline(always)]
        unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: the nibbles at 16..144 (caller contract).
            unsafe { signed(k4_unit(blk.add(BlockQ4K::QS_OFFSET), u)) }
        }

        #[inline(always)]
        unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales(blk.add(BlockQ4K::SCALES_OFFSET)) }
        }
    }

    impl KScales for Q4K {
        const S32: bool = true;

        #[inline(always)]
        unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
            // SAFETY: the packed scales at 4..16 (caller contract).
            unsafe { k4_scales_i32(blk.add(BlockQ4K::SCALES_OFFSET)) }
        }
    }

    q8_entries! { k: Neon, NeonK<Widen>, "NEON table entry, activations in Q8_K.";
        matmul_q4_k_q8k_neon, Q4K;
    }

    q8_entries! { k: NeonDotprod, NeonK<Sdot>, "NEON + `SDOT` table entry, activations in Q8_K.";
        matmul_q4_k_q8k_sdot, Q4K;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {
    use super::Q4K;
    use crate::kernels::aarch64::neon_f32::*;

    use crate::kernels::frame::f32::*;
    use crate::quant::q4_k::BlockQ4K;

    decode_once! {
        BlockQ4K, k_unit, Q4K;
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q4_k, BlockQ4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_rows {
    use crate::kernels::x86_64::avx2_rows::*;
    use crate::quant::Q8Acts;
    use core::arch::x86_64::*;

    /// Q4_K in the interleaved layout ([`crate::kernels::rows8`]; a group-block is one
    /// super-block of the 8 rows), against Q8_K activations: each sub-block's 8 integer dots
    /// are 8 `vpmaddubsw` of a nibble chunk against broadcast activation dwords, added in i16
    /// (at most `8 · 2 · 15 · 127 = 30480`), then one `vpmaddwd` by the rows' 6-bit scale
    /// (lanes `sc · (p0 + p1)`, at most `63 · 32 · 15 · 127 = 3840480` per sub-block, about
    /// 30.7 million for the 8: an i32); the minimums' sum
    /// `Σ_j m_j · (bsum_2j + bsum_2j+1)` is four `vpmaddwd` of the rows' minimums (i16 pairs)
    /// against the activation's pair sums. The term is the oracle's
    /// `(d · dx) · isum - (dmin · dx) · msum`, unfused.
    pub(crate) struct R4K;

    /// A Q4_K group-block with its sub-block scales and minimums unpacked.
    #[derive(Clone, Copy)]
    pub(crate) struct DecK {
        /// The 8 rows' nibbles (byte 128 of the group-block: 32 units of 32 bytes, unit
        /// `8 c + u` holding bytes `4 u .. 4 u + 4` of each row's chunk `c` of 32 bytes).
        q: *const u8,
        /// Scales of sub-blocks 0..4 and 4..8: byte `j % 4` of each row's lane.
        sc: [__m256i; 2],
        /// Minimums as i16 pairs in each row's lane: (m0, m2), (m1, m3), (m4, m6), (m5, m7).
        m: [__m256i; 4],
    }

    /// `vpshufb` control that puts byte `s` of each dword in both i16 halves of it.
    const fn spread_ctrl(s: usize) -> [i8; 32] {
        let mut c = [0i8; 32];
        let mut i = 0;
        while i < 32 {
            c[i] = if i % 2 == 1 { -128 } else { ((i % 16) / 4 * 4 + s) as i8 };
            i += 1;
        }
        c
    }

    /// [`spread_ctrl`] of bytes 0 to 3.
    static SPREAD: [[i8; 32]; 4] = [spread_ctrl(0), spread_ctrl(1), spread_ctrl(2), spread_ctrl(3)];

    /// Sub-block `j`'s scale of each row as an i16 pair `(sc_j, sc_j)` in its lane.
    ///
    /// # Safety
    ///
    /// AVX2 available.
    #[inline(always)]
    unsafe fn scale16(d: &DecK, j: usize) -> __m256i {
        // SAFETY: 32 bytes of a static; the rest is register-only.
        unsafe {
            _mm256_shuffle_epi8(d.sc[j / 4], _mm256_loadu_si256(SPREAD[j % 4].as_ptr().cast()))
        }
    }

    impl RowsType for R4K {
        const BYTES: usize = crate::quant::q4_k::BYTES;
        const ELEMS: usize = crate::quant::QK_K;
        /// Loads the 8 `dmin` with the 8 `d` ([`RowsType::finish`] subtracts their term).
        const MIN: bool = true;
        const GEMV_STREAMS: usize = 1;
        const GEMV_AHEAD: usize = 8 * 8 * crate::quant::q4_k::BYTES;
        type Dec = DecK;

        #[inline(always)]
        unsafe fn decode(g: *const u8) -> DecK {
            // SAFETY: the group-block's packed scales at bytes 32..128 (caller contract); the
            // rest is register-only. The word-parallel unpacking of
            // `crate::quant::q4_k::scales_mins_k4`, lane by lane.
            unsafe {
                let a = _mm256_loadu_si256(g.add(32).cast());
                let b = _mm256_loadu_si256(g.add(64).cast());
                let c = _mm256_loadu_si256(g.add(96).cast());
                let low6 = _mm256_set1_epi32(0x3F3F_3F3F);
                let nib = _mm256_set1_epi32(0x0F0F_0F0F);
                let top2 = _mm256_set1_epi32(0x3030_3030);
                let sc03 = _mm256_and_si256(a, low6);
                let sc47 = _mm256_or_si256(
                    _mm256_and_si256(c, nib),
                    _mm256_and_si256(_mm256_srli_epi32::<2>(a), top2),
                );
                let m03 = _mm256_and_si256(b, low6);
                let m47 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi32::<4>(c), nib),
                    _mm256_and_si256(_mm256_srli_epi32::<2>(b), top2),
                );
                let even = _mm256_set1_epi32(0x00FF_00FF);
                DecK {
                    q: g.add(128),
                    sc: [sc03, sc47],
                    m: [
                        _mm256_and_si256(m03, even),
                        _mm256_and_si256(_mm256_srli_epi32::<8>(m03), even),
                        _mm256_and_si256(m47, even),
                        _mm256_and_si256(_mm256_srli_epi32::<8>(m47), even),
                    ],
                }
            }
        }

        #[inline(always)]
        unsafe fn dot(d: &DecK, x: *const i8) -> __m256i {
            // SAFETY: forwarded caller contract.
            unsafe { Self::dots::<1>(d, [x])[0] }
        }

        /// Chunk by chunk for the `N` activation rows together: each 32-byte unit of
        /// nibbles is loaded and split once.
        #[inline(always)]
        unsafe fn dots<const N: usize>(d: &DecK, x: [*const i8; N]) -> [__m256i; N] {
            // SAFETY: the group-block's 1024 bytes of nibbles at `d.q` and 256 activation
            // bytes at each `x[t]` (caller contract); the rest is register-only.
            unsafe {
                let mask = _mm256_set1_epi8(0x0F);
                let mut isum = [_mm256_setzero_si256(); N];
                for c in 0..4 {
                    let mut lo = [_mm256_setzero_si256(); N];
                    let mut hi = [_mm256_setzero_si256(); N];
                    for u in 0..8 {
                        let v = _mm256_loadu_si256(d.q.add(32 * (8 * c + u)).cast());
                        let l = _mm256_and_si256(v, mask);
                        let h = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
                        for t in 0..N {
                            let xl = bcast(x[t].add(64 * c), u);
                            let xh = bcast(x[t].add(64 * c + 32), u);
                            lo[t] = _mm256_add_epi16(lo[t], _mm256_maddubs_epi16(l, xl));
                            hi[t] = _mm256_add_epi16(hi[t], _mm256_maddubs_epi16(h, xh));
                        }
                    }
                    let (sl, sh) = (scale16(d, 2 * c), scale16(d, 2 * c + 1));
                    for t in 0..N {
                        let s = _mm256_add_epi32(
                            _mm256_madd_epi16(lo[t], sl),
                            _mm256_madd_epi16(hi[t], sh),
                        );
                        isum[t] = _mm256_add_epi32(isum[t], s);
                    }
                }
                isum
            }
        }

        #[inline(always)]
        unsafe fn finish(
            d: &DecK,
            isum: __m256i,
            dw: __m256,
            mw: __m256,
            xq: &Q8Acts<'_>,
            i: usize,
        ) -> __m256 {
            // SAFETY: super-block `i`'s scale and 16 run sums inside `xq` (caller contract);
            // the rest is register-only.
            unsafe {
                let sums = xq.sum().as_ptr().add(16 * i);
                // Pair sums bs_j = sum_2j + sum_2j+1, in the order [0, 1, 4, 5 | 2, 3, 6, 7]
                // (`vphaddd` works per 128-bit half), each at most 32 · 127 (an i16).
                let p = _mm256_hadd_epi32(
                    _mm256_loadu_si256(sums.cast()),
                    _mm256_loadu_si256(sums.add(8).cast()),
                );
                let pk =
                    _mm_packs_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
                // i16 pairs (bs0, bs2), (bs1, bs3), (bs4, bs6), (bs5, bs7) in dwords 0..4.
                let pr = _mm_unpacklo_epi16(pk, _mm_srli_si128::<8>(pk));
                let b0 = _mm256_broadcastd_epi32(pr);
                let b1 = _mm256_broadcastd_epi32(_mm_shuffle_epi32::<0x55>(pr));
                let b2 = _mm256_broadcastd_epi32(_mm_shuffle_epi32::<0xAA>(pr));
                let b3 = _mm256_broadcastd_epi32(_mm_shuffle_epi32::<0xFF>(pr));
                let msum = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_madd_epi16(d.m[0], b0), _mm256_madd_epi16(d.m[1], b1)),
                    _mm256_add_epi32(_mm256_madd_epi16(d.m[2], b2), _mm256_madd_epi16(d.m[3], b3)),
                );
                let dx = _mm256_set1_ps(*xq.d().as_ptr().add(i));
                _mm256_sub_ps(
                    _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum)),
                    _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_cvtepi32_ps(msum)),
                )
            }
        }
    }

    rows8_entries! {
        Avx2, avx2_q4_k_rows8, R4K;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_K's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::avx2_f32::matmul_q4_k)
            .with_q8(DType::Q4_K, super::avx2_k::matmul_q4_k_q8k)
            .with_q8_rows8(DType::Q4_K, super::avx2_rows::avx2_q4_k_rows8)
    }

    /// `t` with Q4_K's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::avx2_k::vnni_q4_k_q8k)
    }

    /// `t` with Q4_K's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::avx512_f32::avx512_q4_k_f32)
            .with_q8(DType::Q4_K, super::avx512_k::avx512_q4_k_q8k)
    }

    /// `t` with Q4_K's AVX-512 + GFNI entries.
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::avx512_k::gfni_q4_k_q8k)
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q4_K's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q4_K, super::neon_f32::matmul_q4_k)
            .with_q8(DType::Q4_K, super::neon_k::matmul_q4_k_q8k_neon)
    }

    /// `t` with Q4_K's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q4_K, super::neon_k::matmul_q4_k_q8k_sdot)
    }
}
