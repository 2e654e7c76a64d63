//! Block layouts by name: [`BlockLayout`] says where each field of a block type's bytes lies
//! (the f16 scale, the minimum, the high bits, the quants, the sub-block scales), so that the
//! SIMD block decoders of every tier read `blk.add(BlockQ4_1::QS_OFFSET)` rather than a byte
//! count repeated per ISA. The offsets come from the `#[repr(C)]` block structs themselves
//! (`core::mem::offset_of!`), which follow ggml's `ggml-common.h`: each type's file implements
//! the trait next to its struct with the crate-internal `block_layout!` macro.

use crate::tensor::DType;

/// The byte layout of one block (or K-quant super-block) of a quantized weight type.
///
/// A field the type does not have has offset [`BlockLayout::BYTES`] (an empty field at the
/// block's end; the `HAS_*` constants say which are there).
pub trait BlockLayout {
    /// The weight type whose blocks these are.
    const DTYPE: DType;
    /// Bytes per block.
    const BYTES: usize;
    /// Elements per block (32, or 256 for the K-quants).
    const ELEMS: usize;
    /// Byte offset of the f16 scale `d`.
    const D_OFFSET: usize;
    /// Byte offset of the f16 minimum (Q4_1 and Q5_1's `m`, the K-quants' `dmin`).
    const M_OFFSET: usize;
    /// Byte offset of the high bits (Q5_0, Q5_1, Q5_K, Q6_K: `qh`; Q3_K: `hmask`).
    const QH_OFFSET: usize;
    /// Byte offset of the quants (`qs`; Q6_K: its low four bits `ql`).
    const QS_OFFSET: usize;
    /// Byte offset of the K-quants' packed sub-block scales (`scales`).
    const SCALES_OFFSET: usize;
    /// Whether the block has a minimum.
    const HAS_M: bool = Self::M_OFFSET < Self::BYTES;
    /// Whether the block has high bits.
    const HAS_QH: bool = Self::QH_OFFSET < Self::BYTES;
    /// Whether the block has sub-block scales.
    const HAS_SCALES: bool = Self::SCALES_OFFSET < Self::BYTES;
}

/// Implements [`BlockLayout`] for a block struct from its field names: `block_layout!(BlockQ4K,
/// Q4_K, QK_K; d: d, m: dmin, qh: -, qs: qs, scales: scales)` (`-`: the type has no such
/// field).
macro_rules! block_layout {
    ($block:ty, $dtype:ident, $elems:expr;
        d: $d:ident, m: $m:tt, qh: $qh:tt, qs: $qs:ident, scales: $sc:tt) => {
        impl $crate::quant::BlockLayout for $block {
            const DTYPE: $crate::tensor::DType = $crate::tensor::DType::$dtype;
            const BYTES: usize = core::mem::size_of::<$block>();
            const ELEMS: usize = $elems;
            const D_OFFSET: usize = core::mem::offset_of!($block, $d);
            const M_OFFSET: usize = $crate::quant::layout::block_layout!(@field $block, $m);
            const QH_OFFSET: usize = $crate::quant::layout::block_layout!(@field $block, $qh);
            const QS_OFFSET: usize = core::mem::offset_of!($block, $qs);
            const SCALES_OFFSET: usize = $crate::quant::layout::block_layout!(@field $block, $sc);
        }
    };
    (@field $block:ty, -) => {
        core::mem::size_of::<$block>()
    };
    (@field $block:ty, $f:ident) => {
        core::mem::offset_of!($block, $f)
    };
}
pub(crate) use block_layout;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq4_nl::BlockIq4Nl;
    use crate::quant::q2_k::BlockQ2K;
    use crate::quant::q3_k::BlockQ3K;
    use crate::quant::q4_k::BlockQ4K;
    use crate::quant::q5_k::BlockQ5K;
    use crate::quant::q6_k::BlockQ6K;
    use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

    /// `[d, m, qh, qs, scales]`, `None` for a missing field.
    type Offsets = [Option<usize>; 5];

    fn check<L: BlockLayout>(want: Offsets) {
        let at = |o: usize| (o < L::BYTES).then_some(o);
        let got = [
            at(L::D_OFFSET),
            at(L::M_OFFSET),
            at(L::QH_OFFSET),
            at(L::QS_OFFSET),
            at(L::SCALES_OFFSET),
        ];
        assert_eq!(got, want, "{}", L::DTYPE);
        let info = crate::quant::info(L::DTYPE);
        assert_eq!((L::BYTES, L::ELEMS), (info.block_bytes, info.block_elems), "{}", L::DTYPE);
        assert_eq!(
            (L::HAS_M, L::HAS_QH, L::HAS_SCALES),
            (want[1].is_some(), want[2].is_some(), want[4].is_some())
        );
    }

    /// The offsets are ggml's (`ggml-common.h`) and the sizes the table's.
    #[test]
    fn offsets_are_ggml_s() {
        check::<BlockQ8_0>([Some(0), None, None, Some(2), None]);
        check::<BlockQ4_0>([Some(0), None, None, Some(2), None]);
        check::<BlockQ4_1>([Some(0), Some(2), None, Some(4), None]);
        check::<BlockQ5_0>([Some(0), None, Some(2), Some(6), None]);
        check::<BlockQ5_1>([Some(0), Some(2), Some(4), Some(8), None]);
        check::<BlockIq4Nl>([Some(0), None, None, Some(2), None]);
        check::<BlockQ2K>([Some(80), Some(82), None, Some(16), Some(0)]);
        check::<BlockQ3K>([Some(108), None, Some(0), Some(32), Some(96)]);
        check::<BlockQ4K>([Some(0), Some(2), None, Some(16), Some(4)]);
        check::<BlockQ5K>([Some(0), Some(2), Some(16), Some(48), Some(4)]);
        check::<BlockQ6K>([Some(208), None, Some(128), Some(0), Some(192)]);
        // The SIMD decoders read Q5_K's scale, minimum and sub-block scales by Q4_K's names.
        assert_eq!(
            (BlockQ4K::D_OFFSET, BlockQ4K::M_OFFSET, BlockQ4K::SCALES_OFFSET),
            (BlockQ5K::D_OFFSET, BlockQ5K::M_OFFSET, BlockQ5K::SCALES_OFFSET)
        );
    }
}
