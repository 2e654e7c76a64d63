//! NEON int8 kernels for the 32-element types: quantized weights × Q8 activations, with
//! `SDOT` (`dotprod`) or a widening-multiply fallback, and the Q8 quantizer. The [`Dot`]
//! instructions are shared with the K-quants (`neon_k.rs`) and the block decoders
//! ([`QBlock`]) with the f32-activation kernels (`neon_f32.rs`).
//!
//! Weights become signed bytes (Q8_0 as stored, Q4_0 `nibble - 8`, Q4_1 the nibble, Q5_0
//! `q - 16`, Q5_1 `q`, IQ4_NL the codebook value) and the block's exact i32 dot product comes from `SDOT` (four i8 products per i32 lane) or from
//! `SMULL` (i8 × i8 → i16, exact even for -128 · -128) plus `SADALP` (pairwise add into i32).
//! Four blocks' lane vectors are reduced with `ADDP`, and the f32 part follows the oracle's
//! order exactly ([`crate::kernels::scalar::accumulate8`]: block `b` into lane `b % 8`, two
//! 4-lane accumulators, separate multiply and add, then the fixed horizontal sum), so the
//! results are bit-identical to the scalar table.

use core::arch::aarch64::*;
use core::arch::asm;

use core::marker::PhantomData;

use super::{cvt_f16x4, NeonPrefetch};
use crate::kernels::frame::q8::{Q8Tier, TileX};
use crate::quant::{BlockLayout, QK};

/// How two 16-byte vectors of i8 are dotted into 4 i32 lanes.
pub(crate) trait Dot {
    /// `acc + dot(a, b)` grouped in 4 lanes (which products land in which lane is the
    /// implementation's; only the total matters).
    ///
    /// # Safety
    ///
    /// NEON available, and `dotprod` for [`Sdot`].
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;

    /// Whether a group of eight blocks runs as two halves of four over all its rows (see
    /// [`NeonTier`]'s `group`): for a dot whose operands take more registers than the 32 NEON
    /// vectors hold when eight blocks of activations are kept live across the rows.
    const HALVES: bool;
}

/// `SDOT` (the `dotprod` extension).
pub(crate) struct Sdot;
/// `SMULL` + `SADALP`, plain NEON.
pub(crate) struct Widen;

impl Dot for Sdot {
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: register-only; the caller runs with `dotprod` enabled (its entry point is
        // `#[target_feature(enable = "neon,dotprod")]`, reached only after detection).
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

impl Dot for Widen {
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: register-only NEON intrinsics.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// A 32-element quantized weight block as two signed-byte vectors (elements 0..16, 16..32),
/// with its f16 scale `d` (and f16 minimum `m` when [`QBlock::MIN`]) where its
/// [`BlockLayout`] says: element `i` is `d · w_i` (`+ m`).
pub(crate) trait QBlock {
    /// The block's byte layout (field offsets by name).
    type L: BlockLayout;
    /// Bytes per block.
    const BYTES: usize = <Self::L as BlockLayout>::BYTES;
    /// Q4_1 / Q5_1: the block term adds `m · s`.
    const MIN: bool = <Self::L as BlockLayout>::HAS_M;
    /// Byte offset of the f16 scale.
    const D: usize = <Self::L as BlockLayout>::D_OFFSET;
    /// Byte offset of the f16 minimum (with [`QBlock::MIN`]).
    const M: usize = <Self::L as BlockLayout>::M_OFFSET;
    /// Byte offset of the fifth bits (the Q5 types).
    const QH: usize = <Self::L as BlockLayout>::QH_OFFSET;
    /// Byte offset of the quants.
    const QS: usize = <Self::L as BlockLayout>::QS_OFFSET;

    /// The block's 32 weights as i8.
    ///
    /// # Safety
    ///
    /// `blk` is a whole block; NEON available.
    unsafe fn weights(blk: *const u8) -> (int8x16_t, int8x16_t);
}

/// Low and high nibbles of the 16 bytes at `qs` (elements 0..16 and 16..32).
///
/// # Safety
///
/// 16 readable bytes; NEON available.
#[inline(always)]
pub(crate) unsafe fn nibbles(qs: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: 16 bytes readable (caller contract).
    unsafe {
        let v = vld1q_u8(qs);
        (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
    }
}

/// The fifth bits of a Q5 block (the little-endian u32 at `qh`, bit `i` = element `i`) as
/// bytes in element order: `0x10` where the bit is set, else 0 (elements 0..16, 16..32).
///
/// # Safety
///
/// 4 readable bytes at `qh`; NEON available.
#[inline(always)]
unsafe fn fifth_bits(qh: *const u8) -> (uint8x16_t, uint8x16_t) {
    const LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: 4 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let h = vreinterpretq_u8_u32(vdupq_n_u32(qh.cast::<u32>().read_unaligned()));
        let lo = vld1q_u8(LO.as_ptr());
        let (bit, b16) = (vld1q_u8(BIT.as_ptr()), vdupq_n_u8(0x10));
        // Byte `i` takes byte `i / 8` of the word, then tests bit `i % 8`.
        let at = |idx: uint8x16_t| vandq_u8(vtstq_u8(vqtbl1q_u8(h, idx), bit), b16);
        (at(lo), at(vaddq_u8(lo, vdupq_n_u8(2))))
    }
}

/// The 32 unsigned 5-bit values (0..=31) of a Q5 block's `qh` and `qs` (16 bytes at `qs`).
///
/// # Safety
///
/// 4 readable bytes at `qh`, 16 at `qs`; NEON available.
#[inline(always)]
pub(crate) unsafe fn q5_values(qh: *const u8, qs: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: in bounds (caller contract).
    unsafe {
        let (lo, hi) = nibbles(qs);
        let (h0, h1) = fifth_bits(qh);
        (vreinterpretq_s8_u8(vorrq_u8(lo, h0)), vreinterpretq_s8_u8(vorrq_u8(hi, h1)))
    }
}

/// The exact dot product of one weight block with 32 activations, as 4 i32 lanes.
///
/// # Safety
///
/// `blk` a whole block, 32 readable values at `x`; NEON (+ `dotprod` for [`Sdot`]).
#[inline(always)]
unsafe fn isum<Q: QBlock, D: Dot>(blk: *const u8, x: *const i8) -> int32x4_t {
    // SAFETY: in bounds (caller contract).
    unsafe {
        let (w0, w1) = Q::weights(blk);
        let acc = D::dot(vdupq_n_s32(0), w0, vld1q_s8(x));
        D::dot(acc, w1, vld1q_s8(x.add(16)))
    }
}

/// The f16 values at `p + j * stride`, `j < 4`, as f32 lanes.
///
/// # Safety
///
/// The 4 locations are readable; NEON available.
#[inline(always)]
unsafe fn gather_f16(p: *const u8, stride: usize) -> float32x4_t {
    // SAFETY: the 4 2-byte reads are in bounds (caller contract).
    unsafe {
        let h = |j: usize| p.add(j * stride).cast::<u16>().read_unaligned();
        let v = [h(0), h(1), h(2), h(3)];
        cvt_f16x4(vld1_u16(v.as_ptr()))
    }
}

/// `acc + (dw · dx) · isum [+ mw · s]`, lane by lane, unfused (the oracle's order).
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn term(
    acc: float32x4_t,
    isum: int32x4_t,
    dw: float32x4_t,
    dx: float32x4_t,
    ms: Option<(float32x4_t, float32x4_t)>,
) -> float32x4_t {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let mut c = vmulq_f32(vmulq_f32(dw, dx), vcvtq_f32_s32(isum));
        if let Some((mw, s)) = ms {
            c = vaddq_f32(c, vmulq_f32(mw, s));
        }
        vaddq_f32(acc, c)
    }
}

/// Four consecutive blocks starting at block `b` (all `< nb`) added into `acc`.
///
/// # Safety
///
/// Blocks `b..b + 4` exist in the weight row and the activation row; NEON (+ `dotprod`).
#[inline(always)]
unsafe fn quad<Q: QBlock, D: Dot>(
    acc: float32x4_t,
    w: *const u8,
    b: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
) -> float32x4_t {
    // SAFETY: blocks `b..b + 4` are in bounds (caller contract).
    unsafe {
        let wb = w.add(b * Q::BYTES);
        let xb = qs.add(b * QK);
        let i = |j: usize| isum::<Q, D>(wb.add(j * Q::BYTES), xb.add(j * QK));
        let sums = vpaddq_s32(vpaddq_s32(i(0), i(1)), vpaddq_s32(i(2), i(3)));
        let ms = if Q::MIN {
            Some((gather_f16(wb.add(Q::M), Q::BYTES), vld1q_f32(s.add(b))))
        } else {
            None
        };
        term(acc, sums, gather_f16(wb.add(Q::D), Q::BYTES), vld1q_f32(d.add(b)), ms)
    }
}

/// Blocks `b .. nb` (fewer than eight) of one weight row (at `w`) · one activation row
/// (`qs`, `d`, `s`), added to `lo`, `hi` in the oracle's order (block `b + j`'s term into
/// lane `j`, lanes 0..4 in `lo`, 4..8 in `hi`; lanes past the blocks gain 0).
///
/// # Safety
///
/// Blocks `b .. nb` of the row and of the activation row; NEON (+ `dotprod` for [`Sdot`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tail<Q: QBlock, D: Dot>(
    acc: [float32x4_t; 2],
    w: *const u8,
    b: usize,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
) -> [float32x4_t; 2] {
    // SAFETY: every block index below is `< nb` (caller contract).
    unsafe {
        let (mut is, mut dw, mut dx) = ([0i32; 8], [0f32; 8], [0f32; 8]);
        let (mut mw, mut sx) = ([0f32; 8], [0f32; 8]);
        for j in 0..nb - b {
            let blk = w.add((b + j) * Q::BYTES);
            is[j] = vaddvq_s32(isum::<Q, D>(blk, qs.add((b + j) * QK)));
            dw[j] = vgetq_lane_f32::<0>(gather_f16(blk.add(Q::D), 0));
            dx[j] = *d.add(b + j);
            if Q::MIN {
                mw[j] = vgetq_lane_f32::<0>(gather_f16(blk.add(Q::M), 0));
                sx[j] = *s.add(b + j);
            }
        }
        let mut acc = acc;
        for (h, acc) in acc.iter_mut().enumerate() {
            let o = 4 * h;
            let ms = if Q::MIN {
                Some((vld1q_f32(mw.as_ptr().add(o)), vld1q_f32(sx.as_ptr().add(o))))
            } else {
                None
            };
            *acc = term(
                *acc,
                vld1q_s32(is.as_ptr().add(o)),
                vld1q_f32(dw.as_ptr().add(o)),
                vld1q_f32(dx.as_ptr().add(o)),
                ms,
            );
        }
        acc
    }
}

/// The NEON and NEON + SDOT tiers' [`Q8Tier`] ([`Widen`] / [`Sdot`] for `D`): one output per
/// pair of 4-lane accumulators (the oracle's lanes 0..4 and 4..8), each output's groups of
/// eight blocks ([`quad`] twice) and last blocks ([`tail`]) one after the other.
pub(crate) struct NeonTier<D>(PhantomData<D>);

impl<Q: QBlock, D: Dot> Q8Tier<Q> for NeonTier<D> {
    const BYTES: usize = Q::BYTES;
    type Prefetch = NeonPrefetch;
    type Acc = [float32x4_t; 2];

    #[inline(always)]
    unsafe fn zero() -> [float32x4_t; 2] {
        // SAFETY: register-only NEON intrinsic (caller contract).
        unsafe { [vdupq_n_f32(0.0); 2] }
    }

    #[inline(always)]
    unsafe fn group<const R: usize, const N: usize, const P: usize>(
        w: *const u8,
        rb: usize,
        x: TileX,
        b: usize,
        m: usize,
        acc: &mut [[float32x4_t; 2]; P],
    ) {
        // SAFETY: blocks `b .. b + m <= nb` of rows `r < R` and activation rows `t < N`
        // (caller contract).
        unsafe {
            if m == 8 && D::HALVES {
                // One half-group (four blocks: lanes 0..4, then 4..8) over every row and
                // activation row at a time: each accumulator lane gets the same terms in the
                // same order as a row-by-row loop, but only four blocks of activations are
                // live at once (eight blocks hoisted out of the row loop spill with `Widen`:
                // there each block is four vectors, its high halves split off; with SDOT the
                // whole group stays in registers and is faster).
                #[allow(clippy::needless_range_loop)] // `h` picks a lane half of every accumulator
                for h in 0..2 {
                    for r in 0..R {
                        let wr = w.add(r * rb);
                        for t in 0..N {
                            let xt = x.rows_from(t);
                            let a = &mut acc[r * N + t][h];
                            *a = quad::<Q, D>(*a, wr, b + 4 * h, xt.qs, xt.d, xt.s);
                        }
                    }
                }
            } else {
                for r in 0..R {
                    let wr = w.add(r * rb);
                    for t in 0..N {
                        let xt = x.rows_from(t);
                        let a = &mut acc[r * N + t];
                        *a = if m == 8 {
                            [
                                quad::<Q, D>(a[0], wr, b, xt.qs, xt.d, xt.s),
                                quad::<Q, D>(a[1], wr, b + 4, xt.qs, xt.d, xt.s),
                            ]
                        } else {
                            tail::<Q, D>(*a, wr, b, b + m, xt.qs, xt.d, xt.s)
                        };
                    }
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn output<const P: usize>(acc: &[[float32x4_t; 2]; P], o: usize) -> f32 {
        // SAFETY: register-only NEON intrinsics (caller contract).
        unsafe {
            // ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as the oracle.
            let t = vaddq_f32(acc[o][0], acc[o][1]);
            vpadds_f32(vadd_f32(vget_low_f32(t), vget_high_f32(t)))
        }
    }
}

tier_fn! { Neon;
    /// NEON table entry: the Q8 quantizer (see [`crate::kernels::QuantizeQ8Fn`]), byte for byte
    /// [`crate::kernels::scalar::quantize_block_q8`] (`FCVTAS` rounds to nearest, ties away).
    ///
    /// # Safety
    ///
    /// As [`crate::kernels::QuantizeQ8Fn`]; the CPU has NEON.
    pub(super) unsafe fn quantize_q8(
        x: *const f32,
        nb: usize,
        qs: *mut i8,
        qs_stride: usize,
        d: *mut f32,
    ) -> bool {
        for b in 0..nb {
            // SAFETY: block `b` of input and outputs is in bounds (caller contract).
            unsafe {
                let p = x.add(b * QK);
                let v: [float32x4_t; 8] = core::array::from_fn(|j| vld1q_f32(p.add(4 * j)));
                let abs = vdupq_n_u32(0x7FFF_FFFF);
                let bits = |v: float32x4_t| vandq_u32(vreinterpretq_u32_f32(v), abs);
                let mut m = bits(v[0]);
                for v in &v[1..] {
                    m = vmaxq_u32(m, bits(*v));
                }
                let amax_bits = vmaxvq_u32(m);
                if amax_bits >= 0x7F80_0000 {
                    return false;
                }
                let dd = f32::from_bits(amax_bits) / 127.0;
                *d.add(b) = dd;
                let out = qs.add(b * qs_stride);
                if dd == 0.0 {
                    vst1q_s8(out, vdupq_n_s8(0));
                    vst1q_s8(out.add(16), vdupq_n_s8(0));
                    continue;
                }
                let dv = vdupq_n_f32(dd);
                let q = |v: float32x4_t| {
                    let r = vcvtaq_s32_f32(vdivq_f32(v, dv));
                    vqmovn_s32(vmaxq_s32(vminq_s32(r, vdupq_n_s32(127)), vdupq_n_s32(-127)))
                };
                let h: [int16x8_t; 4] =
                    core::array::from_fn(|j| vcombine_s16(q(v[2 * j]), q(v[2 * j + 1])));
                vst1q_s8(out, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
                vst1q_s8(out.add(16), vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
            }
        }
        true
    }
}
