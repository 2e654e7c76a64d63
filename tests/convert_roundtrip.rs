//! `rml convert` round trips for every family: each tiny fixture is converted to the other
//! container and back, and the logits of a prefill and decode steps are compared (f32
//! activations, the exact path).
//!
//! - The round trip (input vs the model converted there and back) must give the same logits
//!   bit for bit: each case keeps a lossless dtype chain (f32 → f32, bf16 → bf16, Q8_0 blocks
//!   copied as they are), names map both ways, Gemma's norm weights go `w` → `1 + w` → `w`
//!   (exact: `(1 + w) - 1` is exact by Sterbenz's lemma for `1 + w` in [0.5, 2], and the
//!   loader's `w' + 1` then gives back the same `1 + w`), and q/k rows are permuted and
//!   un-permuted.
//! - The intermediate model (the other container) is compared with a tolerance: where GGUF
//!   permutes the q/k rows (Llama, Mistral) RoPE runs on interleaved pairs and the q·k dot
//!   products add the head's dimensions in another order (rounding differs, ~1e-6 relative);
//!   for the other families it must be bit-identical too.
//! - Mistral's sliding window (8 positions in tiny-mistral) has no GGUF form (llama.cpp writes
//!   Mistral as `llama` without it), so its cases run 8 positions, where the window hides
//!   nothing.
//! - tiny-llama3's `llama3` rope scaling goes into the GGUF as llama.cpp writes it (the
//!   `rope_freqs.weight` divisors, which the GGUF's forward pass uses) plus rml's keys for the
//!   four parameters, which bring it back into config.json; its GGUF → folder → GGUF round
//!   trip starts from that GGUF. llama.cpp's own Llama 3 GGUF has the divisors only and is
//!   refused into a folder (cli_convert.rs).
//! - tiny-llama-gguf holds a SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`),
//!   which rml cannot write as a tokenizer.json, and the fixture has no tokenizer.json to put
//!   beside it (as the Gemma 3 case below does): `convert` refuses it into a folder, naming the
//!   keys (cli_convert.rs). Its family, Llama, round-trips through tiny-llama.
#![cfg(feature = "cli")]

mod decoder_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use decoder_common::{data, max_abs_diff};
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::InlineExecutor;

/// Prefill of the first five tokens, then one decode step per remaining token (8 positions:
/// inside tiny-mistral's window).
const TOKENS: [u32; 8] = [1, 5, 9, 2, 7, 11, 3, 4];

/// The logits after each position from the prefill's last on, concatenated.
fn logits(path: &Path) -> Vec<f32> {
    let model = Model::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let src = PackedSource::new(&model).unwrap();
    let opts = DecoderOptions { activations: Activations::F32, ..DecoderOptions::default() };
    let mut m = DecoderLM::new(model.config(), &src, &InlineExecutor, opts).unwrap();
    let mut out = m.prefill(&TOKENS[..5]).unwrap().to_vec();
    for &t in &TOKENS[5..] {
        out.extend_from_slice(m.decode(t).unwrap());
    }
    out
}

fn convert(input: &Path, output: &Path, dtype: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["convert", input.to_str().unwrap(), output.to_str().unwrap(), "--dtype", dtype])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{} -> {}: {}",
        input.display(),
        output.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A fresh, empty folder under the test's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Copies the files `names` of `from` (those that exist) into `to`.
fn copy(from: &Path, to: &Path, names: &[&str]) {
    for n in names {
        if from.join(n).is_file() {
            std::fs::copy(from.join(n), to.join(n)).unwrap();
        }
    }
}

const FOLDER_FILES: [&str; 4] =
    ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];

/// Asserts bit-identical logits, or within `tol` when `tol > 0`; returns the largest
/// difference.
fn same(what: &str, a: &[f32], b: &[f32], tol: f32) -> f32 {
    assert_eq!(a.len(), b.len(), "{what}");
    let d = max_abs_diff(a, b);
    if tol == 0.0 {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(a) == bits(b), "{what}: logits differ (max |diff| {d:e})");
    } else {
        assert!(d <= tol, "{what}: max |diff| {d:e} above {tol:e}");
    }
    eprintln!("{what}: max |diff| {d:e}");
    d
}

/// Safetensors folder → GGUF → safetensors folder, for every family with a Hugging Face
/// fixture (tiny-llama, tiny-mistral, tiny-qwen2, tiny-qwen3, tiny-gemma3).
#[test]
fn folders_round_trip_through_gguf_for_every_family() {
    for (rel, dtype, permuted) in [
        ("tiny-llama/f32", "f32", true),
        ("tiny-mistral", "bf16", true),
        ("tiny-qwen2", "f32", false),
        ("tiny-qwen3", "f32", false),
        ("tiny-gemma3", "f32", false),
        ("tiny-llama3", "bf16", true),
    ] {
        let name = rel.replace('/', "-");
        let dir = scratch(&format!("roundtrip-{name}"));
        // The GGUF goes into the input folder, beside its tokenizer.json (a GGUF written
        // elsewhere would have no tokenizer, which convert refuses).
        let input = dir.join("in");
        std::fs::create_dir(&input).unwrap();
        copy(&data(rel), &input, &FOLDER_FILES);
        let gguf = input.join("model.gguf");
        let back = dir.join("back");
        convert(&input, &gguf, dtype);
        convert(&gguf, &back, dtype);
        let want = logits(&input);
        let tol = if permuted { 1e-4 } else { 0.0 };
        same(&format!("{name}: folder vs GGUF ({dtype})"), &want, &logits(&gguf), tol);
        same(&format!("{name}: folder vs folder -> GGUF -> folder"), &want, &logits(&back), 0.0);
        if rel == "tiny-llama3" {
            // The rope scaling came back from the GGUF's keys: the folder converts to the same
            // GGUF again (its divisors recomputed from config.json), the GGUF -> folder -> GGUF
            // round trip of rml's Llama 3 GGUF.
            let again = back.join("again.gguf");
            convert(&back, &again, dtype);
            same(
                &format!("{name}: GGUF vs GGUF -> folder -> GGUF"),
                &logits(&gguf),
                &logits(&again),
                0.0,
            );
            let tensors = |p: &Path| {
                let m = Model::open(p).unwrap();
                let v = m.tensor("rope_freqs.weight").unwrap();
                (v.dtype, v.data.to_vec())
            };
            assert_eq!(tensors(&gguf), tensors(&again), "{name}: rope_freqs.weight");
            // The divisors are those llama.cpp's converter wrote into the fixture's GGUF.
            let theirs = tensors(&data("tiny-llama3/gguf/tiny-llama3-Q8_0.gguf"));
            let f32s = |b: &[u8]| {
                b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
            };
            let (ours, theirs): (Vec<f32>, Vec<f32>) = (f32s(&tensors(&gguf).1), f32s(&theirs.1));
            same(&format!("{name}: rope_freqs.weight vs llama.cpp's"), &ours, &theirs, 0.0);
        }
        let (a, b) = (Model::open(&input).unwrap(), Model::open(&back).unwrap());
        let (mut ca, mut cb) = (a.config().clone(), b.config().clone());
        if rel == "tiny-mistral" {
            // Written to GGUF as Llama, without the window (as llama.cpp does).
            assert_eq!(cb.arch.name, "Llama");
            assert_eq!(cb.sliding_window, None);
            (ca.arch, ca.sliding_window, ca.layer_types) = (cb.arch, None, cb.layer_types.clone());
        }
        // GGUF stores the epsilon as an f32.
        assert_eq!(ca.rms_norm_eps as f32, cb.rms_norm_eps as f32, "{name}");
        (ca.dtype, cb.dtype, cb.rms_norm_eps) = (None, None, ca.rms_norm_eps);
        assert_eq!(ca, cb, "{name}: config after the round trip");
    }
}

/// GGUF → safetensors folder → GGUF for the families with GGUF fixtures: Qwen2 and Qwen3 in
/// Q8_0 (blocks copied as they are, so the round trip is exact for every activation mode),
/// Gemma 3 from Q4_K_M through f32 (norm weights `1 + w` → `w` → `1 + w`).
#[test]
fn gguf_round_trips_through_a_folder_for_every_family() {
    for (rel, tok, dtype) in [
        ("tiny-qwen2/gguf/tiny-qwen2-Q8_0.gguf", None, "q8_0"),
        ("tiny-qwen3/gguf/tiny-qwen3-Q8_0.gguf", None, "q8_0"),
        ("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf", Some("tiny-gemma3"), "f32"),
    ] {
        let family = rel.split('/').next().unwrap();
        let dir = scratch(&format!("roundtrip-gguf-{family}"));
        let input = dir.join("in.gguf");
        std::fs::copy(data(rel), &input).unwrap();
        // Gemma's GGUF holds a SentencePiece vocabulary, which has no tokenizer.json form:
        // its tokenizer.json goes beside the GGUF (where rml looks first).
        if let Some(t) = tok {
            copy(&data(t), &dir, &["tokenizer.json", "tokenizer_config.json"]);
        }
        let folder = dir.join("folder");
        // Back into a GGUF beside the folder's tokenizer.json (see above).
        let back = folder.join("back.gguf");
        convert(&input, &folder, dtype);
        convert(&folder, &back, dtype);
        let (want, mid, got) = (logits(&input), logits(&folder), logits(&back));
        if dtype == "q8_0" {
            same(&format!("{family}: GGUF vs folder"), &want, &mid, 0.0);
            same(&format!("{family}: GGUF vs GGUF -> folder -> GGUF"), &want, &got, 0.0);
        } else {
            // Q4_K_M dequantized to f32 weights: the same values, computed by other kernels.
            same(&format!("{family}: Q4_K_M GGUF vs f32 folder"), &want, &mid, 1e-3);
            same(&format!("{family}: f32 folder vs f32 GGUF"), &mid, &got, 0.0);
        }
        let (mut ca, mut cb) = (
            Model::open(&input).unwrap().config().clone(),
            Model::open(&back).unwrap().config().clone(),
        );
        (ca.dtype, cb.dtype) = (None, None);
        assert_eq!(ca, cb, "{family}: config after the round trip");
    }
}
