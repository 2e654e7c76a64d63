//! The attention of one decoder layer: every query head of a run of query rows against a KV
//! cache, split into work items across an executor ([`attention_layer`]). Three schedules:
//!
//! - per head ([`LayerAttention::per_head`], the test oracle): item = one query head and one
//!   of [`ATT_PARTS`] interleaved parts of the query rows, each with its own score row,
//!   running [`attention_head`](super::attention_head);
//! - tiled prefill (more than one row): item = one KV head × [`ROW_TILE`] query rows with all
//!   the query heads that share the KV head, running the `kernels::flash` block over them;
//! - tiled decode (one row): item = one KV head × one segment of [`KV_SEGMENT`] cache
//!   positions; the segments' running max, sum and output are merged in segment order
//!   afterwards.
//!
//! Each output element is computed by one item in a fixed order, and the splits depend on
//! positions only, so results are bit-identical for every executor, thread count and schedule
//! (`docs/architecture.md`, "Threads and schedules").

use core::ops::Range;

use super::{attention_head, run_block, KvRows};
use crate::exec::{Executor, Schedule};
use crate::kernels::{self, flash};

/// Attention below this many multiply-adds runs inline (dispatch would cost more).
const PAR_ATTENTION_WORK: usize = 1 << 15;

/// The per-head schedule splits each head's query rows into this many interleaved parts (row
/// `t` in part `t % ATT_PARTS`), so that heads × parts items balance across threads; each part
/// has its own score row.
pub const ATT_PARTS: usize = 4;

/// Tiled prefill: query rows per work item (with all the query heads of one KV head), so each
/// key and value row is read once per `ROW_TILE × group` vectors.
pub const ROW_TILE: usize = 4;

/// Tiled decode: cache positions per work item. The query heads of one KV head walk each
/// segment `[s * KV_SEGMENT, (s + 1) * KV_SEGMENT)` separately; the segments' running max, sum
/// and output are merged in segment order. The split depends only on positions, so the results
/// are the same for every thread count.
pub const KV_SEGMENT: usize = 256;

/// One [`attention_layer`] call: `rows` query rows at positions `pos0 ..` of `heads` query
/// heads against `kv_heads` KV heads (query head `h` reads KV head `h / (heads / kv_heads)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerAttention {
    /// Query rows (positions `pos0 .. pos0 + rows`); at least 1.
    pub rows: usize,
    /// Position of the first query row: row `t` sees keys `..= pos0 + t` (causal).
    pub pos0: usize,
    /// Query heads; a multiple of `kv_heads`.
    pub heads: usize,
    /// KV heads; at least 1.
    pub kv_heads: usize,
    /// Floats per head; at least 1.
    pub head_dim: usize,
    /// Positions each KV head holds in the cache (at least `pos0 + rows`).
    pub capacity: usize,
    /// Sliding window: row `t` sees only the last `w` positions, its own included.
    pub window: Option<usize>,
    /// Score scale (`1 / sqrt(head_dim)` for plain attention).
    pub scale: f32,
    /// Run the per-head reference schedule instead of the tiled kernel (f32 cache only).
    pub per_head: bool,
}

/// Floats of scratch [`attention_layer`] needs for `rows` query rows with `positions` cached
/// positions (the query rows' included): the larger of what a prefill of `rows` rows and a
/// decode step need, so one size serves both; `None` if it overflows. `f16`: the cache holds
/// f16 values (the tiled kernel widens a tile of them into scratch).
pub fn layer_attention_floats(
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rows: usize,
    positions: usize,
    per_head: bool,
    f16: bool,
) -> Option<usize> {
    let g = heads / kv_heads.max(1);
    if per_head {
        return heads.checked_mul(ATT_PARTS.min(rows))?.checked_mul(positions);
    }
    let tile = ROW_TILE.min(rows);
    let item = |v: usize| v.checked_mul(2)?.checked_add(flash::scratch_floats(v, head_dim, f16));
    let prefill = kv_heads.checked_mul(rows.div_ceil(tile))?.checked_mul(item(tile * g)?)?;
    let segs = positions.div_ceil(KV_SEGMENT);
    let decode = kv_heads.checked_mul(segs)?.checked_mul(item(g)?.checked_add(g * head_dim)?)?;
    Some(prefill.max(decode))
}

/// A raw pointer shared by the items of one `parallel_for`; each item touches disjoint
/// elements.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
// SAFETY: only used to write disjoint ranges from different items of one parallel_for.
unsafe impl Send for SharedMut {}
// SAFETY: as above.
unsafe impl Sync for SharedMut {}

/// Causal scaled dot-product attention of one layer, every query head of `s.rows` rows:
/// `out[t, h] = Σ_j softmax_j(scale · q[t, h]·k_j) · v_j` over the keys row `t` sees, with the
/// schedule the module docs describe, on `exec` when the work is large enough.
///
/// `q` and `out` hold `rows × heads × head_dim` floats, row-major (row, head, element).
/// `keys` and `values` hold the layer's cache, `[kv_head][position][head_dim]` with
/// `capacity` positions per KV head; `scratch` at least [`layer_attention_floats`]`(heads,
/// kv_heads, head_dim, rows, pos0 + rows, per_head, keys are f16)` floats. Allocates nothing.
///
/// # Panics
///
/// If a dimension is 0, `heads` is not a multiple of `kv_heads`, `pos0 + rows > capacity`,
/// a slice is shorter than the above, or `per_head` is set with an f16 cache.
pub fn attention_layer(
    exec: &dyn Executor,
    s: &LayerAttention,
    q: &[f32],
    keys: KvRows<'_>,
    values: KvRows<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (n, p0, nh, nkv, hd) = (s.rows, s.pos0, s.heads, s.kv_heads, s.head_dim);
    assert!(n > 0 && nh > 0 && nkv > 0 && hd > 0, "attention_layer: empty shape");
    assert_eq!(nh % nkv, 0, "attention_layer: heads not a multiple of kv_heads");
    let span = p0 + n;
    assert!(span <= s.capacity, "attention_layer: rows past the cache");
    let qd = nh * hd;
    assert!(q.len() >= n * qd && out.len() >= n * qd, "attention_layer: q / out too short");
    let head_len = s.capacity * hd;
    let kv_len = nkv * head_len;
    assert!(keys.len() >= kv_len && values.len() >= kv_len, "attention_layer: cache too short");
    let f16 = matches!(keys, KvRows::F16(_)) || matches!(values, KvRows::F16(_));
    let need = layer_attention_floats(nh, nkv, hd, n, span, s.per_head, f16);
    assert!(need.is_some_and(|f| scratch.len() >= f), "attention_layer: scratch too short");
    let groups = nh / nkv;
    let scale = s.scale;
    let window = s.window.unwrap_or(usize::MAX);
    let kern = kernels::active().ok();
    let work = nh * n * span * hd;
    let par = exec.threads() > 1 && work >= PAR_ATTENTION_WORK;
    let run = |items: usize, body: &(dyn Fn(Range<usize>) + Sync)| {
        if par {
            exec.parallel_for(0..items, Schedule::Grain(1), body);
        } else {
            body(0..items);
        }
    };
    let att = SharedMut(out.as_mut_ptr());
    let sc = SharedMut(scratch.as_mut_ptr());
    if s.per_head {
        let (KvRows::F32(keys), KvRows::F32(values)) = (keys, values) else {
            panic!("attention_layer: the per-head schedule needs an f32 cache")
        };
        let parts = ATT_PARTS.min(n);
        // Item `i` is head `i / parts`, query rows `t ≡ i % parts (mod parts)`.
        run(nh * parts, &|range: Range<usize>| {
            let (att, sc) = (att, sc);
            for i in range {
                let (hq, part) = (i / parts, i % parts);
                let g = hq / groups;
                let (keys, values) = (&keys[g * head_len..], &values[g * head_len..]);
                // SAFETY: item `i` owns `scratch[i * span .. (i + 1) * span]` (inside it:
                // `nh * parts * span` floats were asserted) and the output rows
                // `[t * qd + hq * hd, + hd)` of its query rows; items are disjoint, and
                // `scratch` and `out` outlive the loop.
                let sv = unsafe { core::slice::from_raw_parts_mut(sc.0.add(i * span), span) };
                for t in (part..n).step_by(parts) {
                    let at = t * qd + hq * hd;
                    // SAFETY: as above.
                    let o = unsafe { core::slice::from_raw_parts_mut(att.0.add(at), hd) };
                    let qv = &q[at..at + hd];
                    let qi = p0 + t;
                    let start = (qi + 1).saturating_sub(window);
                    let (ks, vs) = (&keys[start * hd..], &values[start * hd..]);
                    attention_head(qv, ks, vs, qi + 1 - start, scale, sv, o);
                }
            }
        });
    } else if n > 1 {
        // Item `i` is KV head `i / tiles`, query rows `ROW_TILE * (i % tiles) ..` with all
        // `groups` query heads of that KV head.
        let rows = ROW_TILE.min(n);
        let tiles = n.div_ceil(rows);
        let per = 2 * rows * groups + flash::scratch_floats(rows * groups, hd, f16);
        run(nkv * tiles, &|range: Range<usize>| {
            let (att, sc) = (att, sc);
            for i in range {
                let (g, t0) = (i / tiles, (i % tiles) * rows);
                let at = t0 * qd + g * groups * hd;
                // SAFETY: item `i` owns `scratch[i * per ..][..per]` (its `ml`, then its
                // kernel scratch; `nkv * tiles * per` floats were asserted) and the output
                // vectors of its rows and heads; items are disjoint; `q` and the cache are
                // only read; every key a row sees is below `pos0 + rows <= capacity`, inside
                // the KV head's `capacity * head_dim` elements.
                unsafe {
                    let ml = sc.0.add(i * per);
                    let b = flash::Block {
                        q: q.as_ptr().add(at),
                        out: att.0.add(at),
                        row_stride: qd,
                        rows: rows.min(n - t0),
                        heads: groups,
                        d: hd,
                        keys: keys.slice(g * head_len..(g + 1) * head_len).ptr(),
                        values: values.slice(g * head_len..(g + 1) * head_len).ptr(),
                        pos0: p0 + t0,
                        window,
                        clip: (0, usize::MAX),
                        scale,
                        ml,
                        scratch: ml.add(2 * rows * groups),
                    };
                    run_block(kern, &b);
                    flash::finalize(&b);
                }
            }
        });
    } else {
        // Decode: item `i` is KV head `i / segs`, cache segment `seg0 + i % segs` of
        // KV_SEGMENT positions, all `groups` query heads; each writes unnormalized partial
        // outputs into its scratch, merged below in order.
        let hi = p0 + 1;
        let lo = hi.saturating_sub(window);
        let seg0 = lo / KV_SEGMENT;
        let segs = (hi - 1) / KV_SEGMENT + 1 - seg0;
        let part = groups * hd;
        let per = part + 2 * groups + flash::scratch_floats(groups, hd, f16);
        run(nkv * segs, &|range: Range<usize>| {
            let partials = sc;
            for i in range {
                let (g, s) = (i / segs, seg0 + i % segs);
                // SAFETY: item `i` owns `scratch[i * per ..][..per]` (partial output, `ml`,
                // kernel scratch; `nkv * segs * per` floats were asserted, `segs` being at
                // most `span.div_ceil(KV_SEGMENT)`); items are disjoint; `q` and the cache
                // are only read; keys below `pos0 + 1 <= capacity`.
                unsafe {
                    let base = partials.0.add(i * per);
                    let b = flash::Block {
                        q: q.as_ptr().add(g * part),
                        out: base,
                        row_stride: qd,
                        rows: 1,
                        heads: groups,
                        d: hd,
                        keys: keys.slice(g * head_len..(g + 1) * head_len).ptr(),
                        values: values.slice(g * head_len..(g + 1) * head_len).ptr(),
                        pos0: p0,
                        window,
                        clip: (s * KV_SEGMENT, (s + 1) * KV_SEGMENT),
                        scale,
                        ml: base.add(part),
                        scratch: base.add(part + 2 * groups),
                    };
                    run_block(kern, &b);
                }
            }
        });
        // Merge each vector's segments in order, then normalize.
        for g in 0..nkv {
            for h in 0..groups {
                let o = &mut out[(g * groups + h) * hd..][..hd];
                let (mut m, mut lsum) = (f32::NEG_INFINITY, 0f32);
                for s in 0..segs {
                    let base = (g * segs + s) * per;
                    let ob = &scratch[base + h * hd..][..hd];
                    let (mb, lb) = (scratch[base + part + h], scratch[base + part + groups + h]);
                    flash::merge(&mut m, &mut lsum, o, mb, lb, ob);
                }
                let inv = 1.0 / lsum;
                o.iter_mut().for_each(|x| *x *= inv);
            }
        }
    }
}
