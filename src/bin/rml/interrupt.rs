//! Ctrl-C (SIGINT) and SIGTERM while `rml` writes files (`convert`, the first-run fetch):
//! instead of dying with a half-written file on disk, the process notes the signal, the
//! running loop stops at its next check ([`check`]), removes what it wrote, and `main` exits
//! with status 130. A second signal kills at once (the handler restores the default).

use std::sync::atomic::{AtomicBool, Ordering};

use rml::{Error, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived while a [`Catch`] was alive.
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
    // SAFETY: `signal` is async-signal-safe; SIG_DFL makes a second Ctrl-C kill at once.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// While alive, SIGINT and SIGTERM set the flag instead of killing; dropping restores the
/// default handlers.
pub struct Catch(());

/// Starts catching SIGINT and SIGTERM (see [`Catch`]).
pub fn catch() -> Catch {
    #[cfg(unix)]
    for sig in [libc::SIGINT, libc::SIGTERM] {
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
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restoring the default disposition is always valid.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}
