//! The worker side of the protocol: wait for a job (spin, then sleep), run chunks, leave.
//! `run_chunks` is shared with the caller, which works as thread 0.

use core::sync::atomic::Ordering::Relaxed;

use super::sync::{fence, lock, spin_hint, wait, InChunk, Ordering};
use super::{ChunkPlan, Job, Shared, STOP_CLAIMS};

/// Polls of `generation` between two looks at the clock (and yields) while spinning.
#[cfg(not(loom))]
const CLOCK_EVERY: u32 = 64;

/// Under loom there is no clock: a worker polls this many times, then takes the sleep path.
#[cfg(loom)]
const LOOM_SPIN_POLLS: u32 = 1;

/// A worker thread's life: wait for each job, run its chunks, leave it; exit at shutdown.
pub(super) fn main(sh: &Shared, me: usize) {
    #[cfg(target_vendor = "apple")]
    // SAFETY: sets the calling thread's own QoS class; no pointers involved. A failure only
    // leaves the default class, so the return value is ignored.
    unsafe {
        libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_USER_INTERACTIVE, 0);
    }
    // Generation 0 is the pool's initial value: a job published before this thread got to run
    // is still seen as new, and the caller waits for this worker to take part.
    let mut seen = 0usize;
    loop {
        seen = wait_for_job(sh, me, seen);
        if sh.announce.shutdown.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: the caller wrote `desc` before the generation bump we observed with Acquire
        // (or SeqCst), and writes it again only after our `done` increment below.
        let desc = unsafe { sh.announce.desc.read() };
        // SAFETY: the caller keeps the job (and `f`) alive until `done` reaches its target,
        // which needs our increment below; nothing touches the job after it.
        let job = unsafe { &*desc.job };
        run_chunks(sh, desc.f, &desc.plan, job, me);
        sh.done.fetch_add(1, Ordering::Release);
    }
}

/// Returns the first generation different from `seen`: polls for up to the spin time, then
/// sleeps on the condvar.
fn wait_for_job(sh: &Shared, me: usize, seen: usize) -> usize {
    let generation = &sh.announce.generation;
    #[cfg(not(loom))]
    if !sh.spin.is_zero() {
        let start = std::time::Instant::now();
        let mut polls = 0u32;
        loop {
            let g = generation.load(Ordering::Acquire);
            if g != seen {
                return g;
            }
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY == 0 {
                if start.elapsed() >= sh.spin {
                    break;
                }
                // Hand the CPU to any other runnable thread: on a loaded or oversubscribed
                // machine the caller, or a worker that has not checked in yet, may be waiting
                // for this very CPU. With nothing else runnable this returns at once.
                std::thread::yield_now();
            }
            spin_hint();
        }
    }
    #[cfg(loom)]
    for _ in 0..LOOM_SPIN_POLLS {
        let g = generation.load(Ordering::Acquire);
        if g != seen {
            return g;
        }
        spin_hint();
    }

    // Sleep. The increment of `sleeping` and our next read of `generation` are separated by a
    // SeqCst fence, as are the caller's generation bump and its read of `sleeping`: so either
    // we read the new generation here, or the caller reads our increment and notifies — and it
    // notifies under `sleep_lock`, which we hold from before the increment until `wait`
    // atomically releases it, so the notification cannot fall between our check and our wait.
    let mut guard = lock(&sh.sleep_lock);
    sh.sleeping.fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    sh.slots[me].sleeps.fetch_add(1, Relaxed);
    loop {
        let g = generation.load(Ordering::SeqCst);
        if g != seen {
            sh.sleeping.fetch_sub(1, Ordering::SeqCst);
            return g;
        }
        guard = wait(&sh.wake, guard);
    }
}

/// Runs chunks of `plan` with `f` as thread `me` (0 = the caller) until none are left (or a
/// chunk has panicked), catching panics into `job`.
pub(super) fn run_chunks(
    sh: &Shared,
    f: &(dyn Fn(core::ops::Range<usize>) + Sync),
    plan: &ChunkPlan,
    job: &Job,
    me: usize,
) {
    let _inside = InChunk::enter();
    let threads = sh.threads;
    let mut ran = 0usize;
    let mut stolen = 0usize;
    let mut run = |c: usize| {
        let range = plan.chunk(c);
        if let Err(payload) = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| f(range))) {
            job.record_panic(payload);
            if !plan.is_owned() {
                // Nobody claims another chunk of this job.
                sh.next_chunk.store(STOP_CLAIMS, Ordering::Relaxed);
            }
        }
        ran += 1;
        stolen += usize::from(c % threads != me);
    };
    if plan.is_owned() {
        job.live.check();
        if me < plan.num_chunks() {
            run(me);
        }
    } else {
        loop {
            job.live.check();
            let c = sh.next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= plan.num_chunks() {
                break;
            }
            run(c);
        }
    }
    let slot = &sh.slots[me];
    if ran > 0 {
        slot.chunks.fetch_add(ran, Relaxed);
    }
    if stolen > 0 {
        slot.steals.fetch_add(stolen, Relaxed);
    }
}
