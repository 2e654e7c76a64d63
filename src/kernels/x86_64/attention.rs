//! AVX2 bodies for [`crate::ops::attention_head`]'s two loops over the KV cache: the scores
//! `q · k_t` (four keys per pass over `q`) and the weighted sum `out += p_t · v_t`.
//!
//! Both reproduce the portable code's arithmetic exactly: [`crate::ops::dot`]'s eight
//! partial sums (`acc[i % 8] += a[i] * b[i]`, a separate multiply and add, never fused), its
//! tail of `len % 8` products summed in order, and its fixed combination
//! `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)) + tail`; [`crate::ops::axpy`]'s
//! `y[i] + alpha * x[i]`, unfused. So the scores and outputs are bit-identical to the scalar
//! path's, only faster.

use core::arch::x86_64::*;

/// [`crate::ops::dot`]'s combination of the eight lanes of `acc` and the scalar `tail`.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn combine(acc: __m256, tail: f32) -> f32 {
    let mut a = [0f32; 8];
    // SAFETY: `a` holds 8 floats.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), acc) };
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail
}

/// `scores[t] = dot(q, keys[t * d ..][..d]) * scale` for `t < scores.len()`, with
/// `d = q.len()`.
///
/// # Safety
///
/// `keys` holds at least `scores.len() * q.len()` floats; AVX2 available.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scores(q: &[f32], keys: &[f32], scale: f32, scores: &mut [f32]) {
    let d = q.len();
    let main = d / 8 * 8;
    let n = scores.len();
    debug_assert!(keys.len() >= n * d);
    let tail = |k: &[f32]| {
        let mut s = 0f32;
        for i in main..d {
            s += q[i] * k[i];
        }
        s
    };
    let (qp, kp) = (q.as_ptr(), keys.as_ptr());
    let mut t = 0;
    // SAFETY: every load below is inside `q` (`i + 8 <= main <= d`) or inside key row `t + j`
    // with `t + j < n` (so inside `keys`, caller contract).
    unsafe {
        while t + 4 <= n {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < main {
                let qv = _mm256_loadu_ps(qp.add(i));
                for (j, a) in acc.iter_mut().enumerate() {
                    let kv = _mm256_loadu_ps(kp.add((t + j) * d + i));
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(qv, kv));
                }
                i += 8;
            }
            for (j, a) in acc.iter().enumerate() {
                let row = &keys[(t + j) * d..(t + j + 1) * d];
                scores[t + j] = combine(*a, tail(row)) * scale;
            }
            t += 4;
        }
        while t < n {
            let mut acc = _mm256_setzero_ps();
            let mut i = 0;
            while i < main {
                let kv = _mm256_loadu_ps(kp.add(t * d + i));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(qp.add(i)), kv));
                i += 8;
            }
            scores[t] = combine(acc, tail(&keys[t * d..(t + 1) * d])) * scale;
            t += 1;
        }
    }
}

/// [`crate::ops::softmax`] compiled for AVX2 (8 lanes of its `expf`): the same bits.
///
/// # Safety
///
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax(x: &mut [f32]) {
    crate::math::softmax_body(x)
}

/// `out[i] = Σ_t` in order of `out[i] + p[t] * values[t * d + i]` (the portable loop of
/// `axpy` calls), with `out` zeroed first and `d = out.len()`.
///
/// # Safety
///
/// `values` holds at least `p.len() * out.len()` floats; AVX2 available.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
    let d = out.len();
    debug_assert!(values.len() >= p.len() * d);
    out.fill(0.0);
    let vp = values.as_ptr();
    let op = out.as_mut_ptr();
    let mut i = 0;
    // SAFETY: columns `i .. i + 8 <= d` of `out` and of value rows `t < p.len()` (caller
    // contract).
    unsafe {
        // Eight columns at a time, all positions, the running sums in registers (the order
        // of additions per column is still t = 0, 1, ...).
        while i + 32 <= d {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (t, &pt) in p.iter().enumerate() {
                let pv = _mm256_set1_ps(pt);
                for (j, a) in acc.iter_mut().enumerate() {
                    let v = _mm256_loadu_ps(vp.add(t * d + i + 8 * j));
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, v));
                }
            }
            for (j, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(i + 8 * j), *a);
            }
            i += 32;
        }
        while i + 8 <= d {
            let mut acc = _mm256_setzero_ps();
            for (t, &pt) in p.iter().enumerate() {
                let v = _mm256_loadu_ps(vp.add(t * d + i));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(pt), v));
            }
            _mm256_storeu_ps(op.add(i), acc);
            i += 8;
        }
    }
    for c in i..d {
        let mut s = 0f32;
        for (t, &pt) in p.iter().enumerate() {
            s += pt * values[t * d + c];
        }
        out[c] = s;
    }
}

// ---------------------------------------------------------------------------------------------
// The grouped, tiled attention of `kernels::flash` on 256-bit registers (AVX2; the AVX-512
// entry runs the same body with the EVEX encodings and 32 registers). Same bits as the
// portable lanes: separate multiplies and adds, the same reduction tree, the same `exp`.
// ---------------------------------------------------------------------------------------------

use crate::kernels::flash::{self, Block, Lanes};

/// Eight lanes in a `__m256`.
#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256);

impl Lanes for Avx2 {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_setzero_ps() })
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_set1_ps(x) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: `p` readable for 8 floats; AVX available (trait contract).
        Avx2(unsafe { _mm256_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        // SAFETY: `p` readable for 8 halves; F16C available (trait contract: AVX2 tiers have
        // it).
        Avx2(unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: `p` writable for 8 floats; AVX available (trait contract).
        unsafe { _mm256_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_add_ps(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_sub_ps(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_mul_ps(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn max(self, o: Self) -> Self {
        // SAFETY: AVX available (trait contract).
        Avx2(unsafe { _mm256_max_ps(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // SAFETY: AVX2 available (trait contract). `flash::exp`'s steps in order; `min(88, y)`
        // with the constant first keeps a NaN `y` (as `clamp` does).
        unsafe {
            let s = _mm256_set1_ps;
            let y = _mm256_max_ps(s(-87.0), _mm256_min_ps(s(88.0), self.0));
            let n = _mm256_sub_ps(
                _mm256_add_ps(_mm256_mul_ps(y, s(flash::LOG2E)), s(flash::SHIFT)),
                s(flash::SHIFT),
            );
            let r = _mm256_sub_ps(
                _mm256_sub_ps(y, _mm256_mul_ps(n, s(flash::LN2_HI))),
                _mm256_mul_ps(n, s(flash::LN2_LO)),
            );
            let mut p = _mm256_add_ps(_mm256_mul_ps(s(flash::E0), r), s(flash::E1));
            p = _mm256_add_ps(_mm256_mul_ps(p, r), s(flash::E2));
            p = _mm256_add_ps(_mm256_mul_ps(p, r), s(flash::E3));
            p = _mm256_add_ps(_mm256_mul_ps(p, r), s(flash::E4));
            p = _mm256_add_ps(_mm256_mul_ps(p, r), s(0.5));
            let e = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), s(1.0));
            let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvttps_epi32(n),
                _mm256_set1_epi32(127),
            ));
            Avx2(_mm256_mul_ps(e, _mm256_castsi256_ps(bits)))
        }
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: a prefetch is a hint and never faults; SSE available on every x86_64 tier.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    #[inline(always)]
    unsafe fn sum8(a: &[Self; 8]) -> Self {
        // SAFETY: AVX available (trait contract). `x[i] + x[i + 4]` for two registers at once,
        // then two rounds of pairwise adds: lane `u` ends as
        // `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))` of `a[u]`.
        unsafe {
            let fold = |x: __m256, y: __m256| {
                _mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(x, y),
                    _mm256_permute2f128_ps::<0x31>(x, y),
                )
            };
            let (s04, s15) = (fold(a[0].0, a[4].0), fold(a[1].0, a[5].0));
            let (s26, s37) = (fold(a[2].0, a[6].0), fold(a[3].0, a[7].0));
            let (h1, h2) = (_mm256_hadd_ps(s04, s15), _mm256_hadd_ps(s26, s37));
            Avx2(_mm256_hadd_ps(h1, h2))
        }
    }
}

tier_fn! { Avx2;
    /// [`flash::run`] on AVX2.
    ///
    /// # Safety
    ///
    /// As [`flash::run`]; AVX2, FMA and F16C available.
    pub(crate) unsafe fn flash_avx2(b: &Block) {
        // SAFETY: caller contract; the lanes' ISA is enabled here.
        unsafe { flash::run::<Avx2>(b) }
    }
}

/// The AVX-512 tier's lanes: [`Avx2`]'s eight lanes (EVEX-encoded, 32 registers) for the
/// softmax, with the two loops over a tile on 512-bit registers: the scores of two query
/// heads per register ([`Lanes::qk_heads`]: one broadcast key chunk times both heads' query
/// chunks) and the weighted sum of values sixteen columns per register
/// ([`Lanes::pv_vectors`]). Every lane does the 8-lane code's operations on the same
/// operands in the same order (separate multiplies and adds, the same reduction tree), so
/// the bits are [`Avx2`]'s.
#[derive(Clone, Copy)]
pub(crate) struct Zmm(Avx2);

impl Lanes for Zmm {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { Avx2::zero() })
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { Avx2::splat(x) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { Avx2::load(p) })
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { Avx2::load_f16(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: forwarded trait contract.
        unsafe { self.0.store(p) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { self.0.add(o.0) })
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { self.0.sub(o.0) })
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { self.0.mul(o.0) })
    }
    #[inline(always)]
    unsafe fn max(self, o: Self) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { self.0.max(o.0) })
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { self.0.exp() })
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: forwarded trait contract.
        unsafe { Avx2::prefetch(p) }
    }
    #[inline(always)]
    unsafe fn sum8(a: &[Self; 8]) -> Self {
        // SAFETY: forwarded trait contract.
        Zmm(unsafe { Avx2::sum8(&a.map(|z| z.0)) })
    }
    #[inline(always)]
    unsafe fn qk_heads(
        q: *const f32,
        heads: usize,
        kt: *const f32,
        d: usize,
        rl: usize,
        rh: usize,
        scale: f32,
        s: *mut f32,
    ) {
        // SAFETY: every vector and score row is the caller's (trait contract); AVX-512 F
        // available (this type is only run by the AVX-512 tier).
        unsafe {
            let mut h = 0;
            while h + 2 <= heads {
                qk2(q.add(h * d), q.add((h + 1) * d), kt, d, rl, rh, scale, s.add(h * flash::KT));
                h += 2;
            }
            if h < heads {
                flash::qk::<Avx2>(q.add(h * d), kt, d, rl, rh, scale, s.add(h * flash::KT));
            }
        }
    }
    #[inline(always)]
    unsafe fn pv_vectors<const MV: usize>(
        p: *const f32,
        al: *const f32,
        o: *mut f32,
        vt: *const f32,
        d: usize,
        rl: usize,
        rh: usize,
    ) {
        // SAFETY: forwarded trait contract; AVX-512 F available (as above).
        unsafe {
            let mut c = 0;
            while c + 64 <= d {
                pv16::<MV, 4>(p, al, o, vt, d, c, rl, rh, 0xFFFF);
                c += 64;
            }
            while c < d {
                let mask = if d - c >= 16 { 0xFFFF } else { ((1u32 << (d - c)) - 1) as u16 };
                pv16::<MV, 1>(p, al, o, vt, d, c, rl, rh, mask);
                c += 16;
            }
        }
    }
}

/// [`flash::pv`] for `MV` vectors on columns `c .. c + 16 W` (the last register's lanes
/// limited to `mask`): per output element `acc = out`, `acc = acc * α` unless `α == 1`, then
/// `acc = acc + p_j * v_j` for `j` in `rl .. rh` in order, unfused: the 8-lane code's
/// operations, sixteen elements per register.
///
/// # Safety
///
/// As [`flash::pv`], with `c + 16 W <= d` where the mask is full (the masked lanes are
/// neither read nor written); AVX-512 F available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pv16<const MV: usize, const W: usize>(
    p: *const f32,
    al: *const f32,
    o: *mut f32,
    vt: *const f32,
    d: usize,
    c: usize,
    rl: usize,
    rh: usize,
    mask: u16,
) {
    // SAFETY: outputs `o + u * d + c ..` and value rows `j < rh` at column `c ..` within
    // `d` (lanes past `d` masked off), scores `p + u * KT + j` (caller contract).
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); W]; MV];
        for (u, a) in acc.iter_mut().enumerate() {
            let out = o.add(u * d + c);
            let alpha = *al.add(u);
            for (w, a) in a.iter_mut().enumerate() {
                *a = _mm512_maskz_loadu_ps(mask, out.add(16 * w));
                if alpha != 1.0 {
                    *a = _mm512_mul_ps(*a, _mm512_set1_ps(alpha));
                }
            }
        }
        for j in rl..rh {
            let vr = vt.add(j * d + c);
            let mut v = [_mm512_setzero_ps(); W];
            for (w, v) in v.iter_mut().enumerate() {
                *v = _mm512_maskz_loadu_ps(mask, vr.add(16 * w));
            }
            for (u, a) in acc.iter_mut().enumerate() {
                let pj = _mm512_set1_ps(*p.add(u * flash::KT + j));
                for (a, &v) in a.iter_mut().zip(&v) {
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(pj, v));
                }
            }
        }
        for (u, a) in acc.iter().enumerate() {
            let out = o.add(u * d + c);
            for (w, &a) in a.iter().enumerate() {
                _mm512_mask_storeu_ps(out.add(16 * w), mask, a);
            }
        }
    }
}

/// [`flash::qk`] for two vectors at once (`q0`, `q1`, scores into `s` and `s + KT`): per
/// eight keys, register `u` holds key `j + u`'s eight partial sums for `q0` (low half) and
/// `q1` (high half), each key chunk broadcast to both halves; the eight registers reduce by
/// [`Avx2::sum8`]'s steps within each half. Keys past the last whole eight go one by one
/// through [`flash::qk`] itself.
///
/// # Safety
///
/// As [`flash::qk`] for both vectors; AVX-512 F available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn qk2(
    q0: *const f32,
    q1: *const f32,
    kt: *const f32,
    d: usize,
    rl: usize,
    rh: usize,
    scale: f32,
    s: *mut f32,
) {
    let main = d / 8 * 8;
    // SAFETY: loads inside `q0`, `q1` (`c + 8 <= main <= d`) and key rows `j < rh`; stores
    // inside both score rows `[..rh]` (caller contract).
    unsafe {
        let tail = |q: *const f32, k: *const f32| {
            let mut t = 0f32;
            for i in main..d {
                t += *q.add(i) * *k.add(i);
            }
            t
        };
        let scale_v = _mm512_set1_ps(scale);
        let mut j = rl;
        while j + 8 <= rh {
            let mut acc = [_mm512_setzero_ps(); 8];
            let mut c = 0;
            while c < main {
                let qv = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_loadu_pd(q0.add(c).cast())),
                    _mm256_loadu_pd(q1.add(c).cast()),
                ));
                for (u, a) in acc.iter_mut().enumerate() {
                    let k = _mm256_loadu_pd(kt.add((j + u) * d + c).cast());
                    let kv = _mm512_castpd_ps(_mm512_broadcast_f64x4(k));
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(qv, kv));
                }
                c += 8;
            }
            let mut tails = [0f32; 16];
            if main < d {
                for u in 0..8 {
                    tails[u] = tail(q0, kt.add((j + u) * d));
                    tails[8 + u] = tail(q1, kt.add((j + u) * d));
                }
            }
            let r = _mm512_mul_ps(
                _mm512_add_ps(sum8x2(&acc), _mm512_loadu_ps(tails.as_ptr())),
                scale_v,
            );
            _mm256_storeu_ps(s.add(j), _mm512_castps512_ps256(r));
            let rh_ = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(r)));
            _mm256_storeu_ps(s.add(flash::KT + j), rh_);
            j += 8;
        }
        if j < rh {
            flash::qk::<Avx2>(q0, kt, d, j, rh, scale, s);
            flash::qk::<Avx2>(q1, kt, d, j, rh, scale, s.add(flash::KT));
        }
    }
}

/// [`Avx2::sum8`] within each 256-bit half: lane `u` of half `h` is
/// `((x0 + x4) + (x1 + x5)) + ((x2 + x6) + (x3 + x7))` of half `h` of `a[u]`.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn sum8x2(a: &[__m512; 8]) -> __m512 {
    // SAFETY: register-only intrinsics.
    unsafe {
        // Per half, `_mm256_permute2f128_ps` 0x20 / 0x31 of `x`, `y`: 128-bit lanes
        // [x.L0, y.L0 | x.L2, y.L2] and [x.L1, y.L1 | x.L3, y.L3].
        let lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
        let hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        let fold = |x: __m512, y: __m512| {
            _mm512_add_ps(_mm512_permutex2var_ps(x, lo, y), _mm512_permutex2var_ps(x, hi, y))
        };
        // `_mm256_hadd_ps` per 128-bit lane: `[x1 + x0, x3 + x2, y1 + y0, y3 + y2]`.
        let hadd = |x: __m512, y: __m512| {
            _mm512_add_ps(_mm512_shuffle_ps::<0xDD>(x, y), _mm512_shuffle_ps::<0x88>(x, y))
        };
        let (s04, s15) = (fold(a[0], a[4]), fold(a[1], a[5]));
        let (s26, s37) = (fold(a[2], a[6]), fold(a[3], a[7]));
        hadd(hadd(s04, s15), hadd(s26, s37))
    }
}

tier_fn! { Avx512;
    /// [`flash::run`] on the AVX-512 tier ([`Zmm`]: 512-bit score and weighted-sum loops,
    /// the rest on the AVX2 lanes EVEX-encoded).
    ///
    /// # Safety
    ///
    /// As [`flash::run`]; AVX-512 F/BW/VL, AVX2, FMA and F16C available.
    pub(crate) unsafe fn flash_avx512(b: &Block) {
        // SAFETY: caller contract; the lanes' ISA is enabled here.
        unsafe { flash::run::<Zmm>(b) }
    }
}

// ---------------------------------------------------------------------------------------------
// The encoders' bidirectional attention of one (sequence, head) item on 512-bit registers, as
// two small matrix products around a softmax: the keys transposed once into scratch, then per
// block of up to `BIDIR_ROWS` query rows the scores `S = scale · Q Kᵀ` (16 keys per register,
// each query element broadcast), the softmax of each score row (16-lane exponential, the row's
// sum taken once), and `O = P V / sum` (the value rows read in place, 16 columns per register).
// Each output row's operations depend only on its own query row and the item's keys and
// values, never on the block it shares: bit-identical for every thread split.
// ---------------------------------------------------------------------------------------------

use crate::kernels::{BidirHead, BIDIR_MAX_LEN};

/// Query rows per block of [`bidir_avx512`].
const BIDIR_ROWS: usize = 4;

/// The lanes below `n` (all 16 from `n >= 16`).
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// `e^x` per lane: [`flash::exp`]'s steps (Cephes' polynomial, `x` clamped to `[-87, 88]`)
/// with fused multiply-adds and `vscalefps` for the power of two.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn exp16(x: __m512) -> __m512 {
    // SAFETY: AVX-512 F available (caller contract).
    unsafe {
        let s = _mm512_set1_ps;
        let y = _mm512_max_ps(s(-87.0), _mm512_min_ps(s(88.0), x));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(y, s(flash::LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, s(flash::LN2_LO), _mm512_fnmadd_ps(n, s(flash::LN2_HI), y));
        let mut p = _mm512_fmadd_ps(s(flash::E0), r, s(flash::E1));
        p = _mm512_fmadd_ps(p, r, s(flash::E2));
        p = _mm512_fmadd_ps(p, r, s(flash::E3));
        p = _mm512_fmadd_ps(p, r, s(flash::E4));
        p = _mm512_fmadd_ps(p, r, s(0.5));
        let e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), s(1.0));
        _mm512_scalef_ps(e, n)
    }
}

/// Query rows `i0 .. i0 + RB` of the item `b` (heads `16 DV` wide), the keys already
/// transposed into `b.kt`; `p` is scratch of `RB × lp` floats (`lp`: `len` rounded up to 32).
///
/// # Safety
///
/// As [`bidir_avx512`], with `i0 + RB <= b.len`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn bidir_rows<const RB: usize, const DV: usize>(
    b: &BidirHead,
    i0: usize,
    lp: usize,
    p: *mut f32,
) {
    let (len, d, st) = (b.len, 16 * DV, b.stride);
    // SAFETY: query rows `i0 .. i0 + RB < len` and value rows `< len` (`d` floats each), the
    // transposed keys `d × len` (loads masked below `len`; masked lanes are not read, and
    // their addresses are formed with `wrapping_add`), `p` inside its `RB × lp` floats,
    // output rows `i0 .. i0 + RB` (caller contract).
    unsafe {
        let q = b.q.add(i0 * st);
        let scale = _mm512_set1_ps(b.scale);
        let mut vmax = [_mm512_set1_ps(f32::NEG_INFINITY); RB];
        // Scores, 32 keys at a time, and each row's running maximum over the real keys.
        let mut jb = 0;
        while jb < len {
            let (m0, m1) = (lanes(len - jb), lanes(len.saturating_sub(jb + 16)));
            let mut a0 = [_mm512_setzero_ps(); RB];
            let mut a1 = [_mm512_setzero_ps(); RB];
            for c in 0..d {
                let kp = b.kt.wrapping_add(c * len + jb);
                let k0 = _mm512_maskz_loadu_ps(m0, kp);
                let k1 = _mm512_maskz_loadu_ps(m1, kp.wrapping_add(16));
                for r in 0..RB {
                    let qv = _mm512_set1_ps(*q.add(r * st + c));
                    a0[r] = _mm512_fmadd_ps(qv, k0, a0[r]);
                    a1[r] = _mm512_fmadd_ps(qv, k1, a1[r]);
                }
            }
            for r in 0..RB {
                let (s0, s1) = (_mm512_mul_ps(a0[r], scale), _mm512_mul_ps(a1[r], scale));
                vmax[r] = _mm512_mask_max_ps(vmax[r], m0, vmax[r], s0);
                vmax[r] = _mm512_mask_max_ps(vmax[r], m1, vmax[r], s1);
                _mm512_storeu_ps(p.add(r * lp + jb), s0);
                _mm512_storeu_ps(p.add(r * lp + jb + 16), s1);
            }
            jb += 32;
        }
        // Softmax numerators in place (zero past `len`) and each row's 1 / sum.
        let mut inv = [0f32; RB];
        for r in 0..RB {
            let m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax[r]));
            let mut sum = _mm512_setzero_ps();
            let mut j = 0;
            while j < len {
                let at = p.add(r * lp + j);
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(at), m));
                let e = _mm512_maskz_mov_ps(lanes(len - j), e);
                _mm512_storeu_ps(at, e);
                sum = _mm512_add_ps(sum, e);
                j += 16;
            }
            inv[r] = 1.0 / _mm512_reduce_add_ps(sum);
        }
        // O = P V, scaled by 1 / sum.
        let mut acc = [[_mm512_setzero_ps(); DV]; RB];
        for j in 0..len {
            let vr = b.v.add(j * st);
            let mut vv = [_mm512_setzero_ps(); DV];
            for c in 0..DV {
                vv[c] = _mm512_loadu_ps(vr.add(16 * c));
            }
            for r in 0..RB {
                let pb = _mm512_set1_ps(*p.add(r * lp + j));
                for c in 0..DV {
                    acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
                }
            }
        }
        for r in 0..RB {
            let iv = _mm512_set1_ps(inv[r]);
            for c in 0..DV {
                _mm512_storeu_ps(b.out.add((i0 + r) * st + 16 * c), _mm512_mul_ps(acc[r][c], iv));
            }
        }
    }
}

/// [`bidir_avx512`] for heads `16 DV` wide.
///
/// # Safety
///
/// As [`bidir_avx512`], with `b.d == 16 DV`.
#[inline(always)]
unsafe fn bidir<const DV: usize>(b: &BidirHead) {
    let (len, d, st) = (b.len, 16 * DV, b.stride);
    let lp = len.next_multiple_of(32);
    let mut buf = core::mem::MaybeUninit::<[f32; BIDIR_ROWS * BIDIR_MAX_LEN]>::uninit();
    let p = buf.as_mut_ptr().cast::<f32>();
    // SAFETY: key rows `< len` (`d` floats each) and `kt`'s `d × len` floats (caller
    // contract); `lp <= BIDIR_MAX_LEN` (`len` is at most that, a multiple of 32), so every
    // block's `RB × lp` scores fit `buf`, and each block writes its scores before reading them.
    unsafe {
        for j in 0..len {
            let kr = b.k.add(j * st);
            for c in 0..d {
                *b.kt.add(c * len + j) = *kr.add(c);
            }
        }
        let mut i0 = 0;
        while i0 < len {
            match len - i0 {
                1 => bidir_rows::<1, DV>(b, i0, lp, p),
                2 => bidir_rows::<2, DV>(b, i0, lp, p),
                3 => bidir_rows::<3, DV>(b, i0, lp, p),
                _ => bidir_rows::<BIDIR_ROWS, DV>(b, i0, lp, p),
            }
            i0 += (len - i0).min(BIDIR_ROWS);
        }
    }
}

tier_fn! { Avx512;
    /// The AVX-512 tier's [`crate::kernels::BidirFn`]: one (sequence, head) item of an
    /// encoder's bidirectional attention as the two products `Q Kᵀ` and `P V` (see the
    /// comment above).
    ///
    /// # Safety
    ///
    /// As [`crate::kernels::BidirFn`]; AVX-512 F available.
    pub(crate) unsafe fn bidir_avx512(b: &BidirHead) {
        // SAFETY: caller contract; `d` is 16, 32, 48 or 64 (a multiple of 16 up to
        // `BIDIR_MAX_D`).
        unsafe {
            match b.d / 16 {
                1 => bidir::<1>(b),
                2 => bidir::<2>(b),
                3 => bidir::<3>(b),
                _ => bidir::<4>(b),
            }
        }
    }
}
