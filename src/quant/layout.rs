//! Block layouts by name: [`BlockLayout`] says where each field of a block type's bytes lies
//! (the f16 scale, the minimum, the fifth bits, the quants), so that the SIMD block decoders
//! of every tier read `blk.add(L::QS_OFFSET)` rather than a byte count repeated per ISA.
//! The offsets come from the `#[repr(C)]` block structs themselves (`core::mem::offset_of!`),
//! which follow ggml's `ggml-common.h`: each type's file implements the trait next to its
//! struct with the crate-internal `block_layout!` macro.

use super::QK;
use crate::tensor::DType;

/// The byte layout of one block of a 32-element quantized type: every block is
/// `[f16 d][f16 m]?[u32 qh]?[qs]`, value `e` being `d · q_e` (`+ m`).
pub trait BlockLayout {
    /// The weight type whose blocks these are.
    const DTYPE: DType;
    /// Bytes per block.
    const BYTES: usize;
    /// Elements per block.
    const ELEMS: usize = QK;
    /// Byte offset of the f16 scale `d`.
    const D_OFFSET: usize;
    /// Byte offset of the f16 minimum `m` (Q4_1, Q5_1), `None` for the types without one.
    const M_OFFSET: Option<usize>;
    /// Byte offset of the fifth bits `qh` (the Q5 types: a little-endian u32, bit `e` for
    /// element `e`), `None` for the others.
    const QH_OFFSET: Option<usize>;
    /// Byte offset of the quants `qs` (Q8_0: 32 i8; the 4- and 5-bit types: 16 bytes, element
    /// `e < 16` in the low nibble of byte `e`, element `e + 16` in its high nibble).
    const QS_OFFSET: usize;
    /// Whether the block has a minimum ([`BlockLayout::M_OFFSET`] is `Some`).
    const HAS_M: bool = Self::M_OFFSET.is_some();
    /// [`BlockLayout::M_OFFSET`], or 0 for the types without a minimum (read only where
    /// [`BlockLayout::HAS_M`]).
    const M: usize = match Self::M_OFFSET {
        Some(o) => o,
        None => 0,
    };
    /// [`BlockLayout::QH_OFFSET`], or 0 for the types without fifth bits.
    const QH: usize = match Self::QH_OFFSET {
        Some(o) => o,
        None => 0,
    };
}

/// Implements [`BlockLayout`] for a block struct from its field names:
/// `block_layout!(BlockQ4_1, Q4_1, m: m, qh: -)` (`-`: the type has no such field).
macro_rules! block_layout {
    ($block:ty, $dtype:ident, m: $m:tt, qh: $qh:tt) => {
        impl $crate::quant::BlockLayout for $block {
            const DTYPE: $crate::tensor::DType = $crate::tensor::DType::$dtype;
            const BYTES: usize = core::mem::size_of::<$block>();
            const D_OFFSET: usize = core::mem::offset_of!($block, d);
            const M_OFFSET: Option<usize> = $crate::quant::layout::block_layout!(@field $block, $m);
            const QH_OFFSET: Option<usize> =
                $crate::quant::layout::block_layout!(@field $block, $qh);
            const QS_OFFSET: usize = core::mem::offset_of!($block, qs);
        }
    };
    (@field $block:ty, -) => {
        None
    };
    (@field $block:ty, $f:ident) => {
        Some(core::mem::offset_of!($block, $f))
    };
}
pub(crate) use block_layout;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq4_nl::BlockIq4Nl;
    use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

    /// The offsets are ggml's (`ggml-common.h`) and the sizes the table's.
    #[test]
    fn offsets_are_ggml_s() {
        fn check<L: BlockLayout>(d: usize, m: Option<usize>, qh: Option<usize>, qs: usize) {
            assert_eq!(
                (L::D_OFFSET, L::M_OFFSET, L::QH_OFFSET, L::QS_OFFSET),
                (d, m, qh, qs),
                "{}",
                L::DTYPE
            );
            assert_eq!(L::BYTES, super::super::info(L::DTYPE).block_bytes);
            assert_eq!(L::ELEMS, super::super::info(L::DTYPE).block_elems);
            assert_eq!(L::HAS_M, m.is_some());
        }
        check::<BlockQ8_0>(0, None, None, 2);
        check::<BlockQ4_0>(0, None, None, 2);
        check::<BlockQ4_1>(0, Some(2), None, 4);
        check::<BlockQ5_0>(0, None, Some(2), 6);
        check::<BlockQ5_1>(0, Some(2), Some(4), 8);
        check::<BlockIq4Nl>(0, None, None, 2);
        assert_eq!((BlockQ5_1::M, BlockQ5_1::QH, BlockQ4_0::M), (2, 4, 0));
    }
}
