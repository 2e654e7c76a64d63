//! AVX2 int8 kernels for the K-quants (Q4_K, Q5_K, Q6_K) × Q8_K activations
//! ([`crate::quant::ActFormat::Q8K`]).
//!
//! Per super-block the two exact integer sums of the scalar oracle (`crate::quant::q4_k` etc.)
//! come from `maddubs` (unsigned weight values × signed activations into i16 pairs, never
//! saturating: at most `2 · 63 · 127`) and `madd` against the broadcast sub-block scale (i16
//! pairs into i32); the mins and the `- 32` of Q6_K use the activations' per-16 sums. The f32
//! part is the oracle's, term for term: super-block `b` into lane `b % 8`
//! ([`crate::kernels::scalar::accumulate8`]'s order), then [`hsum8`], so the results are
//! bit-identical to the scalar table.

use core::arch::x86_64::*;

use crate::kernels::scalar::hsum8;
use crate::quant::q4_k::scale_min_k4;
use crate::quant::{f16_at, Q8Acts, QK_K};

/// The total of one vector's 8 i32 lanes.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    // SAFETY: register-only intrinsics.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// `Σ_pairs u · s · scale` as 8 i32 lanes (u8 × i8 → i16 pairs, then × the i16 scale).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn dot_scaled(u: __m256i, s: __m256i, scale: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale) }
}

/// A K-quant super-block as the int8 kernel sees it.
trait KBlock {
    /// Bytes per super-block.
    const BYTES: usize;

    /// `(isum, msum)` of the super-block at `blk` against the 256 activations at `x` with
    /// per-16 sums `bsums`; the f32 term is `(d · dx) · isum - (dmin · dx) · msum`.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block, `x` 256 values, `bsums` 16 sums; AVX2 available.
    unsafe fn isums(blk: *const u8, x: *const i8, bsums: *const i32) -> (i32, i32);

    /// `(d, dmin)` of the super-block (`dmin` 0 for types without mins).
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block.
    unsafe fn scales(blk: *const u8) -> (f32, f32);
}

struct Q4K;
struct Q5K;
struct Q6K;

/// The 8 (scale, min) pairs of a Q4_K/Q5_K super-block's 12 packed bytes at `p`.
///
/// # Safety
///
/// 12 readable bytes at `p`.
#[inline(always)]
unsafe fn scales_mins(p: *const u8) -> ([i16; 8], [i32; 8]) {
    // SAFETY: 12 bytes readable (caller contract).
    let s = unsafe { core::slice::from_raw_parts(p, 12) };
    let (mut sc, mut m) = ([0i16; 8], [0i32; 8]);
    for j in 0..8 {
        let (a, b) = scale_min_k4(j, s);
        sc[j] = a as i16;
        m[j] = b as i32;
    }
    (sc, m)
}

/// `Σ_j m_j · (bsum_2j + bsum_2j+1)`.
///
/// # Safety
///
/// 16 readable sums at `bsums`.
#[inline(always)]
unsafe fn msum(m: &[i32; 8], bsums: *const i32) -> i32 {
    let mut t = 0;
    for (j, &mj) in m.iter().enumerate() {
        // SAFETY: `2j + 1 < 16` (caller contract).
        t += mj * unsafe { *bsums.add(2 * j) + *bsums.add(2 * j + 1) };
    }
    t
}

impl KBlock for Q4K {
    const BYTES: usize = crate::quant::q4_k::BYTES;

    #[inline(always)]
    unsafe fn isums(blk: *const u8, x: *const i8, bsums: *const i32) -> (i32, i32) {
        // SAFETY: the reads stay inside the super-block (144 bytes: scales at 4..16, values
        // at 16..144) and the 256 activations (caller contract).
        unsafe {
            let (sc, m) = scales_mins(blk.add(4));
            let m4 = _mm256_set1_epi8(0x0F);
            let mut acc = _mm256_setzero_si256();
            for c in 0..4 {
                let q = _mm256_loadu_si256(blk.add(16 + 32 * c).cast());
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                let x0 = _mm256_loadu_si256(x.add(64 * c).cast());
                let x1 = _mm256_loadu_si256(x.add(64 * c + 32).cast());
                acc = _mm256_add_epi32(acc, dot_scaled(lo, x0, _mm256_set1_epi16(sc[2 * c])));
                acc = _mm256_add_epi32(acc, dot_scaled(hi, x1, _mm256_set1_epi16(sc[2 * c + 1])));
            }
            (hsum_epi32(acc), msum(&m, bsums))
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> (f32, f32) {
        // SAFETY: 4 bytes readable (caller contract).
        let s = unsafe { core::slice::from_raw_parts(blk, 4) };
        (f16_at(s), f16_at(&s[2..]))
    }
}

impl KBlock for Q5K {
    const BYTES: usize = crate::quant::q5_k::BYTES;

    #[inline(always)]
    unsafe fn isums(blk: *const u8, x: *const i8, bsums: *const i32) -> (i32, i32) {
        // SAFETY: the reads stay inside the super-block (176 bytes: scales at 4..16, fifth
        // bits at 16..48, nibbles at 48..176) and the 256 activations (caller contract).
        unsafe {
            let (sc, m) = scales_mins(blk.add(4));
            let m4 = _mm256_set1_epi8(0x0F);
            let one = _mm256_set1_epi8(1);
            let qh = _mm256_loadu_si256(blk.add(16).cast());
            let mut acc = _mm256_setzero_si256();
            for c in 0..4 {
                let q = _mm256_loadu_si256(blk.add(48 + 32 * c).cast());
                // Sub-blocks 2c and 2c + 1 take bits 2c and 2c + 1 of `qh`.
                let h0 =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32)), one);
                let h1 = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                    one,
                );
                let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16::<4>(h0));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                    _mm256_slli_epi16::<4>(h1),
                );
                let x0 = _mm256_loadu_si256(x.add(64 * c).cast());
                let x1 = _mm256_loadu_si256(x.add(64 * c + 32).cast());
                acc = _mm256_add_epi32(acc, dot_scaled(lo, x0, _mm256_set1_epi16(sc[2 * c])));
                acc = _mm256_add_epi32(acc, dot_scaled(hi, x1, _mm256_set1_epi16(sc[2 * c + 1])));
            }
            (hsum_epi32(acc), msum(&m, bsums))
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> (f32, f32) {
        // SAFETY: 4 bytes readable (caller contract).
        let s = unsafe { core::slice::from_raw_parts(blk, 4) };
        (f16_at(s), f16_at(&s[2..]))
    }
}

impl KBlock for Q6K {
    const BYTES: usize = crate::quant::q6_k::BYTES;

    #[inline(always)]
    unsafe fn isums(blk: *const u8, x: *const i8, bsums: *const i32) -> (i32, i32) {
        // SAFETY: the reads stay inside the super-block (210 bytes: low nibbles at 0..128,
        // high pairs at 128..192, scales at 192..208) and the 256 activations.
        unsafe {
            let sc = core::slice::from_raw_parts(blk.add(192).cast::<i8>(), 16);
            let m4 = _mm256_set1_epi8(0x0F);
            let m2 = _mm256_set1_epi8(3);
            let mut acc = _mm256_setzero_si256();
            for h in 0..2 {
                let ql0 = _mm256_loadu_si256(blk.add(64 * h).cast());
                let ql1 = _mm256_loadu_si256(blk.add(64 * h + 32).cast());
                let qh = _mm256_loadu_si256(blk.add(128 + 32 * h).cast());
                let lows = [
                    _mm256_and_si256(ql0, m4),
                    _mm256_and_si256(ql1, m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                ];
                for (g, lo) in lows.into_iter().enumerate() {
                    let hb =
                        _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g as i32)), m2);
                    let q = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(hb));
                    let xv = _mm256_loadu_si256(x.add(128 * h + 32 * g).cast());
                    let j = 8 * h + 2 * g;
                    let s = _mm256_set_m128i(
                        _mm_set1_epi16(sc[j + 1] as i16),
                        _mm_set1_epi16(sc[j] as i16),
                    );
                    acc = _mm256_add_epi32(acc, dot_scaled(q, xv, s));
                }
            }
            // Σ sc_j Σ (q - 32) x = Σ sc_j Σ q x - 32 Σ sc_j bsum_j.
            let mut off = 0i32;
            for (j, &s) in sc.iter().enumerate() {
                off += s as i32 * *bsums.add(j);
            }
            (hsum_epi32(acc) - 32 * off, 0)
        }
    }

    #[inline(always)]
    unsafe fn scales(blk: *const u8) -> (f32, f32) {
        // SAFETY: 2 bytes at 208 readable (caller contract).
        (f16_at(unsafe { core::slice::from_raw_parts(blk.add(208), 2) }), 0.0)
    }
}

/// Every (row, activation row) pair: per super-block the oracle's term, lane `b % 8`.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] with `xq` in the Q8_K format; AVX2 available.
#[inline(always)]
unsafe fn matmul<K: KBlock, const MINS: bool>(
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
            let mut acc = [0f32; 8];
            for b in 0..nb {
                let i = t * nb + b;
                // SAFETY: super-block `b < nb` of row `r < rows`, activation block `i` of
                // row `t < n <= xq.n()` (caller contract).
                unsafe {
                    let blk = w.add(r * rb + b * K::BYTES);
                    let (is, ms) = K::isums(blk, qs.add(i * QK_K), sums.add(i * 16));
                    let (dw, dmin) = K::scales(blk);
                    let dx = *d.add(i);
                    let term = if MINS {
                        (dw * dx) * is as f32 - (dmin * dx) * ms as f32
                    } else {
                        (dw * dx) * is as f32
                    };
                    acc[b % 8] += term;
                }
            }
            // SAFETY: `y[t * ldy + r]` is writable (caller contract).
            unsafe { *y.add(t * ldy + r) = hsum8(&acc) };
        }
    }
}

macro_rules! entry {
    ($name:ident, $k:ty, $mins:expr) => {
        /// AVX2 table entry (see [`crate::kernels::MatmulQ8Fn`]), activations in Q8_K.
        ///
        /// # Safety
        ///
        /// As [`crate::kernels::MatmulQ8Fn`]; the CPU has AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
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
            unsafe { matmul::<$k, $mins>(w, rb, rows, xq, n, y, ldy) }
        }
    };
}

entry!(matmul_q4_k_q8k, Q4K, true);
entry!(matmul_q5_k_q8k, Q5K, true);
entry!(matmul_q6_k_q8k, Q6K, false);
