//! The four process-wide allocation counters: allocations, frees, live bytes, peak live bytes.
//!
//! They count tensor storage made through [`crate::mem::aligned`] (and so through
//! [`crate::mem::AlignedBlock`], [`crate::mem::Arena::new`] and buffer-pool misses). Memory
//! that is not tensor storage (a `Vec`, mmapped weights) is not counted. The counters are
//! relaxed atomics and always on; the peak rises by a CAS loop that retries only while the new
//! live total is still above the stored peak.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static FREES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

/// A snapshot of the four counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Successful aligned allocations since the process started.
    pub allocations: usize,
    /// Aligned frees since the process started.
    pub frees: usize,
    /// Bytes requested by live allocations (not counting header or alignment padding).
    pub live_bytes: usize,
    /// The highest `live_bytes` seen since the start or the last [`reset_peak`].
    pub peak_bytes: usize,
}

/// Reads the four counters. Each is read separately (relaxed), so under concurrent
/// allocation the snapshot is not atomic as a whole.
pub fn stats() -> MemStats {
    MemStats {
        allocations: ALLOCATIONS.load(Relaxed),
        frees: FREES.load(Relaxed),
        live_bytes: LIVE_BYTES.load(Relaxed),
        peak_bytes: PEAK_BYTES.load(Relaxed),
    }
}

/// Sets the peak to the current live bytes, so that a caller can measure the peak of one
/// region: `reset_peak(); work(); stats().peak_bytes`.
pub fn reset_peak() {
    PEAK_BYTES.store(LIVE_BYTES.load(Relaxed), Relaxed);
}

/// Records one allocation of `bytes`.
pub(crate) fn record_alloc(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Relaxed);
    let live = LIVE_BYTES.fetch_add(bytes, Relaxed).wrapping_add(bytes);
    let mut peak = PEAK_BYTES.load(Relaxed);
    while live > peak {
        match PEAK_BYTES.compare_exchange_weak(peak, live, Relaxed, Relaxed) {
            Ok(_) => break,
            Err(now) => peak = now,
        }
    }
}

/// Records one free of `bytes`.
pub(crate) fn record_free(bytes: usize) {
    FREES.fetch_add(1, Relaxed);
    LIVE_BYTES.fetch_sub(bytes, Relaxed);
}
