//! 32-bit Arm kernels with the DSP extension (Cortex-M4, M7, M33, M55; feature `arm-dsp`):
//! the Q8_0 × int8 dot product with `SMLAD`, and, with a hardware FPU (`eabihf` targets),
//! f16 weights widened by the FPU's `VCVTB.F32.F16` instead of in software.
//!
//! `SXTB16` splits four packed i8 into two pairs of i16 (bytes 0 and 2, then with `ROR #8`
//! bytes 1 and 3) and `SMLAD` multiplies two i16 pairs and adds both products to an i32
//! accumulator, so four int8 products cost two loads, four `SXTB16` and two `SMLAD`. The block
//! sums are exact i32 (at most 32 · 128 · 128 in magnitude), then scaled and accumulated in
//! [`scalar::accumulate8`]'s order, so the results are bit-identical to the scalar oracle.
//! `VCVTB` widens f16 exactly, and the f16 GEMV sums in [`scalar::dot_f16`]'s order, so it is
//! bit-identical too. The other entries are the scalar ones.
//!
//! Stable Rust cannot see the DSP extension at compile time (Arm target features are
//! unstable), so the tier is opt-in: firmware for a core that has it enables `arm-dsp`.
//! `core::arch::arm`'s DSP intrinsics are unstable too, hence inline assembly.

use core::arch::asm;

use super::quant::{Q8Acts, QK};
use super::{scalar, Isa, Kernels, SCALAR};
use crate::tensor::DType;

/// The DSP table: `SMLAD` for Q8_0 weights with int8 activations, `VCVTB` for f16 weights
/// where there is an FPU, scalar elsewhere.
#[cfg(target_abi = "eabihf")]
pub(crate) const ARM_DSP: Kernels = SCALAR
    .for_isa(Isa::ArmDsp)
    .with_q8(DType::Q8_0, matmul_q8_0_q8)
    .with_f32(DType::F16, matmul_f16);

/// The DSP table without an FPU: `SMLAD` for Q8_0 weights with int8 activations.
#[cfg(not(target_abi = "eabihf"))]
pub(crate) const ARM_DSP: Kernels =
    SCALAR.for_isa(Isa::ArmDsp).with_q8(DType::Q8_0, matmul_q8_0_q8);

/// The little-endian f16 at `b[0..2]` as f32, widened by the FPU (exact).
#[cfg(target_abi = "eabihf")]
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    f16_bits(u16::from_le_bytes([b[0], b[1]]))
}

/// f16 bits as f32 with `VCVTB.F32.F16` (FPv4 and later; exact).
#[cfg(target_abi = "eabihf")]
#[inline(always)]
fn f16_bits(h: u16) -> f32 {
    let out: u32;
    // SAFETY: register-only FPU instructions (`eabihf` targets have the FPU enabled). `s0` is
    // saved and restored, so the asm changes no register it does not declare (Rust's inline
    // assembly cannot name FPU registers on this target without the unstable `vfp2` feature).
    unsafe {
        asm!(
            "vmov {save}, s0",
            "vmov s0, {h}",
            "vcvtb.f32.f16 s0, s0",
            "vmov {o}, s0",
            "vmov s0, {save}",
            h = in(reg) h as u32,
            save = out(reg) _,
            o = lateout(reg) out,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    f32::from_bits(out)
}

#[cfg(not(target_abi = "eabihf"))]
use super::quant::f16_at;

/// Table entry: `y[t * ldy + r] = Σ_i f16(W[r][i]) * x[t * k + i]` in [`scalar::dot_f16`]'s
/// order.
///
/// # Safety
///
/// `w` points to `rows` rows of `row_bytes = 2 * k` bytes, `x` to `n * k` floats, every
/// `y[t * ldy + r]` is writable and not aliased by `w` or `x`.
#[cfg(target_abi = "eabihf")]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_f16(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    for r in 0..rows {
        // SAFETY: row `r` is in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), 2 * k) };
        for t in 0..n {
            // SAFETY: activation row `t` is in bounds (caller contract).
            let xt = unsafe { core::slice::from_raw_parts(x.add(t * k), k) };
            let v: f32 = row
                .chunks_exact(2)
                .zip(xt)
                .map(|(b, &xi)| f16_bits(u16::from_le_bytes([b[0], b[1]])) * xi)
                .sum();
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(v) };
        }
    }
}

/// `acc + lo16(a) * lo16(b) + hi16(a) * hi16(b)` (signed halfwords).
#[inline(always)]
fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    let out: i32;
    // SAFETY: a register-only DSP-extension instruction (the `arm-dsp` feature's promise).
    unsafe {
        asm!(
            "smlad {o}, {a}, {b}, {c}",
            o = lateout(reg) out,
            a = in(reg) a,
            b = in(reg) b,
            c = in(reg) acc,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}

/// Bytes 0 and 2 of `x`, sign-extended to the two halfwords.
#[inline(always)]
fn sxtb16(x: u32) -> u32 {
    let out: u32;
    // SAFETY: a register-only DSP-extension instruction.
    unsafe {
        asm!("sxtb16 {o}, {x}", o = lateout(reg) out, x = in(reg) x,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// Bytes 1 and 3 of `x`, sign-extended to the two halfwords.
#[inline(always)]
fn sxtb16_ror8(x: u32) -> u32 {
    let out: u32;
    // SAFETY: a register-only DSP-extension instruction.
    unsafe {
        asm!("sxtb16 {o}, {x}, ror #8", o = lateout(reg) out, x = in(reg) x,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// `Σ w[i] * x[i]` over one block: 32 i8 weights at `w`, 32 i8 activations at `x`, exact.
///
/// # Safety
///
/// 32 readable bytes at each pointer.
#[inline(always)]
unsafe fn block_dot(w: *const u8, x: *const u8) -> i32 {
    let mut acc = 0i32;
    for j in (0..QK).step_by(4) {
        // SAFETY: `j + 4 <= 32` bytes of each (caller contract); unaligned reads.
        let (a, b) = unsafe {
            (w.add(j).cast::<u32>().read_unaligned(), x.add(j).cast::<u32>().read_unaligned())
        };
        acc = smlad(sxtb16(a), sxtb16(b), acc);
        acc = smlad(sxtb16_ror8(a), sxtb16_ror8(b), acc);
    }
    acc
}

/// Table entry: `y[t * ldy + r] = dot(Q8_0 row r, activation row t)` as
/// [`scalar::dot_q8_0_q8`] computes it.
///
/// # Safety
///
/// Row `r` starts at `w + r * row_bytes` and its first `xq.nb()` Q8_0 blocks are readable;
/// `xq.n() >= n`; every `y[t * ldy + r]` is writable and not aliased.
unsafe fn matmul_q8_0_q8(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    for r in 0..rows {
        // SAFETY: the row's first `nb` blocks are in bounds (caller contract).
        let row = unsafe { core::slice::from_raw_parts(w.add(r * row_bytes), nb * 34) };
        for t in 0..n {
            let qs = &xq.qs()[t * nb * QK..(t + 1) * nb * QK];
            let d = &xq.d()[t * nb..(t + 1) * nb];
            let v = scalar::accumulate8(nb, |b| {
                let blk = &row[b * 34..b * 34 + 34];
                // SAFETY: the block's 32 values follow its 2-byte scale; `qs` holds 32 per block.
                let isum =
                    unsafe { block_dot(blk.as_ptr().add(2), qs.as_ptr().add(b * QK).cast()) };
                (f16_at(blk) * d[b]) * isum as f32
            });
            // SAFETY: `t * ldy + r` is writable (caller contract).
            unsafe { y.add(t * ldy + r).write(v) };
        }
    }
}
