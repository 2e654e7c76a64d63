//! A real model nobody here made: Gemma 3 270M, GGUF Q4_K_M (found or fetched on first use:
//! tests/common/gemma3.rs), greedy continuations against llama.cpp's.
//!
//! The file carries no local/global layer pattern and no local RoPE base: rml does what
//! llama.cpp does (every 6th layer global, local base 10000). llama.cpp quantizes activations
//! to 8 bits, so rml's int8 mode is compared with llama.cpp on this file, and rml's f32 mode
//! (weights dequantized exactly, f32 activations) with llama.cpp on an F32 copy of it.
//!
//! Expected text: llama.cpp 0c1e570 (the peers build, CPU, 2 threads), prompt ids from
//! `llama-tokenize -m FILE -p PROMPT --ids` (BOS added):
//!
//! ```text
//! llama-completion -m gemma-3-270m-q4_k_m.gguf -p PROMPT -n 24 --temp 0 -no-cnv -fa off -nr
//! llama-completion -m gemma-3-270m-q4_k_m.gguf -p PROMPT -n 24 --temp 0 -no-cnv -nr
//! llama-quantize --allow-requantize gemma-3-270m-q4_k_m.gguf F32.gguf F32
//! llama-completion -m F32.gguf -p PROMPT -n 24 --temp 0 -no-cnv [-fa off] -nr
//! ```
//!
//! (`-nr`, no weight repacking: on this machine llama.cpp's AMX path dies with SIGILL.)
//! Outputs:
//! - "My favourite food is": Q4_K_M `-fa off` and default, F32 both: " the one that I eat
//!   with my family. I love to eat with my family because it is a great way to spend".
//! - "The three primary colours are": Q4_K_M `-fa off`: " red, blue and yellow.\n\nThe three
//!   primary colours are red, blue and yellow.\n\nThe three primary colours are"; Q4_K_M
//!   default: the same with "yellow and blue" (the two runs part after " red,"); F32, both:
//!   " red, yellow and blue.\n\nThe three primary colours are red, yellow and blue.\n\nThe
//!   three primary colours are".
#![cfg(feature = "std")]

use rml::load::Model;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::InlineExecutor;

#[path = "common/gemma3.rs"]
mod gemma3;

use gemma3::gemma3_gguf;

/// The text of `ids` from the GGUF vocabulary (SentencePiece pieces: `▁` is a space,
/// `<0xNN>` a byte).
fn detokenize(pieces: &[&str], ids: &[u32]) -> String {
    let mut bytes = Vec::new();
    for &id in ids {
        let p = pieces[id as usize];
        match p.strip_prefix("<0x").and_then(|h| h.strip_suffix('>')) {
            Some(hex) if hex.len() == 2 => bytes.push(u8::from_str_radix(hex, 16).unwrap()),
            _ => bytes.extend_from_slice(p.replace('\u{2581}', " ").as_bytes()),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// rml's greedy continuation of `prompt` (24 tokens) and its pieces' texts, one per token.
fn greedy(model: &Model, prompt: &[u32], activations: Activations) -> Vec<u32> {
    let opts = DecoderOptions { context_len: Some(64), activations, ..DecoderOptions::default() };
    let mut m = DecoderLM::new(model.config(), &model, &InlineExecutor, opts).unwrap();
    let mut out = Vec::new();
    let mut logits = m.prefill(prompt).unwrap().to_vec();
    for _ in 0..24 {
        let t = argmax(&logits);
        out.push(t);
        logits = m.decode(t).unwrap().to_vec();
    }
    out
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

const FOOD: &[u32] = &[2, 4754, 17797, 2780, 563];
const COLOURS: &[u32] = &[2, 818, 1806, 5905, 22640, 659];
const FOOD_OUT: &str = " the one that I eat with my family. I love to eat with my family because it is a great way to spend";
const COLOURS_FA_OFF: &str = " red, blue and yellow.\n\nThe three primary colours are red, blue and yellow.\n\nThe three primary colours are";
const COLOURS_DEFAULT: &str = " red, yellow and blue.\n\nThe three primary colours are red, yellow and blue.\n\nThe three primary colours are";

/// At least `n` leading tokens of rml's continuation, read as text, are a prefix of one of
/// llama.cpp's continuations `want`; returns how many are.
fn agrees(what: &str, pieces: &[&str], got: &[u32], n: usize, want: &[&str]) -> usize {
    let k = (0..=got.len())
        .rev()
        .find(|&k| {
            let text = detokenize(pieces, &got[..k]);
            want.iter().any(|w| w.starts_with(&text))
        })
        .unwrap_or(0);
    eprintln!("{what}: {k} of {} tokens agree; rml {:?}", got.len(), detokenize(pieces, got));
    assert!(
        k >= n,
        "{what}: only {k} tokens agree (want {n}): rml {:?}, llama.cpp {want:?}",
        detokenize(pieces, got)
    );
    k
}

#[test]
fn gemma3_270m_greedy_matches_llama_cpp() {
    let model = Model::open(gemma3_gguf()).unwrap();
    let c = model.config();
    assert_eq!(c.arch.name, "Gemma 3");
    let globals: Vec<usize> = (0..c.num_hidden_layers)
        .filter(|&l| c.layer_types[l] == rml::model::config::LayerKind::Global)
        .collect();
    assert_eq!(globals, [5, 11, 17], "llama.cpp's pattern: every 6th layer global");
    assert_eq!(c.local_rope_theta, Some(10_000.0));
    let g = model.gguf().unwrap().unwrap();
    let pieces = g.tokens().unwrap();
    assert_eq!(detokenize(&pieces, &FOOD[1..]), "My favourite food is");
    assert_eq!(detokenize(&pieces, &COLOURS[1..]), "The three primary colours are");

    // int8 activations vs llama.cpp on the Q4_K_M file: "colours" agrees only up to " red," in
    // llama.cpp's two runs, then rml must follow one of them. "food": int8 rounding amplifies
    // any change upstream to logit differences of up to ~1 on this model (measured: the tiled
    // attention, 1e-6 off the per-head loops, moves the int8 logits by 0.7-0.96 while the f32
    // ones move by 2e-5), and token 5's int8 top-2 margin is 0.035-0.13: with the per-head
    // attention rml followed llama.cpp for 12+ tokens, with the tiled one for 5.
    let food = greedy(&model, FOOD, Activations::Int8Plain);
    agrees("int8, food", &pieces, &food, 5, &[FOOD_OUT]);
    let colours = greedy(&model, COLOURS, Activations::Int8Plain);
    agrees("int8, colours", &pieces, &colours, 12, &[COLOURS_FA_OFF, COLOURS_DEFAULT]);

    // f32 activations (exact dequantization) vs llama.cpp on the F32 copy: 24 tokens.
    let food = greedy(&model, FOOD, Activations::F32);
    agrees("f32, food", &pieces, &food, 24, &[FOOD_OUT]);
    let colours = greedy(&model, COLOURS, Activations::F32);
    agrees("f32, colours", &pieces, &colours, 24, &[COLOURS_DEFAULT]);
}
