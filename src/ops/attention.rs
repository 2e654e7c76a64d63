//! Attention over a KV cache: grouped, tiled, online-softmax ([`attention_group`]; the
//! arithmetic is `kernels::flash`'s, with AVX2 and AVX-512 bodies picked with the kernel tier,
//! bit-identical to the portable code), the per-head reference ([`attention_head`]: all
//! scores, softmax, weighted sum), and a decoder layer's attention scheduled over an executor
//! ([`attention_layer`], in `attention/layer.rs`).

mod layer;

pub use layer::{
    attention_decode, attention_layer, decode_attention_floats, layer_attention_floats, DecodeRow,
    DecodeShape, LayerAttention, ATT_PARTS, KV_SEGMENT, ROW_TILE,
};

use super::activation::softmax;
use super::vector::{axpy, dot};
use crate::kernels::flash::{self, Block, KvPtr};
use crate::kernels::{self, Kernels};

/// The keys or the values of one KV head: position `t` at elements `[t * d, (t + 1) * d)`.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// IEEE binary16 elements, as bit patterns (widened exactly when read).
    F16(&'a [u16]),
}

impl<'a> KvRows<'a> {
    /// Elements `range` (e.g. one KV head's rows out of a layer's).
    ///
    /// # Panics
    ///
    /// If `range` is out of bounds.
    pub fn slice(&self, range: core::ops::Range<usize>) -> KvRows<'a> {
        match *self {
            KvRows::F32(s) => KvRows::F32(&s[range]),
            KvRows::F16(s) => KvRows::F16(&s[range]),
        }
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            KvRows::F32(s) => s.len(),
            KvRows::F16(s) => s.len(),
        }
    }

    /// Whether no element is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hints that the elements will be read soon: one prefetch per 64-byte line on x86_64
    /// (nothing elsewhere). Changes no value.
    pub(crate) fn prefetch(&self) {
        let (p, bytes) = match self {
            KvRows::F32(s) => (s.as_ptr().cast::<u8>(), core::mem::size_of_val(*s)),
            KvRows::F16(s) => (s.as_ptr().cast::<u8>(), core::mem::size_of_val(*s)),
        };
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let mut o = 0;
            while o < bytes {
                // SAFETY: a prefetch is a hint that never faults (the address is inside the
                // slice anyway); every x86_64 CPU has SSE (even where a target compiles
                // without SSE registers, as x86_64-unknown-none).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o).cast()) };
                o += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, bytes);
    }

    pub(crate) fn ptr(&self) -> KvPtr {
        match self {
            KvRows::F32(s) => KvPtr::F32(s.as_ptr()),
            KvRows::F16(s) => KvPtr::F16(s.as_ptr()),
        }
    }
}

/// One [`attention_group`] call: `rows` consecutive query rows × `heads` query heads that
/// share one KV head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupShape {
    /// Query rows (positions `pos0 .. pos0 + rows`); at least 1.
    pub rows: usize,
    /// Query heads sharing the KV head; at least 1.
    pub heads: usize,
    /// Floats per head (`d`); at least 1.
    pub head_dim: usize,
    /// Floats from one query row to the next in `q` and `out` (at least `heads * head_dim`).
    pub row_stride: usize,
    /// Position of the first query row: row `r` sees keys `..= pos0 + r` (causal).
    pub pos0: usize,
    /// Sliding window: row `r` sees only the last `w` positions, its own included.
    pub window: Option<usize>,
    /// Score scale (`1 / sqrt(head_dim)` for plain attention).
    pub scale: f32,
}

impl GroupShape {
    /// Floats of scratch [`attention_group`] needs for this shape.
    pub fn scratch_floats(&self) -> usize {
        self.rows * self.heads * 2
            + flash::scratch_floats(self.rows * self.heads, self.head_dim, true)
    }

    /// Floats `q` and `out` must hold: `(rows - 1) * row_stride + heads * head_dim`.
    pub fn io_floats(&self) -> usize {
        (self.rows.max(1) - 1) * self.row_stride + self.heads * self.head_dim
    }
}

/// Runs `b` on `k`'s attention body, else the active tier's.
///
/// # Safety
///
/// As `kernels::flash::run`; `k`'s ISA available (true of every table [`kernels::table`]
/// returns).
pub(crate) unsafe fn run_block(k: Option<&Kernels>, b: &Block) {
    let f = match k {
        Some(k) => k.attention,
        None => {
            kernels::active().map_or(flash::run_portable as kernels::AttentionFn, |k| k.attention)
        }
    };
    // SAFETY: caller contract.
    unsafe { f(b) }
}

/// Causal scaled dot-product attention of `shape.rows × shape.heads` query vectors against one
/// KV head: `out_v = Σ_t softmax_t(scale · q_v·k_t) · v_t` over the keys row `r` sees (see
/// [`GroupShape`]), computed in tiles of keys with a running max and sum (online softmax), each
/// key and value row read once for all the vectors. Vector `(r, h)` is
/// `q[r * row_stride + h * head_dim ..][..head_dim]`, its output the same range of `out`
/// (other elements of `out` are left alone).
///
/// Each vector's result depends only on its own query and key range (never on the other rows
/// and heads of the call), and is bit-identical on every kernel tier. It equals
/// [`crate::ops::attention_head`] to rounding (a different summation order and `exp`).
///
/// # Panics
///
/// If a dimension is 0, `row_stride < heads * head_dim`, `q` or `out` hold fewer than
/// [`GroupShape::io_floats`], `keys` / `values` fewer than `(pos0 + rows) * head_dim`
/// elements, or `scratch` fewer than [`GroupShape::scratch_floats`].
pub fn attention_group(
    shape: &GroupShape,
    q: &[f32],
    keys: KvRows<'_>,
    values: KvRows<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    attention_group_inner(None, shape, q, keys, values, scratch, out)
}

/// [`attention_group`] with the kernels of `k` (e.g. [`kernels::table`]`(Isa::Scalar)`, the
/// portable oracle) instead of the active ones.
///
/// # Panics
///
/// As [`attention_group`].
pub fn attention_group_on(
    k: &Kernels,
    shape: &GroupShape,
    q: &[f32],
    keys: KvRows<'_>,
    values: KvRows<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    attention_group_inner(Some(k), shape, q, keys, values, scratch, out)
}

fn attention_group_inner(
    k: Option<&Kernels>,
    shape: &GroupShape,
    q: &[f32],
    keys: KvRows<'_>,
    values: KvRows<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let s = shape;
    assert!(s.rows > 0 && s.heads > 0 && s.head_dim > 0, "attention_group: empty shape");
    assert!(s.row_stride >= s.heads * s.head_dim, "attention_group: row_stride too small");
    let io = s.io_floats();
    assert!(q.len() >= io && out.len() >= io, "attention_group: q / out too short");
    let kv = (s.pos0 + s.rows) * s.head_dim;
    assert!(keys.len() >= kv && values.len() >= kv, "attention_group: cache too short");
    assert!(scratch.len() >= s.scratch_floats(), "attention_group: scratch too short");
    let nv = s.rows * s.heads;
    let (ml, rest) = scratch.split_at_mut(2 * nv);
    let b = Block {
        q: q.as_ptr(),
        out: out.as_mut_ptr(),
        row_stride: s.row_stride,
        rows: s.rows,
        heads: s.heads,
        d: s.head_dim,
        keys: keys.ptr(),
        values: values.ptr(),
        pos0: s.pos0,
        window: s.window.unwrap_or(usize::MAX).max(1),
        clip: (0, usize::MAX),
        scale: s.scale,
        ml: ml.as_mut_ptr(),
        scratch: rest.as_mut_ptr(),
    };
    // SAFETY: the asserts above cover every offset `run` touches: vectors inside `q` / `out`,
    // keys below `pos0 + rows`, `ml` and the scratch sized by `scratch_floats`; `out` is a
    // unique borrow, so it overlaps nothing.
    unsafe {
        run_block(k, &b);
        flash::finalize(&b);
    }
}

/// Scaled dot-product attention for one query head over `n` cached positions:
/// `out = Σ_t softmax_t(scale · q·k_t) · v_t`.
///
/// `keys` and `values` hold positions `0..n` of one KV head, `q.len()` floats each, position
/// `t` at `[t * d, (t + 1) * d)`; `scores` is scratch of at least `n` floats. Positions past
/// `n` are not read (causality is the caller's choice of `n`). With an AVX2 kernel tier
/// active the two loops over the cache run as AVX2 code with the same arithmetic (bit-identical
/// results).
///
/// # Panics
///
/// If `n == 0`, `out.len() != q.len()`, `keys`/`values` hold fewer than `n * q.len()` floats,
/// or `scores` fewer than `n`.
pub fn attention_head(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    n: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = q.len();
    assert!(n > 0 && out.len() == d, "attention_head: shapes");
    assert!(keys.len() >= n * d && values.len() >= n * d && scores.len() >= n);
    let scores = &mut scores[..n];
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
    if kernels::active().is_ok_and(|k| k.isa().has_avx2()) {
        // SAFETY: the active table is an AVX2 tier, so the CPU has AVX2; `keys` and `values`
        // hold `n * d` floats (asserted above). Same arithmetic as the loops below.
        unsafe {
            kernels::attention::scores(q, keys, scale, scores);
            kernels::attention::softmax(scores);
            kernels::attention::weighted_sum(scores, values, out);
        }
        return;
    }
    for (t, s) in scores.iter_mut().enumerate() {
        *s = dot(q, &keys[t * d..(t + 1) * d]) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    for (t, &p) in scores.iter().enumerate() {
        axpy(p, &values[t * d..(t + 1) * d], out);
    }
}

/// An encoder's bidirectional attention of one (sequence, head) item through the active
/// kernels' own body ([`crate::kernels::BidirFn`]; the AVX-512 tiers have one): the same
/// function as [`attention_head`] for every query row over all the item's keys, computed as two
/// small matrix products around the softmax, so the bits differ from [`attention_head`]'s by
/// rounding (fused multiply-adds, another summation order, Cephes' exponential).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BidirAttention(kernels::BidirFn);

impl BidirAttention {
    /// The active kernels' body, when they have one that takes heads of `d` floats and
    /// sequences of up to `longest` tokens (`d` a multiple of 16 up to
    /// [`kernels::BIDIR_MAX_D`], `longest` at most [`kernels::BIDIR_MAX_LEN`]).
    pub(crate) fn for_shape(d: usize, longest: usize) -> Option<Self> {
        let fits = d > 0 && d % 16 == 0 && d <= kernels::BIDIR_MAX_D;
        let fits = fits && longest <= kernels::BIDIR_MAX_LEN;
        kernels::active().ok()?.bidir.filter(|_| fits).map(BidirAttention)
    }

    /// Row `j < len` of the output at `out + j * stride` = attention of query row `q + j *
    /// stride` over the key and value rows `k`, `v` `+ i * stride` (`i < len`), scores scaled
    /// by `scale`; `kt` is scratch of at least `d * len` floats.
    ///
    /// # Safety
    ///
    /// `1 <= len <= longest` and `d` as given to [`BidirAttention::for_shape`]; the `len` rows
    /// of `d` floats at `q`, `k`, `v` readable, those at `out` writable and overlapping no
    /// input nor `kt`, and no other thread touching them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn run(
        &self,
        q: *const f32,
        k: *const f32,
        v: *const f32,
        out: *mut f32,
        stride: usize,
        len: usize,
        d: usize,
        scale: f32,
        kt: &mut [f32],
    ) {
        assert!(kt.len() >= d * len, "BidirAttention::run: scratch too short");
        let b = kernels::BidirHead { q, k, v, out, stride, len, d, scale, kt: kt.as_mut_ptr() };
        // SAFETY: the body came from the active table (its ISA is available); the rows, `kt`
        // and the bounds as the caller contract and the assert above give them.
        unsafe { (self.0)(&b) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::close;

    #[test]
    fn attention_head_by_value() {
        // Two positions, d = 2: scores = [q·k0, q·k1] * scale.
        let q = [1.0f32, 0.0];
        let keys = [0.0f32, 1.0, 2.0, 0.0];
        let values = [10.0f32, 0.0, 0.0, 20.0];
        let mut scores = [0f32; 4];
        let mut out = [0f32; 2];
        attention_head(&q, &keys, &values, 2, 0.5, &mut scores, &mut out);
        let (p0, p1) = (1.0 / (1.0 + 1f32.exp()), 1f32.exp() / (1.0 + 1f32.exp()));
        assert!(close(out[0], 10.0 * p0, 1e-6) && close(out[1], 20.0 * p1, 1e-6), "{out:?}");
        // n = 1 attends to position 0 only.
        attention_head(&q, &keys, &values, 1, 0.5, &mut scores, &mut out);
        assert_eq!(out, [10.0, 0.0]);
    }

    #[test]
    fn bidir_attention_matches_attention_head() {
        // Where the active kernels have a bidirectional body (AVX-512), every query row of an
        // item must be `attention_head` over the item's keys, to rounding: two heads side by
        // side in rows `2 d` apart, row counts around the 4-row blocks and 16 / 32-key
        // vectors, and an offset that makes every score very negative (the row maxima).
        let Some(f) = BidirAttention::for_shape(16, kernels::BIDIR_MAX_LEN) else {
            return;
        };
        for d in [16usize, 32, 48, 64] {
            assert!(BidirAttention::for_shape(d, kernels::BIDIR_MAX_LEN).is_some());
            for len in [1usize, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 70, 128, 512] {
                for shift in [0.0f32, -40.0] {
                    let st = 2 * d;
                    let g = |i: usize, s: f32| (i as f32 * 0.377 + s).sin() * 1.5;
                    let q: alloc::vec::Vec<f32> = (0..len * st).map(|i| g(i, 0.1)).collect();
                    let k: alloc::vec::Vec<f32> =
                        (0..len * st).map(|i| g(i, 1.3) + shift * (i % 2) as f32).collect();
                    let v: alloc::vec::Vec<f32> = (0..len * st).map(|i| g(i, 2.9)).collect();
                    let mut out = alloc::vec![f32::NAN; len * st];
                    let mut kt = alloc::vec![0f32; d * len];
                    let scale = 1.0 / (d as f32).sqrt();
                    for head in 0..2 {
                        let o = head * d;
                        // SAFETY: `len` rows of `d` floats, `st` apart, from `o` inside each
                        // buffer; `out` and `kt` are distinct allocations.
                        unsafe {
                            let (qp, kp, vp) = (q.as_ptr().add(o), k.as_ptr().add(o), v.as_ptr());
                            let op = out.as_mut_ptr().add(o);
                            f.run(qp, kp, vp.add(o), op, st, len, d, scale, &mut kt);
                        }
                    }
                    let head_rows = |m: &[f32], o: usize| -> alloc::vec::Vec<f32> {
                        (0..len).flat_map(|j| m[j * st + o..j * st + o + d].to_vec()).collect()
                    };
                    let mut scores = alloc::vec![0f32; len];
                    let mut want = alloc::vec![0f32; d];
                    for head in 0..2 {
                        let o = head * d;
                        let (keys, values) = (head_rows(&k, o), head_rows(&v, o));
                        for j in 0..len {
                            let qr = &q[j * st + o..j * st + o + d];
                            attention_head(qr, &keys, &values, len, scale, &mut scores, &mut want);
                            for (c, &w) in want.iter().enumerate() {
                                let got = out[j * st + o + c];
                                assert!(
                                    close(got, w, 2e-5),
                                    "d {d} len {len} row {j}: {got} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // Shapes without a body.
        assert!(BidirAttention::for_shape(8, 16).is_none());
        assert!(BidirAttention::for_shape(80, 16).is_none());
        assert!(BidirAttention::for_shape(32, kernels::BIDIR_MAX_LEN + 1).is_none());
    }

    #[test]
    fn attention_head_is_bit_identical_to_the_portable_loops() {
        // On an AVX2 tier `attention_head` runs the SIMD loops; they must give the bits of
        // `dot` / `softmax` / `axpy` (on other machines this compares the portable path with
        // itself).
        for d in [1usize, 7, 8, 13, 32, 64, 80, 128] {
            for n in [1usize, 3, 4, 5, 17, 64] {
                let f = |i: usize, s: f32| (i as f32 * 0.731 + s).sin() * 2.5;
                let q: alloc::vec::Vec<f32> = (0..d).map(|i| f(i, 0.3)).collect();
                let keys: alloc::vec::Vec<f32> = (0..n * d).map(|i| f(i, 1.1)).collect();
                let values: alloc::vec::Vec<f32> = (0..n * d).map(|i| f(i, 2.7)).collect();
                let mut scores = alloc::vec![0f32; n];
                let mut out = alloc::vec![0f32; d];
                attention_head(&q, &keys, &values, n, 0.125, &mut scores, &mut out);
                let mut want_s: alloc::vec::Vec<f32> =
                    (0..n).map(|t| dot(&q, &keys[t * d..(t + 1) * d]) * 0.125).collect();
                softmax(&mut want_s);
                let mut want = alloc::vec![0f32; d];
                for (t, &p) in want_s.iter().enumerate() {
                    axpy(p, &values[t * d..(t + 1) * d], &mut want);
                }
                let bits =
                    |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<alloc::vec::Vec<_>>();
                assert_eq!(bits(&scores), bits(&want_s), "scores d={d} n={n}");
                assert_eq!(bits(&out), bits(&want), "output d={d} n={n}");
            }
        }
    }
}
