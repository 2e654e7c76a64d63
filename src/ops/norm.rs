//! RMSNorm of one row ([`rms_norm`], [`rms_norm_in_place`]), its mean of squares in f64 in a
//! fixed order.

/// `Σ x[i]²` in f64 (each square is exact there) as eight partial sums, lane `i % 8`, combined
/// as `((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))`: a fixed order, so the same bits on
/// every machine, and independent chains the compiler vectorizes (one running sum would be a
/// chain of dependent f64 adds; the measurement: `docs/perf/notes-ops-decoder.md`).
fn sum_squares(x: &[f32]) -> f64 {
    let mut s = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in s.iter_mut().zip(c) {
            *a += (v as f64) * (v as f64);
        }
    }
    for (a, &v) in s.iter_mut().zip(chunks.remainder()) {
        *a += (v as f64) * (v as f64);
    }
    ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
}

/// RMSNorm of one row (Llama's `LlamaRMSNorm`): `out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]`.
///
/// The mean of squares is accumulated in f64 (eight partial sums in a fixed order): the
/// residual stream of real models reaches ~2·10⁴, whose squares summed in f32 would lose
/// digits.
///
/// # Panics
///
/// If `x`, `w` and `out` differ in length or are empty.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(!x.is_empty() && x.len() == w.len() && x.len() == out.len(), "rms_norm: shapes");
    let ss = sum_squares(x);
    let inv = 1.0 / libm::sqrt(ss / x.len() as f64 + eps as f64);
    let inv = inv as f32;
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = wi * (xi * inv);
    }
}

/// [`rms_norm`] in place: `x[i] = x[i] / sqrt(mean(x²) + eps) * w[i]` (per-head q/k norms,
/// Gemma's post-norms).
///
/// # Panics
///
/// If `x` and `w` differ in length or are empty.
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    assert!(!x.is_empty() && x.len() == w.len(), "rms_norm_in_place: shapes");
    let ss = sum_squares(x);
    let inv = (1.0 / libm::sqrt(ss / x.len() as f64 + eps as f64)) as f32;
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = wi * (*xi * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::close;

    #[test]
    fn rms_norm_by_value() {
        // mean(x²) = (9 + 16) / 2 = 12.5; 1 / sqrt(12.5 + 0.5) = 0.27735
        let mut out = [0f32; 2];
        rms_norm(&[3.0, -4.0], &[1.0, 2.0], 0.5, &mut out);
        let inv = 1.0 / 13f32.sqrt();
        assert!(close(out[0], 3.0 * inv, 1e-6) && close(out[1], -8.0 * inv, 1e-6), "{out:?}");
    }
}
