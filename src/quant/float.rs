//! The plain float weight types (F32, F16, BF16) as rows of the table: element-wise "blocks"
//! of one value, widened to f32 exactly.

use half::{bf16, f16};

use super::reference;
use super::TypeInfo;
use crate::tensor::DType;

fn widen_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

fn widen_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

fn widen_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

const fn float(
    dtype: DType,
    name: &'static str,
    ggml_id: u32,
    bytes: usize,
    dequantize: fn(&[u8], &mut [f32]),
    dot: super::DotF32Fn,
) -> TypeInfo {
    TypeInfo {
        dtype,
        name,
        ggml_id,
        block_elems: 1,
        block_bytes: bytes,
        dequantize: Some(dequantize),
        quantize: None,
        act: None,
        matmul_f32: Some(dot),
        matmul_q8: None,
    }
}

/// IEEE binary32 (ggml `GGML_TYPE_F32`).
pub(super) const F32: TypeInfo =
    float(DType::F32, "F32", 0, 4, widen_f32, reference::dot_f32_bytes);
/// IEEE binary16 (ggml `GGML_TYPE_F16`).
pub(super) const F16: TypeInfo = float(DType::F16, "F16", 1, 2, widen_f16, reference::dot_f16);
/// bfloat16 (ggml `GGML_TYPE_BF16`).
pub(super) const BF16: TypeInfo =
    float(DType::BF16, "BF16", 30, 2, widen_bf16, reference::dot_bf16);
