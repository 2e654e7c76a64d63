//! GELU with the exact Gaussian CDF (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units"):
//! `gelu(x) = x · Φ(x) = 0.5 · x · (1 + erf(x / √2))`, PyTorch's `nn.GELU()` (the default,
//! `approximate='none'`) and transformers' `"gelu"` activation (BERT's intermediate layer).
//! [`crate::ops::gelu_tanh`] is the tanh approximation (`"gelu_new"`, `"gelu_pytorch_tanh"`).
//!
//! The whole expression is evaluated in f64 and rounded to f32 once, with `erf` from a rational
//! approximation (`crate::math::erf_f64`) written without branches, so that loops over it vectorise (the
//! scalar `libm::erff` this replaced took about a tenth of an encoder's time). Only IEEE
//! additions, multiplications, one division and min/max: the same bits on every machine,
//! element by element, so any split of a buffer across threads gives the same result. The
//! decoders do not use it (their GELU is the tanh form).

/// GELU (erf) of one value: `0.5 · x · (1 + erf(x / √2))`, in f64, rounded once to f32:
/// within 0.5 f32 ulp plus `1.1e-9 · |x|` of the exact value (plus `4.4e-8` below `x = −5.65`,
/// where it is 0 and the exact value is smaller than that).
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    crate::math::gelu_erf(x)
}

/// [`gelu_erf`] of every element, in place.
pub fn gelu_erf_in_place(x: &mut [f32]) {
    crate::math::bias_gelu_erf_body(x, &[]);
}

/// `x[i] = gelu_erf(x[i] + bias[i])` (`bias` empty: no bias) with the active kernels (the
/// scalar table's if `RML_KERNELS` is invalid): the same bits as [`gelu_erf`] of the sum on
/// every ISA (the loop compiled for the ISA's vector width, each lane running the same f64
/// operations).
///
/// # Panics
///
/// If `bias` is neither empty nor as long as `x`.
pub fn bias_gelu_erf(x: &mut [f32], bias: &[f32]) {
    assert!(bias.is_empty() || bias.len() == x.len(), "bias_gelu_erf: length mismatch");
    let k = crate::kernels::active().unwrap_or(&crate::kernels::SCALAR);
    // SAFETY: a `Kernels` table is only handed out for an ISA this CPU runs.
    unsafe { (k.bias_gelu_erf)(x, bias) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::erf_f64;

    #[test]
    fn bias_gelu_erf_has_the_bits_of_the_scalar_loop() {
        // The active table's loop (vectorised under its features) against `gelu_erf` of
        // each sum, lengths with vector tails, with and without a bias.
        for len in [1usize, 7, 8, 9, 15, 16, 17, 33, 1536] {
            let x: alloc::vec::Vec<f32> =
                (0..len).map(|i| ((i * 7919) % 2001) as f32 / 150.0 - 6.7).collect();
            let b: alloc::vec::Vec<f32> = (0..len).map(|i| (i % 13) as f32 / 7.0 - 0.9).collect();
            let mut got = x.clone();
            bias_gelu_erf(&mut got, &b);
            for i in 0..len {
                assert_eq!(got[i].to_bits(), gelu_erf(x[i] + b[i]).to_bits(), "len {len} i {i}");
            }
            let mut got = x.clone();
            bias_gelu_erf(&mut got, &[]);
            for i in 0..len {
                assert_eq!(got[i].to_bits(), gelu_erf(x[i]).to_bits(), "len {len} i {i}");
            }
        }
    }

    /// The f32 ulp at `v` (the spacing of f32 values of `v`'s binade; at 0 the smallest normal's).
    fn ulp(v: f64) -> f64 {
        let v = (v.abs() as f32).max(f32::MIN_POSITIVE);
        let e = (v.to_bits() >> 23) as i32 - 127;
        libm::ldexp(1.0, e - 23)
    }

    #[test]
    fn erf_is_within_0_54_ulp_of_f64_erf() {
        // Every multiple of 2^-16 in [-6, 6] and 2^-24 near 0, against msun's f64 erf (under
        // 1 f64 ulp): the f32 rounding of erf_f64 differs by at most 0.54 f32 ulp.
        let mut worst = (0f64, 0f64);
        let mut check = |x: f32| {
            let want = libm::erf(x as f64);
            let got = erf_f64(x as f64) as f32 as f64;
            let e = (got - want).abs() / ulp(want);
            if e > worst.0 {
                worst = (e, x as f64);
            }
        };
        for i in -6 * 65536..=6 * 65536 {
            check(i as f32 / 65536.0);
        }
        for i in -65536..=65536 {
            check(i as f32 / 16_777_216.0);
        }
        assert!(worst.0 <= 0.54, "erf({}) is {} f32 ulp off", worst.1, worst.0);
        // ±1 outside (-4, 4), as f32's erf is there; 0 at 0
        assert_eq!(erf_f64(0.0), 0.0);
        for x in [4.5, 10.0, 1e30, f64::INFINITY] {
            assert_eq!((erf_f64(x) as f32, erf_f64(-x) as f32), (1.0, -1.0));
        }
    }

    #[test]
    fn known_values() {
        // 0.5·x·(1 + erf(x/√2)) in f64 (msun's f64 erf) over [-10, 10] in steps of 2^-12:
        // within 0.5 f32 ulp of the result plus 1.1e-9·|x| (the fit's relative error)
        for i in -10 * 4096..=10 * 4096 {
            let x = i as f32 / 4096.0;
            let want = 0.5 * x as f64 * (1.0 + libm::erf(x as f64 / core::f64::consts::SQRT_2));
            let got = gelu_erf(x) as f64;
            let tail = if x < -5.65 { 4.4e-8 } else { 0.0 };
            let bound = 0.5 * ulp(want) + 1.1e-9 * (x as f64).abs() + tail;
            assert!((got - want).abs() <= bound, "gelu({x}) = {got}, want {want}");
        }
        assert_eq!(gelu_erf(0.0), 0.0);
        assert_eq!(gelu_erf(20.0), 20.0);
        assert_eq!(gelu_erf(6.0), 6.0);
        assert_eq!(gelu_erf(-20.0), 0.0);
        assert!(gelu_erf(f32::NAN).is_nan());
        let mut v = [-1.0f32, 0.5, 2.0];
        gelu_erf_in_place(&mut v);
        assert_eq!(v, [gelu_erf(-1.0), gelu_erf(0.5), gelu_erf(2.0)]);
    }
}
