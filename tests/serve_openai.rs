//! The real `openai` Python client (pinned, [`OPENAI`]) against `rml serve` on SmolLM2: models,
//! chat (streamed and not, usage, greedy text equal to `rml generate --chat`), completions,
//! seeded sampling, logprobs and the errors the client maps to its exceptions
//! (tests/serve/openai_client.py).
//!
//! The client is installed on first use into a virtual environment under the target folder
//! (`target/tmp/openai-venv`), as the real models are fetched on first use; when that is not
//! possible the test fails with the steps to do it by hand, never skips.
#![cfg(feature = "server")]

mod decoder_common;
#[path = "common/serve.rs"]
mod serve;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve::{generate, Server};

/// The pinned client version.
const OPENAI: &str = "openai==3.51.0";

/// The venv's python with [`OPENAI`] installed, made on first use.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let py = venv.join("bin/python");
    let manual = format!(
        "install it by hand: `python3 -m venv {v} && {v}/bin/pip install {OPENAI}` (needs \
         python3 with venv and pip, and the Python package index)",
        v = venv.display()
    );
    let has_client = |py: &Path| {
        Command::new(py)
            .args([
                "-c",
                &format!("import openai, sys; sys.exit(openai.__version__ != {:?})", &OPENAI[8..]),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if py.is_file() && has_client(&py) {
        return py;
    }
    let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status();
    assert!(made.is_ok_and(|s| s.success()), "`python3 -m venv` failed: {manual}");
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", OPENAI])
        .status();
    assert!(pip.is_ok_and(|s| s.success()), "pip could not install {OPENAI}: {manual}");
    assert!(has_client(&py), "{OPENAI} is not importable after pip: {manual}");
    py
}

#[test]
fn openai_python_client() {
    let py = python();
    let s = Server::start(&["--api-key", "k", "--parallel", "2", "--ctx-size", "256"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/openai_client.py");
    let o = Command::new(py)
        .arg(script)
        .env("RML_SERVE_URL", format!("http://{}", s.addr))
        .env("RML_SERVE_MODEL", "SmolLM2-135M-Instruct.Q4_1")
        .env("RML_EXPECTED_CHAT", generate("What is the capital of France?", 12, true))
        .env("RML_EXPECTED_COMPLETION", generate("Once upon a time", 10, false))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}\nserver log:\n{}", s.log());
    assert!(out.contains("openai client: all checks passed"), "{out}");
}
