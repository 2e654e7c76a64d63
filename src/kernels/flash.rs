//! Grouped, tiled, online-softmax ("flash-style") attention: the arithmetic every ISA shares.
//!
//! One call computes the query vectors of one KV head: `rows` query rows × `heads` query heads
//! (the heads that share the KV head, GQA), vector `(r, h)` at `q + r * row_stride + h * d`,
//! its output at the same offset from `out`. Row `r` sees the keys `lo(r) .. hi(r)` with
//! `hi(r) = min(pos0 + r + 1, clip.end)` and `lo(r) = max(hi₀(r) - window, clip.start)`
//! (`hi₀` before clipping; causal, with an optional sliding window; `clip` restricts the call
//! to one segment of the cache for split decoding).
//!
//! Keys are walked in tiles of [`KT`] positions at absolute boundaries (multiples of `KT`), so
//! the operations applied to one vector depend only on its own key range, never on which
//! other rows or heads share the call: results are bit-identical however the caller groups
//! and splits the work. Each key and value row of a tile is read from memory once per call
//! (f16 rows are widened once into scratch) and reused, from L1, by every vector of the call.
//!
//! Per vector and tile (`s_j` the scores, `m`, `l` the running max and sum, `acc` the
//! unnormalized output, all f32, separate multiplies and adds, never fused):
//!
//! - `s_j = (tree(lanes) + tail) * scale`, the dot product of [`crate::ops::dot`]: eight
//!   partial sums `lane[i % 8] += q[i] * k[i]` over `d / 8 * 8` elements, combined as
//!   `((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7))`, plus the `d % 8` tail summed in order
//!   from `0.0` (added even when empty);
//! - `m' = max(m, max_j s_j)`, `α = exp(m - m')`, `p_j = exp(s_j - m')` with [`exp`] (Cephes'
//!   polynomial; `exp(-inf)` is about `1.6e-38`, harmless since `l = acc = 0` then);
//! - `l = l * α + tree(plane)` where `plane[u]` sums, from `0.0` and in tile order, the `p_j`
//!   of the tile positions `j ≡ u (mod 8)` (`p_j = 0` outside the vector's keys);
//! - `acc = acc * α` (skipped when `α == 1`, which changes no bit), then `acc += p_j * v_j`
//!   for the vector's keys in ascending order.
//!
//! Finally `out = acc * (1 / l)` ([`finalize`]). Segments computed separately are combined by
//! [`merge`] in segment order.

use core::ops::Range;

/// Keys per tile (a multiple of 8).
pub(crate) const KT: usize = 32;

/// Where one KV head's keys or values are: position `t` at element `t * d`.
#[derive(Clone, Copy)]
pub(crate) enum KvPtr {
    /// f32 elements.
    F32(*const f32),
    /// IEEE binary16 elements (bit patterns).
    F16(*const u16),
}

/// One call's operands (see the module docs). Pointers are raw because the decoder's chunks
/// write interleaved parts of one output buffer.
#[derive(Clone, Copy)]
pub(crate) struct Block {
    /// Query vectors.
    pub q: *const f32,
    /// Outputs (unnormalized until [`finalize`]), laid out as `q`.
    pub out: *mut f32,
    /// Floats from one query row to the next.
    pub row_stride: usize,
    /// Query rows.
    pub rows: usize,
    /// Query heads per row (the group).
    pub heads: usize,
    /// Head width.
    pub d: usize,
    /// Keys of the KV head.
    pub keys: KvPtr,
    /// Values of the KV head.
    pub values: KvPtr,
    /// Position of query row 0.
    pub pos0: usize,
    /// Sliding window (`usize::MAX`: none).
    pub window: usize,
    /// The keys this call may read.
    pub clip: (usize, usize),
    /// Score scale.
    pub scale: f32,
    /// `2 * rows * heads` floats: running max, then running sum, per vector `r * heads + h`.
    pub ml: *mut f32,
    /// [`scratch_floats`]`(rows * heads, d, keys are f16)` floats: the scores of a tile per vector, each
    /// vector's `α`, and two tiles of widened keys and values.
    pub scratch: *mut f32,
}

/// Floats of scratch one [`Block`] with `vectors = rows * heads` query vectors of width `d`
/// needs: `KT + 1` per vector, plus two tiles of `KT * d` when the cache is f16 (`widen`).
pub(crate) const fn scratch_floats(vectors: usize, d: usize, widen: bool) -> usize {
    vectors * (KT + 1) + if widen { 2 * KT * d } else { 0 }
}

impl Block {
    /// The key range of row `r` (empty when `lo >= hi`).
    #[inline(always)]
    pub(crate) fn range(&self, r: usize) -> Range<usize> {
        let hi0 = self.pos0 + r + 1;
        let lo = hi0.saturating_sub(self.window).max(self.clip.0);
        lo..hi0.min(self.clip.1)
    }
}

/// `e^y` as [`crate::ops`]'s GELU uses it (Cephes' `expf`, branch-free; the one copy is
/// [`crate::math::exp_cephes`]): the per-lane arithmetic every [`Lanes`] implementation
/// reproduces, with these constants.
pub(crate) use crate::math::exp_cephes as exp;
#[allow(unused_imports)] // read by the x86_64 lanes only; unused on other targets
pub(crate) use crate::math::{E0, E1, E2, E3, E4, LN2_HI, LN2_LO, LOG2E, SHIFT};

/// `if a > b { a } else { b }`: x86's `maxps` (so NaN and signed zeros come out the same on
/// every path).
#[inline(always)]
pub(crate) fn maxps(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))`.
#[inline(always)]
pub(crate) fn tree(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

/// Eight f32 lanes and the operations the kernel needs; every implementation gives the same
/// bits per lane as [`Portable`].
pub(crate) trait Lanes: Copy {
    /// All lanes 0.
    ///
    /// # Safety
    ///
    /// The implementation's ISA is available.
    unsafe fn zero() -> Self;
    /// All lanes `x`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn splat(x: f32) -> Self;
    /// Eight floats from `p`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`]; `p` readable for 8 floats.
    unsafe fn load(p: *const f32) -> Self;
    /// Eight IEEE binary16 values from `p`, widened (exactly).
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`]; `p` readable for 8 values.
    unsafe fn load_f16(p: *const u16) -> Self;
    /// Stores the lanes at `p`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`]; `p` writable for 8 floats.
    unsafe fn store(self, p: *mut f32);
    /// Lane-wise `self + o`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn add(self, o: Self) -> Self;
    /// Lane-wise `self - o`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn sub(self, o: Self) -> Self;
    /// Lane-wise `self * o`.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn mul(self, o: Self) -> Self;
    /// Lane-wise [`maxps`].
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn max(self, o: Self) -> Self;
    /// Lane-wise [`exp`].
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn exp(self) -> Self;
    /// Lane `u` of the result is [`tree`] of `a[u]`'s lanes.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn sum8(a: &[Self; 8]) -> Self;
    /// Hints that the cache line at `p` will be read soon (no effect on results).
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`] (any address: a prefetch never faults).
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        let _ = p;
    }
    /// The scores of `heads` vectors (vector `h` at `q + h * d`) against tile keys `rl .. rh`
    /// into `s + h * KT` ([`qk`] per vector; a wider ISA may take several vectors per pass,
    /// with the same bits per score).
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`]; for each vector as [`qk`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
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
        for h in 0..heads {
            // SAFETY: vector `h` and its score row (caller contract).
            unsafe { qk::<Self>(q.add(h * d), kt, d, rl, rh, scale, s.add(h * KT)) }
        }
    }
    /// [`pv`] of `MV` vectors (a wider ISA may use wider registers, with the same bits per
    /// output element).
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`] and [`pv`].
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
        // SAFETY: forwarded caller contract.
        unsafe { pv::<Self, MV>(p, al, o, vt, d, rl, rh) }
    }
    /// The lanes as an array.
    ///
    /// # Safety
    ///
    /// As [`Lanes::zero`].
    unsafe fn to_array(self) -> [f32; 8] {
        let mut a = [0f32; 8];
        // SAFETY: `a` holds 8 floats.
        unsafe { self.store(a.as_mut_ptr()) };
        a
    }
}

/// Plain Rust lanes (the oracle; LLVM vectorizes them where it can).
#[derive(Clone, Copy)]
pub(crate) struct Portable([f32; 8]);

impl Lanes for Portable {
    #[inline(always)]
    unsafe fn zero() -> Self {
        Portable([0.0; 8])
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable([x; 8])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: `p` readable for 8 floats (caller contract).
        Portable(unsafe { p.cast::<[f32; 8]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        // SAFETY: `p` readable for 8 values (caller contract).
        let h = unsafe { p.cast::<[u16; 8]>().read_unaligned() };
        Portable(h.map(|b| half::f16::from_bits(b).to_f32()))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: `p` writable for 8 floats (caller contract).
        unsafe { p.cast::<[f32; 8]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        Portable(core::array::from_fn(|i| self.0[i] + o.0[i]))
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        Portable(core::array::from_fn(|i| self.0[i] - o.0[i]))
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        Portable(core::array::from_fn(|i| self.0[i] * o.0[i]))
    }
    #[inline(always)]
    unsafe fn max(self, o: Self) -> Self {
        Portable(core::array::from_fn(|i| maxps(self.0[i], o.0[i])))
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        Portable(self.0.map(exp))
    }
    #[inline(always)]
    unsafe fn sum8(a: &[Self; 8]) -> Self {
        Portable(core::array::from_fn(|u| tree(a[u].0)))
    }
}

/// Rows `a .. a + w` of `src` (width `d`) as f32: the rows themselves for f32, else widened
/// into `buf`.
///
/// # Safety
///
/// `src` readable for rows `a .. a + w`; `buf` writable for `w * d` floats; ISA available.
#[inline(always)]
unsafe fn tile<L: Lanes>(src: KvPtr, a: usize, w: usize, d: usize, buf: *mut f32) -> *const f32 {
    match src {
        KvPtr::F32(p) => {
            // SAFETY: row `a` is inside `src` (caller contract).
            unsafe { p.add(a * d) }
        }
        KvPtr::F16(p) => {
            let n = w * d;
            // SAFETY: elements `a * d .. a * d + n` are readable and `buf` holds `n` floats
            // (caller contract); ISA available.
            unsafe {
                let p = p.add(a * d);
                let mut i = 0;
                while i + 8 <= n {
                    L::load_f16(p.add(i)).store(buf.add(i));
                    i += 8;
                }
                while i < n {
                    *buf.add(i) = half::f16::from_bits(*p.add(i)).to_f32();
                    i += 1;
                }
            }
            buf
        }
    }
}

/// Runs `b` (see the module docs) with lanes `L`: unnormalized outputs and `(m, l)` per
/// vector. A vector whose row sees no key in `clip` gets `m = -inf`, `l = 0` and its output is
/// not written.
///
/// # Safety
///
/// `L`'s ISA available; every vector's `q` readable and `out` writable for `d` floats; keys
/// and values readable for every position any row sees; `ml` and `scratch` as documented on
/// [`Block`]; no output overlaps an input or the scratch.
#[inline(always)]
pub(crate) unsafe fn run<L: Lanes>(b: &Block) {
    let (d, heads) = (b.d, b.heads);
    let nv = b.rows * heads;
    // SAFETY: offsets stay inside the buffers of the caller contract (whole body): vector
    // `(r, h)` at `r * row_stride + h * d`, `ml[0 .. 2 nv]`, scratch `nv * KT` scores, `nv`
    // alphas, then two tiles of `KT * d` floats; key rows come from tiles of rows some vector
    // sees.
    unsafe {
        let (m, l) = (b.ml, b.ml.add(nv));
        let scores = b.scratch;
        let alphas = b.scratch.add(nv * KT);
        // Only an f16 cache uses (and has) the widening buffers.
        let kbuf = alphas.wrapping_add(nv);
        let vbuf = kbuf.wrapping_add(KT * d);
        let (mut kmin, mut kmax) = (usize::MAX, 0);
        for r in 0..b.rows {
            let range = b.range(r);
            for h in 0..heads {
                *m.add(r * heads + h) = f32::NEG_INFINITY;
                *l.add(r * heads + h) = 0.0;
            }
            if range.start < range.end {
                kmin = kmin.min(range.start);
                kmax = kmax.max(range.end);
                for h in 0..heads {
                    let o = b.out.add(r * b.row_stride + h * d);
                    for i in 0..d {
                        *o.add(i) = 0.0;
                    }
                }
            }
        }
        if kmin >= kmax {
            return;
        }
        let mut a = kmin / KT * KT;
        let esize = match b.keys {
            KvPtr::F32(_) => 4,
            KvPtr::F16(_) => 2,
        };
        let base = |p: KvPtr| match p {
            KvPtr::F32(p) => p.cast::<u8>(),
            KvPtr::F16(p) => p.cast::<u8>(),
        };
        let (kb, vb) = (base(b.keys), base(b.values));
        // The key and value rows of the tile at `t` (up to `kmax`), one cache line at a time:
        // decode reads the cache from memory once, so keep those loads in flight.
        let prefetch_tile = |t: usize| {
            let mut off = t * d * esize;
            let end = (t + KT).min(kmax) * d * esize;
            while off < end {
                L::prefetch(kb.wrapping_add(off));
                L::prefetch(vb.wrapping_add(off));
                off += 64;
            }
        };
        // The first tile before any work (at short depth it is the whole call, which otherwise
        // waits on its demand loads; docs/perf/notes-kernels.md), then each next tile while
        // the current one is computed.
        prefetch_tile(a);
        while a < kmax {
            let w = (a + KT).min(kmax) - a;
            prefetch_tile(a + KT);
            let kt = tile::<L>(b.keys, a, w, d, kbuf);
            let vt = tile::<L>(b.values, a, w, d, vbuf);
            for r in 0..b.rows {
                let range = b.range(r);
                let (rl, rh) = (range.start.max(a) - a, range.end.min(a + w).saturating_sub(a));
                if range.start >= range.end || rl >= rh {
                    continue;
                }
                let v0 = r * heads;
                let qr = b.q.add(r * b.row_stride);
                L::qk_heads(qr, heads, kt, d, rl, rh, b.scale, scores.add(v0 * KT));
                for v in v0..v0 + heads {
                    let s = scores.add(v * KT);
                    *alphas.add(v) = softmax_tile::<L>(s, rl, rh, m.add(v), l.add(v));
                }
                let mut h = 0;
                while h < heads {
                    let mv = (heads - h).min(4);
                    let v = r * heads + h;
                    let (p, al) = (scores.add(v * KT), alphas.add(v));
                    let o = b.out.add(r * b.row_stride + h * d);
                    match mv {
                        4 => L::pv_vectors::<4>(p, al, o, vt, d, rl, rh),
                        3 => L::pv_vectors::<3>(p, al, o, vt, d, rl, rh),
                        2 => L::pv_vectors::<2>(p, al, o, vt, d, rl, rh),
                        _ => L::pv_vectors::<1>(p, al, o, vt, d, rl, rh),
                    }
                    h += mv;
                }
            }
            a += KT;
        }
    }
}

/// Scores of one vector against tile keys `rl .. rh` into `s[rl .. rh]`.
///
/// # Safety
///
/// As [`run`]: `q` readable for `d`, `kt` for `rh * d` floats, `s` writable for `rh`.
#[inline(always)]
pub(crate) unsafe fn qk<L: Lanes>(
    q: *const f32,
    kt: *const f32,
    d: usize,
    rl: usize,
    rh: usize,
    scale: f32,
    s: *mut f32,
) {
    let main = d / 8 * 8;
    // SAFETY: loads inside `q` (`c + 8 <= main <= d`) and inside key rows `j < rh`; stores
    // inside `s[..rh]` (caller contract).
    unsafe {
        let tail = |k: *const f32| {
            let mut t = 0f32;
            for i in main..d {
                t += *q.add(i) * *k.add(i);
            }
            t
        };
        let scale_v = L::splat(scale);
        let mut j = rl;
        while j + 8 <= rh {
            let mut acc = [L::zero(); 8];
            let mut c = 0;
            while c < main {
                let qv = L::load(q.add(c));
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = a.add(qv.mul(L::load(kt.add((j + u) * d + c))));
                }
                c += 8;
            }
            let mut tails = [0f32; 8];
            if main < d {
                for (u, t) in tails.iter_mut().enumerate() {
                    *t = tail(kt.add((j + u) * d));
                }
            }
            L::sum8(&acc).add(L::load(tails.as_ptr())).mul(scale_v).store(s.add(j));
            j += 8;
        }
        while j < rh {
            let k = kt.add(j * d);
            let mut acc = L::zero();
            let mut c = 0;
            while c < main {
                acc = acc.add(L::load(q.add(c)).mul(L::load(k.add(c))));
                c += 8;
            }
            *s.add(j) = (tree(acc.to_array()) + tail(k)) * scale;
            j += 1;
        }
    }
}

/// The online-softmax step of one vector over tile positions `rl .. rh` of its scores `s`:
/// turns them into `p` (0 elsewhere in the 8-aligned span that covers them), updates `*m` and
/// `*l`, and returns `α`.
///
/// # Safety
///
/// As [`run`]: `s` writable for `rh.next_multiple_of(8) <= KT` floats.
#[inline(always)]
unsafe fn softmax_tile<L: Lanes>(
    s: *mut f32,
    rl: usize,
    rh: usize,
    m: *mut f32,
    l: *mut f32,
) -> f32 {
    let end = rh.next_multiple_of(8);
    let start = rl / 8 * 8;
    // SAFETY: `s[start .. end]` with `end <= KT` (caller contract); `m`, `l` valid.
    unsafe {
        for j in (start..rl).chain(rh..end) {
            *s.add(j) = f32::NEG_INFINITY;
        }
        let mut mx = L::splat(f32::NEG_INFINITY);
        let mut j = start;
        while j < end {
            mx = mx.max(L::load(s.add(j)));
            j += 8;
        }
        let mt = mx.to_array().iter().copied().fold(f32::NEG_INFINITY, maxps);
        let m_old = *m;
        let m_new = maxps(m_old, mt);
        let alpha = exp(m_old - m_new);
        let mv = L::splat(m_new);
        j = start;
        while j < end {
            L::load(s.add(j)).sub(mv).exp().store(s.add(j));
            j += 8;
        }
        for j in (start..rl).chain(rh..end) {
            *s.add(j) = 0.0;
        }
        let mut plane = L::zero();
        j = start;
        while j < end {
            plane = plane.add(L::load(s.add(j)));
            j += 8;
        }
        *m = m_new;
        *l = *l * alpha + tree(plane.to_array());
        alpha
    }
}

/// `acc = acc * α` (unless `α == 1`), then `acc += p_j * v_j` for `j` in `rl .. rh`, for `MV`
/// vectors: consecutive heads of one row (scores `KT` floats apart from `p`, alphas from `al`,
/// outputs `d` floats apart from `o`).
///
/// # Safety
///
/// As [`run`].
#[inline(always)]
pub(crate) unsafe fn pv<L: Lanes, const MV: usize>(
    p: *const f32,
    al: *const f32,
    o: *mut f32,
    vt: *const f32,
    d: usize,
    rl: usize,
    rh: usize,
) {
    // SAFETY: outputs `o + u * d + c` with `c < d`, value rows `j < rh` of the tile, scores
    // `p + u * KT + j` (caller contract).
    unsafe {
        let alpha: [f32; MV] = core::array::from_fn(|u| *al.add(u));
        let mut c = 0;
        while c + 16 <= d {
            let mut acc: [[L; 2]; MV] = [[L::zero(); 2]; MV];
            for (u, a) in acc.iter_mut().enumerate() {
                let out = o.add(u * d + c);
                *a = [L::load(out), L::load(out.add(8))];
                if alpha[u] != 1.0 {
                    let av = L::splat(alpha[u]);
                    *a = [a[0].mul(av), a[1].mul(av)];
                }
            }
            for j in rl..rh {
                let vr = vt.add(j * d + c);
                let (v0, v1) = (L::load(vr), L::load(vr.add(8)));
                for (u, a) in acc.iter_mut().enumerate() {
                    let pj = L::splat(*p.add(u * KT + j));
                    *a = [a[0].add(pj.mul(v0)), a[1].add(pj.mul(v1))];
                }
            }
            for (u, a) in acc.iter().enumerate() {
                let out = o.add(u * d + c);
                a[0].store(out);
                a[1].store(out.add(8));
            }
            c += 16;
        }
        while c + 8 <= d {
            let mut acc: [L; MV] = [L::zero(); MV];
            for (u, a) in acc.iter_mut().enumerate() {
                *a = L::load(o.add(u * d + c));
                if alpha[u] != 1.0 {
                    *a = a.mul(L::splat(alpha[u]));
                }
            }
            for j in rl..rh {
                let v0 = L::load(vt.add(j * d + c));
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = a.add(L::splat(*p.add(u * KT + j)).mul(v0));
                }
            }
            for (u, a) in acc.iter().enumerate() {
                a.store(o.add(u * d + c));
            }
            c += 8;
        }
        while c < d {
            for (u, &au) in alpha.iter().enumerate() {
                let out = o.add(u * d + c);
                let mut acc = *out;
                if au != 1.0 {
                    acc *= au;
                }
                for j in rl..rh {
                    acc += *p.add(u * KT + j) * *vt.add(j * d + c);
                }
                *out = acc;
            }
            c += 1;
        }
    }
}

/// `out = out * (1 / l)` for the `rows × heads` vectors of `b` whose `l` is not 0.
///
/// # Safety
///
/// As [`run`] (after it).
pub(crate) unsafe fn finalize(b: &Block) {
    let nv = b.rows * b.heads;
    // SAFETY: as [`run`].
    unsafe {
        for r in 0..b.rows {
            for h in 0..b.heads {
                let l = *b.ml.add(nv + r * b.heads + h);
                if l == 0.0 {
                    continue;
                }
                let inv = 1.0 / l;
                let o = b.out.add(r * b.row_stride + h * b.d);
                for i in 0..b.d {
                    *o.add(i) *= inv;
                }
            }
        }
    }
}

/// Folds segment `(mb, lb, ob)` into the running `(ma, la, oa)` (`d` floats each):
/// `m = max(ma, mb)`, `a = exp(ma - m)`, `b = exp(mb - m)`, `l = la * a + lb * b`,
/// `o = oa * a + ob * b`. A segment with `lb == 0` (no keys) changes nothing.
pub(crate) fn merge(ma: &mut f32, la: &mut f32, oa: &mut [f32], mb: f32, lb: f32, ob: &[f32]) {
    if lb == 0.0 {
        return;
    }
    if *la == 0.0 {
        (*ma, *la) = (mb, lb);
        oa.copy_from_slice(ob);
        return;
    }
    let m = maxps(*ma, mb);
    let (a, b) = (exp(*ma - m), exp(mb - m));
    *ma = m;
    *la = *la * a + lb * b;
    for (x, &y) in oa.iter_mut().zip(ob) {
        *x = *x * a + y * b;
    }
}

/// [`run`] with the portable lanes.
///
/// # Safety
///
/// As [`run`].
pub(crate) unsafe fn run_portable(b: &Block) {
    // SAFETY: caller contract; portable lanes need no ISA.
    unsafe { run::<Portable>(b) }
}
