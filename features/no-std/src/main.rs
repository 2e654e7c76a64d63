//! A `#![no_std]`, `#![no_main]` consumer of rml with no features: its own static heap as the
//! global allocator, its own panic handler, and libc only for `write` and the entry point
//! (x86_64 / aarch64 Linux hosts). Firmware replaces those two with its board's.
//!
//! It exercises aligned allocation, the four counters, the arena and a kernel, then runs the
//! tiny Llama (2 layers, hidden 64) from `include_bytes!` and checks its greedy tokens against
//! PyTorch's; it exits non-zero if anything is off.
#![no_std]
#![no_main]

extern crate alloc;

use core::fmt::Write;

use linked_list_allocator::LockedHeap;
use rml::mem::{self, AlignedBlock, Arena};

const HEAP_BYTES: usize = 8 << 20;
static mut HEAP: [u8; HEAP_BYTES] = [0; HEAP_BYTES];

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

#[link(name = "c")]
extern "C" {
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
}

struct Stdout;
impl Write for Stdout {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: `s` is valid for `s.len()` bytes; fd 1 is stdout.
        unsafe { write(1, s.as_ptr(), s.len()) };
        Ok(())
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let _ = writeln!(Stdout, "panic: {info}");
    extern "C" {
        fn _exit(code: i32) -> !;
    }
    // SAFETY: `_exit` ends the process; it has no preconditions.
    unsafe { _exit(101) }
}

// The prebuilt `alloc` references the unwinder; with `panic = "abort"` nothing unwinds, so these
// symbols only need to exist. (Firmware builds with `-Zbuild-std` do not need them.)
#[no_mangle]
extern "C" fn rust_eh_personality() {}

#[no_mangle]
extern "C" fn _Unwind_Resume() -> ! {
    extern "C" {
        fn abort() -> !;
    }
    // SAFETY: abort ends the process; no preconditions.
    unsafe { abort() }
}

fn check(ok: bool, what: &str) -> bool {
    let _ = writeln!(Stdout, "{} {what}", if ok { "ok  " } else { "FAIL" });
    ok
}

/// The tiny Llama fixture (f32 safetensors + config.json), compiled into the program.
static MODEL: &[u8] = include_bytes!("../../../tests/data/tiny-llama/f32/model.safetensors");
static CONFIG: &str = include_str!("../../../tests/data/tiny-llama/f32/config.json");
/// Prompt and greedy continuation computed by PyTorch (tests/data/tiny-llama/README.md).
const PROMPT: [u32; 16] = [1, 17, 42, 99, 3, 250, 128, 7, 64, 200, 13, 77, 5, 31, 180, 222];
const GREEDY: [u32; 9] = [103, 134, 245, 181, 8, 149, 139, 99, 67];

fn run_tiny_llama() -> bool {
    use rml::format::safetensors::SafeTensors;
    use rml::model::config::parse_config;
    use rml::model::decoder::{DecoderLM, DecoderOptions};
    use rml::model::sample::{Sampler, SamplerConfig};

    let result = (|| -> rml::Result<[u32; 9]> {
        let config = parse_config(CONFIG)?;
        let file = SafeTensors::parse(MODEL)?;
        let mut lm =
            DecoderLM::new(&config, &file, &rml::InlineExecutor, DecoderOptions::default())?;
        let mut sampler = Sampler::new(SamplerConfig::greedy(), config.vocab_size)?;
        let mut out = [0u32; 9];
        let mut next = sampler.sample(lm.prefill(&PROMPT)?)?;
        out[0] = next;
        for slot in out.iter_mut().skip(1) {
            next = sampler.sample(lm.decode(next)?)?;
            *slot = next;
        }
        Ok(out)
    })();
    match result {
        Ok(tokens) => {
            let _ = writeln!(Stdout, "     tiny-llama greedy tokens: {tokens:?}");
            check(tokens == GREEDY, "tiny-llama greedy tokens match PyTorch")
        }
        Err(e) => check(false, &alloc::format!("tiny-llama: {e}")),
    }
}

/// # Safety
///
/// Called once by the C runtime as the program's entry point.
#[no_mangle]
pub extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    // SAFETY: called once, before any allocation; HEAP is used by nothing else.
    unsafe { ALLOCATOR.lock().init(core::ptr::addr_of_mut!(HEAP).cast(), HEAP_BYTES) };
    let mut ok = true;

    let before = mem::stats();
    let block = AlignedBlock::try_new(1000).expect("alloc");
    ok &= check(block.as_ptr() as usize % 64 == 0, "aligned block is 64-byte aligned");
    let during = mem::stats();
    ok &= check(during.allocations == before.allocations + 1, "allocation counted");
    ok &= check(during.live_bytes == before.live_bytes + 1000, "live bytes counted");
    drop(block);
    ok &= check(mem::stats().frees == before.frees + 1, "free counted");
    ok &= check(
        mem::aligned_alloc(usize::MAX - 8).map_err(|e| e.code()).err()
            == Some(rml::Code::ResourceExhausted),
        "usize::MAX - 8 bytes is ResourceExhausted",
    );

    let mut arena = Arena::new(4096).expect("arena");
    let allocs = mem::stats().allocations;
    for _ in 0..100 {
        let a = arena.alloc_slice::<f32>(100).expect("arena slice");
        a[99] = 1.0;
        let b = arena.alloc_slice_aligned::<u8>(10, 256).expect("arena slice");
        ok &= b.as_ptr() as usize % 256 == 0;
        arena.reset();
    }
    ok &= check(mem::stats().allocations == allocs, "100 arena rounds allocate nothing");
    ok &= check(arena.alloc_slice::<u8>(5000).is_err(), "full arena is an error");

    let w: [f32; 64] = core::array::from_fn(|i| i as f32);
    let x = [1.0f32; 64];
    ok &= check(rml::kernels::scalar::dot_f32(&w, &x) == 2016.0, "scalar dot");

    ok &= run_tiny_llama();

    let _ = writeln!(
        Stdout,
        "{}",
        if ok { "no-std consumer: all checks passed" } else { "no-std consumer: FAILED" }
    );
    if ok {
        0
    } else {
        1
    }
}
