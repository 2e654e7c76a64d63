//! The `RML_*` environment variables, checked before `rml` prints anything: a value that does
//! not parse is a one-line error naming the variable, and an empty (or blank) value means
//! unset — it is removed from the environment so that no part of rml reads it.

use rml::exec::tune::TuneMode;
use rml::{Error, Result};

/// Every variable `rml` reads, with what a value must be.
const VARS: &[(&str, &str)] = &[
    ("RML_NUM_THREADS", "a whole number of threads, at least 1"),
    ("RML_THREAD_SPIN_US", "a whole number of microseconds"),
    ("RML_KERNELS", "auto or the name of an instruction set"),
    ("RML_TUNE", "off, on or refresh"),
    ("RML_CACHE_DIR", "a folder"),
    ("RML_MODEL", "a model file or folder"),
];

/// Removes blank `RML_*` variables and validates the others (see the module docs).
///
/// # Errors
///
/// [`rml::Code::InvalidArgument`] naming the variable, its value and what it must be.
pub fn check() -> Result<()> {
    for &(name, want) in VARS {
        let Some(raw) = std::env::var_os(name) else { continue };
        let Some(value) = raw.to_str() else {
            return Err(bad(name, &raw.to_string_lossy(), want));
        };
        let v = value.trim();
        if v.is_empty() {
            std::env::remove_var(name);
            continue;
        }
        let ok = match name {
            "RML_NUM_THREADS" => v.parse::<usize>().is_ok_and(|n| n >= 1),
            "RML_THREAD_SPIN_US" => v.parse::<u64>().is_ok(),
            "RML_TUNE" => tune_value_ok(v),
            "RML_KERNELS" => {
                // Chooses the kernels now (the choice is cached), so a name this CPU or build
                // cannot run is reported here, before any output.
                return_if_err(rml::kernels::active().map(|_| ()), name, value)?;
                true
            }
            _ => true,
        };
        if !ok {
            return Err(bad(name, value, want));
        }
    }
    Ok(())
}

/// The values `RML_TUNE` takes: those [`TuneMode::parse`] reads as off or refresh, and the
/// spellings of "on" (the default, cached).
fn tune_value_ok(v: &str) -> bool {
    TuneMode::parse(v) != TuneMode::Cached
        || ["on", "1", "true", "yes", "cached"].iter().any(|o| v.eq_ignore_ascii_case(o))
}

fn return_if_err(r: Result<()>, name: &str, value: &str) -> Result<()> {
    r.map_err(|e| {
        let msg = e.message().trim_start_matches(name).trim_start_matches(": ").to_string();
        Error::invalid_argument(format_args!("{name}={value:?}: {msg}"))
    })
}

fn bad(name: &str, value: &str, want: &str) -> Error {
    Error::invalid_argument(format_args!("{name}={value:?}: expected {want}"))
}
