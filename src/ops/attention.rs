//! Grouped, tiled, online-softmax attention over a KV cache ([`attention_group`]); the
//! arithmetic is `kernels::flash`'s, with AVX2 and AVX-512 bodies picked with the kernel tier
//! (bit-identical to the portable code).

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

impl KvRows<'_> {
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
