//! rml on a microcontroller: firmware for qemu-system-arm's `mps2-an386` (Cortex-M4F,
//! `thumbv7em-none-eabihf`).
//!
//! The tiny Llama (2 layers, hidden 64, vocab 256) lives in flash twice — the f32 safetensors
//! file and llama.cpp's Q8_0 GGUF of the same weights — each compiled in with `include_bytes!`
//! inside a 64-byte aligned wrapper and used in place (every matrix is borrowed from flash,
//! checked below). Each run sizes its memory with [`DecoderLM::memory_plan_for`] and builds the
//! decoder with [`DecoderLM::new_in`] in a `static` region, so the heap (a small
//! `linked_list_allocator`, counted) only serves parsing and the layer table; the decode loop
//! is checked to make no allocator call at all. Each run does prefill + 8 greedy steps, prints
//! the tokens, compares them with PyTorch's (read from the reference files in flash) and reports
//! instructions per token.
//!
//! Counting instructions: QEMU does not model the DWT cycle counter, but with `-icount shift=0`
//! (see .cargo/config.toml) its virtual clock advances exactly 1 ns per guest instruction, and
//! the board's CMSDK APB Timer0 (0x4000_0000) counts that clock at 25 MHz, one tick per 40
//! instructions. The firmware calibrates the ratio with a loop of known length (2 instructions
//! per iteration) before it measures anything.
//!
//! Output goes over semihosting; the exit status is 0 when every run matched.
#![no_std]
#![no_main]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use linked_list_allocator::LockedHeap;
use rml::format::gguf::Gguf;
use rml::model::config::parse_config;
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::model::config::ModelConfig;
use rml::model::{DecoderLM, DecoderOptions, WeightFormat};
use rml::ops::Activations;
use rml::InlineExecutor;

/// Bytes aligned to 64 (rml's tensor alignment), so weights in flash are used in place.
#[repr(C, align(64))]
struct Align64<B: ?Sized>(B);

static F32_MODEL: &Align64<[u8]> =
    &Align64(*include_bytes!("../../../tests/data/tiny-llama/f32/model.safetensors"));
static F32_CONFIG: &str = include_str!("../../../tests/data/tiny-llama/f32/config.json");
static F32_REFERENCE: &Align64<[u8]> =
    &Align64(*include_bytes!("../../../tests/data/tiny-llama/f32/reference.safetensors"));
static Q8_MODEL: &Align64<[u8]> =
    &Align64(*include_bytes!("../../../tests/data/tiny-llama-gguf/tiny-llama-Q8_0.gguf"));
static Q8_REFERENCE: &Align64<[u8]> =
    &Align64(*include_bytes!("../../../tests/data/tiny-llama-gguf/reference_Q8_0.safetensors"));

/// The decoder's region: the largest [`rml::model::MemoryPlan::region_bytes`] of the runs
/// below (KV cache for 24 positions, scratch, logits, RoPE table, norms, and for the last run
/// the matrices converted to Q8_0 at load). The firmware fails if a plan needs more, and if
/// this is not exactly the largest plan, so it cannot drift from `memory_plan`.
const REGION_BYTES: usize = 187_904;
static mut REGION: Align64<[u8; REGION_BYTES]> = Align64([0; REGION_BYTES]);

/// The heap: parsing (safetensors header, GGUF metadata, config.json) and the layer table.
const HEAP_BYTES: usize = 32 * 1024;
static mut HEAP: [u8; HEAP_BYTES] = [0; HEAP_BYTES];

/// The global allocator, counting calls and the peak of live bytes.
struct Counting(LockedHeap);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the linked-list heap unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        // SAFETY: same contract as ours.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: same contract as ours.
        unsafe { self.0.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting(LockedHeap::empty());

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}

/// CMSDK APB Timer0 of the MPS2 board: a 32-bit down-counter at 25 MHz (PCLK).
mod timer {
    const BASE: usize = 0x4000_0000;
    const CTRL: *mut u32 = BASE as *mut u32;
    const VALUE: *mut u32 = (BASE + 4) as *mut u32;
    const RELOAD: *mut u32 = (BASE + 8) as *mut u32;

    /// Starts the timer from its top value.
    pub fn start() {
        // SAFETY: the board's Timer0 registers; nothing else uses the timer.
        unsafe {
            RELOAD.write_volatile(u32::MAX);
            VALUE.write_volatile(u32::MAX);
            CTRL.write_volatile(1);
        }
    }

    /// The current count (it counts down).
    pub fn now() -> u32 {
        // SAFETY: a read of the timer's value register.
        unsafe { VALUE.read_volatile() }
    }

    /// Ticks since `since` (a value of [`now`]).
    pub fn ticks(since: u32) -> u32 {
        since.wrapping_sub(now())
    }
}

/// Runs `iterations` of a 2-instruction loop (`subs`, `bne`).
fn known_loop(iterations: u32) {
    // SAFETY: only decrements a register it owns.
    unsafe {
        core::arch::asm!("2:", "subs {0}, {0}, #1", "bne 2b", inout(reg) iterations => _);
    }
}

/// Guest instructions per timer tick, measured on a loop of known length.
fn calibrate() -> u64 {
    const N: u32 = 1_000_000;
    let t = timer::now();
    known_loop(N);
    let ticks = timer::ticks(t) as u64;
    let ipt = (2 * N as u64 + ticks / 2) / ticks.max(1);
    hprintln!(
        "calibration: {} loop instructions took {} timer ticks: {} instructions per tick",
        2 * N,
        ticks,
        ipt
    );
    ipt
}

/// Workspace of the `arm-dsp` conformance check and kernel timing, laid over [`REGION`] before
/// the decoder runs use it.
#[repr(C)]
struct Bench {
    w: [u8; 64 * 8 * 34],
    x: [f32; 3 * 256],
    y: [[f32; 3 * 64]; 2],
    scratch: [u8; 4096],
}
const _: () = assert!(core::mem::size_of::<Bench>() <= REGION_BYTES);

/// The `arm-dsp` tier's conformance check: int8-activation GEMM / GEMV of Q8_0 weights
/// (arbitrary bytes, -128 included, random f16 scales) and f32-activation GEMM / GEMV of f16
/// weights must give the scalar oracle's bits for several shapes; one 64 x 256 int8 GEMV is
/// timed with each. Returns the number of outputs
/// compared.
fn dsp_conformance(ipt: u64) -> rml::Result<Option<usize>> {
    use rml::kernels::{table, Isa};
    use rml::ops::{gemm_with, scratch_bytes, Matrix};
    let Ok(dsp) = table(Isa::ArmDsp) else { return Ok(None) };
    let scalar = table(Isa::Scalar)?;
    // SAFETY: REGION is 64-byte aligned, larger than `Bench` (asserted above), every bit
    // pattern is a valid `Bench`, and nothing else uses REGION until the decoder runs start.
    let bench = unsafe { &mut *core::ptr::addr_of_mut!(REGION).cast::<Bench>() };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut compared = 0;
    for (rows, k, n) in
        [(1, 32, 1), (3, 64, 1), (17, 96, 3), (5, 256, 2), (8, 160, 1), (64, 256, 1)]
    {
        let nb = k / 32;
        let w = &mut bench.w[..rows * nb * 34];
        for blk in w.chunks_exact_mut(34) {
            let scale = half_bits(((next() % 2000) as f32 - 1000.0) / 4096.0);
            blk[..2].copy_from_slice(&scale.to_le_bytes());
            for q in &mut blk[2..] {
                *q = next() as u8;
            }
        }
        let x = &mut bench.x[..n * k];
        for v in x.iter_mut() {
            *v = ((next() % 20001) as f32 - 10000.0) / 1000.0;
        }
        let m = Matrix::new(rml::DType::Q8_0, rows, k, w)?;
        let scratch = &mut bench.scratch[..scratch_bytes(k, n, Activations::Int8Plain)];
        let [y0, y1] = &mut bench.y;
        let (y0, y1) = (&mut y0[..n * rows], &mut y1[..n * rows]);
        let mut ticks = [0u64; 2];
        for (i, (kern, y)) in [(scalar, &mut *y0), (dsp, &mut *y1)].into_iter().enumerate() {
            let t = timer::now();
            gemm_with(kern, &InlineExecutor, None, &m, x, n, y, Activations::Int8Plain, scratch)?;
            ticks[i] = timer::ticks(t) as u64;
        }
        if y0.iter().zip(y1.iter()).any(|(a, b)| a.to_bits() != b.to_bits()) {
            hprintln!(
                "FAIL: arm-dsp differs from scalar at {}x{} n {}: {:?} vs {:?}",
                rows,
                k,
                n,
                y1,
                y0
            );
            return Ok(Some(0));
        }
        compared += y0.len();
        // f16 weights with f32 activations (the FPU's VCVTB in the arm-dsp table).
        if rows * k * 2 <= bench.w.len() {
            let w = &mut bench.w[..rows * k * 2];
            for h in w.chunks_exact_mut(2) {
                let v = half_bits(((next() % 20001) as f32 - 10000.0) / 5000.0);
                h.copy_from_slice(&v.to_le_bytes());
            }
            let m = Matrix::new(rml::DType::F16, rows, k, w)?;
            for (kern, y) in [(scalar, &mut *y0), (dsp, &mut *y1)] {
                gemm_with(kern, &InlineExecutor, None, &m, x, n, y, Activations::F32, &mut [])?;
            }
            if y0.iter().zip(y1.iter()).any(|(a, b)| a.to_bits() != b.to_bits()) {
                hprintln!("FAIL: arm-dsp f16 differs from scalar at {}x{} n {}", rows, k, n);
                return Ok(Some(0));
            }
            compared += y0.len();
        }
        if rows == 64 {
            hprintln!(
                "int8 GEMV 64 x 256 (Q8_0 weights): scalar {} instructions, arm-dsp {} ({:.2}x)",
                ticks[0] * ipt,
                ticks[1] * ipt,
                ticks[0] as f32 / ticks[1].max(1) as f32
            );
        }
    }
    Ok(Some(compared))
}

/// `v` as IEEE f16 bits (normal range, truncated: only used to make test scales).
fn half_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

/// One run's inputs.
struct Run {
    name: &'static str,
    options: DecoderOptions,
    /// Expect every matrix used in place from flash.
    in_place: bool,
    /// Pin the scalar kernels (to show the `arm-dsp` tier's speed-up).
    scalar: bool,
}

/// Reads an i64 token list from a reference file.
fn tokens(file: &SafeTensors<'_>, name: &str, out: &mut [u32]) -> rml::Result<usize> {
    let v = file.tensor(name)?;
    let n = v.data.len() / 8;
    for (o, b) in out.iter_mut().zip(v.data.chunks_exact(8)) {
        *o = i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as u32;
    }
    Ok(n.min(out.len()))
}

/// Argmax, lowest index on ties (greedy decoding).
fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs prefill + 8 greedy steps; returns (tokens match, region bytes used).
fn run(
    run: &Run,
    config: &ModelConfig,
    src: &dyn TensorSource<'static>,
    reference: &SafeTensors<'_>,
    ipt: u64,
) -> rml::Result<(bool, usize)> {
    let mut prompt = [0u32; 16];
    let mut want = [0u32; 9];
    let np = tokens(reference, "prompt", &mut prompt)?;
    let nw = tokens(reference, "generated", &mut want)?;
    let best = rml::kernels::best();
    rml::kernels::force(if run.scalar { rml::kernels::Isa::Scalar } else { best })?;
    let plan = DecoderLM::memory_plan_for(config, &run.options, src)?;
    hprintln!("[{}] memory plan: {}", run.name, plan);
    let need = plan.region_bytes();
    if need > REGION_BYTES {
        hprintln!(
            "[{}] FAIL: the plan needs {} region bytes, the firmware has {}",
            run.name,
            need,
            REGION_BYTES
        );
        return Ok((false, need));
    }
    // SAFETY: runs are sequential and each decoder (the region's only user) is dropped before
    // this function returns, so no two borrows of REGION are alive at once.
    let region: &'static mut [u8] = unsafe { &mut (&mut (*addr_of_mut!(REGION)).0)[..need] };
    let (calls0, live0) = (CALLS.load(Relaxed), LIVE.load(Relaxed));
    let mut lm = DecoderLM::new_in(config, src, &InlineExecutor, run.options, region)?;
    let init_heap = LIVE.load(Relaxed) - live0;
    let in_place = lm.weights().matrices().filter(|m| m.is_borrowed()).count();
    let total = lm.weights().matrices().count();
    hprintln!(
        "[{}] init: {} heap bytes kept (plan tables {}), {} allocator calls; {} of {} matrices used in place from flash",
        run.name,
        init_heap,
        plan.tables,
        CALLS.load(Relaxed) - calls0,
        in_place,
        total
    );
    let mut ok = init_heap == plan.tables;
    if run.in_place && in_place != total {
        hprintln!("[{}] FAIL: weights were copied out of flash", run.name);
        ok = false;
    }

    let calls = CALLS.load(Relaxed);
    let mut got = [0u32; 9];
    let t = timer::now();
    let mut next = argmax(lm.prefill(&prompt[..np])?);
    let prefill_ticks = timer::ticks(t) as u64;
    got[0] = next;
    let mut decode_ticks = 0u64;
    for slot in got.iter_mut().skip(1) {
        let t = timer::now();
        next = argmax(lm.decode(next)?);
        decode_ticks += timer::ticks(t) as u64;
        *slot = next;
    }
    let step_calls = CALLS.load(Relaxed) - calls;
    drop(lm);

    let (pre, dec) = (prefill_ticks * ipt, decode_ticks * ipt);
    hprintln!("[{}] tokens:    {:?}", run.name, got);
    hprintln!("[{}] reference: {:?} (PyTorch)", run.name, &want[..nw]);
    hprintln!(
        "[{}] instructions: prefill of {} tokens {} ({} per token), 8 decode steps {} ({} per token)",
        run.name,
        np,
        pre,
        pre / np as u64,
        dec,
        dec / 8
    );
    if step_calls != 0 {
        hprintln!(
            "[{}] FAIL: prefill and decode called the allocator {} times",
            run.name,
            step_calls
        );
        ok = false;
    }
    let same = got[..] == want[..nw];
    hprintln!("[{}] {}", run.name, if same && ok { "ok" } else { "FAIL" });
    Ok((same && ok, need))
}

/// Stack measurement: the free RAM between the end of `.bss`/`.uninit` (cortex-m-rt's
/// `__sheap`) and the stack pointer is painted at start-up; the lowest overwritten word at the
/// end gives the deepest stack use.
mod stack {
    const PAINT: u32 = 0x5AA5_5AA5;
    extern "C" {
        static mut __sheap: u32;
        static _stack_start: u32;
    }

    fn bottom() -> *mut u32 {
        core::ptr::addr_of_mut!(__sheap)
    }

    /// Paints the unused stack below the current stack pointer (keeping 256 bytes of margin).
    #[inline(never)]
    pub fn paint() {
        let sp = cortex_m::register::msp::read() as usize - 256;
        let mut p = bottom();
        while (p as usize) < sp {
            // SAFETY: `[__sheap, sp)` is RAM that nothing uses yet (below the live stack).
            unsafe {
                p.write_volatile(PAINT);
                p = p.add(1);
            }
        }
    }

    /// Deepest stack use in bytes since [`paint`].
    pub fn used() -> usize {
        let top = core::ptr::addr_of!(_stack_start) as usize;
        let mut p = bottom();
        // SAFETY: reads of RAM between `__sheap` and the stack top.
        while (p as usize) < top && unsafe { p.read_volatile() } == PAINT {
            // SAFETY: stays below the stack top (checked above).
            p = unsafe { p.add(1) };
        }
        top - p as usize
    }
}

#[entry]
fn main() -> ! {
    stack::paint();
    // SAFETY: called once, before any allocation; HEAP is used by nothing else.
    unsafe { ALLOCATOR.0.lock().init(addr_of_mut!(HEAP).cast(), HEAP_BYTES) };
    timer::start();
    let ipt = calibrate();
    let isa = rml::kernels::active().map(|k| k.isa());
    hprintln!("kernels: {:?}", isa);
    let conformance = match dsp_conformance(ipt) {
        Ok(Some(0)) => false,
        Ok(Some(n)) => {
            hprintln!("ok   arm-dsp GEMV/GEMM (Q8_0 x int8, f16 x f32) bit-identical to scalar ({} outputs)", n);
            true
        }
        Ok(None) => {
            hprintln!("skip arm-dsp conformance: the tier is not in this build");
            true
        }
        Err(e) => {
            hprintln!("FAIL: arm-dsp conformance: {}", e);
            false
        }
    };

    // f32 activations spelled out: the decoder's default is int8 with outlier correction.
    let base = DecoderOptions {
        context_len: Some(24),
        prefill_chunk: 16,
        activations: Activations::F32,
        ..DecoderOptions::default()
    };
    let int8 = DecoderOptions { activations: Activations::Int8Plain, ..base };
    let runs = [
        (
            Run {
                name: "f32 weights, f32 activations",
                options: base,
                in_place: true,
                scalar: false,
            },
            false,
        ),
        (
            Run {
                name: "Q8_0 weights, f32 activations",
                options: base,
                in_place: true,
                scalar: false,
            },
            true,
        ),
        (
            Run {
                name: "Q8_0 weights, int8 activations",
                options: int8,
                in_place: true,
                scalar: false,
            },
            true,
        ),
        (
            Run {
                name: "Q8_0 weights, int8 activations, scalar kernels",
                options: int8,
                in_place: true,
                scalar: true,
            },
            true,
        ),
        (
            Run {
                name: "f32 weights converted to Q8_0 at load, int8 activations",
                options: DecoderOptions {
                    activations: Activations::Int8Plain,
                    weight_format: WeightFormat::Q8_0,
                    ..base
                },
                in_place: false,
                scalar: false,
            },
            false,
        ),
    ];

    let result = (|| -> rml::Result<bool> {
        let f32_file = SafeTensors::parse(&F32_MODEL.0)?;
        let f32_config = parse_config(F32_CONFIG)?;
        let f32_ref = SafeTensors::parse(&F32_REFERENCE.0)?;
        let q8_file = Gguf::parse(&Q8_MODEL.0)?;
        let q8_config = rml::model::config::from_gguf(&q8_file)?;
        let q8_ref = SafeTensors::parse(&Q8_REFERENCE.0)?;
        let (mut all, mut largest) = (conformance, 0);
        for (r, q8) in &runs {
            let (ok, need) = if *q8 {
                run(r, &q8_config, &q8_file, &q8_ref, ipt)?
            } else {
                run(r, &f32_config, &f32_file, &f32_ref, ipt)?
            };
            all &= ok;
            largest = largest.max(need);
        }
        hprintln!(
            "RAM: region {} bytes (largest plan {}), heap peak {} of {} bytes, stack peak {} bytes",
            REGION_BYTES,
            largest,
            PEAK.load(Relaxed),
            HEAP_BYTES,
            stack::used()
        );
        if largest != REGION_BYTES {
            hprintln!("FAIL: REGION_BYTES must be the largest plan, {}", largest);
            all = false;
        }
        Ok(all)
    })();
    let ok = match result {
        Ok(ok) => ok,
        Err(e) => {
            hprintln!("error: {}", e);
            false
        }
    };
    hprintln!("{}", if ok { "mcu: all runs match PyTorch" } else { "mcu: FAILED" });
    debug::exit(if ok { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    #[allow(clippy::empty_loop)]
    loop {}
}
