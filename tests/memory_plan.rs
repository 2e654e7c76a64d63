//! `DecoderLM::memory_plan` is what construction really takes: a counting `#[global_allocator]`
//! (every heap byte, not only rml's counters) watches `DecoderLM::new` and `DecoderLM::new_in`
//! for every activation mode and weight-conversion case of the tiny Llama fixtures (f32, bf16,
//! f16 safetensors; llama.cpp's Q8_0 GGUF; an f32 file at an odd address, so every matrix is
//! copied) and of every other family's tiny fixture (Qwen2, Qwen3, Gemma 3, Llama 3, Mistral),
//! and a caller region one byte too small is refused naming the need. The same plan check
//! for a 3-slot `DecoderBatch` (`DecoderBatch::memory_plan`), whose steps call no allocator.
//! `harness = false`: libtest allocates on other threads, which would pollute the count.

mod decoder_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::SeqCst};

use decoder_common::{data, leak_aligned, Reference};
use rml::format::gguf::Gguf;
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::model::config::parse_config;
use rml::model::config::ModelConfig;
use rml::model::{
    AttentionPath, DecoderBatch, DecoderLM, DecoderOptions, KvDtype, MemoryPlan, SeqInput,
    WeightFormat,
};
use rml::ops::Activations;
use rml::{Code, InlineExecutor};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, SeqCst);
        LIVE.fetch_add(layout.size() as isize, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, SeqCst);
        LIVE.fetch_add(layout.size() as isize, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        CALLS.fetch_add(1, SeqCst);
        LIVE.fetch_add(new_size as isize - layout.size() as isize, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes live and allocator calls made while `f` runs (its result stays alive).
fn heap_of<T>(f: impl FnOnce() -> T) -> (T, isize, usize) {
    let (live, calls) = (LIVE.load(SeqCst), CALLS.load(SeqCst));
    let out = f();
    (out, LIVE.load(SeqCst) - live, CALLS.load(SeqCst) - calls)
}

struct Case {
    name: &'static str,
    config: ModelConfig,
    src: Box<dyn TensorSource<'static>>,
    /// The weights are Hugging Face floats at aligned addresses: the source-free plan applies.
    hf_floats: bool,
    /// Greedy tokens the decoder must produce (PyTorch's).
    reference: Vec<u32>,
    prompt: Vec<u32>,
}

fn hf_case(name: &'static str, dir: &str) -> Case {
    let config =
        parse_config(&std::fs::read_to_string(data(&format!("{dir}/config.json"))).unwrap())
            .unwrap();
    let bytes = leak_aligned(&data(&format!("{dir}/model.safetensors")));
    let r = Reference::open(&data(&format!("{dir}/reference.safetensors")));
    Case {
        name,
        config,
        src: Box::new(SafeTensors::parse(bytes).unwrap()),
        hf_floats: true,
        reference: r.tokens("generated"),
        prompt: r.tokens("prompt"),
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![
        hf_case("tiny-llama f32", "tiny-llama/f32"),
        hf_case("tiny-llama bf16", "tiny-llama/bf16"),
        hf_case("tiny-llama f16", "tiny-llama/f16"),
        // Every other family (biases, q/k norms, post-norms, windows, rope_freqs-free llama3).
        hf_case("tiny-qwen2 f32", "tiny-qwen2"),
        hf_case("tiny-qwen3 f32", "tiny-qwen3"),
        hf_case("tiny-gemma3 f32", "tiny-gemma3"),
        hf_case("tiny-llama3 bf16", "tiny-llama3"),
        hf_case("tiny-mistral bf16", "tiny-mistral"),
    ];
    // The f32 file one byte past an aligned address: every f32 matrix is copied at load.
    let aligned = leak_aligned(&data("tiny-llama/f32/model.safetensors"));
    let odd: &'static mut [u8] = Box::leak(vec![0u8; aligned.len() + 1].into_boxed_slice());
    odd[1..].copy_from_slice(aligned);
    let mut odd_case = hf_case("tiny-llama f32, misaligned", "tiny-llama/f32");
    odd_case.src = Box::new(SafeTensors::parse(&odd[1..]).unwrap());
    odd_case.hf_floats = false;
    v.push(odd_case);
    let gguf = Gguf::parse(leak_aligned(&data("tiny-llama-gguf/tiny-llama-Q8_0.gguf"))).unwrap();
    let r = Reference::open(&data("tiny-llama-gguf/reference_Q8_0.safetensors"));
    v.push(Case {
        name: "tiny-llama Q8_0 GGUF",
        config: rml::model::config::from_gguf(&gguf).unwrap(),
        src: Box::new(gguf),
        hf_floats: false,
        reference: r.tokens("generated"),
        prompt: r.tokens("prompt"),
    });
    // Q5_0 matrices (with Q8_0 and F16): with int8 activations on AVX-512 the layers' Q5_0
    // matrices are repacked at load (`repack_weights`), a copy the plan counts.
    let gguf = Gguf::parse(leak_aligned(&data("tiny-llama-gguf/tiny-llama-Q4_K_M.gguf"))).unwrap();
    let r = Reference::open(&data("tiny-llama-gguf/reference_Q4_K_M.safetensors"));
    v.push(Case {
        name: "tiny-llama Q4_K_M GGUF",
        config: rml::model::config::from_gguf(&gguf).unwrap(),
        src: Box::new(gguf),
        hf_floats: false,
        reference: r.tokens("generated"),
        prompt: r.tokens("prompt"),
    });
    v
}

/// Prefill and 8 greedy steps; also checks no step touches the heap.
fn greedy(lm: &mut DecoderLM<'_>, prompt: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(9);
    let ((), _, calls) = heap_of(|| {
        let mut t = decoder_common::argmax(lm.prefill(prompt).unwrap());
        out.push(t);
        for _ in 0..8 {
            t = decoder_common::argmax(lm.decode(t).unwrap());
            out.push(t);
        }
    });
    assert_eq!(calls, 0, "prefill + 8 decode steps called the allocator {calls} times");
    out
}

fn check(case: &Case, options: DecoderOptions, what: &str) {
    let src: &dyn TensorSource<'static> = &*case.src;
    let (plan, live, calls) =
        heap_of(|| DecoderLM::memory_plan_for(&case.config, &options, src).unwrap());
    // Probing a file's naming may build (and free) an error message; nothing stays.
    let _ = calls;
    assert_eq!(live, 0, "{what}: memory_plan_for kept heap memory");
    if case.hf_floats {
        let (free, live, calls) =
            heap_of(|| DecoderLM::memory_plan(&case.config, &options).unwrap());
        assert_eq!((live, calls), (0, 0), "{what}: memory_plan allocated");
        assert_eq!(free, plan, "{what}: the source-free plan differs from the file's");
    }
    // The heap build: every byte the global allocator gives is in the plan.
    let (lm, live, _) =
        heap_of(|| DecoderLM::new(&case.config, src, &InlineExecutor, options).unwrap());
    assert_eq!(live, plan.heap_bytes() as isize, "{what}: heap build vs plan {plan}");
    assert_eq!(lm.scratch_capacity(), plan.scratch, "{what}: scratch");
    assert_eq!(lm.kv_cache().size_bytes(), plan.kv_cache, "{what}: KV cache");
    let mut lm = lm;
    let heap_tokens = greedy(&mut lm, &case.prompt);
    let heap_logits = lm.logits().to_vec();
    drop(lm);

    // The caller-memory build: an aligned region of exactly `region_bytes`.
    let need = plan.region_bytes();
    let mut region = rml::mem::AlignedBlock::try_new(need + 1).unwrap();
    let (lm, live, _) = heap_of(|| {
        DecoderLM::new_in(
            &case.config,
            src,
            &InlineExecutor,
            options,
            &mut region.as_mut_slice()[..need],
        )
        .unwrap()
    });
    assert_eq!(live, plan.tables as isize, "{what}: region build's heap vs plan tables");
    let mut lm = lm;
    let region_tokens = greedy(&mut lm, &case.prompt);
    assert_eq!(region_tokens, heap_tokens, "{what}: region vs heap build");
    assert_eq!(lm.logits(), &heap_logits[..], "{what}: region logits differ from the heap build's");
    drop(lm);

    // One byte short, and the same region one byte off a 64-byte boundary.
    let e = DecoderLM::new_in(
        &case.config,
        src,
        &InlineExecutor,
        options,
        &mut region.as_mut_slice()[..need - 1],
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{what}: {e}");
    assert!(e.message().contains(&format!("needs {need} bytes")), "{what}: {e}");
    let e = DecoderLM::new_in(
        &case.config,
        src,
        &InlineExecutor,
        options,
        &mut region.as_mut_slice()[1..],
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{what}: {e}");
    let mut wide = vec![0u8; plan.region_bytes_unaligned() + 1];
    DecoderLM::new_in(&case.config, src, &InlineExecutor, options, &mut wide[1..]).unwrap();

    // Converting to Q8_0 at load moves logits by more than these random models' top-2 margins,
    // so the free-running tokens are only compared for weights as stored.
    if options.activations == Activations::F32 && options.weight_format == WeightFormat::AsStored {
        assert_eq!(heap_tokens, case.reference, "{what}: greedy tokens vs PyTorch");
    }
    println!("ok   {what}: {plan}");
}

/// The same for a 3-slot `DecoderBatch`: the plan is what the heap build takes, and steps
/// (prefill chunks of every slot, then decode tokens of all) call no allocator.
fn check_batch(case: &Case, options: DecoderOptions, what: &str) {
    let src: &dyn TensorSource<'static> = &*case.src;
    let slots = 3;
    let (plan, live, _) =
        heap_of(|| DecoderBatch::memory_plan_for(&case.config, &options, src, slots).unwrap());
    assert_eq!(live, 0, "{what}: batch memory_plan_for kept heap memory");
    if case.hf_floats {
        let (free, live, calls) =
            heap_of(|| DecoderBatch::memory_plan(&case.config, &options, slots).unwrap());
        assert_eq!((live, calls), (0, 0), "{what}: batch memory_plan allocated");
        assert_eq!(free, plan, "{what}: the source-free batch plan differs from the file's");
    }
    let single = DecoderLM::memory_plan_for(&case.config, &options, src).unwrap();
    assert_eq!(plan.kv_cache, slots * single.kv_cache, "{what}: batch KV caches");
    assert_eq!(plan.logits, slots * single.logits, "{what}: batch logits");
    let (b, live, _) =
        heap_of(|| DecoderBatch::new(&case.config, src, &InlineExecutor, options, slots).unwrap());
    assert_eq!(live, plan.heap_bytes() as isize, "{what}: batch heap build vs plan {plan}");
    assert_eq!(b.scratch_capacity(), plan.scratch, "{what}: batch scratch");
    assert_eq!(b.max_step_tokens(), plan.prefill_chunk, "{what}: batch max_step_tokens");
    let kv: usize = (0..slots).map(|s| b.kv_cache(s).size_bytes()).sum();
    assert_eq!(kv, plan.kv_cache, "{what}: batch KV caches");
    let mut b = b;
    let p = &case.prompt;
    let ((), _, calls) = heap_of(|| {
        let mut t = [[0u32; 1]; 3];
        for (s, t) in t.iter_mut().enumerate() {
            let n = p.len().min(b.max_step_tokens());
            b.step(&[SeqInput { slot: s, tokens: &p[..n] }]).unwrap();
            *t = [decoder_common::argmax(b.logits(0))];
        }
        for _ in 0..4 {
            let work: [SeqInput<'_>; 3] =
                core::array::from_fn(|s| SeqInput { slot: s, tokens: &t[s] });
            b.step(&work).unwrap();
            t = core::array::from_fn(|i| [decoder_common::argmax(b.logits(i))]);
        }
    });
    assert_eq!(calls, 0, "{what}: batch steps called the allocator {calls} times");
    println!("ok   {what}, 3-slot batch: {plan}");
}

fn main() {
    let cases = cases();
    let mut n = 0;
    for case in &cases {
        for activations in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
            for weight_format in [WeightFormat::AsStored, WeightFormat::Q8_0] {
                for (context_len, prefill_chunk, kv_dtype) in [
                    (Some(64), 64, KvDtype::F32),
                    (None, 5, KvDtype::F32),
                    (Some(200), 7, KvDtype::F16),
                ] {
                    let options = DecoderOptions {
                        context_len,
                        activations,
                        weight_format,
                        prefill_chunk,
                        kv_dtype,
                        ..DecoderOptions::default()
                    };
                    let what = format!(
                        "{}, {activations:?} activations, {weight_format:?}, context {context_len:?}, chunk {prefill_chunk}, {kv_dtype:?} KV",
                        case.name
                    );
                    check(case, options, &what);
                    check_batch(case, options, &what);
                    n += 1;
                }
            }
        }
    }
    // Repacking's copy, spelled out for the Q4_K_M file: with int8 activations the plan grows
    // by the bytes of the Q5_0 matrices of its layers and head (rows a multiple of 64 long)
    // where the active kernels have a Q5_0x2 body, by those of every matrix there of a type
    // with a row-interleaved kernel (rows a multiple of 8) where they have those, and by
    // nothing elsewhere or with `repack_weights: false`. With f32 activations it grows by 34
    // bytes per 32 weights of each matrix of a type the kernels widen to Q8_0
    // (`Kernels::f32_via_q8_0`: Q5_0 on AVX2). Its embedding is untied: never copied.
    let q = cases.iter().find(|c| c.name == "tiny-llama Q4_K_M GGUF").unwrap();
    let src: &dyn TensorSource<'static> = &*q.src;
    let plan = |activations, repack_weights| {
        let o = DecoderOptions { activations, repack_weights, ..DecoderOptions::default() };
        DecoderLM::memory_plan_for(&q.config, &o, src).unwrap().converted
    };
    let kern = rml::kernels::active().unwrap();
    let simd = kern.has_simd_q8(rml::DType::Q5_0x2);
    let (mut q5_0, mut copied, mut widened) = (0, 0, 0);
    assert!(!q.config.tie_word_embeddings);
    for name in src.tensor_names() {
        let t = src.tensor(name).unwrap();
        let (rows, k) = (t.shape.dims()[0], *t.shape.dims().last().unwrap());
        if t.shape.dims().len() != 2 || !(name.starts_with("blk.") || name == "output.weight") {
            continue;
        }
        if t.dtype == rml::DType::Q5_0 && k % 64 == 0 {
            q5_0 += t.data.len();
            copied += if simd { t.data.len() } else { 0 };
        }
        if !simd && rows % 8 == 0 && kern.matmul_q8_rows8(t.dtype).is_some() {
            copied += t.data.len();
        }
        if kern.f32_via_q8_0(t.dtype) {
            widened += rows * k / 32 * 34;
        }
    }
    assert!(q5_0 > 0, "the Q4_K_M file has no Q5_0 layer matrices");
    assert_eq!(plan(Activations::Int8, true), copied);
    assert_eq!(plan(Activations::Int8Plain, true), plan(Activations::Int8, true));
    assert_eq!((plan(Activations::Int8, false), plan(Activations::F32, false)), (0, 0));
    assert_eq!(plan(Activations::F32, true), widened);
    assert_eq!(plan(Activations::Mixed, true), 0);
    println!(
        "ok   tiny-llama Q4_K_M GGUF: repacking copies {} bytes (f32 activations: {})",
        plan(Activations::Int8, true),
        plan(Activations::F32, true)
    );

    // The plan's parts, spelled out for the f32 file (2 layers, 2 KV heads, head_dim 16,
    // context 64, vocab 256, hidden 64).
    let c = &cases[0].config;
    let opts = DecoderOptions { context_len: Some(64), ..DecoderOptions::default() };
    let p: MemoryPlan = DecoderLM::memory_plan(c, &opts).unwrap();
    assert_eq!(p.kv_cache, 2 * 2 * 2 * 64 * 16 * 4);
    // An f16 cache is half the bytes; the scratch grows by the tiles each attention item widens
    // keys and values into (2 x 32 positions x 16 floats) for its 2 KV heads x 16 row tiles
    // of 4 (the prefill chunk of 64).
    let half = DecoderOptions { kv_dtype: KvDtype::F16, ..opts };
    let ph: MemoryPlan = DecoderLM::memory_plan(c, &half).unwrap();
    assert_eq!(ph.kv_cache, 2 * 2 * 2 * 64 * 16 * 2);
    assert_eq!(ph.scratch, p.scratch + 2 * 16 * (2 * 32 * 16) * 4);
    assert_eq!((ph.logits, ph.buffers), (p.logits, p.buffers));
    // The per-head reference path runs on an f32 cache only.
    let per_head = DecoderOptions { attention: AttentionPath::PerHead, ..half };
    assert_eq!(DecoderLM::memory_plan(c, &per_head).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!((p.logits, p.rope, p.norms, p.converted), (256 * 4, 8 * 4, 5 * 64 * 4, 0));
    assert_eq!(p.buffers, 2 + 1 + 1 + 1 + 5);
    // Bad options are refused by the plan as by construction.
    let bad = DecoderOptions { context_len: Some(0), ..DecoderOptions::default() };
    assert_eq!(DecoderLM::memory_plan(c, &bad).unwrap_err().code(), Code::InvalidArgument);
    println!("{n} memory plan cases passed");
}
