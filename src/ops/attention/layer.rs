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
//!   afterwards. [`attention_decode`] runs the decode rows of several sequences (each with
//!   its own cache) as one set of such items: one dispatch, and items enough to balance the
//!   threads, where a call per sequence would be one dispatch of `kv_heads` items each.
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
        let row = DecodeRow { row: 0, pos: p0, keys, values, capacity: s.capacity };
        let shape = DecodeShape { heads: nh, kv_heads: nkv, head_dim: hd, window: s.window, scale };
        attention_decode(exec, &shape, &[row], q, scratch, out);
    }
}

/// The query heads, KV heads, head width, window and scale of an [`attention_decode`] call
/// (as the fields of [`LayerAttention`] with the same names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeShape {
    /// Query heads; a multiple of `kv_heads`.
    pub heads: usize,
    /// KV heads; at least 1.
    pub kv_heads: usize,
    /// Floats per head; at least 1.
    pub head_dim: usize,
    /// Sliding window: a row sees only the last `w` positions, its own included.
    pub window: Option<usize>,
    /// Score scale (`1 / sqrt(head_dim)` for plain attention).
    pub scale: f32,
}

/// One query row of an [`attention_decode`] call: the next token of one sequence, against
/// that sequence's own cache.
#[derive(Clone, Copy, Debug)]
pub struct DecodeRow<'a> {
    /// Where the row's vectors are in `q` and `out`: from `row * heads * head_dim`.
    pub row: usize,
    /// The row's position: it sees the keys `..= pos` (the last `window` of them).
    pub pos: usize,
    /// The sequence's keys for this layer, `[kv_head][position][head_dim]` with `capacity`
    /// positions per KV head.
    pub keys: KvRows<'a>,
    /// The sequence's values, laid out as `keys`.
    pub values: KvRows<'a>,
    /// Positions per KV head in `keys` and `values` (more than `pos`).
    pub capacity: usize,
}

/// Floats of scratch one [`DecodeRow`] at position `pos` takes in [`attention_decode`]
/// (its work items' partial outputs and kernel scratch); `None` if it overflows. `f16`: the
/// cache holds f16 values.
pub fn decode_attention_floats(
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    pos: usize,
    f16: bool,
) -> Option<usize> {
    let g = heads / kv_heads.max(1);
    let segs = pos.checked_add(1)?.div_ceil(KV_SEGMENT);
    let per = decode_item_floats(g, head_dim, f16)?;
    kv_heads.checked_mul(segs)?.checked_mul(per)
}

/// Floats of one decode work item: partial output (`g * d`), running max and sum, kernel
/// scratch.
fn decode_item_floats(g: usize, d: usize, f16: bool) -> Option<usize> {
    g.checked_mul(d)?.checked_add(2 * g)?.checked_add(flash::scratch_floats(g, d, f16))
}

/// The first and the number of [`KV_SEGMENT`]s row `r` reads.
fn decode_segments(r: &DecodeRow<'_>, window: usize) -> (usize, usize) {
    let hi = r.pos + 1;
    let lo = hi.saturating_sub(window);
    let seg0 = lo / KV_SEGMENT;
    (seg0, (hi - 1) / KV_SEGMENT + 1 - seg0)
}

/// Attention of one decoder layer for single query rows of different sequences, each against
/// its own cache, as one set of work items on `exec`: what a decode step of several
/// sequences runs, where per-sequence [`attention_layer`] calls would each be a dispatch with
/// a few items (and, on two threads, three items as two rounds). Row `rows[i]` gets exactly
/// the bits [`attention_layer`] gives it alone (`rows: 1`, `pos0: pos`; the tiled decode
/// schedule): item = row × KV head × [`KV_SEGMENT`] segment, all query heads of the KV head,
/// partial outputs merged per row in segment order.
///
/// `q` and `out` hold each row's `heads × head_dim` floats from `row * heads * head_dim`
/// (other elements of `out` are left alone); `scratch` at least the sum over the rows of
/// [`decode_attention_floats`]`(heads, kv_heads, head_dim, pos, cache is f16)`. Allocates
/// nothing.
///
/// # Panics
///
/// If a dimension is 0, `heads` is not a multiple of `kv_heads`, a row's `pos` is not below
/// its `capacity`, a slice is shorter than the above, or two rows share a `row`.
pub fn attention_decode(
    exec: &dyn Executor,
    s: &DecodeShape,
    rows: &[DecodeRow<'_>],
    q: &[f32],
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (nh, nkv, hd) = (s.heads, s.kv_heads, s.head_dim);
    assert!(nh > 0 && nkv > 0 && hd > 0, "attention_decode: empty shape");
    assert_eq!(nh % nkv, 0, "attention_decode: heads not a multiple of kv_heads");
    let (qd, groups) = (nh * hd, nh / nkv);
    let window = s.window.unwrap_or(usize::MAX);
    // Every item's floats, the widening tiles included whenever any row's cache is f16.
    let f16 =
        rows.iter().any(|r| matches!(r.keys, KvRows::F16(_)) || matches!(r.values, KvRows::F16(_)));
    let mut need = 0usize;
    let mut work = 0usize;
    for (i, r) in rows.iter().enumerate() {
        assert!(r.pos < r.capacity, "attention_decode: row past its cache");
        let end = (r.row + 1).checked_mul(qd);
        assert!(
            end.is_some_and(|e| q.len() >= e && out.len() >= e),
            "attention_decode: q / out too short"
        );
        assert!(rows[..i].iter().all(|o| o.row != r.row), "attention_decode: a row twice");
        let kv_len = nkv * r.capacity * hd;
        assert!(
            r.keys.len() >= kv_len && r.values.len() >= kv_len,
            "attention_decode: cache too short"
        );
        let n = decode_attention_floats(nh, nkv, hd, r.pos, f16);
        need =
            n.and_then(|n| need.checked_add(n)).expect("attention_decode: scratch size overflows");
        work = work.saturating_add(nh * (r.pos + 1) * hd);
    }
    assert!(scratch.len() >= need, "attention_decode: scratch too short");
    let per = decode_item_floats(groups, hd, f16).expect("checked above");
    let part = groups * hd;
    let items: usize = rows.iter().map(|r| nkv * decode_segments(r, window).1).sum();
    let kern = kernels::active().ok();
    let sc = SharedMut(scratch.as_mut_ptr());
    // Items `[first, first + nkv * segs)` are row `i`'s: KV head `j / segs`, segment
    // `seg0 + j % segs` for `j = item - first`; item `k` owns `scratch[k * per ..][..per]`.
    // Item `k`'s row, KV head and segment (`k < items`).
    let item = |k: usize| {
        let (mut i, mut first) = (0, 0);
        loop {
            let (seg0, segs) = decode_segments(&rows[i], window);
            if k < first + nkv * segs {
                return (i, (k - first) / segs, seg0 + (k - first) % segs);
            }
            first += nkv * segs;
            i += 1;
        }
    };
    let body = |range: Range<usize>| {
        // The whole wrapper (Sync), not its pointer field, is captured.
        let partials = sc;
        let end = range.end;
        for k in range {
            let (i, g, sg) = item(k);
            let r = &rows[i];
            let head_len = r.capacity * hd;
            if k + 1 < end {
                // The next item's first keys and values start their way from memory while
                // this one is computed (the kernel prefetches each next tile of its own
                // item, but would wait on the first one).
                let (ni, ng, nsg) = item(k + 1);
                let n = &rows[ni];
                let lo = (n.pos + 1).saturating_sub(window).max(nsg * KV_SEGMENT);
                let len = (n.pos + 1).min((nsg + 1) * KV_SEGMENT) - lo;
                let at = (ng * n.capacity + lo) * hd;
                let take = len.min(flash::KT) * hd;
                n.keys.slice(at..at + take).prefetch();
                n.values.slice(at..at + take).prefetch();
            }
            // SAFETY: item `k` owns `scratch[k * per ..][..per]` (partial output, `ml`,
            // kernel scratch; the rows' `decode_attention_floats` sum to at least
            // `items * per` floats, asserted); items are disjoint; `q` and the caches are
            // only read; keys below `pos + 1 <= capacity`.
            unsafe {
                let base = partials.0.add(k * per);
                let b = flash::Block {
                    q: q.as_ptr().add(r.row * qd + g * part),
                    out: base,
                    row_stride: qd,
                    rows: 1,
                    heads: groups,
                    d: hd,
                    keys: r.keys.slice(g * head_len..(g + 1) * head_len).ptr(),
                    values: r.values.slice(g * head_len..(g + 1) * head_len).ptr(),
                    pos0: r.pos,
                    window,
                    clip: (sg * KV_SEGMENT, (sg + 1) * KV_SEGMENT),
                    scale: s.scale,
                    ml: base.add(part),
                    scratch: base.add(part + 2 * groups),
                };
                run_block(kern, &b);
            }
        }
    };
    if exec.threads() > 1 && work >= PAR_ATTENTION_WORK {
        exec.parallel_for(0..items, Schedule::Grain(1), &body);
    } else {
        body(0..items);
    }
    // Merge each vector's segments in order, then normalize.
    let mut first = 0;
    for r in rows {
        let segs = decode_segments(r, window).1;
        for g in 0..nkv {
            for h in 0..groups {
                let o = &mut out[r.row * qd + (g * groups + h) * hd..][..hd];
                let (mut m, mut lsum) = (f32::NEG_INFINITY, 0f32);
                for s in 0..segs {
                    let base = (first + g * segs + s) * per;
                    let ob = &scratch[base + h * hd..][..hd];
                    let (mb, lb) = (scratch[base + part + h], scratch[base + part + groups + h]);
                    flash::merge(&mut m, &mut lsum, o, mb, lb, ob);
                }
                let inv = 1.0 / lsum;
                o.iter_mut().for_each(|x| *x *= inv);
            }
        }
        first += nkv * segs;
    }
}
