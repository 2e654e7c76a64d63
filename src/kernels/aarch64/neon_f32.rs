//! NEON bodies of the f32-activation product (the kernel frame's `kernels/frame/f32.rs` runs
//! the tiles): how f32, f16, bf16 weights widen and every quantized type dequantizes to 8 f32
//! lanes (Q8_0 / Q4_0 / Q4_1 by 8-element chunks; Q5_0 / Q5_1 / IQ4_NL by block, through the
//! int8 kernels' decoders [`QBlock`]; the K-quants by runs of 32 inside their super-blocks,
//! through [`KQuant`]), and the lanes ([`NeonF32`]): each output has one 4-lane accumulator
//! fed 8 elements per step (two FMAs, low half then high half) and the fixed sum
//! `(a0 + a2) + (a1 + a3)`.

use core::arch::aarch64::*;

use super::neon_k::KQuant;
use super::neon_q8::QBlock;
use super::{cvt_f16x4, f16_scalar, f16_splat};
use crate::kernels::frame::f32::{
    f32_entries, Bf16Weights, F16Weights, F32Decode, F32Lanes, F32Weights,
};

/// 8 weights as two f32x4 (elements `i..i + 4`, `i + 4..i + 8`).
pub(crate) type Pair = (float32x4_t, float32x4_t);

/// The `len < 8` floats at `x`, zero-filled to 8.
///
/// # Safety
///
/// `len` floats at `x` readable; NEON available.
#[inline(always)]
unsafe fn x_tail(x: *const f32, len: usize) -> Pair {
    let mut buf = [0f32; 8];
    // SAFETY: `len <= 8` floats readable (caller contract) into an 8-float buffer.
    unsafe {
        core::ptr::copy_nonoverlapping(x, buf.as_mut_ptr(), len);
        (vld1q_f32(buf.as_ptr()), vld1q_f32(buf.as_ptr().add(4)))
    }
}

impl F32Decode<F32Weights> for NeonF32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 4;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: 8 floats in bounds (caller contract); `vld1q_f32` needs no alignment
        // beyond the element's, and callers pass 4-byte aligned f32 rows.
        unsafe {
            let p = row.add(b * 128 + c * 32).cast::<f32>();
            (vld1q_f32(p), vld1q_f32(p.add(4)))
        }
    }
}

impl F32Decode<F16Weights> for NeonF32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 2;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: 16 bytes in bounds (caller contract); `vld1_u8` has no alignment needs.
        unsafe {
            let p = row.add(b * 64 + c * 16);
            let lo = vreinterpret_u16_u8(vld1_u8(p));
            let hi = vreinterpret_u16_u8(vld1_u8(p.add(8)));
            (cvt_f16x4(lo), cvt_f16x4(hi))
        }
    }
}

impl F32Decode<Bf16Weights> for NeonF32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 2;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: 16 bytes in bounds (caller contract).
        unsafe {
            let v = vreinterpretq_u16_u8(vld1q_u8(row.add(b * 64 + c * 16)));
            (
                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(v))),
                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(v)),
            )
        }
    }
}

/// 8 u8 values as two f32x4.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn u8x8_to_f32(v: uint8x8_t) -> Pair {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let w = vmovl_u8(v);
        (vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), vcvtq_f32_u32(vmovl_high_u16(w)))
    }
}

/// Nibbles of chunk `c` of a Q4 block whose 16 nibble bytes start at `qs` (chunk 0 = low
/// nibbles of bytes 0..8, 1 = low of 8..16, 2 = high of 0..8, 3 = high of 8..16) as f32.
///
/// # Safety
///
/// 16 readable bytes at `qs`; NEON available.
#[inline(always)]
pub(crate) unsafe fn nibbles(qs: *const u8, c: usize) -> Pair {
    // SAFETY: 8 bytes at `qs + 8 * (c & 1)` readable (caller contract).
    unsafe {
        let v = vld1_u8(qs.add(8 * (c & 1)));
        let v = if c >= 2 { vshr_n_u8::<4>(v) } else { vand_u8(v, vdup_n_u8(0x0F)) };
        u8x8_to_f32(v)
    }
}

/// 32 i8 (two vectors, element order) as the four chunks of f32.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn i8x32_f32(w: (int8x16_t, int8x16_t)) -> [Pair; 4] {
    // SAFETY: register-only NEON intrinsics.
    unsafe {
        let f = |v: int16x8_t| {
            (vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))), vcvtq_f32_s32(vmovl_high_s16(v)))
        };
        [
            f(vmovl_s8(vget_low_s8(w.0))),
            f(vmovl_high_s8(w.0)),
            f(vmovl_s8(vget_low_s8(w.1))),
            f(vmovl_high_s8(w.1)),
        ]
    }
}

/// Block `b` of a 32-element type decoded by its int8 decoder ([`QBlock`]): ggml's
/// `block_q5_0` (`d · (q - 16)`), `block_q5_1` (`d · q + m`), `block_iq4_nl` (`d · kvalue`).
///
/// # Safety
///
/// Block `b` of the row at `row` is in bounds; NEON available.
#[inline(always)]
pub(crate) unsafe fn q_block<Q: QBlock>(row: *const u8, b: usize) -> [Pair; 4] {
    // SAFETY: block `b` is in bounds (caller contract). `d · w` is exact, so the fused
    // `d · w + m` rounds once, like the oracle's `d * q + m`.
    unsafe {
        let blk = row.add(b * Q::BYTES);
        let v = i8x32_f32(Q::weights(blk));
        let d = f16_splat(blk.add(Q::D));
        if Q::MIN {
            let m = f16_splat(blk.add(Q::M));
            v.map(|(l, h)| (vfmaq_f32(m, l, d), vfmaq_f32(m, h, d)))
        } else {
            v.map(|(l, h)| (vmulq_f32(l, d), vmulq_f32(h, d)))
        }
    }
}

/// Unit `b % 8` of super-block `b / 8` of a K-quant (ggml's `block_q2_K` .. `block_q6_K`)
/// decoded by [`KQuant`]: `(d · sc_j) · q` (`- dmin · m_j`) with the oracle's `d · sc_j` and
/// `dmin · m_j` per sub-block of 16.
///
/// # Safety
///
/// Super-block `b / 8` of the row at `row` is in bounds; NEON available.
#[inline(always)]
pub(crate) unsafe fn k_unit<K: KQuant>(row: *const u8, b: usize) -> [Pair; 4] {
    // SAFETY: super-block `b / 8` is in bounds (caller contract). `(d · sc) · q` is exact
    // for the types with mins, so the fused `q · dl - ml` rounds once like the oracle's.
    unsafe {
        let (sb, u) = (b / 8, b % 8);
        let blk = row.add(sb * K::BYTES);
        let v = i8x32_f32(K::unit(blk, u));
        let (sc, mn) = K::scales(blk);
        let d = f16_scalar(blk.add(K::D_AT));
        // Chunks 0 and 1 are sub-block 2u, chunks 2 and 3 sub-block 2u + 1.
        let j = |c: usize| 2 * u + c / 2;
        if K::MINS {
            let dmin = f16_scalar(blk.add(K::D_AT + 2));
            core::array::from_fn(|c| {
                let dl = vdupq_n_f32(d * sc[j(c)] as f32);
                let nml = vdupq_n_f32(-(dmin * mn[j(c)] as f32));
                (vfmaq_f32(nml, v[c].0, dl), vfmaq_f32(nml, v[c].1, dl))
            })
        } else {
            core::array::from_fn(|c| {
                let dl = vdupq_n_f32(d * sc[j(c)] as f32);
                (vmulq_f32(v[c].0, dl), vmulq_f32(v[c].1, dl))
            })
        }
    }
}

/// The formats decoded once per unit by [`q_block`] or [`k_unit`].
macro_rules! decode_once {
    ($($w:ty, $f:ident, $q:ty;)*) => { $(
        impl F32Decode<$w> for NeonF32 {
            const DECODE_ONCE: bool = true;

            #[inline(always)]
            unsafe fn block(row: *const u8, b: usize) -> [Pair; 4] {
                // SAFETY: forwarded caller contract.
                unsafe { $f::<$q>(row, b) }
            }
        }
    )* };
}
pub(crate) use decode_once;

/// `(a0 + a2) + (a1 + a3)`.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn hsum4(a: float32x4_t) -> f32 {
    // SAFETY: register-only NEON intrinsics.
    unsafe { vpadds_f32(vadd_f32(vget_low_f32(a), vget_high_f32(a))) }
}

/// The NEON tier's f32 lanes and weight decoders ([`F32Lanes`], [`F32Decode`]).
pub(crate) struct NeonF32;

impl F32Lanes for NeonF32 {
    type V = Pair;
    type Acc = float32x4_t;
    type Prefetch = super::NeonPrefetch;

    #[inline(always)]
    unsafe fn zero() -> float32x4_t {
        // SAFETY: register-only NEON intrinsic (caller contract).
        unsafe { vdupq_n_f32(0.0) }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Pair {
        // SAFETY: 8 readable floats (caller contract).
        unsafe { (vld1q_f32(p), vld1q_f32(p.add(4))) }
    }

    #[inline(always)]
    unsafe fn load_tail(p: *const f32, len: usize) -> Pair {
        // SAFETY: forwarded caller contract.
        unsafe { x_tail(p, len) }
    }

    #[inline(always)]
    unsafe fn fma(acc: float32x4_t, (wl, wh): Pair, (xl, xh): Pair) -> float32x4_t {
        // SAFETY: register-only NEON intrinsics (caller contract): low half, then high half.
        unsafe { vfmaq_f32(vfmaq_f32(acc, wl, xl), wh, xh) }
    }

    #[inline(always)]
    unsafe fn splat(v: f32) -> Pair {
        // SAFETY: register-only NEON intrinsic (caller contract).
        unsafe { (vdupq_n_f32(v), vdupq_n_f32(v)) }
    }

    #[inline(always)]
    unsafe fn add((al, ah): Pair, (bl, bh): Pair) -> Pair {
        // SAFETY: register-only NEON intrinsics (caller contract).
        unsafe { (vaddq_f32(al, bl), vaddq_f32(ah, bh)) }
    }

    #[inline(always)]
    unsafe fn mul((al, ah): Pair, (bl, bh): Pair) -> Pair {
        // SAFETY: register-only NEON intrinsics (caller contract).
        unsafe { (vmulq_f32(al, bl), vmulq_f32(ah, bh)) }
    }

    #[inline(always)]
    unsafe fn mul_add((al, ah): Pair, (bl, bh): Pair, (cl, ch): Pair) -> Pair {
        // SAFETY: register-only NEON intrinsics (caller contract): `c + a ⊙ b` fused.
        unsafe { (vfmaq_f32(cl, al, bl), vfmaq_f32(ch, ah, bh)) }
    }

    #[inline(always)]
    unsafe fn store<const R: usize, const N: usize>(
        acc: &[[float32x4_t; N]; R],
        y: *mut f32,
        ldy: usize,
    ) {
        // SAFETY: writes only the `R × N` outputs of the caller contract.
        unsafe {
            for (r, acc) in acc.iter().enumerate() {
                for (t, a) in acc.iter().enumerate() {
                    *y.add(t * ldy + r) = hsum4(*a);
                }
            }
        }
    }
}

f32_entries! { Neon, NeonF32, "NEON table entry (f32 activations).";
    matmul_f32, F32Weights;
    matmul_f16, F16Weights;
    matmul_bf16, Bf16Weights;
}
