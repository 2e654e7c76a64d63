//! Q8_0's SIMD bodies, moved out of the tier files: one submodule per tier file whose
//! machinery they plug into (named after it: its trait impls for Q8_0 and its table entries,
//! under that tier's build gate), and per architecture (`x86`, `aarch64`) one `const fn` per
//! SIMD table that adds Q8_0's entries to a table ([`super`]'s type list chains them).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) struct Q8_0B;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_q8 {
    use super::Q8_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::*;
    use crate::quant::*;
    use core::arch::x86_64::*;

    impl QBlock for Q8_0B {
        type L = BlockQ8_0;
        const OFFSET: i32 = 0;

        #[inline(always)]
        unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
            // SAFETY: 32 bytes at the block's quants (caller contract).
            unsafe { signed_operands(_mm256_loadu_si256(blk.add(Self::QS).cast()), x) }
        }
    }

    q8_entries! { Avx2, Avx2Tier<Avx2Ops>, "AVX2 table entry.";
        matmul_q8_0_q8, Q8_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_q8 {
    use super::Q8_0B;
    use crate::kernels::frame::q8::q8_entries;
    use crate::kernels::x86_64::avx2_q8::*;
    use crate::kernels::x86_64::avx512_q8::*;
    use crate::kernels::x86_64::*;

    use core::arch::x86_64::*;

    const _: () = assert!(scales_first::<Q8_0B>());

    impl VBlock for Q8_0B {
        vblock_consts!(Q8_0B);
        const OFF: i32 = 128;

        #[inline(always)]
        unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i {
            // SAFETY: 32 quant bytes in each block (caller contract).
            unsafe {
                let w0 = _mm256_loadu_si256(blk0.add(Self::QS).cast());
                let w1 = _mm256_loadu_si256(blk1.add(Self::QS).cast());
                let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0), w1);
                _mm512_xor_si512(w, _mm512_set1_epi8(SIGN))
            }
        }
    }

    q8_entries! { AvxVnni, Avx2Tier<VexOps>, "AVX-VNNI table entry (the AVX2 kernel with the VEX `vpdpbusd`).";
        vnni_q8_0_q8, Q8_0B;
    }

    q8_entries! { Avx512, Avx512Tier<ShiftNibbles>, "AVX-512 table entry.";
        avx512_q8_0_q8, Q8_0B;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_f32 {

    use crate::kernels::frame::f32::*;
    use crate::kernels::x86_64::avx2_f32::*;

    use crate::quant::*;
    use core::arch::x86_64::*;

    impl F32Decode<BlockQ8_0> for Avx2F32 {
        const FACTORED: bool = true;
        const GROUP_SCALES: bool = true;
        const PARTIAL_BY_UNIT: bool = true;

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
            // SAFETY: block `b` is in bounds (caller contract): the 32 i8.
            unsafe {
                let qs = row.add(b * BlockQ8_0::BYTES + BlockQ8_0::QS_OFFSET);
                let q = |c: usize| {
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(qs.add(8 * c).cast())))
                };
                [q(0), q(1), q(2), q(3)]
            }
        }

        #[inline(always)]
        unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
            const { assert!(BlockQ8_0::D_OFFSET + 4 <= BlockQ8_0::BYTES) };
            // SAFETY: block `b` is in bounds (caller contract), 4 bytes from its `d`.
            unsafe { block_scales::<false>(row.add(b * BlockQ8_0::BYTES + BlockQ8_0::D_OFFSET)) }
        }

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
            const { assert!(BlockQ8_0::D_OFFSET + 2 <= BlockQ8_0::BYTES) };
            // SAFETY: units `8 g .. 8 g + n` are in bounds (caller contract).
            unsafe {
                block_group_scales::<false>(row, BlockQ8_0::BYTES, BlockQ8_0::D_OFFSET, g, n, out)
            }
        }
    }

    f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
        matmul_q8_0, BlockQ8_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx512_f32 {
    use crate::quant;

    use crate::kernels::x86_64::avx512_f32::*;
    use core::arch::x86_64::*;

    struct Q8_0W;

    impl W512 for Q8_0W {
        const BYTES: usize = quant::q8_0::BYTES;
        const FALLBACK: crate::kernels::MatmulF32Fn = super::avx2_f32::matmul_q8_0;

        #[inline(always)]
        unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512) {
            // SAFETY: forwarded caller contract.
            unsafe { d_only(row, g, n, Self::BYTES) }
        }

        #[inline(always)]
        unsafe fn values(row: *const u8, b: usize) -> [__m512; 2] {
            // SAFETY: block `b` is in bounds (caller contract).
            unsafe {
                let qs = row.add(b * Self::BYTES + 2);
                [
                    sbytes_f32(_mm_loadu_si128(qs.cast())),
                    sbytes_f32(_mm_loadu_si128(qs.add(16).cast())),
                ]
            }
        }
    }

    entry!(avx512_q8_0_f32, Q8_0W);
}

/// ggml `block_q8_0`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) struct Q8_0B;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_q8 {
    use super::Q8_0B;
    use crate::kernels::aarch64::neon_q8::*;

    use crate::kernels::frame::q8::q8_entries;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl QBlock for Q8_0B {
        type L = BlockQ8_0;

        #[inline(always)]
        unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t) {
            // SAFETY: the block's 32 quant bytes (caller contract).
            unsafe {
                let qs = blk.add(Self::QS);
                (vld1q_s8(qs.cast()), vld1q_s8(qs.add(16).cast()))
            }
        }
    }

    q8_entries! { Neon, NeonTier<Widen>, "NEON table entry.";
        matmul_q8_0_q8_neon, Q8_0B;
    }

    q8_entries! { NeonDotprod, NeonTier<Sdot>, "NEON + `SDOT` table entry.";
        matmul_q8_0_q8_sdot, Q8_0B;
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon_f32 {

    use crate::kernels::aarch64::neon_f32::*;
    use crate::kernels::aarch64::*;
    use crate::kernels::frame::f32::*;
    use crate::quant::*;
    use core::arch::aarch64::*;

    impl F32Decode<BlockQ8_0> for NeonF32 {
        #[inline(always)]
        unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
            // SAFETY: block `b` in bounds (caller contract); `d * q` is exact in f32.
            unsafe {
                let blk = row.add(b * BlockQ8_0::BYTES);
                let q = vmovl_s8(vld1_s8(blk.add(BlockQ8_0::QS_OFFSET + 8 * c).cast()));
                let d = f16_splat(blk.add(BlockQ8_0::D_OFFSET));
                (
                    vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d),
                    vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), d),
                )
            }
        }
    }

    f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
        matmul_q8_0, BlockQ8_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod avx2_rows {
    use crate::kernels::x86_64::avx2_rows::*;
    use core::arch::x86_64::*;

    /// Q8_0 in the interleaved layout ([`crate::kernels::rows8`]).
    pub(crate) struct R8_0;

    impl RowsType for R8_0 {
        const BYTES: usize = 34;
        /// The group-block's address (the 8 chunks are read per activation row: 16 registers
        /// of `|w|` and `w` would not stay in registers).
        type Dec = *const u8;
        #[inline(always)]
        unsafe fn decode(g: *const u8) -> *const u8 {
            g
        }
        #[inline(always)]
        unsafe fn dot(g: &*const u8, x: *const i8) -> __m256i {
            // SAFETY: 8 × 32 bytes of quants at byte 16 of the group-block and 32 bytes at `x`
            // (caller contract); the rest is register-only.
            unsafe {
                let q = g.add(16);
                let one = _mm256_set1_epi16(1);
                let p = |c: usize| {
                    let w = _mm256_loadu_si256(q.add(32 * c).cast());
                    let s =
                        _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast(x, c), w));
                    _mm256_madd_epi16(s, one)
                };
                let a =
                    _mm256_add_epi32(_mm256_add_epi32(p(0), p(1)), _mm256_add_epi32(p(2), p(3)));
                let b =
                    _mm256_add_epi32(_mm256_add_epi32(p(4), p(5)), _mm256_add_epi32(p(6), p(7)));
                _mm256_add_epi32(a, b)
            }
        }
        const TILE: usize = 8;
        /// Chunk by chunk: each chunk's `w` and `|w|` once, then its product with every
        /// activation row (registers: `w`, `|w|`, the `N` sums and temporaries).
        #[inline(always)]
        unsafe fn dots<const N: usize>(g: &*const u8, x: [*const i8; N]) -> [__m256i; N] {
            // SAFETY: as `dot`, for every `x[t]` (caller contract).
            unsafe {
                let q = g.add(16);
                let one = _mm256_set1_epi16(1);
                let mut acc = [_mm256_setzero_si256(); N];
                for c in 0..8 {
                    let w = _mm256_loadu_si256(q.add(32 * c).cast());
                    let aw = _mm256_abs_epi8(w);
                    for (a, &x) in acc.iter_mut().zip(&x) {
                        let s = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast(x, c), w));
                        *a = _mm256_add_epi32(*a, _mm256_madd_epi16(s, one));
                    }
                }
                acc
            }
        }
    }

    /// Q8_0 in the interleaved layout on AVX-VNNI: `w + 128` as u8 (the sign bit flipped)
    /// times the activations by `vpdpbusd`, exact in i32 (four products of at most
    /// `255 · 127` per lane and step), then `128 · Σ x` subtracted (`OFFSET`).
    pub(crate) struct V8_0;

    impl RowsType for V8_0 {
        const BYTES: usize = 34;
        const OFFSET: i32 = 128;
        const TILE: usize = 8;
        /// The group-block's address, as [`R8_0`]'s.
        type Dec = *const u8;
        #[inline(always)]
        unsafe fn decode(g: *const u8) -> *const u8 {
            g
        }
        #[inline(always)]
        unsafe fn dot(g: &*const u8, x: *const i8) -> __m256i {
            // SAFETY: forwarded caller contract.
            unsafe { Self::dots::<1>(g, [x])[0] }
        }
        /// Chunk by chunk: each chunk's `w + 128` once, then one `vpdpbusd` per activation
        /// row.
        #[inline(always)]
        unsafe fn dots<const N: usize>(g: &*const u8, x: [*const i8; N]) -> [__m256i; N] {
            // SAFETY: as `R8_0::dots`; `vpdpbusd` needs AVX-VNNI, which the entry's tier has
            // (this type is only used by `vnni_q8_0_rows8`).
            unsafe {
                let q = g.add(16);
                let flip = _mm256_set1_epi8(i8::MIN);
                let mut acc = [_mm256_setzero_si256(); N];
                for c in 0..8 {
                    let u = _mm256_xor_si256(_mm256_loadu_si256(q.add(32 * c).cast()), flip);
                    for (a, &x) in acc.iter_mut().zip(&x) {
                        *a = _mm256_dpbusd_avx_epi32(*a, u, bcast(x, c));
                    }
                }
                acc
            }
        }
    }

    rows8_entries! {
        Avx2, avx2_q8_0_rows8, R8_0;
        AvxVnni, vnni_q8_0_rows8, V8_0;
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) mod x86 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q8_0's AVX2 entries.
    pub(crate) const fn avx2(t: Kernels) -> Kernels {
        t.with_f32(DType::Q8_0, super::avx2_f32::matmul_q8_0)
            .with_q8(DType::Q8_0, super::avx2_q8::matmul_q8_0_q8)
            .with_q8_rows8(DType::Q8_0, super::avx2_rows::avx2_q8_0_rows8)
    }

    /// `t` with Q8_0's AVX-VNNI entries.
    pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
        t.with_q8(DType::Q8_0, super::avx512_q8::vnni_q8_0_q8)
            .with_q8_rows8(DType::Q8_0, super::avx2_rows::vnni_q8_0_rows8)
    }

    /// `t` with Q8_0's AVX-512 entries.
    pub(crate) const fn avx512(t: Kernels) -> Kernels {
        t.with_f32(DType::Q8_0, super::avx512_f32::avx512_q8_0_f32)
            .with_q8(DType::Q8_0, super::avx512_q8::avx512_q8_0_q8)
    }

    /// `t` with Q8_0's AVX-512 + GFNI entries (none).
    pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
        t
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) mod aarch64 {
    use crate::kernels::Kernels;
    use crate::tensor::DType;

    /// `t` with Q8_0's NEON entries.
    pub(crate) const fn neon(t: Kernels) -> Kernels {
        t.with_f32(DType::Q8_0, super::neon_f32::matmul_q8_0)
            .with_q8(DType::Q8_0, super::neon_q8::matmul_q8_0_q8_neon)
    }

    /// `t` with Q8_0's NEON + SDOT entries.
    pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
        t.with_q8(DType::Q8_0, super::neon_q8::matmul_q8_0_q8_sdot)
    }
}
