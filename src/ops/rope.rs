//! Rotary position embeddings: the inverse frequencies ([`rope_inv_freq`]), one position's
//! cosines and sines ([`rope_cos_sin`]) and the rotation of query/key heads ([`rope`]) in
//! either pair layout ([`RopeLayout`]).

/// The RoPE inverse frequencies `inv_freq[i] = theta^(-2i/d)` for `i < d/2`, written to
/// `out` (`d / 2` values), as Hugging Face's default rope computes them.
///
/// # Panics
///
/// If `out.len() * 2 != head_dim`.
pub fn rope_inv_freq(theta: f32, head_dim: usize, out: &mut [f32]) {
    assert_eq!(out.len() * 2, head_dim, "rope_inv_freq: out must hold head_dim / 2 values");
    for (i, f) in out.iter_mut().enumerate() {
        let e = (2 * i) as f64 / head_dim as f64;
        *f = (1.0 / libm::pow(theta as f64, e)) as f32;
    }
}

/// Fills `cos[i]` and `sin[i]` with the rotation for position `pos` and `inv_freq[i]`
/// (angle `pos * inv_freq[i]`, rounded to f32 first as PyTorch does).
///
/// # Panics
///
/// If the three slices differ in length.
pub fn rope_cos_sin(pos: usize, inv_freq: &[f32], cos: &mut [f32], sin: &mut [f32]) {
    assert!(inv_freq.len() == cos.len() && cos.len() == sin.len(), "rope_cos_sin: shapes");
    for ((&f, c), s) in inv_freq.iter().zip(cos.iter_mut()).zip(sin.iter_mut()) {
        let angle = (pos as f32 * f) as f64;
        *c = libm::cos(angle) as f32;
        *s = libm::sin(angle) as f32;
    }
}

/// How the two halves of each rotated pair sit inside a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Hugging Face's `rotate_half`: element `i` pairs with `i + d/2`.
    RotateHalf,
    /// GPT-J / llama.cpp style: element `2i` pairs with `2i + 1`. Equivalent to `RotateHalf`
    /// on GGUF Llama weights, whose q/k rows are stored permuted so that pairs are adjacent.
    Interleaved,
}

/// Applies RoPE in place to `x`, a run of heads of `2 * cos.len()` elements each. Pair `i` of
/// every head is rotated by the angle whose cosine and sine are `cos[i]`, `sin[i]`:
/// `(a, b) → (a cos − b sin, b cos + a sin)`.
///
/// # Panics
///
/// If `cos` and `sin` differ in length, are empty, or `x.len()` is not a whole number of heads.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    assert!(half > 0 && sin.len() == half, "rope: cos/sin shapes");
    assert_eq!(x.len() % (2 * half), 0, "rope: x is not a whole number of heads");
    for head in x.chunks_exact_mut(2 * half) {
        match layout {
            RopeLayout::RotateHalf => {
                let (lo, hi) = head.split_at_mut(half);
                for i in 0..half {
                    let (a, b) = (lo[i], hi[i]);
                    lo[i] = a * cos[i] - b * sin[i];
                    hi[i] = b * cos[i] + a * sin[i];
                }
            }
            RopeLayout::Interleaved => {
                for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                    let (a, b) = (pair[0], pair[1]);
                    pair[0] = a * cos[i] - b * sin[i];
                    pair[1] = b * cos[i] + a * sin[i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::close;

    #[test]
    fn rope_rotates_pairs_in_both_layouts() {
        let mut inv = [0f32; 2];
        rope_inv_freq(100.0, 4, &mut inv);
        assert_eq!(inv[0], 1.0);
        assert!(close(inv[1], 0.1, 1e-6));
        let (mut c, mut s) = ([0f32; 2], [0f32; 2]);
        rope_cos_sin(3, &inv, &mut c, &mut s);
        assert!(close(c[0], 3f32.cos(), 1e-6) && close(s[1], 0.3f32.sin(), 1e-6));
        // Rotate-half: pairs (0, 2), (1, 3).
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rope(&mut x, &c, &s, RopeLayout::RotateHalf);
        let want = [
            1.0 * c[0] - 3.0 * s[0],
            2.0 * c[1] - 4.0 * s[1],
            3.0 * c[0] + 1.0 * s[0],
            4.0 * c[1] + 2.0 * s[1],
        ];
        for i in 0..4 {
            assert!(close(x[i], want[i], 1e-6), "{x:?} vs {want:?}");
        }
        // Interleaved on the permuted vector [1, 3, 2, 4] gives the same numbers permuted.
        let mut y = [1.0f32, 3.0, 2.0, 4.0];
        rope(&mut y, &c, &s, RopeLayout::Interleaved);
        assert_eq!(y, [want[0], want[2], want[1], want[3]]);
        // Position 0 is the identity.
        rope_cos_sin(0, &inv, &mut c, &mut s);
        let mut z = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        rope(&mut z, &c, &s, RopeLayout::RotateHalf);
        assert_eq!(z, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    }
}
