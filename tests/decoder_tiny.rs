//! The tiny random Llama (tests/data/tiny-llama) in f32, bf16 and f16, with both config
//! dialects, against PyTorch's float32 reference: prefill and decode logits, the residual
//! stream per layer, and the greedy tokens.

mod decoder_common;

use decoder_common::{argmax, data, leak_aligned, max_abs_diff, Reference};
use rml::format::safetensors::SafeTensors;
use rml::model::config::parse_config;
use rml::model::{DecoderLM, DecoderOptions, Hidden, Stage};
use rml::{Code, InlineExecutor};

const TOL: f32 = 1e-4;

fn model(dtype: &str, config: &str, options: DecoderOptions) -> DecoderLM<'static> {
    let dir = data(&format!("tiny-llama/{dtype}"));
    let cfg = parse_config(&std::fs::read_to_string(dir.join(config)).unwrap()).unwrap();
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    let st: &'static SafeTensors<'static> = Box::leak(Box::new(st));
    DecoderLM::new(&cfg, st, &InlineExecutor, options).unwrap()
}

fn reference(dtype: &str) -> Reference {
    Reference::open(&data(&format!("tiny-llama/{dtype}/reference.safetensors")))
}

/// Prefill with every logit and the hidden states, then greedy decode, all against the
/// reference.
fn check(dtype: &str, config: &str) {
    let r = reference(dtype);
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let mut m = model(dtype, config, DecoderOptions::default());
    let vocab = m.config().vocab_size;
    let h = m.config().hidden_size;
    let mut logits = vec![0f32; prompt.len() * vocab];
    let mut hidden: Vec<(Stage, Vec<f32>)> = Vec::new();
    let mut observe = |s: &Hidden<'_>| hidden.push((s.stage, s.data.to_vec()));
    let last = m.forward(&prompt, Some(&mut logits), Some(&mut observe)).unwrap().to_vec();
    let what = format!("{dtype} {config}");
    let d = max_abs_diff(&logits, &r.f32s("prefill_logits"));
    assert!(d <= TOL, "{what}: prefill logits differ by {d}");
    eprintln!("{what}: prefill logits max abs diff {d:.2e}");
    assert_eq!(last, logits[(prompt.len() - 1) * vocab..], "{what}: last row");
    let names =
        ["hidden.embed_out", "hidden.layer0_out", "hidden.layer1_out", "hidden.final_norm_out"];
    let stages = [Stage::Embedding, Stage::Layer(0), Stage::Layer(1), Stage::FinalNorm];
    assert_eq!(hidden.iter().map(|(s, _)| *s).collect::<Vec<_>>(), stages);
    for ((_, got), name) in hidden.iter().zip(names) {
        assert_eq!(got.len(), prompt.len() * h);
        let d = max_abs_diff(got, &r.f32s(name));
        assert!(d <= TOL, "{what}: {name} differs by {d}");
    }
    // Greedy: argmax after the prompt, then 8 decode steps fed the reference tokens.
    assert_eq!(argmax(&last), generated[0], "{what}: first greedy token");
    let want = r.f32s("decode_logits");
    for (i, &tok) in generated[..generated.len() - 1].iter().enumerate() {
        let got = m.decode(tok).unwrap();
        let d = max_abs_diff(got, &want[i * vocab..(i + 1) * vocab]);
        assert!(d <= TOL, "{what}: decode step {i} differs by {d}");
        assert_eq!(argmax(got), generated[i + 1], "{what}: greedy token {}", i + 1);
    }
    assert_eq!(m.position(), prompt.len() + generated.len() - 1);
}

#[test]
fn f32_matches_pytorch() {
    check("f32", "config.json");
    check("f32", "config.transformers4.json");
}

#[test]
fn bf16_matches_pytorch() {
    check("bf16", "config.json");
    check("bf16", "config.transformers4.json");
}

#[test]
fn f16_matches_pytorch() {
    check("f16", "config.json");
    check("f16", "config.transformers4.json");
}

#[test]
fn the_reference_greedy_tokens_are_the_documented_ones() {
    let r = reference("f32");
    assert_eq!(
        r.tokens("prompt"),
        [1, 17, 42, 99, 3, 250, 128, 7, 64, 200, 13, 77, 5, 31, 180, 222]
    );
    assert_eq!(r.tokens("generated"), [103, 134, 245, 181, 8, 149, 139, 99, 67]);
}

#[test]
fn chunked_prefill_and_token_by_token_agree_with_one_prefill() {
    let r = reference("f32");
    let prompt = r.tokens("prompt");
    let mut one = model("f32", "config.json", DecoderOptions::default());
    let whole = one.prefill(&prompt).unwrap().to_vec();
    let opts = DecoderOptions { prefill_chunk: 5, ..DecoderOptions::default() };
    let mut chunked = model("f32", "config.json", opts);
    let d = max_abs_diff(chunked.prefill(&prompt).unwrap(), &whole);
    assert!(d <= 1e-5, "chunked prefill differs by {d}");
    let mut steps = model("f32", "config.json", DecoderOptions::default());
    let mut last = Vec::new();
    for &t in &prompt {
        last = steps.decode(t).unwrap().to_vec();
    }
    let d = max_abs_diff(&last, &whole);
    assert!(d <= 1e-5, "token-by-token differs by {d}");
    // The full recompute of prompt + generated without a cache: the last row.
    let seq: Vec<u32> = prompt.iter().chain(&r.tokens("generated")[..8]).copied().collect();
    one.reset();
    let full = r.f32s("full_recompute_logits");
    let got = one.prefill(&seq).unwrap();
    let d = max_abs_diff(got, &full[23 * 256..]);
    assert!(d <= TOL, "full recompute last row differs by {d}");
}

#[test]
fn context_overflow_and_bad_tokens_are_errors_that_change_nothing() {
    let opts = DecoderOptions { context_len: Some(8), ..DecoderOptions::default() };
    let mut m = model("f32", "config.json", opts);
    assert_eq!(m.context_len(), 8);
    let first = m.prefill(&[1, 2, 3, 4, 5, 6]).unwrap().to_vec();
    let e = m.prefill(&[7, 8, 9]).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert_eq!(m.position(), 6);
    let e = m.decode(256).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert!(e.to_string().contains("256"), "{e}");
    assert_eq!(m.forward(&[], None, None).unwrap_err().code(), Code::InvalidArgument);
    m.decode(7).unwrap();
    m.decode(8).unwrap();
    assert_eq!(m.decode(9).unwrap_err().code(), Code::OutOfRange);
    // Rewinding replays the same step (GEMV now, GEMM in the prefill).
    m.rewind(5).unwrap();
    let d = max_abs_diff(m.decode(6).unwrap(), &first);
    assert!(d <= 1e-5, "replay after rewind differs by {d}");
    assert_eq!(m.rewind(9).unwrap_err().code(), Code::OutOfRange);
    // A context past max_position_embeddings (512) or of 0 is refused.
    let dir = data("tiny-llama/f32");
    let cfg = parse_config(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    for ctx in [0, 513] {
        let opts = DecoderOptions { context_len: Some(ctx), ..DecoderOptions::default() };
        let e = DecoderLM::new(&cfg, &st, &InlineExecutor, opts).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    }
    // Default context: min(max_position_embeddings, 4096).
    let m = DecoderLM::new(&cfg, &st, &InlineExecutor, DecoderOptions::default()).unwrap();
    assert_eq!(m.context_len(), 512);
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let dir = data("tiny-llama/f32");
    let mut cfg = parse_config(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    cfg.num_hidden_layers = 3;
    cfg.layer_types.resize(3, cfg.layer_types[0]);
    let e = DecoderLM::new(&cfg, &st, &InlineExecutor, DecoderOptions::default()).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(e.to_string().contains("model.layers.2."), "{e}");
    cfg.num_hidden_layers = 2;
    cfg.layer_types.truncate(2);
    cfg.intermediate_size = 160;
    let e = DecoderLM::new(&cfg, &st, &InlineExecutor, DecoderOptions::default()).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("model.layers.0.mlp.gate_proj.weight"), "{e}");
}

#[test]
fn weights_are_used_in_place() {
    for dtype in ["f32", "bf16", "f16"] {
        let m = model(dtype, "config.json", DecoderOptions::default());
        let w = m.weights();
        assert!(w.matrices().all(|l| l.is_borrowed()), "{dtype}: a matrix was copied");
        assert!(w.lm_head.is_some(), "tiny-llama has an untied lm_head");
    }
}

#[test]
fn q8_0_weights_at_load_stay_close() {
    use rml::model::WeightFormat;
    use rml::ops::Activations;
    use rml::DType;
    let r = reference("f32");
    let prompt = r.tokens("prompt");
    let want = r.f32s("prefill_logits");
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    for dtype in ["f32", "bf16", "f16"] {
        for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
            let opts = DecoderOptions {
                weight_format: WeightFormat::Q8_0,
                activations: act,
                ..DecoderOptions::default()
            };
            let mut m = model(dtype, "config.json", opts);
            for l in m.weights().matrices() {
                // Rows of 176 (the MLP's down projection) do not split into 32-blocks and
                // stay as stored.
                let quantized = l.k() % 32 == 0;
                assert_eq!(l.dtype() == DType::Q8_0, quantized, "{}", l.name());
                assert_eq!(l.is_borrowed(), !quantized, "{}", l.name());
            }
            let mut logits = vec![0f32; prompt.len() * 256];
            m.forward(&prompt, Some(&mut logits), None).unwrap();
            let d = max_abs_diff(&logits, &want);
            eprintln!(
                "tiny {dtype} as Q8_0, {act:?}: max abs diff {d:.3e} (logit scale {scale:.1})"
            );
            assert!(d <= 0.1 * scale, "{dtype} {act:?}: {d}");
            assert_eq!(argmax(&logits[15 * 256..]), r.tokens("generated")[0]);
        }
    }
}

#[cfg(feature = "std")]
#[test]
fn inline_and_pools_give_bit_identical_logits_for_every_schedule() {
    use rml::exec::{Schedule, ThreadPool};
    let r = reference("f32");
    let prompt = r.tokens("prompt");
    let generated = r.tokens("generated");
    let run = |exec: &dyn rml::Executor, schedule: Option<Schedule>| {
        let dir = data("tiny-llama/f32");
        let cfg = parse_config(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
        // Chunks of 7 so that prefill runs GEMM on several chunk sizes.
        let opts = DecoderOptions { schedule, prefill_chunk: 7, ..DecoderOptions::default() };
        let mut m = DecoderLM::new(&cfg, &st, exec, opts).unwrap();
        let mut all = vec![0f32; prompt.len() * 256];
        m.forward(&prompt, Some(&mut all), None).unwrap();
        for &t in &generated[..8] {
            all.extend_from_slice(m.decode(t).unwrap());
        }
        all
    };
    let want = run(&InlineExecutor, None);
    for threads in [2, 3] {
        let pool = ThreadPool::new(threads);
        for schedule in Schedule::ALL.into_iter().chain([Schedule::Grain(4)]) {
            let got = run(&pool, Some(schedule));
            assert!(got == want, "{threads} threads, {schedule}: logits differ from inline");
        }
        assert_eq!(run(&pool, None), want, "{threads} threads, pool default");
    }
}
