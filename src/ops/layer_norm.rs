//! LayerNorm with weight and bias (the BERT family's norm; PyTorch's `nn.LayerNorm`), on one
//! row of f32.
//!
//! `out[i] = (x[i] − mean) / sqrt(var + eps) · w[i] + b[i]` with the biased variance
//! `var = Σ (x[i] − mean)² / n` (Ba, Kiros, Hinton 2016, "Layer Normalization"; PyTorch's
//! definition). The mean and the variance are accumulated in f64 as eight partial sums
//! combined in a fixed order (two passes), and `x[i] − mean` is taken in f64 before rounding
//! (a row far from zero, |mean| ≫ std, keeps its digits); a row gives the same bits on every
//! machine and for every split of the rows across threads.

/// `Σ v(x[i])` in f64 as eight partial sums, lane `i % 8`, combined in a fixed order.
#[inline]
fn sum8(x: &[f32], v: impl Fn(f32) -> f64) -> f64 {
    let mut s = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &e) in s.iter_mut().zip(c) {
            *a += v(e);
        }
    }
    for (a, &e) in s.iter_mut().zip(chunks.remainder()) {
        *a += v(e);
    }
    ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
}

/// The mean (f64) and `1 / sqrt(var + eps)` (rounded to f32) of a row.
#[inline]
fn moments(x: &[f32], eps: f32) -> (f64, f32) {
    let n = x.len() as f64;
    let mean = sum8(x, |e| e as f64) / n;
    let var = sum8(x, |e| {
        let d = e as f64 - mean;
        d * d
    }) / n;
    (mean, (1.0 / libm::sqrt(var + eps as f64)) as f32)
}

/// LayerNorm of one row: `out[i] = (x[i] − mean) / sqrt(var + eps) · w[i] + b[i]`.
///
/// # Panics
///
/// If `x`, `w`, `b` and `out` differ in length or are empty.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        !x.is_empty() && x.len() == w.len() && x.len() == b.len() && x.len() == out.len(),
        "layer_norm: shapes"
    );
    let (mean, inv) = moments(x, eps);
    for (((o, &xi), &wi), &bi) in out.iter_mut().zip(x).zip(w).zip(b) {
        *o = (xi as f64 - mean) as f32 * inv * wi + bi;
    }
}

/// [`layer_norm`] in place.
///
/// # Panics
///
/// If `x`, `w` and `b` differ in length or are empty.
pub fn layer_norm_in_place(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    assert!(!x.is_empty() && x.len() == w.len() && x.len() == b.len(), "layer_norm: shapes");
    let (mean, inv) = moments(x, eps);
    for ((xi, &wi), &bi) in x.iter_mut().zip(w).zip(b) {
        *xi = (*xi as f64 - mean) as f32 * inv * wi + bi;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition in f64, for comparison.
    fn reference(x: &[f32], w: &[f32], b: &[f32], eps: f64) -> alloc::vec::Vec<f64> {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        x.iter()
            .zip(w)
            .zip(b)
            .map(|((&v, &w), &b)| (v as f64 - mean) * inv * w as f64 + b as f64)
            .collect()
    }

    #[test]
    fn matches_the_definition() {
        // a row with a large offset (where a one-pass E[x²] − mean² loses the variance) and a
        // length that is not a multiple of eight
        let x: alloc::vec::Vec<f32> =
            (0..37).map(|i| 1000.0 + ((i * 7919) % 61) as f32 * 0.125 - 3.0).collect();
        let w: alloc::vec::Vec<f32> = (0..37).map(|i| 0.5 + i as f32 / 37.0).collect();
        let b: alloc::vec::Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.01).collect();
        let mut out = alloc::vec![0f32; 37];
        layer_norm(&x, &w, &b, 1e-12, &mut out);
        let want = reference(&x, &w, &b, 1e-12);
        for (o, r) in out.iter().zip(&want) {
            assert!((*o as f64 - r).abs() < 2e-6, "{o} vs {r}");
        }
        let mut y = x.clone();
        layer_norm_in_place(&mut y, &w, &b, 1e-12);
        assert_eq!(y, out);
    }

    #[test]
    fn constant_row_gives_the_bias() {
        let x = [3.5f32; 16];
        let w = [2.0f32; 16];
        let b: [f32; 16] = core::array::from_fn(|i| i as f32);
        let mut out = [0f32; 16];
        layer_norm(&x, &w, &b, 1e-5, &mut out);
        assert_eq!(out, b);
    }

    #[test]
    #[should_panic(expected = "layer_norm: shapes")]
    fn refuses_mismatched_shapes() {
        let mut out = [0f32; 3];
        layer_norm(&[1.0, 2.0, 3.0], &[1.0; 3], &[0.0; 2], 1e-5, &mut out);
    }
}
