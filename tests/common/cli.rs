//! Shared by the CLI tests: running the `rml` binary, a tiny model folder with a byte-level
//! tokenizer, and checks on its output.
#![allow(dead_code)]

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use rml::tokenizer::Tokenizer;

// The including test binary declares `mod decoder_common;` at its root.
use crate::decoder_common::data;

pub fn rml(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(args)
        .env_remove("RML_MODEL")
        .env("RML_TUNE", "off")
        .output()
        .unwrap()
}

/// GPT-2's byte-to-unicode alphabet: the printable character standing for each byte.
pub fn byte_alphabet() -> Vec<String> {
    let mut printable: Vec<u32> =
        (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    let mut by_byte = vec![String::new(); 256];
    for (b, c) in printable.iter().zip(&chars) {
        by_byte[*b as usize] = char::from_u32(*c).unwrap().to_string();
    }
    by_byte
}

/// A Hugging Face folder with the tiny f32 model, `config` as its config.json (default: the
/// fixture's), and a byte-level tokenizer whose 256 tokens are the bytes.
pub fn tiny_dir(name: &str, config: Option<&str>) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = data("tiny-llama/f32");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let cfg = match config {
        Some(c) => c.to_string(),
        None => std::fs::read_to_string(src.join("config.json")).unwrap(),
    };
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let alphabet = byte_alphabet();
    let tokens: Vec<&str> = alphabet.iter().map(String::as_str).collect();
    let tok = Tokenizer::from_gguf_vocab("gpt2", None, &tokens, &[], &[]).unwrap();
    tok.save(&dir.join("tokenizer.json")).unwrap();
    dir
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails unless `o` exited non-zero with exactly one line on stderr containing `needle`.
pub fn one_line_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "exited 0; stderr: {err}");
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

/// Polls `probe` every 20 ms until it returns `Some`. A hang watchdog, not a speed bound: after
/// `secs` seconds (chosen far above what a loaded machine needs) it fails naming `what`.
pub fn wait_for<T>(secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("watchdog: still waiting after {secs} s for {what}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
