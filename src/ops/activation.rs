//! Element-wise activations: [`softmax`], [`silu`] / [`swiglu`], [`gelu_tanh`] /
//! [`geglu_tanh`], [`softcap`]. Two `e^x` functions serve them, each written once in
//! `crate::math`: [`expf`] (the bits of libm's `expf`, branch-free so that loops vectorise)
//! for SiLU and softmax, and the Cephes polynomial (`crate::math::exp_cephes`) for the GELU's
//! `tanh` and the tiled attention kernel (`crate::kernels::flash`). Which function a result
//! went through is part of its bits: the two are not interchangeable.

use crate::kernels::{self, Kernels};
pub use crate::math::expf;
use crate::math::{geglu_tanh_body, swiglu_body};

/// Softmax in place: `x[i] = exp(x[i] − max) / Σ exp(x[j] − max)`. An empty slice is left
/// alone. `-inf` entries get probability 0.
pub fn softmax(x: &mut [f32]) {
    crate::math::softmax_body(x)
}

/// SiLU (swish): `x · sigmoid(x) = x / (1 + e^(−x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    crate::math::silu(x)
}

/// The SwiGLU gate in place: `gate[i] = silu(gate[i]) * up[i]` (Llama's MLP before
/// `down_proj`).
///
/// # Panics
///
/// If the lengths differ.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: length mismatch");
    swiglu_body(gate, up);
}

/// [`swiglu`] with the kernels of `k`: the same bits on every ISA (the loop is compiled for
/// the ISA's vector width; each lane runs [`silu`]'s operations unchanged), faster than the
/// portable loop where the ISA has wide vectors (figures: `docs/perf/notes-ops-decoder.md`).
///
/// # Panics
///
/// If the lengths differ.
pub fn swiglu_on(k: &Kernels, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: length mismatch");
    // SAFETY: a `Kernels` table is only handed out for an ISA this CPU runs.
    unsafe { (k.swiglu)(gate, up) }
}

/// The gated activation of a decoder's MLP (`gelu`: GeGLU with tanh, else SwiGLU) with the
/// active kernels when there are some, the scalar table's otherwise (the same bits).
pub(crate) fn glu_with(k: Option<&Kernels>, gelu: bool, gate: &mut [f32], up: &[f32]) {
    let k = k.unwrap_or(&kernels::SCALAR);
    if gelu {
        geglu_tanh_on(k, gate, up)
    } else {
        swiglu_on(k, gate, up)
    }
}

/// GELU with the tanh approximation (PyTorch's `gelu(x, approximate="tanh")`,
/// transformers' `gelu_pytorch_tanh`): `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// The GeGLU gate in place: `gate[i] = gelu_tanh(gate[i]) * up[i]` (Gemma's MLP before
/// `down_proj`).
///
/// # Panics
///
/// If the lengths differ.
pub fn geglu_tanh(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "geglu_tanh: length mismatch");
    geglu_tanh_body(gate, up);
}

/// [`geglu_tanh`] with the kernels of `k`: the same bits on every ISA, as [`swiglu_on`].
///
/// # Panics
///
/// If the lengths differ.
pub fn geglu_tanh_on(k: &Kernels, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "geglu_tanh: length mismatch");
    // SAFETY: a `Kernels` table is only handed out for an ISA this CPU runs.
    unsafe { (k.geglu_tanh)(gate, up) }
}

/// Soft-capping in place: `x[i] = cap * tanh(x[i] / cap)` (Gemma's
/// `final_logit_softcapping`).
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = cap * libm::tanhf(*v / cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::close;

    #[test]
    fn softmax_by_value_and_masked_entries() {
        let mut x = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        softmax(&mut x);
        let e: [f32; 3] = [(-2f32).exp(), (-1f32).exp(), 1.0];
        let s: f32 = e.iter().sum();
        for i in 0..3 {
            assert!(close(x[i], e[i] / s, 1e-6));
        }
        assert_eq!(x[3], 0.0);
        let mut big = [1e4f32, 1e4];
        softmax(&mut big);
        assert_eq!(big, [0.5, 0.5]);
    }

    #[test]
    fn silu_and_swiglu_by_value() {
        assert_eq!(silu(0.0), 0.0);
        assert!(close(silu(1.0), 1.0 / (1.0 + (-1f32).exp()), 1e-6));
        assert!(close(silu(-20.0), -20.0 * (-20f32).exp(), 1e-3));
        let mut g = [2.0f32, -1.0];
        swiglu(&mut g, &[3.0, 0.5]);
        assert!(close(g[0], 3.0 * silu(2.0), 1e-6) && close(g[1], 0.5 * silu(-1.0), 1e-6));
    }
}
