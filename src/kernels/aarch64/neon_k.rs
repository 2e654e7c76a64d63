//! NEON kernels for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): the per-type decoders of
//! runs of 32 values ([`KQuant`]), shared by the f32-activation kernels (`neon_f32.rs`), and
//! the int8 row loop against Q8_K activations ([`crate::quant::ActFormat::Q8K`]) with `SDOT`
//! or the widening fallback ([`Dot`]).
//!
//! A super-block is 8 units of 32 values, each unit two sub-blocks of 16 (the 32-element
//! sub-blocks of Q4_K/Q5_K give both halves the same scale). A unit decodes to two vectors of
//! 16 signed bytes: the weights' integers with the type's offset already applied (Q3_K
//! `q - 4`, Q6_K `q - 32`; the others unsigned, with the mins kept apart), so `SDOT` gives
//! the oracle's sub-block sums `Σ q · x` directly. The int8 path then forms the oracle's exact
//! integers `isum = Σ_j sc_j Σ_{i in j} q_i x_i` (one `MLA` by the scale per 16 values) and
//! `msum = Σ_j m_j · bsum_j` (the activations' per-16 sums), and the f32 term of the scalar
//! oracle (`crate::quant::q4_k::dot_q4_k_q8k` etc.), term for term: super-block `b` into lane
//! `b % 8` ([`crate::kernels::scalar::accumulate8`]'s order), then [`hsum8`]; the results are
//! bit-identical to the scalar table. The sub-block scales come from the oracle's own
//! unpacking ([`scales_mins_k4`], [`scales_q3`]), once per super-block.

use core::arch::aarch64::*;

use super::f16_scalar;
use super::neon_q8::{Dot, Sdot, Widen};
use crate::kernels::scalar::hsum8;
use crate::quant::q2_k::BlockQ2K;
use crate::quant::q3_k::scales_q3;
use crate::quant::q3_k::BlockQ3K;
use crate::quant::q4_k::scales_mins_k4;
use crate::quant::q4_k::BlockQ4K;
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::BlockLayout;
use crate::quant::{Q8Acts, QK_K};

/// A K-quant super-block as the NEON kernels see it.
pub(super) trait KQuant {
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

/// ggml `block_q2_K`.
pub(super) struct Q2K;
/// ggml `block_q3_K`.
pub(super) struct Q3K;
/// ggml `block_q4_K`.
pub(super) struct Q4K;
/// ggml `block_q5_K`.
pub(super) struct Q5K;
/// ggml `block_q6_K`.
pub(super) struct Q6K;

/// `(v >> s) & mask` per byte, for a shift `s` known only at run time.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn bits(v: uint8x16_t, s: usize, mask: u8) -> uint8x16_t {
    // SAFETY: register-only NEON intrinsics.
    unsafe { vandq_u8(vshlq_u8(v, vdupq_n_s8(-(s as i8))), vdupq_n_u8(mask)) }
}

/// `val` where bit `u` of a byte of `v` is set, else 0.
///
/// # Safety
///
/// NEON available; `u < 8`.
#[inline(always)]
unsafe fn bit_to(v: uint8x16_t, u: usize, val: u8) -> uint8x16_t {
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
unsafe fn q2_unit(qs: *const u8, u: usize) -> (uint8x16_t, uint8x16_t) {
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
unsafe fn k4_unit(qs: *const u8, u: usize) -> (uint8x16_t, uint8x16_t) {
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
unsafe fn signed(v: (uint8x16_t, uint8x16_t)) -> (int8x16_t, int8x16_t) {
    // SAFETY: register-only NEON intrinsics.
    unsafe { (vreinterpretq_s8_u8(v.0), vreinterpretq_s8_u8(v.1)) }
}

/// `v - off` per byte, as i8.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn minus(v: (uint8x16_t, uint8x16_t), off: u8) -> (int8x16_t, int8x16_t) {
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
unsafe fn k4_scales(sp: *const u8) -> ([i32; 16], [i32; 16]) {
    // SAFETY: 12 bytes readable (caller contract).
    let sm = scales_mins_k4(unsafe { core::slice::from_raw_parts(sp, 12) });
    (core::array::from_fn(|j| sm[j / 2] as i32), core::array::from_fn(|j| sm[8 + j / 2] as i32))
}

impl KQuant for Q2K {
    const BYTES: usize = crate::quant::q2_k::BYTES;
    const D_AT: usize = BlockQ2K::D_OFFSET;
    const MINS: bool = true;

    #[inline(always)]
    unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
        // SAFETY: the 64 value bytes at 16..80 (caller contract: a whole super-block).
        unsafe { signed(q2_unit(blk.add(BlockQ2K::QS_OFFSET), u)) }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
        // SAFETY: the 16 scale bytes at 0..16 (caller contract).
        let s = |j: usize| unsafe { *blk.add(BlockQ2K::SCALES_OFFSET + j) } as i32;
        (core::array::from_fn(|j| s(j) & 0x0F), core::array::from_fn(|j| s(j) >> 4))
    }
}

impl KQuant for Q3K {
    const BYTES: usize = crate::quant::q3_k::BYTES;
    const D_AT: usize = BlockQ3K::D_OFFSET;
    const MINS: bool = false;

    #[inline(always)]
    unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
        // SAFETY: high bits at 0..32, low pairs at 32..96 (caller contract). Element
        // `32 u + l` has its high bit in bit `u` of `hmask[l]`; `q = low + 4 high - 4`.
        unsafe {
            let (l0, l1) = q2_unit(blk.add(BlockQ3K::QS_OFFSET), u);
            let (h0, h1) = (
                vld1q_u8(blk.add(BlockQ3K::QH_OFFSET)),
                vld1q_u8(blk.add(BlockQ3K::QH_OFFSET + 16)),
            );
            minus((vorrq_u8(l0, bit_to(h0, u, 4)), vorrq_u8(l1, bit_to(h1, u, 4))), 4)
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
        // SAFETY: the 12 packed scale bytes at 96..108 (caller contract).
        let sc =
            scales_q3(unsafe { core::slice::from_raw_parts(blk.add(BlockQ3K::SCALES_OFFSET), 12) });
        (sc.map(i32::from), [0; 16])
    }
}

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

impl KQuant for Q5K {
    const BYTES: usize = crate::quant::q5_k::BYTES;
    const D_AT: usize = BlockQ5K::D_OFFSET;
    const MINS: bool = true;

    #[inline(always)]
    unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
        // SAFETY: fifth bits at 16..48, nibbles at 48..176 (caller contract). Unit `u` takes
        // bit `u` of `qh[l]`.
        unsafe {
            let (l0, l1) = k4_unit(blk.add(BlockQ5K::QS_OFFSET), u);
            let (h0, h1) = (
                vld1q_u8(blk.add(BlockQ5K::QH_OFFSET)),
                vld1q_u8(blk.add(BlockQ5K::QH_OFFSET + 16)),
            );
            signed((vorrq_u8(l0, bit_to(h0, u, 0x10)), vorrq_u8(l1, bit_to(h1, u, 0x10))))
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
        // SAFETY: the packed scales at 4..16 (caller contract).
        unsafe { k4_scales(blk.add(BlockQ5K::SCALES_OFFSET)) }
    }
}

impl KQuant for Q6K {
    const BYTES: usize = crate::quant::q6_k::BYTES;
    const D_AT: usize = BlockQ6K::D_OFFSET;
    const MINS: bool = false;

    #[inline(always)]
    unsafe fn unit(blk: *const u8, u: usize) -> (int8x16_t, int8x16_t) {
        // SAFETY: low nibbles at 0..128, high pairs at 128..192 (caller contract). Unit
        // `u = 4 h + g`: nibble `g / 2` of `ql[64 h + 32 (g % 2) ..]`, bits `2 g` of
        // `qh[32 h ..]`; `q - 32`.
        unsafe {
            let (h, g) = (u / 4, u % 4);
            let l = blk.add(BlockQ6K::QS_OFFSET + 64 * h + 32 * (g % 2));
            let q = blk.add(BlockQ6K::QH_OFFSET + 32 * h);
            let v = |i: usize| {
                let lo = bits(vld1q_u8(l.add(16 * i)), 4 * (g / 2), 0x0F);
                let hi = bits(vld1q_u8(q.add(16 * i)), 2 * g, 3);
                vorrq_u8(lo, vshlq_n_u8::<4>(hi))
            };
            minus((v(0), v(1)), 32)
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> ([i32; 16], [i32; 16]) {
        // SAFETY: the 16 i8 scales at 192..208 (caller contract).
        (
            core::array::from_fn(|j| unsafe { *blk.add(BlockQ6K::SCALES_OFFSET + j) } as i8 as i32),
            [0; 16],
        )
    }
}

/// `(isum, msum)` of the super-block at `blk` against the 256 activations at `x` with per-16
/// sums `bsums` (`msum` 0 without mins): the oracle's exact integers.
///
/// # Safety
///
/// `blk` is a whole super-block, 256 values at `x`, 16 sums at `bsums`; NEON (+ `dotprod`
/// for [`Sdot`]).
#[inline(always)]
unsafe fn isums<K: KQuant, D: Dot>(blk: *const u8, x: *const i8, bsums: *const i32) -> (i32, i32) {
    // SAFETY: every read stays inside the super-block and the 256 activations.
    unsafe {
        let (sc, mn) = K::scales(blk);
        let zero = vdupq_n_s32(0);
        let mut acc = zero;
        for u in 0..8 {
            let (w0, w1) = K::unit(blk, u);
            let xu = x.add(32 * u);
            acc = vmlaq_n_s32(acc, D::dot(zero, w0, vld1q_s8(xu)), sc[2 * u]);
            acc = vmlaq_n_s32(acc, D::dot(zero, w1, vld1q_s8(xu.add(16))), sc[2 * u + 1]);
        }
        let ms = if K::MINS {
            let mut m = zero;
            for q in 0..4 {
                m = vmlaq_s32(m, vld1q_s32(mn.as_ptr().add(4 * q)), vld1q_s32(bsums.add(4 * q)));
            }
            vaddvq_s32(m)
        } else {
            0
        };
        (vaddvq_s32(acc), ms)
    }
}

/// One weight row (`nb` super-blocks at `w`) · one Q8_K activation row (values `qs`, scales
/// `d`, per-16 sums `sums`), in the oracle's f32 order.
///
/// # Safety
///
/// `w` holds `nb` super-blocks, `qs` `256 nb` values, `d` `nb` scales, `sums` `16 nb` sums;
/// NEON (+ `dotprod` for [`Sdot`]).
#[inline(always)]
unsafe fn row_dot<K: KQuant, D: Dot>(
    w: *const u8,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    sums: *const i32,
) -> f32 {
    let mut acc = [0f32; 8];
    for b in 0..nb {
        // SAFETY: super-block `b < nb` of the row and of the activations (caller contract).
        unsafe {
            let blk = w.add(b * K::BYTES);
            let (is, ms) = isums::<K, D>(blk, qs.add(b * QK_K), sums.add(16 * b));
            let (dw, dx) = (f16_scalar(blk.add(K::D_AT)), *d.add(b));
            acc[b % 8] += if K::MINS {
                (dw * dx) * is as f32 - (f16_scalar(blk.add(K::D_AT + 2)) * dx) * ms as f32
            } else {
                (dw * dx) * is as f32
            };
        }
    }
    hsum8(&acc)
}

/// Every (row, activation row) pair of the block, one at a time.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] with `xq` in the Q8_K format; NEON (+ `dotprod` for
/// [`Sdot`]).
#[inline(always)]
unsafe fn matmul<K: KQuant, D: Dot>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let (qs, d, sums) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.sum().as_ptr());
    for r in 0..rows {
        for t in 0..n {
            let o = t * nb;
            // SAFETY: row `r < rows` of `nb` super-blocks, activation row `t < n <= xq.n()`,
            // `y[t * ldy + r]` writable (caller contract).
            unsafe {
                *y.add(t * ldy + r) = row_dot::<K, D>(
                    w.add(r * rb),
                    nb,
                    qs.add(o * QK_K),
                    d.add(o),
                    sums.add(16 * o),
                );
            }
        }
    }
}

macro_rules! entry {
    ($name:ident, $k:ty, $d:ty, $tier:ident, $doc:expr) => {
        tier_fn! { $tier;
            #[doc = $doc]
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulQ8Fn`] (activations in Q8_K); the CPU has the enabled
            /// features.
            pub(super) unsafe fn $name(
                w: *const u8,
                rb: usize,
                rows: usize,
                xq: &Q8Acts<'_>,
                n: usize,
                y: *mut f32,
                ldy: usize,
            ) {
                // SAFETY: forwarded caller contract; the features are enabled here.
                unsafe { matmul::<$k, $d>(w, rb, rows, xq, n, y, ldy) }
            }
        }
    };
}

/// The NEON and NEON + `SDOT` int8 entries of each type.
macro_rules! entries {
    ($($neon:ident, $sdot:ident, $k:ty, $block:literal;)*) => { $(
        entry!($neon, $k, Widen, Neon, concat!("NEON table entry for ggml `", $block, "`."));
        entry!(
            $sdot,
            $k,
            Sdot,
            NeonDotprod,
            concat!("NEON + `SDOT` table entry for ggml `", $block, "`.")
        );
    )* };
}

entries! {
    matmul_q2_k_q8k_neon, matmul_q2_k_q8k_sdot, Q2K, "block_q2_K";
    matmul_q3_k_q8k_neon, matmul_q3_k_q8k_sdot, Q3K, "block_q3_K";
    matmul_q4_k_q8k_neon, matmul_q4_k_q8k_sdot, Q4K, "block_q4_K";
    matmul_q5_k_q8k_neon, matmul_q5_k_q8k_sdot, Q5K, "block_q5_K";
    matmul_q6_k_q8k_neon, matmul_q6_k_q8k_sdot, Q6K, "block_q6_K";
}
