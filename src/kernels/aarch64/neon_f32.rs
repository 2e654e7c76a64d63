//! NEON matmul with f32 activations, for f32, f16, bf16 weights (widened on the fly) and
//! every quantized type (dequantized on the fly: Q8_0 / Q4_0 / Q4_1 by 8-element chunks;
//! Q5_0 / Q5_1 / IQ4_NL by block, through the int8 kernels' decoders [`QBlock`]; the
//! K-quants by runs of 32 inside their super-blocks, through [`KQuant`]).
//!
//! As on x86_64: a register tile of `R` weight rows × `N` activation rows, both contiguous
//! along K. Each output has one 4-lane accumulator fed 8 elements per step (two FMAs, low
//! half then high half), a K tail through zero-filled lanes, and the fixed sum
//! `(a0 + a2) + (a1 + a3)`; every output sees the same operations whatever the tile shape, so
//! results are bit-identical for every schedule and thread count.

use core::arch::aarch64::*;
use core::marker::PhantomData;

use super::neon_k::{KQuant, Q2K, Q3K, Q4K, Q5K, Q6K};
use super::neon_q8::{Iq4NlB, QBlock, Q5_0B, Q5_1B};
use super::{cvt_f16x4, f16_scalar, f16_splat};

/// 8 weights as two f32x4 (elements `i..i + 4`, `i + 4..i + 8`).
type Pair = (float32x4_t, float32x4_t);

/// A weight encoding: how 8 consecutive elements of a row become f32 lanes. Elements are
/// addressed in units of 32 (a quantization block, or a run of 32 inside a K-quant
/// super-block) and 8-element chunks inside them. An encoding implements [`Weights::chunk`]
/// or [`Weights::block`] (each defaults to the other).
trait Weights {
    /// Whether rows may end with a partial unit (f32/f16/bf16: any `k`; quantized: `k % 32
    /// == 0`).
    const TAIL: bool = false;
    /// Bytes per element for the unblocked encodings.
    const ELEM_BYTES: usize = 0;
    /// Decoding a unit costs more than its four chunks' loads (the K-quants' scales, Q5's
    /// fifth bits): tiles decode each unit once per weight row ([`Weights::block`]) instead
    /// of chunk by chunk. The FMAs per output are the same, in the same order.
    const DECODE_ONCE: bool = false;

    /// Elements `32 b + 8 c .. + 8` of the row at `row` (`c < 4`).
    ///
    /// # Safety
    ///
    /// Those elements are in bounds; NEON available.
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: forwarded caller contract.
        unsafe { Self::block(row, b)[c] }
    }

    /// The four chunks of unit `b` at once (the same values as [`Weights::chunk`]).
    ///
    /// # Safety
    ///
    /// As [`Weights::chunk`].
    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [Pair; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { core::array::from_fn(|c| Self::chunk(row, b, c)) }
    }
}

/// `len < 8` elements of an unblocked row starting at element `i`, zero-filled to 8.
///
/// # Safety
///
/// `len` elements at `i` are readable; NEON available.
#[inline(always)]
unsafe fn tail<W: Weights>(row: *const u8, i: usize, len: usize) -> Pair {
    let mut buf = [0u32; 8];
    // SAFETY: `len * ELEM_BYTES <= 28` readable bytes (caller contract) into a 32-byte,
    // 4-byte aligned buffer, which holds 8 elements of at most 4 bytes.
    unsafe {
        let dst = buf.as_mut_ptr().cast::<u8>();
        core::ptr::copy_nonoverlapping(row.add(i * W::ELEM_BYTES), dst, len * W::ELEM_BYTES);
        W::chunk(buf.as_ptr().cast(), 0, 0)
    }
}

/// Like [`tail`] for the activation row (f32).
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

struct F32W;
struct F16W;
struct Bf16W;
struct Q8_0W;
struct Q4_0W;
struct Q4_1W;

impl Weights for F32W {
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

impl Weights for F16W {
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

impl Weights for Bf16W {
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
unsafe fn nibbles(qs: *const u8, c: usize) -> Pair {
    // SAFETY: 8 bytes at `qs + 8 * (c & 1)` readable (caller contract).
    unsafe {
        let v = vld1_u8(qs.add(8 * (c & 1)));
        let v = if c >= 2 { vshr_n_u8::<4>(v) } else { vand_u8(v, vdup_n_u8(0x0F)) };
        u8x8_to_f32(v)
    }
}

impl Weights for Q8_0W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: block `b` in bounds (caller contract); `d * q` is exact in f32.
        unsafe {
            let blk = row.add(b * 34);
            let q = vmovl_s8(vld1_s8(blk.add(2 + 8 * c).cast()));
            let d = f16_splat(blk);
            (
                vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d),
                vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), d),
            )
        }
    }
}

impl Weights for Q4_0W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: block `b` in bounds (caller contract); `(q - 8) * d` is exact.
        unsafe {
            let blk = row.add(b * 18);
            let (lo, hi) = nibbles(blk.add(2), c);
            let (d, eight) = (f16_splat(blk), vdupq_n_f32(8.0));
            (vmulq_f32(vsubq_f32(lo, eight), d), vmulq_f32(vsubq_f32(hi, eight), d))
        }
    }
}

impl Weights for Q4_1W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Pair {
        // SAFETY: block `b` in bounds (caller contract); `d * q` is exact, so the fused
        // `m + q * d` rounds once, like the oracle's `d * q + m`.
        unsafe {
            let blk = row.add(b * 20);
            let (lo, hi) = nibbles(blk.add(4), c);
            let (d, m) = (f16_splat(blk), f16_splat(blk.add(2)));
            (vfmaq_f32(m, lo, d), vfmaq_f32(m, hi, d))
        }
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

/// A 32-element type decoded by its int8 decoder ([`QBlock`]): ggml's `block_q5_0`
/// (`d · (q - 16)`), `block_q5_1` (`d · q + m`), `block_iq4_nl` (`d · kvalue`).
struct Blk<Q>(PhantomData<Q>);

impl<Q: QBlock> Weights for Blk<Q> {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [Pair; 4] {
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
}

/// A K-quant (ggml's `block_q2_K` .. `block_q6_K`), unit `b % 8` of super-block `b / 8`
/// decoded by [`KQuant`]: `(d · sc_j) · q` (`- dmin · m_j`) with the oracle's `d · sc_j` and
/// `dmin · m_j` per sub-block of 16.
struct KUnits<K>(PhantomData<K>);

impl<K: KQuant> Weights for KUnits<K> {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [Pair; 4] {
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
}

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

/// `acc[r][t] += w(r) · x[t]` for one 8-element step: low half, then high half.
///
/// # Safety
///
/// NEON available.
#[inline(always)]
unsafe fn step<const R: usize, const N: usize>(
    acc: &mut [[float32x4_t; N]; R],
    xv: &[Pair; N],
    w: impl Fn(usize) -> Pair,
) {
    for (r, acc) in acc.iter_mut().enumerate() {
        let (wl, wh) = w(r);
        for (a, &(xl, xh)) in acc.iter_mut().zip(xv) {
            // SAFETY: register-only NEON intrinsics.
            unsafe {
                *a = vfmaq_f32(*a, wl, xl);
                *a = vfmaq_f32(*a, wh, xh);
            }
        }
    }
}

/// One `R × N` tile: `y[t * ldy + r] = W[r] · x[t]`.
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats,
/// every `y[t * ldy + r]` is writable; NEON available.
#[inline(always)]
unsafe fn tile<W: Weights, const R: usize, const N: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: every access stays inside the rows of the caller contract: blocks below
    // `k / 32`, full 8-element steps below `k`, and a copied tail of `k % 8` elements.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); N]; R];
        let nblk = k / 32;
        for b in (0..nblk).filter(|_| W::DECODE_ONCE) {
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = W::block(w.add(r * rb), b);
                for (c, &(wl, wh)) in wv.iter().enumerate() {
                    for (t, a) in acc.iter_mut().enumerate() {
                        let p = x.add(t * k + b * 32 + c * 8);
                        *a = vfmaq_f32(*a, wl, vld1q_f32(p));
                        *a = vfmaq_f32(*a, wh, vld1q_f32(p.add(4)));
                    }
                }
            }
        }
        for b in (0..nblk).filter(|_| !W::DECODE_ONCE) {
            for c in 0..4 {
                let mut xv = [(vdupq_n_f32(0.0), vdupq_n_f32(0.0)); N];
                for (t, xv) in xv.iter_mut().enumerate() {
                    let p = x.add(t * k + b * 32 + c * 8);
                    *xv = (vld1q_f32(p), vld1q_f32(p.add(4)));
                }
                step(&mut acc, &xv, |r| W::chunk(w.add(r * rb), b, c));
            }
        }
        if W::TAIL {
            let mut i = nblk * 32;
            while i < k {
                let len = (k - i).min(8);
                let mut xv = [(vdupq_n_f32(0.0), vdupq_n_f32(0.0)); N];
                for (t, xv) in xv.iter_mut().enumerate() {
                    let p = x.add(t * k + i);
                    *xv =
                        if len == 8 { (vld1q_f32(p), vld1q_f32(p.add(4))) } else { x_tail(p, len) };
                }
                step(&mut acc, &xv, |r| {
                    let row = w.add(r * rb);
                    if len == 8 {
                        W::chunk(row.add(i * W::ELEM_BYTES), 0, 0)
                    } else {
                        tail::<W>(row, i, len)
                    }
                });
                i += 8;
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (t, a) in acc.iter().enumerate() {
                *y.add(t * ldy + r) = hsum4(*a);
            }
        }
    }
}

/// Tiles `R` rows × `n` activation rows with `N` = 3, 2, 1.
///
/// # Safety
///
/// As [`crate::kernels::MatmulF32Fn`] for `R` rows; NEON available.
#[inline(always)]
unsafe fn rows_of<W: Weights, const R: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: tiles stay inside `R` rows and `n` activation rows (caller contract).
    unsafe {
        let mut t = 0;
        while t + 3 <= n {
            tile::<W, R, 3>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 3;
        }
        match n - t {
            2 => tile::<W, R, 2>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy),
            1 => tile::<W, R, 1>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy),
            _ => {}
        }
    }
}

/// The whole block of rows: 8-row tiles for GEMV, 4-row tiles otherwise, then 2 and 1.
///
/// # Safety
///
/// As [`crate::kernels::MatmulF32Fn`]; NEON available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul<W: Weights>(
    w: *const u8,
    rb: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: each call covers rows `r..r + R <= rows` (caller contract).
    unsafe {
        let mut r = 0;
        if n == 1 {
            while r + 8 <= rows {
                tile::<W, 8, 1>(w.add(r * rb), rb, k, x, y.add(r), ldy);
                r += 8;
            }
            if r + 4 <= rows {
                tile::<W, 4, 1>(w.add(r * rb), rb, k, x, y.add(r), ldy);
                r += 4;
            }
        } else {
            while r + 4 <= rows {
                rows_of::<W, 4>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                r += 4;
            }
        }
        if r + 2 <= rows {
            rows_of::<W, 2>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
            r += 2;
        }
        if r < rows {
            rows_of::<W, 1>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
        }
    }
}

macro_rules! entry {
    ($name:ident, $w:ty, $block:literal) => {
        tier_fn! { Neon;
            #[doc = concat!("NEON table entry for ", $block, " (see [`crate::kernels::MatmulF32Fn`]).")]
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulF32Fn`]; the CPU has NEON.
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                w: *const u8,
                rb: usize,
                rows: usize,
                k: usize,
                x: *const f32,
                n: usize,
                y: *mut f32,
                ldy: usize,
            ) {
                // SAFETY: forwarded caller contract; NEON is enabled here.
                unsafe { matmul::<$w>(w, rb, rows, k, x, n, y, ldy) }
            }
        }
    };
}

entry!(matmul_f32, F32W, "f32 weights");
entry!(matmul_f16, F16W, "f16 weights");
entry!(matmul_bf16, Bf16W, "bf16 weights");
entry!(matmul_q8_0, Q8_0W, "ggml `block_q8_0`");
entry!(matmul_q4_0, Q4_0W, "ggml `block_q4_0`");
entry!(matmul_q4_1, Q4_1W, "ggml `block_q4_1`");
entry!(matmul_q5_0, Blk<Q5_0B>, "ggml `block_q5_0`");
entry!(matmul_q5_1, Blk<Q5_1B>, "ggml `block_q5_1`");
entry!(matmul_iq4_nl, Blk<Iq4NlB>, "ggml `block_iq4_nl`");
entry!(matmul_q2_k, KUnits<Q2K>, "ggml `block_q2_K`");
entry!(matmul_q3_k, KUnits<Q3K>, "ggml `block_q3_K`");
entry!(matmul_q4_k, KUnits<Q4K>, "ggml `block_q4_K`");
entry!(matmul_q5_k, KUnits<Q5K>, "ggml `block_q5_K`");
entry!(matmul_q6_k, KUnits<Q6K>, "ggml `block_q6_K`");
