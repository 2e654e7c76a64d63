//! The two `e^x` functions of the crate, each written once, below `kernels` and `ops` in the
//! layering (see `docs/architecture.md`, "What may import what"): both may import this
//! module, neither has to import the other.
//!
//! - [`expf`]: the bits of libm's `expf` for every input, branch-free so that loops over it
//!   vectorise (SiLU, softmax, sampling);
//! - [`exp_cephes`]: Cephes' polynomial `expf`, faster and within about 1e-7 (the GELU's
//!   `tanh`, the tiled attention kernel).
//!
//! They give different bits; which one a result went through is part of the bit-identity
//! contract (`docs/architecture.md`, "Contracts" → "Bit-identity").

/// `e^x` with exactly the bits of `libm::expf` (FreeBSD's `e_expf.c`: `k = round(x / ln 2)`,
/// `r = x - k ln 2` in two parts, the rational approximation `1 + r + r c / (2 - c)` with its
/// two-coefficient `c`, times `2^k` as `scalbnf` applies it) for every input, NaN, infinities and
/// subnormal results included, but with every branch written as a select, so that loops over
/// it vectorise. SiLU and softmax use it: their results stay those of the scalar libm call.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    // libm's constants, by their bits: ln 2 in two parts, 1 / ln 2, the two coefficients.
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
    const P1: f32 = f32::from_bits(0x3e2a_aa8f);
    const P2: f32 = f32::from_bits(0xbb35_5215);
    let bits = x.to_bits();
    let hx = bits & 0x7fff_ffff;
    let neg = bits >> 31 != 0;
    // Argument reduction: |x| > 1.5 ln 2 rounds x / ln 2, 0.5 ln 2 < |x| <= 1.5 ln 2 takes
    // k = ±1, smaller |x| takes k = 0 (then hi = x and lo = 0 exactly, as libm's branch has it).
    // `as i32` would saturate lane by lane (scalar code on x86); clamping first keeps every k
    // a result can use (-151..=129, see below) and makes the plain conversion defined, so the
    // loop vectorises. Lanes clamped here (NaN, |x| > 110) take a special case below.
    #[allow(clippy::manual_clamp)] // `clamp` keeps NaN; `max` / `min` replace it
    let t = (INV_LN2 * x + if neg { -0.5 } else { 0.5 }).max(-160.0).min(160.0);
    // SAFETY: `t` is finite and within ±160 (`max` / `min` turn NaN into a bound).
    let k_far = unsafe { t.to_int_unchecked::<i32>() };
    let k_near = if neg { -1 } else { 1 };
    let k = if hx > 0x3f85_1592 {
        k_far
    } else if hx > 0x3eb1_7218 {
        k_near
    } else {
        0
    };
    let kf = k as f32;
    let hi = x - kf * LN2_HI;
    let lo = kf * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (P1 + rr * P2);
    let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
    // scalbnf(y, k) for the k this range produces (-150..=128): one pre-scaling step, then the
    // power of two built in the exponent bits.
    let (y, k) = if k > 127 {
        (y * f32::from_bits(0x7f00_0000), k.wrapping_sub(127))
    } else if k < -126 {
        (y * f32::from_bits(0x0c80_0000), k.wrapping_add(102))
    } else {
        (y, k)
    };
    let scaled = y * f32::from_bits((k.wrapping_add(127) as u32) << 23);
    // Special cases, in libm's order.
    if hx >= 0x42ae_ac50 {
        if hx > 0x7f80_0000 {
            x // NaN
        } else if !neg && hx >= 0x42b1_7218 {
            x * f32::from_bits(0x7f00_0000) // overflow: +inf
        } else if neg && hx >= 0x42cf_f1b5 {
            0.0 // x <= -103.97: underflow
        } else {
            scaled
        }
    } else if hx <= 0x3900_0000 {
        1.0 + x // |x| <= 2^-14
    } else {
        scaled
    }
}

/// `e^y`, branch-free (Cephes' `expf`): `y` clamped to `[-87, 88]`, `n = round(y / ln 2)` by
/// the `1.5 · 2^23` shift, `r = y - n ln 2` in two parts, a degree-5 polynomial, times `2^n`
/// built in the exponent bits. Relative error about 1e-7; NaN stays NaN.
///
/// The one copy of this arithmetic: the GELU of `crate::ops::activation` and the tiled
/// attention kernel (`crate::kernels::flash`, whose SIMD lanes repeat these steps with the
/// constants below) both call or mirror it, and bit-identity between them rests on that.
#[inline(always)]
pub(crate) fn exp_cephes(y: f32) -> f32 {
    let y = y.clamp(-87.0, 88.0);
    let n = (y * LOG2E + SHIFT) - SHIFT;
    let r = (y - n * LN2_HI) - n * LN2_LO;
    let p = ((((E0 * r + E1) * r + E2) * r + E3) * r + E4) * r + 0.5;
    let e = (p * r * r + r) + 1.0;
    // `n` is a whole number in -126..=127 unless `y` is NaN (then `e` is NaN and so is the
    // result, whatever the power of two): clamping makes the plain conversion defined and
    // vectorisable (`as i32` saturates lane by lane).
    #[allow(clippy::manual_clamp)] // `clamp` keeps NaN; `max` / `min` replace it
    // SAFETY: finite and within -127..=128 after `max` / `min` (which turn NaN into a bound).
    let n = unsafe { n.max(-127.0).min(128.0).to_int_unchecked::<i32>() };
    e * f32::from_bits(((n + 127) as u32) << 23)
}

/// `log2(e)`, the scale of [`exp_cephes`]'s argument reduction.
pub(crate) const LOG2E: f32 = core::f32::consts::LOG2_E;
/// `1.5 · 2^23`: adding and subtracting it rounds to the nearest integer.
pub(crate) const SHIFT: f32 = 12_582_912.0;
/// The high part of `ln 2` (exact in few bits, so `n * LN2_HI` is exact).
pub(crate) const LN2_HI: f32 = 0.693_359_4;
/// The low part of `ln 2` (`ln 2 = LN2_HI + LN2_LO` to about 1e-11), negated.
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// The polynomial's coefficients, highest degree first.
pub(crate) const E0: f32 = 1.987_569_1e-4;
/// See [`E0`].
pub(crate) const E1: f32 = 1.398_199_9e-3;
/// See [`E0`].
pub(crate) const E2: f32 = 8.333_452e-3;
/// See [`E0`].
pub(crate) const E3: f32 = 4.166_579_6e-2;
/// See [`E0`].
pub(crate) const E4: f32 = 1.666_666_5e-1;

/// `erf(z)`: `z · P(z²) / Q(z²)` for `|z| < 4`, `P` of degree 6 and `Q` of degree 5 in `z²`, a
/// rational minimax fit to `erf(z) / z` on `[0, 4]` (relative error ≤ 2.1e-9;
/// `tools/erf_fit.py` makes the coefficients), and `±1` for `|z| ≥ 4` (`1 − erf(4) = 1.5e-8`).
/// Rounded to f32 it is within 0.54 f32 ulp of `erf` (a unit test in `ops/gelu.rs` checks a
/// dense grid).
/// NaN gives a number, which `gelu_erf`'s factor `x` turns back into NaN.
#[inline(always)]
pub(crate) fn erf_f64(z: f64) -> f64 {
    const P: [f64; 7] = [
        1.1283791693637368,
        0.1852055609617226,
        0.054316945108033345,
        0.0038496713714127463,
        0.0003795984856187514,
        4.684443331154503e-06,
        -1.320066175857478e-08,
    ];
    const Q: [f64; 6] = [
        1.0,
        0.49746756847429946,
        0.11395913809127275,
        0.015462173895543307,
        0.001307568129430797,
        6.310743070727706e-05,
    ];
    // Every lane computes the rational (on a clamped `z`, so that no lane overflows) and the
    // tails are a select: no branch, so loops over it vectorise.
    #[allow(clippy::manual_clamp)] // `clamp` keeps NaN; `max` / `min` replace it
    let c = z.max(-4.0).min(4.0);
    let t = c * c;
    let p = (((((P[6] * t + P[5]) * t + P[4]) * t + P[3]) * t + P[2]) * t + P[1]) * t + P[0];
    let q = ((((Q[5] * t + Q[4]) * t + Q[3]) * t + Q[2]) * t + Q[1]) * t + Q[0];
    let r = c * (p / q);
    if z.abs() >= 4.0 {
        1f64.copysign(z)
    } else {
        r
    }
}

/// `crate::ops::gelu_erf`: `0.5 · x · (1 + erf(x / √2))` in f64 with [`erf_f64`], rounded
/// once to f32 (see `ops/gelu.rs` for its accuracy).
#[inline(always)]
pub(crate) fn gelu_erf(x: f32) -> f32 {
    let x = x as f64;
    (0.5 * x * (1.0 + erf_f64(x * core::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// The loop of `crate::ops::bias_gelu_erf`: `y[i] = gelu_erf(y[i] + bias[i])`, or
/// `gelu_erf(y[i])` for an empty `bias` (a non-empty `bias` is as long as `y`: the callers
/// check it). Here, below `kernels`, for the tables to compile it under their features.
#[inline(always)]
pub(crate) fn bias_gelu_erf_body(y: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        for v in y.iter_mut() {
            *v = gelu_erf(*v);
        }
    } else {
        for (v, &b) in y.iter_mut().zip(bias) {
            *v = gelu_erf(*v + b);
        }
    }
}

/// The body of `crate::ops::softmax`: `x[i] = expf(x[i] − max) / Σ expf(x[j] − max)` with
/// the sum taken in order, here for the kernels to compile it under their features (the same
/// bits: each lane runs [`expf`]'s operations, the sum stays a sequential chain).
#[inline(always)]
pub(crate) fn softmax_body(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = expf(*v - max);
    }
    for &v in x.iter() {
        sum += v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// SiLU (swish): `x / (1 + e^(−x))` with [`expf`]; `crate::ops::silu` is this function.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + expf(-x))
}

/// The loop of `crate::ops::swiglu`: `gate[i] = silu(gate[i]) * up[i]` (the lengths are
/// checked by the callers; a longer `gate` keeps its tail). It lives here, below `kernels`,
/// because the kernel tables compile it under their target features (the same bits on every
/// ISA: each lane runs [`silu`]'s operations unchanged).
#[inline(always)]
pub(crate) fn swiglu_body(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// The loop of `crate::ops::geglu_tanh`, as [`swiglu_body`].
#[inline(always)]
pub(crate) fn geglu_tanh_body(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh_fast(*g) * u;
    }
}

/// `crate::ops::gelu_tanh` as `x / (1 + e^(-2 z))` (the same function: `0.5 (1 + tanh z) =
/// 1 / (1 + e^(-2 z))`) with the branch-free [`exp_cephes`] the compiler vectorises; within a
/// few f32 ulps of the libm `tanhf` form.
#[inline(always)]
fn gelu_tanh_fast(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let z = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp_cephes(-2.0 * z))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input in `bits` (stepping by `step`) gives libm's bits.
    fn expf_matches_libm_over(bits: impl Iterator<Item = u32>) {
        for b in bits {
            let x = f32::from_bits(b);
            let (got, want) = (expf(x), libm::expf(x));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "expf({x:e}) = {got:e} ({:#x}), libm {want:e} ({:#x})",
                got.to_bits(),
                want.to_bits()
            );
        }
    }

    #[test]
    fn expf_has_libms_bits() {
        // A sweep of both signs, dense runs around every branch threshold of libm's expf
        // (0x39000000: 2^-14, 0x3eb17218: ln2/2, 0x3f851592: 1.5 ln2, 0x42aeac50: the
        // subnormal range, 0x42b17218: overflow, 0x42cff1b5: underflow to 0), the
        // specials, and the inputs that vectorised loops see (x − max of softmax, −x of SiLU).
        expf_matches_libm_over((0..=u32::MAX).step_by(4099));
        for t in [0x3900_0000u32, 0x3eb1_7218, 0x3f85_1592, 0x42ae_ac50, 0x42b1_7218, 0x42cf_f1b5] {
            for sign in [0, 0x8000_0000u32] {
                expf_matches_libm_over((t - 3000..t + 3000).map(|b| b | sign));
            }
        }
        expf_matches_libm_over([0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0, 0x8000_0000].into_iter());
        // Dense in the range activations live in: [-20, 20] in steps of 1/1024.
        expf_matches_libm_over((-20 * 1024..=20 * 1024).map(|i| (i as f32 / 1024.0).to_bits()));
    }

    #[test]
    #[ignore = "all 2^32 inputs (one to two minutes optimised): cargo test --release --lib -- --ignored expf"]
    fn expf_has_libms_bits_for_every_input() {
        expf_matches_libm_over(0..=u32::MAX);
    }

    /// The Cephes polynomial stays within its documented error of libm over the range the
    /// attention kernel and the GELU feed it, and saturates instead of overflowing.
    #[test]
    fn exp_cephes_is_close_to_libm() {
        for i in -87 * 64..=88 * 64 {
            let y = i as f32 / 64.0;
            let (got, want) = (exp_cephes(y), libm::expf(y));
            assert!(((got - want) / want).abs() < 4e-7, "exp_cephes({y}) = {got}, libm {want}");
        }
        assert_eq!(exp_cephes(-1000.0), exp_cephes(-87.0));
        assert_eq!(exp_cephes(1000.0), exp_cephes(88.0));
        assert!(exp_cephes(f32::NAN).is_nan());
    }
}
