// Shared by `smollm2.rs` and `gemma3.rs` (each `include!`s this file): where a real model the
// tests check comes from — the places the `rml` binary looks, and its fetch when it is in none:
//
// 1. `$RML_SMOLLM2_GGUF` / `$RML_GEMMA3_GGUF` (must exist when set);
// 2. with the `cli` feature (as in the README's `cargo test --all-features`): `rml fetch NAME`,
//    which finds the checkout's `target/models/` copy or the cached one (`$RML_CACHE_DIR`, else
//    `rml/models/` in the user cache directory), sha256-checked, or else fetches it into that
//    cache (pip, sha256-pinned; its progress goes straight to the terminal). Test binaries
//    fetching at once each write their own partial file and rename it into place;
// 3. without it (or when the binary was not built): the checkout's `target/models/`, then
//    the cache.
//
// When none of these works the test fails with the manual steps; it never passes untested.

/// One real model: its variable, file name, `rml fetch` name and the steps to fetch it by hand.
struct RealModel {
    var: &'static str,
    file: &'static str,
    fetch_name: &'static str,
    manual: &'static str,
}

/// The cache folder `rml` uses when `$RML_CACHE_DIR` is unset: `rml/models/` under
/// `$XDG_CACHE_HOME` or `~/.cache` (`~/Library/Caches` on macOS).
fn user_cache() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
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

fn find_or_fetch(m: &RealModel) -> Result<std::path::PathBuf, String> {
    use std::path::PathBuf;
    if let Some(p) = std::env::var_os(m.var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{}={} does not exist", m.var, p.display()))
        };
    }
    // Cargo names the binary even when it was not built (a `--features std` build leaves out
    // `cli`, the binary's required feature, as in .ci/run's AddressSanitizer step).
    match option_env!("CARGO_BIN_EXE_rml").filter(|rml| std::path::Path::new(rml).is_file()) {
        Some(rml) => {
            let o = std::process::Command::new(rml)
                .args(["fetch", m.fetch_name])
                .env_remove("RML_MODEL")
                .stderr(std::process::Stdio::inherit())
                .output()
                .map_err(|e| format!("running {rml} fetch {}: {e}", m.fetch_name))?;
            let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            if o.status.success() && path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "`rml fetch {}` failed ({}; its error is printed above)",
                    m.fetch_name, o.status
                ))
            }
        }
        None => {
            let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models").join(m.file);
            let cached = user_cache().map(|d| d.join(m.file));
            core::iter::once(repo).chain(cached).find(|p| p.is_file()).ok_or_else(|| {
                format!(
                    "{} is neither in target/models/ nor in the cache, and the `rml` binary was \
                     not built (feature `cli`), so this test cannot run `rml fetch {}`",
                    m.file, m.fetch_name
                )
            })
        }
    }
}

/// `m`'s path, found or fetched once per test process; panics with the manual steps when it
/// cannot be had.
fn real_model_path(
    m: &RealModel,
    found: &'static std::sync::OnceLock<Result<std::path::PathBuf, String>>,
) -> std::path::PathBuf {
    match found.get_or_init(|| find_or_fetch(m)) {
        Ok(p) => p.clone(),
        Err(why) => panic!(
            "{why}. {} is needed and could not be found or fetched. {} Or set {}=PATH.",
            m.file, m.manual, m.var
        ),
    }
}
