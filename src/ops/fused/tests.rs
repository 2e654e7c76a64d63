//! [`gemm_fused`], [`gemm_glu`] and [`gemm_q8`] against the separate steps, bit for bit.

use super::*;
use crate::ops::{gemm, scratch_bytes};
use crate::quant::q8_acts_bytes_as;

#[test]
fn gemm_fused_equals_separate_gemms_bit_for_bit() {
    use crate::quant::quantize_row_q8_0;
    let k = 64;
    let vals = |rows: usize, seed: usize| -> alloc::vec::Vec<f32> {
        (0..rows * k).map(|i| (((i * 7 + seed * 13) % 29) as f32 - 14.0) * 0.05).collect()
    };
    let f32_bytes = |v: &[f32]| -> crate::mem::AlignedBlock {
        let b: alloc::vec::Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        crate::mem::AlignedBlock::try_from_slice(&b).unwrap()
    };
    let (a, b, c) = (vals(40, 1), vals(72, 2), vals(33, 3));
    let mut q8 = alloc::vec![0u8; 72 * 68];
    for (row, out) in b.chunks_exact(k).zip(q8.chunks_exact_mut(68)) {
        quantize_row_q8_0(row, out).unwrap();
    }
    let (ab, cb) = (f32_bytes(&a), f32_bytes(&c));
    let wa = Matrix::new(DType::F32, 40, k, ab.as_slice()).unwrap();
    let wb = Matrix::new(DType::Q8_0, 72, k, &q8).unwrap();
    let wc = Matrix::new(DType::F32, 33, k, cb.as_slice()).unwrap();
    let n = 3;
    let x: alloc::vec::Vec<f32> = (0..n * k).map(|i| ((i % 11) as f32 - 5.0) * 0.3).collect();
    for act in [Activations::F32, Activations::Int8Plain] {
        let mut scratch = alloc::vec![0u8; scratch_bytes(k, n, act) + 64];
        let off = scratch.as_ptr().align_offset(64);
        let scratch = &mut scratch[off..];
        let exec = crate::exec::InlineExecutor;
        let mut want =
            [alloc::vec![0f32; n * 40], alloc::vec![0f32; n * 72], alloc::vec![0f32; n * 33]];
        for (w, y) in [&wa, &wb, &wc].into_iter().zip(want.iter_mut()) {
            gemm(&exec, None, w, &x, n, y, act, scratch).unwrap();
        }
        let (mut ya, mut yb, mut yc) =
            (alloc::vec![0f32; n * 40], alloc::vec![0f32; n * 72], alloc::vec![0f32; n * 33]);
        gemm_fused(&exec, None, [&wa, &wb, &wc], &x, n, [&mut ya, &mut yb, &mut yc], act, scratch)
            .unwrap();
        assert!(ya == want[0] && yb == want[1] && yc == want[2], "{act:?}");
        if act == Activations::Int8Plain {
            // A single call treats the decoder policy `Mixed` as int8.
            gemm_fused(
                &exec,
                None,
                [&wa, &wb, &wc],
                &x,
                n,
                [&mut ya, &mut yb, &mut yc],
                Activations::Mixed,
                scratch,
            )
            .unwrap();
            assert!(ya == want[0] && yb == want[1] && yc == want[2], "Mixed");
        }
    }
    assert_eq!(Activations::Mixed.for_normed_input(), Activations::F32);
    assert_eq!(Activations::Int8Plain.for_normed_input(), Activations::Int8Plain);
    assert_eq!(
        scratch_bytes(k, n, Activations::Mixed),
        scratch_bytes(k, n, Activations::Int8Plain)
    );
    let short = Matrix::new(DType::F32, 1, 32, &ab.as_slice()[..128]).unwrap();
    let (mut y1, mut y2) = (alloc::vec![0f32; 40], alloc::vec![0f32; 1]);
    let e = gemm_fused(
        &crate::exec::InlineExecutor,
        None,
        [&wa, &short],
        &x[..k],
        1,
        [&mut y1, &mut y2],
        Activations::F32,
        &mut [],
    );
    assert_eq!(e.unwrap_err().code(), crate::Code::InvalidArgument);
}

/// `gemm_glu` (with and without the in-loop quantization, both formats, several
/// executors and schedules) against `gemm_fused` + `glu_with` + `Q8Acts::quantize_as`, and
/// `gemm_q8` against `gemm` with plain int8 on the same product: every bit the same.
#[test]
fn gemm_glu_and_gemm_q8_equal_the_separate_steps_bit_for_bit() {
    use crate::quant::quantize_row_q8_0;
    let (k, rows, n) = (64, 256, 3);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
    };
    let q8_matrix = |rows: usize, k: usize, next: &mut dyn FnMut() -> f32| {
        let v: alloc::vec::Vec<f32> = (0..rows * k).map(|_| next()).collect();
        let mut b = alloc::vec![0u8; rows * k / 32 * 34];
        for (row, out) in v.chunks_exact(k).zip(b.chunks_exact_mut(k / 32 * 34)) {
            quantize_row_q8_0(row, out).unwrap();
        }
        b
    };
    let (gb, ub) = (q8_matrix(rows, k, &mut next), q8_matrix(rows, k, &mut next));
    let gate = Matrix::new(DType::Q8_0, rows, k, &gb).unwrap();
    let up = Matrix::new(DType::Q8_0, rows, k, &ub).unwrap();
    // A down projection per activation format: Q8_0 (Q8) and Q4_K bytes with valid f16
    // scales (Q8_K), 40 rows of the product's width.
    let db = q8_matrix(40, rows, &mut next);
    let down8 = Matrix::new(DType::Q8_0, 40, rows, &db).unwrap();
    let mut kb = alloc::vec![0u8; 40 * 144];
    for (i, blk) in kb.chunks_exact_mut(144).enumerate() {
        for (j, b) in blk.iter_mut().enumerate() {
            *b = ((i * 31 + j * 7) % 251) as u8;
        }
        blk[..4].copy_from_slice(&[0x00, 0x2C, 0x00, 0x28]); // d = 2^-4, dmin = 2^-5
    }
    let downk = Matrix::new(DType::Q4_K, 40, rows, &kb).unwrap();
    let x: alloc::vec::Vec<f32> = (0..n * k).map(|_| next()).collect();
    let kern = kernels::active().unwrap();
    // The inline executor, and with std two pools (2 and 3 threads).
    let inline: &dyn Executor = &crate::exec::InlineExecutor;
    #[cfg(feature = "std")]
    let pools = [crate::exec::ThreadPool::new(2), crate::exec::ThreadPool::new(3)];
    #[cfg(feature = "std")]
    let execs: alloc::vec::Vec<&dyn Executor> =
        core::iter::once(inline).chain(pools.iter().map(|p| p as &dyn Executor)).collect();
    #[cfg(not(feature = "std"))]
    let execs = [inline];
    for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
        let mut sv = alloc::vec![0u8; scratch_bytes(k, n, act) + 64];
        let off = sv.as_ptr().align_offset(64);
        let scratch = &mut sv[off..];
        let (mut wg, mut wu) = (alloc::vec![0f32; n * rows], alloc::vec![0f32; n * rows]);
        let exec = crate::exec::InlineExecutor;
        gemm_fused(&exec, None, [&gate, &up], &x, n, [&mut wg, &mut wu], act, scratch).unwrap();
        for gelu in [false, true] {
            let mut want = wg.clone();
            glu_with(Some(kern), gelu, &mut want, &wu);
            for (fmt, down) in [(ActFormat::Q8, &down8), (ActFormat::Q8K, &downk)] {
                let mut rq = alloc::vec![0u8; q8_acts_bytes_as(fmt, rows, n)];
                let wq = Q8Acts::quantize_as(fmt, kern, &want, n, rows, &mut rq).unwrap();
                let mut wy = alloc::vec![0f32; n * 40];
                let mut ds = alloc::vec![0u8; scratch_bytes(rows, n, Activations::Int8Plain)];
                let exec = crate::exec::InlineExecutor;
                let plain = Activations::Int8Plain;
                gemm(&exec, None, down, &want, n, &mut wy, plain, &mut ds).unwrap();
                for exec in &execs {
                    for sched in [None, Some(Schedule::Static), Some(Schedule::Grain(1))] {
                        let (mut g, mut u) =
                            (alloc::vec![0f32; n * rows], alloc::vec![0f32; n * rows]);
                        let at = alloc::format!("{act:?} gelu {gelu} {fmt:?} {sched:?}");
                        let mut qv = alloc::vec![0u8; q8_acts_bytes_as(fmt, rows, n)];
                        let mut run = |g: &mut [f32], u: &mut [f32], q| {
                            let w = [&gate, &up];
                            gemm_glu(*exec, sched, w, &x, n, g, u, gelu, act, scratch, q)
                        };
                        let none = run(&mut g, &mut u, None).unwrap();
                        assert!(none.is_none() && g == want && u == wu, "{at}");
                        let q = GluQuant { fmt, scratch: &mut qv };
                        let hq = run(&mut g, &mut u, Some(q)).unwrap().unwrap();
                        assert!(g == want && u == wu, "{at}");
                        assert_eq!(hq.qs(), wq.qs(), "{at}");
                        assert_eq!(hq.d(), wq.d(), "{at}");
                        assert_eq!(hq.s(), wq.s(), "{at}");
                        assert_eq!(hq.sum(), wq.sum(), "{at}");
                        let mut y = alloc::vec![0f32; n * 40];
                        gemm_q8(*exec, sched, down, &hq, &mut y).unwrap();
                        assert!(y == wy, "{at}");
                    }
                }
            }
        }
    }
    // Wrong shapes and formats are refused, and a product that overflows is reported,
    // not quantized (f32 activations, 1 or `n` rows, outputs sized for the gate).
    let exec = crate::exec::InlineExecutor;
    let code = |w: [&Matrix<'_>; 2], x: &[f32], q: Option<GluQuant<'_>>| {
        let len = x.len() / k * w[0].rows;
        let (mut g, mut u) = (alloc::vec![0f32; len], alloc::vec![0f32; len]);
        let n = x.len() / k;
        let e = gemm_glu(&exec, None, w, x, n, &mut g, &mut u, false, Activations::F32, &mut [], q);
        e.err().map(|e| e.code())
    };
    let invalid = Some(crate::Code::InvalidArgument);
    let short = Matrix::new(DType::Q8_0, 32, k, &gb[..32 * 68]).unwrap();
    assert_eq!(code([&gate, &short], &x, None), invalid, "rows differ");
    let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8K, 32, n)];
    let odd = GluQuant { fmt: ActFormat::Q8K, scratch: &mut qv };
    assert_eq!(code([&short, &short], &x, Some(odd)), invalid, "32 rows, Q8_K blocks");
    let big: alloc::vec::Vec<u8> =
        [1.0e30f32; 64 * 32].iter().flat_map(|v| v.to_le_bytes()).collect();
    let big = crate::mem::AlignedBlock::try_from_slice(&big).unwrap();
    let wbig = Matrix::new(DType::F32, 32, k, big.as_slice()).unwrap();
    let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8, 32, 1)];
    let q = GluQuant { fmt: ActFormat::Q8, scratch: &mut qv };
    assert_eq!(code([&wbig, &wbig], &[1.0e30; 64], Some(q)), invalid, "non-finite product");
    let mut qv = alloc::vec![0u8; q8_acts_bytes_as(ActFormat::Q8, rows, n)];
    let want = alloc::vec![0.5f32; n * rows];
    let xq = Q8Acts::quantize_as(ActFormat::Q8, kern, &want, n, rows, &mut qv).unwrap();
    let mut y = alloc::vec![0f32; n * 40];
    let e = gemm_q8(&exec, None, &downk, &xq, &mut y);
    assert_eq!(e.unwrap_err().code(), crate::Code::InvalidArgument, "Q8 acts for Q4_K");
}
