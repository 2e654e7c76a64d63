//! Matmul kernels: block formats ([`quant`]) and the scalar oracle ([`scalar`]).
//!
//! The SIMD paths (AVX2 + FMA on x86_64, NEON / SDOT on aarch64), the `Kernels` function
//! table and run-time ISA selection build on these; every SIMD kernel is tested against the
//! scalar oracle.

pub mod quant;
pub mod scalar;
