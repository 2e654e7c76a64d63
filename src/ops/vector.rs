//! Vector primitives on f32 slices: [`dot`], [`axpy`], [`add_assign`] (the residual
//! connection). Each reduces in a fixed order.

/// Dot product of two equal-length f32 slices with eight independent partial sums (so the
/// compiler can vectorise it), combined in a fixed order.
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `y[i] += alpha * x[i]`.
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// `y[i] += x[i]` (the residual connection).
///
/// # Panics
///
/// If the lengths differ.
#[inline]
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    assert_eq!(x.len(), y.len(), "add_assign: length mismatch");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += xi;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::close;

    #[test]
    fn dot_matches_naive_sum_for_ragged_lengths() {
        for n in [0usize, 1, 7, 8, 9, 31, 64, 100] {
            let a: alloc::vec::Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: alloc::vec::Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64) * (*y as f64)).sum();
            assert!(close(dot(&a, &b), naive as f32, 1e-5), "n = {n}");
        }
    }
}
