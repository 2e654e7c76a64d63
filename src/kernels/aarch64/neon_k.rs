//! NEON kernels for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): the per-type decoders of
//! runs of 32 values ([`KQuant`]), shared by the f32-activation kernels (`neon_f32.rs`), and
//! the NEON and NEON + `SDOT` tiers' [`KTier`] for the int8 product against Q8_K activations
//! ([`crate::quant::ActFormat::Q8K`]): their tiles and schedule are the kernel frame's
//! ([`crate::kernels::frame::k`]), as for AVX2.
//!
//! A super-block is 8 units of 32 values, each unit two sub-blocks of 16 (the 32-element
//! sub-blocks of Q4_K/Q5_K give both halves the same scale). A unit decodes to two vectors of
//! 16 signed bytes: the weights' integers with the type's offset already applied (Q3_K
//! `q - 4`, Q6_K `q - 32`; the others unsigned, with the mins kept apart), so `SDOT` (or
//! `SMULL` + `SADALP`, [`KDot`]) gives the oracle's sub-block sums `Σ q · x` directly, one
//! 4-lane vector per scale. Pairwise adds gather four sub-blocks' sums into the lanes of one
//! vector, which is multiplied by the sub-block scales' lanes ([`KScales`], unpacked in
//! registers once per decoded super-block) into the oracle's exact integer
//! `isum = Σ_j sc_j Σ_{i in j} q_i x_i`, and the activations' per-16 sums by the mins' lanes
//! into `msum = Σ_j m_j · bsum_j`. The frame's f32 epilogue is the scalar oracle's
//! (`crate::quant::q4_k::dot_q4_k_q8k` etc.) term for term, lane by lane, so the results are
//! bit-identical to the scalar table.

use core::arch::aarch64::*;
use core::arch::asm;
use core::marker::PhantomData;

use super::neon_q8::{Dot, Sdot, Widen};
use super::{cvt_f16x4, NeonPrefetch};
use crate::kernels::frame::k::KTier;
use crate::quant::q4_k::scales_mins_k4;

/// A K-quant super-block as the NEON kernels see it.
pub(crate) trait KQuant {
    /// Bytes per super-block.
    const BYTES: usize;
    /// Byte offset of the f16 `d` (followed by the f16 `dmin` when [`KQuant::MINS`]).
    const D_AT: usize;
    /// Whether values are `(d · sc_j) · q - dmin · m_j` (else `(d · sc_j) · q`).
    const MINS: bool;

    /// The 32 integer values of unit `u < 8` (elements `32 u .. 32 u + 32`) as two vectors
    /// of i8 (elements `.. + 16`, `+ 16 .. + 32`).
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; NEON available.
    unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t);

    /// The scale and min (0 without [`KQuant::MINS`]) of each sub-block of 16, `j < 16`.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block.
    unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]);
}

/// `(v >> s) & mask` per byte, for a shift `s` known only at run time.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
pub(crate) unsafe fn bits(v: uint8x16_t, s: usize, mask: u8) -> uint8x16_t {
    // SAFETY: register-only NEON intrinsics.
    unsafe { vandq_u8(vshlq_u8(v, vdupq_n_s8(-(s as i8))), vdupq_n_u8(mask)) }
}

/// `val` where bit `u` of a byte of `v` is set, else 0.
///
/// # Safety
///
/// NEON available; `u < 8`.
#[inline(always)]
pub(crate) unsafe fn bit_to(v: uint8x16_t, u: usize, val: u8) -> uint8x16_t {
    // SAFETY: register-only NEON intrinsics.
    unsafe { vandq_u8(vtstq_u8(v, vdupq_n_u8(1 << u)), vdupq_n_u8(val)) }
}

/// The 2-bit values of unit `u` of a Q2_K/Q3_K super-block's 64 bytes at `qs`: bits
/// `2 (u % 4)` of bytes `32 (u / 4) .. + 32`.
///
/// # Safety
///
/// 64 readable bytes at `qs`; NEON available.
#[inline(always)]
pub(crate) unsafe fn q2_unit(qs: *const u8, u: usize) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: 32 bytes at `qs + 32 (u / 4)` (caller contract).
    unsafe {
        let p = qs.add(32 * (u / 4));
        let s = 2 * (u % 4);
        (bits(vld1q_u8(p), s, 3), bits(vld1q_u8(p.add(16)), s, 3))
    }
}

/// The nibbles of unit `u` of a Q4_K/Q5_K super-block's 128 bytes at `qs`: the low nibbles
/// of bytes `32 (u / 2) .. + 32` for even `u`, the high ones for odd.
///
/// # Safety
///
/// 128 readable bytes at `qs`; NEON available.
#[inline(always)]
pub(crate) unsafe fn k4_unit(qs: *const u8, u: usize) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: 32 bytes at `qs + 32 (u / 2)` (caller contract).
    unsafe {
        let p = qs.add(32 * (u / 2));
        let s = 4 * (u % 2);
        (bits(vld1q_u8(p), s, 0x0F), bits(vld1q_u8(p.add(16)), s, 0x0F))
    }
}

/// Two u8 vectors as i8 (values below 128).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
pub(crate) unsafe fn signed(v: (uint8x16_t, uint8x16_t)) -> (int8x16_t, int8x16_t) {
    // SAFETY: register-only NEON intrinsics.
    unsafe { (vreinterpretq_s8_u8(v.0), vreinterpretq_s8_u8(v.1)) }
}

/// `v - off` per byte, as i8.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
pub(crate) unsafe fn minus(v: (uint8x16_t, uint8x16_t), off: u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let o = vdupq_n_u8(off);
        signed((vsubq_u8(v.0, o), vsubq_u8(v.1, o)))
    }
}

/// Per-16 scales and mins of a Q4_K/Q5_K super-block (both halves of sub-block `s` take
/// entry `s` of [`scales_mins_k4`]).
///
/// # Safety
///
/// 12 readable bytes at `sp`.
#[inline(always)]
pub(crate) unsafe fn k4_scales(sp: *const u8) -> ([i32; 16], [i32; 16]) {
    // SAFETY: 12 bytes readable (caller contract).
    let sm = scales_mins_k4(unsafe { core::slice::from_raw_parts(sp, 12) });
    (core::array::from_fn(|j| sm[j / 2] as i32), core::array::from_fn(|j| sm[8 + j / 2] as i32))
}

/// A K-quant's sub-block scales (and mins) for the int8 dot, as i32 lanes.
pub(crate) trait KScales: KQuant {
    /// Whether a scale (and min) covers 32 values (Q4_K, Q5_K), else 16.
    const S32: bool;

    /// Lane `l` of vector `q`: the scale of sub-block `4 q + l`, and of its min (0 without
    /// [`KQuant::MINS`]); sub-blocks of 32 values with [`KScales::S32`] (vectors 0, 1), of
    /// 16 without (0..4). The oracle's unpacking ([`scales_mins_k4`], [`scales_q3`]) done in
    /// lanes.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; NEON available.
    unsafe fn scales_i32(blk: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]);
}

/// The 8 bytes of `v` as i32 lanes (two vectors).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn widen8(v: uint8x8_t) -> [int32x4_t; 2] {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let h = vmovl_u8(v);
        [
            vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(h))),
            vreinterpretq_s32_u32(vmovl_high_u16(h)),
        ]
    }
}

/// The 16 i16 lanes of `lo`, `hi` as i32 lanes (four vectors).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
pub(crate) unsafe fn widen16(lo: int16x8_t, hi: int16x8_t) -> [int32x4_t; 4] {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        [
            vmovl_s16(vget_low_s16(lo)),
            vmovl_high_s16(lo),
            vmovl_s16(vget_low_s16(hi)),
            vmovl_high_s16(hi),
        ]
    }
}

/// The 4 bytes at `p` in both halves of a vector of 8.
///
/// # Safety
///
/// 4 readable bytes at `p`; NEON available.
#[inline(always)]
unsafe fn word_twice(p: *const u8) -> uint8x8_t {
    // SAFETY: 4 bytes readable (caller contract).
    unsafe { vreinterpret_u8_u32(vdup_n_u32(p.cast::<u32>().read_unaligned())) }
}

/// The scales and mins of a Q4_K/Q5_K super-block from the 12 packed bytes at `sp`
/// ([`scales_mins_k4`] in lanes: words `a`, `b` (bytes 0..8) give scales and mins 0..4 and
/// the top bits of 4..8, word `c` (bytes 8..12) their low nibbles).
///
/// # Safety
///
/// 12 readable bytes at `sp`; NEON available.
#[inline(always)]
pub(crate) unsafe fn k4_scales_i32(sp: *const u8) -> ([int32x4_t; 4], [int32x4_t; 4]) {
    // SAFETY: 12 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let ab = vld1_u8(sp);
        // Scales 0..4, mins 0..4.
        let low = vand_u8(ab, vdup_n_u8(0x3F));
        // Scales 4..8: c & 0x0F | (a >> 2) & 0x30; mins 4..8: c >> 4 | (b >> 2) & 0x30.
        const SHIFTS: [i8; 8] = [0, 0, 0, 0, -4, -4, -4, -4];
        let c = vand_u8(vshl_u8(word_twice(sp.add(8)), vld1_s8(SHIFTS.as_ptr())), vdup_n_u8(0x0F));
        let high = vorr_u8(c, vand_u8(vshr_n_u8::<2>(ab), vdup_n_u8(0x30)));
        let (low, high) = (vreinterpret_u32_u8(low), vreinterpret_u32_u8(high));
        let sc = widen8(vreinterpret_u8_u32(vzip1_u32(low, high)));
        let mn = widen8(vreinterpret_u8_u32(vzip2_u32(low, high)));
        let z = vdupq_n_s32(0);
        ([sc[0], sc[1], z, z], [mn[0], mn[1], z, z])
    }
}

/// One super-block decoded for the int8 dot: `v[2 u]`, `v[2 u + 1]` the signed values of
/// unit `u` ([`KQuant::unit`]), `sc`, `mn` its scales and mins ([`KScales::scales_i32`]).
#[derive(Clone, Copy)]
pub(crate) struct KW {
    v: [int8x16_t; 16],
    sc: [int32x4_t; 4],
    mn: [int32x4_t; 4],
}

/// The totals of `v[o]` (`o < P <= 4` from `at`) as lanes `o` (the lanes from `P` on repeat
/// the last total).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn totals4<const P: usize>(v: [int32x4_t; P], at: usize) -> int32x4_t {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let g = |i: usize| v[(at + i).min(P - 1)];
        vpaddq_s32(vpaddq_s32(g(0), g(1)), vpaddq_s32(g(2), g(3)))
    }
}

/// The K-quants' [`Dot`]: [`Sdot`]'s, and [`Widen`]'s with its two widening multiplies in
/// inline assembly.
///
/// The weights of Q2_K, Q4_K and Q5_K decode to bytes LLVM knows are non-negative, so it
/// rewrites `SMULL` as a zero-extension of the weights times the activations sign-extended
/// to i16, and hoists those extensions out of the loop over a tile's rows: 32 vectors of
/// activations, which do not fit in registers with the rest and are reloaded from the stack
/// before every multiply (three instructions for each `SMULL`). `SMULL` in assembly keeps
/// one instruction per eight products.
pub(crate) trait KDot: Dot {
    /// As [`Dot::dot`].
    ///
    /// # Safety
    ///
    /// As [`Dot::dot`].
    unsafe fn kdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

impl KDot for Sdot {
    #[inline(always)]
    unsafe fn kdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: forwarded caller contract.
        unsafe { Sdot::dot(acc, a, b) }
    }
}

impl KDot for Widen {
    #[inline(always)]
    unsafe fn kdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let (lo, hi): (int16x8_t, int16x8_t);
        // SAFETY: register-only base AdvSIMD instructions (`lo` is written before the second
        // reads `a` and `b`, so it is an early output).
        unsafe {
            asm!(
                "smull {lo:v}.8h, {a:v}.8b, {b:v}.8b",
                "smull2 {hi:v}.8h, {a:v}.16b, {b:v}.16b",
                lo = out(vreg) lo,
                hi = lateout(vreg) hi,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// The NEON and NEON + SDOT tiers' [`KTier`] ([`Widen`] / [`Sdot`] for `D`): each unit's
/// values dotted with `D` per sub-block (one sum per scale), the sub-block sums of an output
/// gathered into lanes by pairwise adds and multiplied by the scale lanes, the per-16
/// activation sums by the min lanes; eight f32 lanes as two 4-lane vectors.
pub(crate) struct NeonK<D>(PhantomData<D>);

impl<K: KScales, D: KDot> KTier<K> for NeonK<D> {
    const BYTES: usize = K::BYTES;
    const D_AT: usize = K::D_AT;
    const MINS: bool = K::MINS;
    type Prefetch = NeonPrefetch;
    type W = KW;
    /// `(isum, msum)` lane vectors.
    type S = (int32x4_t, int32x4_t);
    type F = [float32x4_t; 2];

    #[inline(always)]
    unsafe fn decode(blk: *const u8) -> KW {
        // SAFETY: forwarded caller contract.
        unsafe {
            let (sc, mn) = K::scales_i32(blk);
            let mut v = [vdupq_n_s8(0); 16];
            for u in 0..8 {
                (v[2 * u], v[2 * u + 1]) = K::unit(blk, u);
            }
            KW { v, sc, mn }
        }
    }

    #[inline(always)]
    unsafe fn dot(w: &KW, x: *const i8, bsums: *const i32) -> (int32x4_t, int32x4_t) {
        // SAFETY: the reads stay inside the 256 values and 16 sums (caller contract); the
        // rest is register-only.
        unsafe {
            let z = vdupq_n_s32(0);
            let xv = |j: usize| vld1q_s8(x.add(16 * j));
            let bs = |q: usize| vld1q_s32(bsums.add(4 * q));
            if K::S32 {
                // One sum per unit (both halves share the scale).
                let d: [int32x4_t; 8] = core::array::from_fn(|u| {
                    D::kdot(D::kdot(z, w.v[2 * u], xv(2 * u)), w.v[2 * u + 1], xv(2 * u + 1))
                });
                let s = [totals4(d, 0), totals4(d, 4)];
                let is = vmlaq_s32(vmulq_s32(s[0], w.sc[0]), s[1], w.sc[1]);
                let ms = if K::MINS {
                    let b = [vpaddq_s32(bs(0), bs(1)), vpaddq_s32(bs(2), bs(3))];
                    vmlaq_s32(vmulq_s32(b[0], w.mn[0]), b[1], w.mn[1])
                } else {
                    z
                };
                (is, ms)
            } else {
                let d: [int32x4_t; 16] = core::array::from_fn(|j| D::kdot(z, w.v[j], xv(j)));
                let mut is = vmulq_s32(totals4(d, 0), w.sc[0]);
                for q in 1..4 {
                    is = vmlaq_s32(is, totals4(d, 4 * q), w.sc[q]);
                }
                let ms = if K::MINS {
                    let mut m = vmulq_s32(bs(0), w.mn[0]);
                    for q in 1..4 {
                        m = vmlaq_s32(m, bs(q), w.mn[q]);
                    }
                    m
                } else {
                    z
                };
                (is, ms)
            }
        }
    }

    #[inline(always)]
    unsafe fn totals<const P: usize>(
        s: &[(int32x4_t, int32x4_t); P],
    ) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: register-only NEON intrinsics.
        unsafe {
            let is: [int32x4_t; P] = core::array::from_fn(|o| s[o].0);
            let ms: [int32x4_t; P] = core::array::from_fn(|o| s[o].1);
            let f = |v: int32x4_t| vcvtq_f32_s32(v);
            let z = vdupq_n_f32(0.0);
            if K::MINS && P <= 2 {
                // One reduction: lanes 0..2 the `isum`s, 2..4 the `msum`s.
                let g = |v: &[int32x4_t; P], i: usize| v[i.min(P - 1)];
                let r =
                    vpaddq_s32(vpaddq_s32(g(&is, 0), g(&is, 1)), vpaddq_s32(g(&ms, 0), g(&ms, 1)));
                let r = f(r);
                ([r, z], [vextq_f32::<2>(r, r), z])
            } else {
                let hi = |v: [int32x4_t; P]| if P > 4 { f(totals4(v, 4)) } else { z };
                let ms = if K::MINS { [f(totals4(ms, 0)), hi(ms)] } else { [z, z] };
                ([f(totals4(is, 0)), hi(is)], ms)
            }
        }
    }

    #[inline(always)]
    unsafe fn f16(h: [u16; 8]) -> [float32x4_t; 2] {
        // SAFETY: an 8-lane load from a local array; the rest is register-only.
        unsafe {
            let v = vld1q_u16(h.as_ptr());
            [cvt_f16x4(vget_low_u16(v)), cvt_f16x4(vget_high_u16(v))]
        }
    }

    #[inline(always)]
    unsafe fn lanes(v: [f32; 8]) -> [float32x4_t; 2] {
        // SAFETY: two 4-lane loads from a local array.
        unsafe { [vld1q_f32(v.as_ptr()), vld1q_f32(v.as_ptr().add(4))] }
    }

    #[inline(always)]
    unsafe fn add(a: [float32x4_t; 2], b: [float32x4_t; 2]) -> [float32x4_t; 2] {
        // SAFETY: register-only NEON intrinsics.
        unsafe { [vaddq_f32(a[0], b[0]), vaddq_f32(a[1], b[1])] }
    }

    #[inline(always)]
    unsafe fn sub(a: [float32x4_t; 2], b: [float32x4_t; 2]) -> [float32x4_t; 2] {
        // SAFETY: register-only NEON intrinsics.
        unsafe { [vsubq_f32(a[0], b[0]), vsubq_f32(a[1], b[1])] }
    }

    #[inline(always)]
    unsafe fn mul(a: [float32x4_t; 2], b: [float32x4_t; 2]) -> [float32x4_t; 2] {
        // SAFETY: register-only NEON intrinsics (`FMUL`, never fused).
        unsafe { [vmulq_f32(a[0], b[0]), vmulq_f32(a[1], b[1])] }
    }

    #[inline(always)]
    unsafe fn array(a: [float32x4_t; 2]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: two 4-lane stores into a local array.
        unsafe {
            vst1q_f32(out.as_mut_ptr(), a[0]);
            vst1q_f32(out.as_mut_ptr().add(4), a[1]);
        }
        out
    }
}
