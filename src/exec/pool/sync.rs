//! The synchronisation types the pool protocol is written against: std's in ordinary builds,
//! loom's under `--cfg loom`, so that `tests/loom.rs` model-checks the real protocol code.
//!
//! Only the protocol's atomics, locks, threads and the "inside a chunk" flag go through here;
//! the statistics counters use `core` atomics directly (they order nothing).

#[cfg(not(loom))]
pub(super) use alloc::sync::Arc;
#[cfg(not(loom))]
pub(super) use core::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(super) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(super) use std::thread;

#[cfg(loom)]
pub(super) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(super) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(super) use loom::thread;

/// One poll of a busy-wait loop: a CPU spin hint (under loom, a yield so the model checker
/// schedules another thread instead of exploring an endless spin).
#[inline(always)]
pub(super) fn spin_hint() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Locks `m`, ignoring poisoning: the pool's mutexes guard plain counters that are updated in
/// one step, so a panic while one was held cannot have left them half-written.
#[inline]
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `cv`, ignoring poisoning (see [`lock`]).
#[inline]
pub(super) fn wait<'a>(cv: &Condvar, g: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// A plain (non-atomic) shared value whose accesses the protocol orders: the caller writes it
/// only while no worker holds a job, and workers read it only after seeing the job's
/// generation. Under loom it is loom's cell, which reports any access the protocol fails to
/// order.
pub(super) struct RacyCell<T> {
    #[cfg(not(loom))]
    value: core::cell::UnsafeCell<T>,
    #[cfg(loom)]
    value: loom::cell::UnsafeCell<T>,
}

// SAFETY: shared access is ordered by the protocol (see the methods' contracts), so the cell
// only moves `T` values between threads, which `T: Send` allows.
unsafe impl<T: Send> Sync for RacyCell<T> {}

impl<T: Copy> RacyCell<T> {
    pub(super) fn new(value: T) -> Self {
        RacyCell {
            #[cfg(not(loom))]
            value: core::cell::UnsafeCell::new(value),
            #[cfg(loom)]
            value: loom::cell::UnsafeCell::new(value),
        }
    }

    /// # Safety
    /// No write may happen concurrently (every write happens-before or after this read).
    #[inline(always)]
    pub(super) unsafe fn read(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: no concurrent write, by the caller's contract.
        return unsafe { *self.value.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return self.value.with(|p| unsafe { *p });
    }

    /// # Safety
    /// No other access may happen concurrently.
    #[inline(always)]
    pub(super) unsafe fn write(&self, value: T) {
        #[cfg(not(loom))]
        // SAFETY: no concurrent access, by the caller's contract.
        unsafe {
            *self.value.get() = value;
        }
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        self.value.with_mut(|p| unsafe { *p = value });
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static IN_CHUNK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}
#[cfg(loom)]
loom::thread_local! {
    static IN_CHUNK: core::cell::Cell<bool> = core::cell::Cell::new(false);
}

/// Whether the current thread is running a chunk of some pool's `parallel_for`.
#[inline]
pub(super) fn in_chunk() -> bool {
    IN_CHUNK.with(|c| c.get())
}

/// Marks the current thread as inside a chunk until dropped (also on unwind), restoring the
/// previous value.
pub(super) struct InChunk {
    was: bool,
}

impl InChunk {
    #[inline]
    pub(super) fn enter() -> Self {
        InChunk { was: IN_CHUNK.with(|c| c.replace(true)) }
    }
}

impl Drop for InChunk {
    #[inline]
    fn drop(&mut self) {
        let was = self.was;
        IN_CHUNK.with(|c| c.set(was));
    }
}

/// Under loom: a cell the caller "kills" when `parallel_for` returns (its stack frame, and the
/// job in it, die there) and that a worker reads every time it touches the job. loom reports a
/// causality violation if a worker's read is not ordered before the kill, i.e. if the caller
/// could return while a worker still holds the job. Outside loom it is zero-sized.
pub(super) struct Liveness {
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<bool>,
}

impl Liveness {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Liveness {
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(true),
        }
    }

    /// A worker is about to touch the job.
    #[inline(always)]
    pub(super) fn check(&self) {
        #[cfg(loom)]
        // SAFETY: loom's cell checks that this read does not race with `kill`'s write.
        self.alive.with(|p| assert!(unsafe { *p }, "a worker touched a dead job"));
    }

    /// The caller is about to return: no worker may touch the job from here on.
    #[inline(always)]
    pub(super) fn kill(&self) {
        #[cfg(loom)]
        // SAFETY: loom's cell checks that this write does not race with any `check`.
        self.alive.with_mut(|p| unsafe { *p = false });
    }
}
