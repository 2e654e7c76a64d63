//! Standard output that notices a closed pipe: `rml inspect X | head -1` closes the pipe
//! after one line, the next write fails with `BrokenPipe`, and `main` then exits quietly with
//! status 0 instead of reporting an error.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static BROKEN: AtomicBool = AtomicBool::new(false);

/// Whether a write to standard output found the pipe closed.
pub fn broken_pipe() -> bool {
    BROKEN.load(Ordering::Relaxed)
}

/// Records a broken pipe; any other error gets "standard output" in its message, so that
/// `rml generate > /dev/full` says where there was no space.
fn note(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        BROKEN.store(true, Ordering::Relaxed);
        return e;
    }
    io::Error::new(e.kind(), format!("writing to standard output: {e}"))
}

/// Locked standard output that records a broken pipe (see the module docs).
pub struct Stdout(io::StdoutLock<'static>);

/// Standard output, locked for the caller.
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(note)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(note)
    }
}
