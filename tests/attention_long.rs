//! Long contexts: the grouped, tiled attention (the default) against the per-head reference
//! path (`AttentionPath::PerHead`, the attention rml had before) with teacher-forced logits
//! after 1,000+ tokens, on tiny fixtures (tiny-llama: 2 query heads per KV head; tiny-gemma3:
//! 4 per KV head, sliding-window layers) and, optimised, on SmolLM2-135M; bit-identical logits
//! across thread counts and schedules; and the f16 KV cache against the f32 one.
#![cfg(feature = "std")]

mod decoder_common;

use decoder_common::{argmax, data, leak_aligned, max_abs_diff, smollm2_gguf, Reference};
use rml::exec::{Schedule, ThreadPool};
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::load::Model;
use rml::model::config::{parse_config, ModelConfig};
use rml::model::{AttentionPath, DecoderLM, DecoderOptions, KvDtype};
use rml::ops::Activations;
use rml::{Executor, InlineExecutor};

/// Positions of the long runs: past 1,000 and past several 256-position decode segments.
const LONG: usize = 1100;

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((s >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// A tiny fixture's config with room for `LONG + 64` positions, and its weights.
fn tiny(dir: &str) -> (ModelConfig, &'static dyn TensorSource<'static>) {
    let dir = data(dir);
    let mut cfg = parse_config(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg.max_position_embeddings = cfg.max_position_embeddings.max(LONG + 64);
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    (cfg, Box::leak(Box::new(st)))
}

/// Teacher-forced logits of every prompt position (prefill in chunks of `chunk`), then of 20
/// decode steps.
fn run(
    cfg: &ModelConfig,
    src: &dyn TensorSource<'_>,
    exec: &dyn Executor,
    opts: DecoderOptions,
    prompt: &[u32],
    steps: &[u32],
) -> Vec<f32> {
    let opts = DecoderOptions { context_len: Some(prompt.len() + steps.len()), ..opts };
    let mut m = DecoderLM::new(cfg, src, exec, opts).unwrap();
    let vocab = cfg.vocab_size;
    let mut all = vec![0f32; prompt.len() * vocab];
    m.forward(prompt, Some(&mut all), None).unwrap();
    for &t in steps {
        all.extend_from_slice(m.decode(t).unwrap());
    }
    all
}

fn tiled_equals_per_head(dir: &str) {
    let (cfg, st) = tiny(dir);
    let toks = tokens(LONG + 20, cfg.vocab_size, 5);
    let (prompt, steps) = toks.split_at(LONG);
    let tiled = run(&cfg, st, &InlineExecutor, DecoderOptions::default(), prompt, steps);
    let oracle = DecoderOptions { attention: AttentionPath::PerHead, ..DecoderOptions::default() };
    let want = run(&cfg, st, &InlineExecutor, oracle, prompt, steps);
    let vocab = cfg.vocab_size;
    let d = max_abs_diff(&tiled, &want);
    let tail = max_abs_diff(&tiled[(LONG - 100) * vocab..], &want[(LONG - 100) * vocab..]);
    let scale = want.iter().fold(0f32, |a, &b| a.max(b.abs()));
    eprintln!(
        "{dir}: {LONG} prompt + 20 decode positions, tiled vs per-head max abs logit diff \
         {d:.2e} (last 120 positions {tail:.2e}; logits up to {scale:.2})"
    );
    assert!(d <= 1e-4, "{dir}: tiled attention differs from the per-head path by {d}");
}

#[test]
fn tiny_llama_long_context_tiled_equals_per_head() {
    tiled_equals_per_head("tiny-llama/f32");
}

#[test]
fn tiny_gemma3_long_context_tiled_equals_per_head() {
    // Sliding-window layers (window 8) and 4 query heads per KV head.
    tiled_equals_per_head("tiny-gemma3");
}

#[test]
fn tiled_logits_are_bit_identical_across_threads_and_schedules() {
    for dir in ["tiny-llama/f32", "tiny-gemma3"] {
        let (cfg, st) = tiny(dir);
        let toks = tokens(700, cfg.vocab_size, 9);
        let (prompt, steps) = toks.split_at(680);
        for kv_dtype in [KvDtype::F32, KvDtype::F16] {
            let opts = DecoderOptions { kv_dtype, prefill_chunk: 37, ..DecoderOptions::default() };
            let want = run(&cfg, st, &InlineExecutor, opts, prompt, steps);
            for threads in [1, 2, 3] {
                let pool = ThreadPool::new(threads);
                for schedule in [None, Some(Schedule::Static), Some(Schedule::Fixed8)]
                    .into_iter()
                    .chain(Schedule::ALL.into_iter().map(Some))
                {
                    let opts = DecoderOptions { schedule, ..opts };
                    let got = run(&cfg, st, &pool, opts, prompt, steps);
                    assert!(
                        got == want,
                        "{dir} {kv_dtype:?}: {threads} threads, {schedule:?} differ from inline"
                    );
                }
            }
        }
    }
}

#[test]
fn f16_kv_cache_stays_close_to_f32_on_tiny_models() {
    for dir in ["tiny-llama/f32", "tiny-gemma3"] {
        let (cfg, st) = tiny(dir);
        let toks = tokens(LONG + 20, cfg.vocab_size, 3);
        let (prompt, steps) = toks.split_at(LONG);
        let f32s = run(&cfg, st, &InlineExecutor, DecoderOptions::default(), prompt, steps);
        let opts = DecoderOptions { kv_dtype: KvDtype::F16, ..DecoderOptions::default() };
        let f16s = run(&cfg, st, &InlineExecutor, opts, prompt, steps);
        let d = max_abs_diff(&f16s, &f32s);
        let scale = f32s.iter().fold(0f32, |a, &b| a.max(b.abs()));
        eprintln!("{dir}: f16 KV vs f32 KV max abs logit diff {d:.2e} (logits up to {scale:.2})");
        assert!(d <= 5e-3 * scale.max(1.0), "{dir}: f16 KV differs by {d}");
        assert!(d > 0.0, "{dir}: the f16 cache changed nothing (is it f16?)");
    }
}

/// SmolLM2-135M Q4_1: 1,100 random tokens prefilled in chunks of 64, then 16 teacher-forced
/// decode steps; logits after the prompt and after each step, tiled vs per-head.
#[test]
fn smollm2_long_context_tiled_equals_per_head() {
    let model = Model::open(smollm2_gguf()).unwrap();
    let cfg = model.config();
    let toks = tokens(LONG + 16, cfg.vocab_size, 1);
    let (prompt, steps) = toks.split_at(LONG);
    let pool = ThreadPool::new(2);
    let logits = |attention: AttentionPath, kv_dtype: KvDtype| {
        // f32 activations: the comparison is of the attention paths alone (int8 activations
        // would turn their 1e-6 differences into requantized inputs).
        let opts = DecoderOptions {
            context_len: Some(LONG + 16),
            attention,
            kv_dtype,
            activations: Activations::F32,
            ..DecoderOptions::default()
        };
        let mut m = DecoderLM::new(cfg, &&model, &pool, opts).unwrap();
        let mut all = m.prefill(prompt).unwrap().to_vec();
        for &t in steps {
            all.extend_from_slice(m.decode(t).unwrap());
        }
        all
    };
    let want = logits(AttentionPath::PerHead, KvDtype::F32);
    let tiled = logits(AttentionPath::Tiled, KvDtype::F32);
    let d = max_abs_diff(&tiled, &want);
    let scale = want.iter().fold(0f32, |a, &b| a.max(b.abs()));
    eprintln!(
        "SmolLM2 at {LONG}..{} positions: tiled vs per-head max abs logit diff {d:.2e} (logits up \
         to {scale:.1})",
        LONG + 16
    );
    assert!(d <= 1e-4, "SmolLM2: tiled attention differs from the per-head path by {d}");
    let f16 = logits(AttentionPath::Tiled, KvDtype::F16);
    let d16 = max_abs_diff(&f16, &want);
    let vocab = cfg.vocab_size;
    let agree = (0..=16).filter(|&i| {
        argmax(&f16[i * vocab..(i + 1) * vocab]) == argmax(&want[i * vocab..(i + 1) * vocab])
    });
    eprintln!("SmolLM2 f16 KV vs f32: max abs logit diff {d16:.2e}, argmax {}/17", agree.count());
    assert!(d16 <= 0.1, "SmolLM2 f16 KV differs by {d16}");
}

/// The README's prompt ("Once upon a time, there was a little", the fixture's) generates the
/// same 16 greedy tokens with the f16 cache as transformers' reference (and rml's f32 cache).
#[test]
fn smollm2_f16_kv_cache_keeps_the_greedy_text() {
    let model = Model::open(smollm2_gguf()).unwrap();
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let mut worst = 0f32;
    for kv_dtype in [KvDtype::F32, KvDtype::F16] {
        let opts = DecoderOptions {
            context_len: Some(64),
            kv_dtype,
            activations: Activations::F32,
            ..DecoderOptions::default()
        };
        let mut m = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
        let mut tok = argmax(m.prefill(&prompt).unwrap());
        let mut got = vec![tok];
        let want = r.f32s("decode_logits");
        let vocab = model.config().vocab_size;
        for i in 0..15 {
            let logits = m.decode(tok).unwrap();
            worst = worst.max(max_abs_diff(logits, &want[i * vocab..(i + 1) * vocab]));
            tok = argmax(logits);
            got.push(tok);
        }
        assert_eq!(got, generated[..16], "{kv_dtype:?}: greedy tokens differ");
    }
    eprintln!(
        "SmolLM2 greedy 16 tokens equal with f32 and f16 KV (max diff from reference {worst:.2e})"
    );
}
