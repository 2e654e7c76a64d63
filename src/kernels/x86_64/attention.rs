//! AVX2 bodies for [`crate::ops::attention_head`]'s two loops over the KV cache: the scores
//! `q · k_t` (four keys per pass over `q`) and the weighted sum `out += p_t · v_t`.
//!
//! Both reproduce the portable code's arithmetic exactly: [`crate::ops::dot`]'s eight
//! partial sums (`acc[i % 8] += a[i] * b[i]`, a separate multiply and add, never fused), its
//! tail of `len % 8` products summed in order, and its fixed combination
//! `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)) + tail`; [`crate::ops::axpy`]'s
//! `y[i] + alpha * x[i]`, unfused. So the scores and outputs are bit-identical to the scalar
//! path's, only faster.

use core::arch::x86_64::*;

/// [`crate::ops::dot`]'s combination of the eight lanes of `acc` and the scalar `tail`.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn combine(acc: __m256, tail: f32) -> f32 {
    let mut a = [0f32; 8];
    // SAFETY: `a` holds 8 floats.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), acc) };
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail
}

/// `scores[t] = dot(q, keys[t * d ..][..d]) * scale` for `t < scores.len()`, with
/// `d = q.len()`.
///
/// # Safety
///
/// `keys` holds at least `scores.len() * q.len()` floats; AVX2 available.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scores(q: &[f32], keys: &[f32], scale: f32, scores: &mut [f32]) {
    let d = q.len();
    let main = d / 8 * 8;
    let n = scores.len();
    debug_assert!(keys.len() >= n * d);
    let tail = |k: &[f32]| {
        let mut s = 0f32;
        for i in main..d {
            s += q[i] * k[i];
        }
        s
    };
    let (qp, kp) = (q.as_ptr(), keys.as_ptr());
    let mut t = 0;
    // SAFETY: every load below is inside `q` (`i + 8 <= main <= d`) or inside key row `t + j`
    // with `t + j < n` (so inside `keys`, caller contract).
    unsafe {
        while t + 4 <= n {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < main {
                let qv = _mm256_loadu_ps(qp.add(i));
                for (j, a) in acc.iter_mut().enumerate() {
                    let kv = _mm256_loadu_ps(kp.add((t + j) * d + i));
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(qv, kv));
                }
                i += 8;
            }
            for (j, a) in acc.iter().enumerate() {
                let row = &keys[(t + j) * d..(t + j + 1) * d];
                scores[t + j] = combine(*a, tail(row)) * scale;
            }
            t += 4;
        }
        while t < n {
            let mut acc = _mm256_setzero_ps();
            let mut i = 0;
            while i < main {
                let kv = _mm256_loadu_ps(kp.add(t * d + i));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(qp.add(i)), kv));
                i += 8;
            }
            scores[t] = combine(acc, tail(&keys[t * d..(t + 1) * d])) * scale;
            t += 1;
        }
    }
}

/// `out[i] = Σ_t` in order of `out[i] + p[t] * values[t * d + i]` (the portable loop of
/// `axpy` calls), with `out` zeroed first and `d = out.len()`.
///
/// # Safety
///
/// `values` holds at least `p.len() * out.len()` floats; AVX2 available.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
    let d = out.len();
    debug_assert!(values.len() >= p.len() * d);
    out.fill(0.0);
    let vp = values.as_ptr();
    let op = out.as_mut_ptr();
    let mut i = 0;
    // SAFETY: columns `i .. i + 8 <= d` of `out` and of value rows `t < p.len()` (caller
    // contract).
    unsafe {
        // Eight columns at a time, all positions, the running sums in registers (the order
        // of additions per column is still t = 0, 1, ...).
        while i + 32 <= d {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (t, &pt) in p.iter().enumerate() {
                let pv = _mm256_set1_ps(pt);
                for (j, a) in acc.iter_mut().enumerate() {
                    let v = _mm256_loadu_ps(vp.add(t * d + i + 8 * j));
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, v));
                }
            }
            for (j, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(i + 8 * j), *a);
            }
            i += 32;
        }
        while i + 8 <= d {
            let mut acc = _mm256_setzero_ps();
            for (t, &pt) in p.iter().enumerate() {
                let v = _mm256_loadu_ps(vp.add(t * d + i));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(pt), v));
            }
            _mm256_storeu_ps(op.add(i), acc);
            i += 8;
        }
    }
    for c in i..d {
        let mut s = 0f32;
        for (t, &pt) in p.iter().enumerate() {
            s += pt * values[t * d + c];
        }
        out[c] = s;
    }
}
