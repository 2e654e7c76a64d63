//! GELU with the exact Gaussian CDF (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units"):
//! `gelu(x) = x · Φ(x) = 0.5 · x · (1 + erf(x / √2))`, PyTorch's `nn.GELU()` (the default,
//! `approximate='none'`) and transformers' `"gelu"` activation (BERT's intermediate layer).
//! [`crate::ops::gelu_tanh`] is the tanh approximation (`"gelu_new"`, `"gelu_pytorch_tanh"`).
//!
//! `erf` is `libm::erff` (the f32 `erff` of FreeBSD's msun, ported to Rust): the same
//! bits on every machine, element by element, so any split of a buffer across threads gives
//! the same result.

/// GELU (erf) of one value: `0.5 · x · (1 + erf(x / √2))`.
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2))
}

/// [`gelu_erf`] of every element, in place.
pub fn gelu_erf_in_place(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = gelu_erf(*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // 0.5·x·(1 + erf(x/√2)) in f64 (erf from the series in Abramowitz & Stegun 7.1.5,
        // summed to convergence) for a few points, and the limits
        fn erf64(z: f64) -> f64 {
            let (mut term, mut sum, mut k) = (z, z, 0f64);
            while term.abs() > 1e-18 {
                k += 1.0;
                term *= -z * z / k;
                sum += term / (2.0 * k + 1.0);
            }
            sum * 2.0 / core::f64::consts::PI.sqrt()
        }
        for &x in &[-3.0f32, -1.5, -0.5, -1e-3, 0.0, 1e-3, 0.25, 1.0, 2.0, 3.5] {
            let want = 0.5 * x as f64 * (1.0 + erf64(x as f64 / core::f64::consts::SQRT_2));
            let got = gelu_erf(x) as f64;
            assert!(
                (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "gelu({x}) = {got}, want {want}"
            );
        }
        assert_eq!(gelu_erf(0.0), 0.0);
        assert_eq!(gelu_erf(20.0), 20.0);
        assert_eq!(gelu_erf(-20.0), 0.0);
        let mut v = [-1.0f32, 0.5, 2.0];
        gelu_erf_in_place(&mut v);
        assert_eq!(v, [gelu_erf(-1.0), gelu_erf(0.5), gelu_erf(2.0)]);
    }
}
