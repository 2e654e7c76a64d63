//! The scalar oracle: plain-Rust dot products for every weight dtype. Every SIMD kernel is
//! tested against these.

use crate::quant::q8::Q8Row;
use crate::quant::{Q8Acts, QK};
use crate::tensor::DType;

use crate::quant::reference::quantize_block_any;
pub use crate::quant::reference::{
    accumulate8, dot_bf16, dot_blocks, dot_f16, dot_f32, hsum8, quantize_block_q8,
};

pub use crate::quant::q4_0::{block_dot_q4_0, dot_q4_0_f32, dot_q4_0_q8};
pub use crate::quant::q4_1::{block_dot_q4_1, dot_q4_1_f32, dot_q4_1_q8};
pub use crate::quant::q8_0::{block_dot_q8_0, dot_q8_0_f32, dot_q8_0_q8};

// ------------------------------------------------------------------ the scalar table entries

/// Builds a scalar f32-activation matmul entry from a row dot product.
macro_rules! matmul_f32_entry {
    ($name:ident, $dot:expr, $welem:ty) => {
        /// Scalar table entry: `y[t * ldy + r] = dot(row r, x[t * k ..])` for `r < rows`,
        /// `t < n`.
        ///
        /// # Safety
        ///
        /// `w` points to `rows` rows of `row_bytes` bytes (aligned for the element type),
        /// `x` to `n * k` floats, `y` to a buffer where every `t * ldy + r` is writable and
        /// not aliased by `w` or `x`; `row_bytes` matches `k` for the dtype.
        pub(crate) unsafe fn $name(
            w: *const u8,
            row_bytes: usize,
            rows: usize,
            k: usize,
            x: *const f32,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            let dot: fn(&[$welem], &[f32]) -> f32 = $dot;
            let per_row = row_bytes / core::mem::size_of::<$welem>();
            for r in 0..rows {
                // SAFETY: row `r` is in bounds and aligned (caller contract).
                let row = unsafe {
                    core::slice::from_raw_parts(w.add(r * row_bytes).cast::<$welem>(), per_row)
                };
                for t in 0..n {
                    // SAFETY: activation row `t` is in bounds (caller contract).
                    let xt = unsafe { core::slice::from_raw_parts(x.add(t * k), k) };
                    // SAFETY: `t * ldy + r` is writable (caller contract).
                    unsafe { y.add(t * ldy + r).write(dot(row, xt)) };
                }
            }
        }
    };
}

matmul_f32_entry!(matmul_f32, dot_f32, f32);
matmul_f32_entry!(matmul_f16, dot_f16, u8);
matmul_f32_entry!(matmul_bf16, dot_bf16, u8);

/// The scalar f32-activation matmul over rows of `u8` blocks, one row dot at a time
/// (the body of every quantized type's scalar entry).
///
/// # Safety
///
/// As [`super::MatmulF32Fn`]: `w` points to `rows` rows of `row_bytes` bytes, `x` to `n * k`
/// floats, every `y[t * ldy + r]` is writable and not aliased; `dot` accepts a row of
/// `row_bytes` bytes with `k` floats.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn rows_f32(
    dot: fn(&[u8], &[f32]) -> f32,
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    for r in 0..rows {
        // SAFETY: row `r` is in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), row_bytes) };
        for t in 0..n {
            // SAFETY: activation row `t` is in bounds (caller contract).
            let xt = unsafe { core::slice::from_raw_parts(x.add(t * k), k) };
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(dot(row, xt)) };
        }
    }
}

/// The scalar int8-activation matmul, one row dot at a time (the body of every quantized
/// type's scalar int8 entry).
///
/// # Safety
///
/// As [`super::MatmulQ8Fn`]: row `r` starts at `w + r * row_bytes` and its first `xq.nb()`
/// blocks of `block_bytes` bytes are readable; `xq.n() >= n`; every `y[t * ldy + r]` is
/// writable and not aliased.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn rows_q8(
    dot: fn(&[u8], &Q8Row<'_>) -> f32,
    block_bytes: usize,
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let used = xq.nb() * block_bytes;
    for r in 0..rows {
        // SAFETY: the row's first `nb` blocks are in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), used) };
        for t in 0..n {
            let xt = xq.row(t);
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(dot(row, &xt)) };
        }
    }
}

/// The scalar f32-activation entry of table row `D` ([`crate::quant::TYPES`]): its
/// reference row dot, one row and activation row at a time.
///
/// # Safety
///
/// As [`super::MatmulF32Fn`] for dtype `D`.
#[allow(clippy::too_many_arguments)]
unsafe fn block_f32<const D: usize>(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let dot = const {
        match crate::quant::TYPES[D].matmul_f32 {
            Some(f) => f,
            None => panic!("no reference dot"),
        }
    };
    // SAFETY: forwarded caller contract.
    unsafe { rows_f32(dot, w, row_bytes, rows, k, x, n, y, ldy) }
}

/// The scalar int8-activation entry of table row `D`: its reference row dot over
/// [`crate::quant::TypeInfo::act_block_bytes`]-byte steps.
///
/// # Safety
///
/// As [`super::MatmulQ8Fn`] for dtype `D`.
unsafe fn block_q8<const D: usize>(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let (dot, bytes) = const {
        let t = &crate::quant::TYPES[D];
        match t.matmul_q8 {
            Some(f) => (f, t.act_block_bytes()),
            None => panic!("no reference int8 dot"),
        }
    };
    // SAFETY: forwarded caller contract.
    unsafe { rows_q8(dot, bytes, w, row_bytes, rows, xq, n, y, ldy) }
}

/// Row `D`'s scalar f32-activation entry, if there is such a row and it has a reference dot
/// (the float types keep their typed loops).
const fn f32_entry<const D: usize>() -> Option<super::MatmulF32Fn> {
    if D >= DType::COUNT {
        None
    } else if D == DType::F32 as usize {
        Some(matmul_f32)
    } else if D == DType::F16 as usize {
        Some(matmul_f16)
    } else if D == DType::BF16 as usize {
        Some(matmul_bf16)
    } else if crate::quant::TYPES[D].matmul_f32.is_some() {
        Some(block_f32::<D>)
    } else {
        None
    }
}

/// Row `D`'s scalar int8-activation entry, if there is such a row with a reference int8
/// dot.
const fn q8_entry<const D: usize>() -> Option<super::MatmulQ8Fn> {
    if D < DType::COUNT && crate::quant::TYPES[D].matmul_q8.is_some() {
        Some(block_q8::<D>)
    } else {
        None
    }
}

/// The most table rows the entry lists below cover (a new dtype needs no edit here until
/// there are more).
const MAX_ROWS: usize = 32;
const _: () = assert!(DType::COUNT <= MAX_ROWS, "extend by_dtype!'s index list");

/// The scalar entries of the table rows `0 .. DType::COUNT`, by [`DType`] index.
macro_rules! by_dtype {
    ($f:ident) => {{
        let all = [
            $f::<0>(),
            $f::<1>(),
            $f::<2>(),
            $f::<3>(),
            $f::<4>(),
            $f::<5>(),
            $f::<6>(),
            $f::<7>(),
            $f::<8>(),
            $f::<9>(),
            $f::<10>(),
            $f::<11>(),
            $f::<12>(),
            $f::<13>(),
            $f::<14>(),
            $f::<15>(),
            $f::<16>(),
            $f::<17>(),
            $f::<18>(),
            $f::<19>(),
            $f::<20>(),
            $f::<21>(),
            $f::<22>(),
            $f::<23>(),
            $f::<24>(),
            $f::<25>(),
            $f::<26>(),
            $f::<27>(),
            $f::<28>(),
            $f::<29>(),
            $f::<30>(),
            $f::<31>(),
        ];
        let _: [_; MAX_ROWS] = all;
        let mut out = [None; DType::COUNT];
        let mut i = 0;
        while i < DType::COUNT {
            out[i] = all[i];
            i += 1;
        }
        out
    }};
}

/// The scalar f32-activation entries, indexed by [`DType`].
pub(crate) const F32_ENTRIES: [Option<super::MatmulF32Fn>; DType::COUNT] = by_dtype!(f32_entry);

/// The scalar int8-activation entries, indexed by [`DType`].
pub(crate) const Q8_ENTRIES: [Option<super::MatmulQ8Fn>; DType::COUNT] = by_dtype!(q8_entry);

/// The column-block kernel of half `H` of the pair layout ([`DType::Q5_0x2`]): `xq` holds
/// one block of 32 per row, and row `r`'s weights are half `H` of the pair at `w + r *
/// row_bytes`. Output `y[t * ldy + r]` is [`crate::quant::q5_0::dot_q5_0_q8`] of that half
/// as a Q5_0 block.
///
/// # Safety
///
/// As [`super::MatmulQ8Fn`], with `xq.nb() == 1` and a whole pair at each row.
pub(crate) unsafe fn q5_0x2_col_q8<const H: usize>(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    use crate::quant::{q5_0, q5_0x2};
    debug_assert_eq!(xq.nb(), 1);
    for r in 0..rows {
        // SAFETY: a whole pair at each row (caller contract).
        let pair = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), q5_0x2::BYTES) };
        let blk = q5_0x2::half_block(pair, H);
        for t in 0..n {
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(q5_0::dot_q5_0_q8(&blk, &xq.row(t))) };
        }
    }
}

/// Scalar table entry: quantizes `nb` blocks of `x` with [`quantize_block_q8`], writing
/// block `b`'s values at `qs + b * qs_stride` and its f32 scale at `d[b]`. Returns `false`
/// (with the output partly written) if a block holds NaN or ±infinity.
///
/// # Safety
///
/// `x` points to `nb * 32` floats, `qs + b * qs_stride` to 32 writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
pub(crate) unsafe fn quantize_q8(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
) -> bool {
    // SAFETY: forwarded caller contract, blocks of QK values.
    unsafe { quantize_blocks::<QK>(x, nb, qs, qs_stride, d, quantize_block_q8) }
}

/// `nb` blocks of `N` values quantized by `block` (one scale each); false at the first block
/// `block` refuses (a non-finite value).
///
/// # Safety
///
/// `x` points to `nb * N` floats, `qs + b * qs_stride` to `N` writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
#[inline(always)]
unsafe fn quantize_blocks<const N: usize>(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
    block: fn(&[f32], &mut [i8]) -> Option<f32>,
) -> bool {
    for b in 0..nb {
        // SAFETY: caller contract: block `b` of input and output are in bounds.
        let (xb, qb) = unsafe {
            (
                core::slice::from_raw_parts(x.add(b * N), N),
                core::slice::from_raw_parts_mut(qs.add(b * qs_stride), N),
            )
        };
        match block(xb, qb) {
            // SAFETY: `d + b` is writable (caller contract).
            Some(s) => unsafe { d.add(b).write(s) },
            None => return false,
        }
    }
    true
}

/// Scalar table entry: [`quantize_q8`] over blocks of 256 values ([`crate::quant::QK_K`]).
///
/// # Safety
///
/// `x` points to `nb * 256` floats, `qs + b * qs_stride` to 256 writable bytes for each
/// `b < nb`, `d` to `nb` writable floats, none aliasing.
pub(crate) unsafe fn quantize_q8k(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
) -> bool {
    // SAFETY: forwarded caller contract, blocks of QK_K values.
    unsafe {
        quantize_blocks::<{ crate::quant::QK_K }>(x, nb, qs, qs_stride, d, quantize_block_any)
    }
}
