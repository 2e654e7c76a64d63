//! Ctrl-C (SIGINT), SIGTERM and SIGHUP while `rml` writes files (`convert`, the first-run
//! fetch): instead of dying with a half-written file on disk, the process notes the signal,
//! the running loop stops at its next check ([`check`]), removes what it wrote, and `main`
//! exits with status 130. A second signal at least [`SECOND_AFTER_NS`] after the first kills
//! at once; one sooner is the same signal delivered twice (`timeout` signals the child and
//! then its process group, which holds the child too) and is ignored.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rml::{Error, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// CLOCK_MONOTONIC nanoseconds of the first signal (0: none yet).
static FIRST_NS: AtomicU64 = AtomicU64::new(0);

/// How long after the first signal a second one counts as a second request (it kills).
const SECOND_AFTER_NS: u64 = 300_000_000;

/// The signals [`catch`] handles.
#[cfg(unix)]
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe: `clock_gettime` is on POSIX's list).
#[cfg(unix)]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64).max(1)
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived while a [`Catch`] was alive.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// `Err` (cancelled) once a signal arrived: long loops call it between units of work.
///
/// # Errors
///
/// [`rml::Code::Internal`] with the message "interrupted".
pub fn check() -> Result<()> {
    if interrupted() {
        Err(Error::internal("interrupted"))
    } else {
        Ok(())
    }
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
    let now = monotonic_ns();
    let first = FIRST_NS.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    if let Err(first) = first {
        if now.saturating_sub(first) >= SECOND_AFTER_NS {
            // SAFETY: `signal` and `raise` are async-signal-safe; with the default restored,
            // the raised signal ends the process as if nothing had caught it.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
    }
}

/// While alive, SIGINT, SIGTERM and SIGHUP set the flag instead of killing; dropping restores
/// the default handlers.
pub struct Catch(());

/// Starts catching SIGINT, SIGTERM and SIGHUP (see [`Catch`]).
pub fn catch() -> Catch {
    #[cfg(unix)]
    for sig in SIGNALS {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: installs a handler that only stores to an atomic and calls `signal`, both
        // async-signal-safe.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
    Catch(())
}

impl Drop for Catch {
    fn drop(&mut self) {
        #[cfg(unix)]
        for sig in SIGNALS {
            // SAFETY: restoring the default disposition is always valid.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}
