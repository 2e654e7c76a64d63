//! SmolLM2-135M-Instruct (GGUF Q4_1) against transformers' float32 forward on
//! the dequantized weights (tests/data/smollm2-135m/reference.safetensors), teacher-forced over
//! the prompt and the 16 generated tokens: logits after the prompt (`prefill_logits_last`) and
//! after each decode step (`decode_logits`), and the argmax at all 17 positions. The model is
//! found or fetched as `rml` does (tests/common/smollm2.rs); a test fails, never skips, without it.
#![cfg(feature = "std")]

mod decoder_common;

use decoder_common::{argmax, data, max_abs_diff, smollm2_gguf, Reference};
use rml::load::Model;
use rml::model::{DecoderLM, DecoderOptions, Hidden, Stage};
use rml::ops::Activations;
use rml::InlineExecutor;

/// Max abs logit diff and how many of the 17 argmaxes match the reference tokens.
pub fn teacher_forced(model: &Model, activations: Activations) -> (f32, usize) {
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let opts = DecoderOptions { context_len: Some(64), activations, ..DecoderOptions::default() };
    let mut m = DecoderLM::new(model.config(), &model, &InlineExecutor, opts).unwrap();
    let vocab = m.config().vocab_size;
    let logits = m.prefill(&prompt).unwrap();
    let mut worst = max_abs_diff(logits, &r.f32s("prefill_logits_last"));
    let mut agree = usize::from(argmax(logits) == generated[0]);
    let want = r.f32s("decode_logits");
    for i in 0..16 {
        let logits = m.decode(generated[i]).unwrap();
        worst = worst.max(max_abs_diff(logits, &want[i * vocab..(i + 1) * vocab]));
        agree += usize::from(argmax(logits) == generated[i + 1]);
    }
    (worst, agree)
}

#[test]
fn gguf_q4_1_f32_activations_match_transformers() {
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    let (diff, agree) = teacher_forced(&model, Activations::F32);
    eprintln!("SmolLM2 Q4_1, f32 activations: max abs logit diff {diff:.3e}, argmax {agree}/17");
    assert!(diff <= 2e-3, "max abs logit diff {diff}");
    assert_eq!(agree, 17);
}

/// Int8 activations quantize every matmul input to Q8_0 blocks (`d = amax / 127` per 32
/// values): about 1% relative error per product on SmolLM2's heavy-tailed activations, which
/// the kernels reproduce exactly (their int8 products match a float64 dot with the ideally
/// quantized input to ~1e-7). Over 30 layers that moves the logits by 0.1-0.35 on average and
/// 0.86 at most (measured), so the bound here is 1.0, not the 0.5 the issue guessed; even with
/// only the gate/up products in int8 the maximum is 0.56. Decode step 11 is borderline (the
/// reference's top three logits lie within 0.053 of each other): it missed with the per-head
/// attention and matches with the tiled one, so at least 16 of 17 must agree.
#[test]
fn gguf_q4_1_int8_activations_stay_close() {
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    let (diff, agree) = teacher_forced(&model, Activations::Int8Plain);
    eprintln!("SmolLM2 Q4_1, int8 activations: max abs logit diff {diff:.3e}, argmax {agree}/17");
    assert!(diff <= 1.0, "max abs logit diff {diff}");
    assert!(agree >= 16, "argmax agrees at {agree}/17 positions");
    // Issue 13 item 5: the README states this measured agreement, and no longer claims that
    // int8 gives the same greedy text (it does not, e.g. for "The capital of France is").
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let stated = format!("the int8 argmax equals transformers' at {agree} of 17 positions");
    assert!(readme.contains(&stated), "README.md does not state {stated:?}");
    assert!(!readme.contains("the greedy text is the same"), "README.md claims identical text");
}

/// The default, int8 with outlier-block correction on the normalized inputs: over this
/// fixture's 17 positions the largest logit error is 0.714 against plain int8's 0.795
/// (measured; over the 3,746 positions of the README's agreement table the mean halves too),
/// and every argmax equals transformers'.
#[test]
fn gguf_q4_1_default_int8_activations_stay_closer() {
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    assert_eq!(DecoderOptions::default().activations, Activations::Int8);
    let (diff, agree) = teacher_forced(&model, Activations::Int8);
    let (plain, _) = teacher_forced(&model, Activations::Int8Plain);
    eprintln!(
        "SmolLM2 Q4_1, corrected int8 activations: max abs logit diff {diff:.3e} (plain int8 \
         {plain:.3e}), argmax {agree}/17"
    );
    assert!(diff <= 0.75 && diff < plain, "max abs logit diff {diff}, plain int8 {plain}");
    assert_eq!(agree, 17, "argmax agrees at {agree}/17 positions");
}

#[test]
fn gguf_hidden_states_follow_the_reference() {
    // The residual stream reaches ~22,000; compare relative to each layer's largest value.
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let opts = DecoderOptions {
        context_len: Some(16),
        activations: Activations::F32,
        ..DecoderOptions::default()
    };
    let mut m = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
    let mut seen = 0;
    let mut observe = |s: &Hidden<'_>| {
        let name = match s.stage {
            Stage::Embedding => "hidden.embed_out".to_string(),
            Stage::Layer(l) => format!("hidden.layer{l}_out"),
            Stage::FinalNorm => "hidden.final_norm_out".to_string(),
        };
        let want = r.f32s(&name);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = max_abs_diff(s.data, &want);
        assert!(d <= 1e-5 * scale.max(1.0), "{name}: max abs diff {d} at scale {scale}");
        seen += 1;
    };
    m.forward(&r.tokens("prompt"), None, Some(&mut observe)).unwrap();
    assert_eq!(seen, 32);
}

#[test]
fn gguf_pool_and_inline_are_bit_identical() {
    use rml::exec::{Schedule, ThreadPool};
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
        let run = |exec: &dyn rml::Executor, schedule: Option<Schedule>| {
            let opts = DecoderOptions {
                context_len: Some(32),
                activations: act,
                schedule,
                ..DecoderOptions::default()
            };
            let mut m = DecoderLM::new(model.config(), &&model, exec, opts).unwrap();
            let mut out = m.prefill(&prompt).unwrap().to_vec();
            for &t in &generated[..4] {
                out.extend_from_slice(m.decode(t).unwrap());
            }
            out
        };
        let want = run(&InlineExecutor, None);
        let pool = ThreadPool::new(2);
        for schedule in
            [None, Some(Schedule::Static), Some(Schedule::Fixed8), Some(Schedule::Adaptive)]
        {
            assert!(
                run(&pool, schedule) == want,
                "{act:?}, {schedule:?}: pool differs from inline"
            );
        }
    }
}
