//! The worker side of the protocol: wait for a job (spin, then sleep), join it unless it is
//! closed, run chunks, leave. `run_chunks` is shared with the caller, which works as thread 0.

use core::sync::atomic::Ordering::Relaxed;

use super::sync::{fence, lock, spin_hint, wait, AtomicU64, InChunk, Ordering};
use super::{claims, state, ChunkPlan, Job, Shared, STOP_CLAIMS};

/// Polls of `generation` between two looks at the clock (and yields) while spinning.
#[cfg(not(loom))]
const CLOCK_EVERY: u32 = 64;

/// Under loom there is no clock: a worker polls this many times, then takes the sleep path.
#[cfg(loom)]
const LOOM_SPIN_POLLS: u32 = 1;

/// A worker thread's life: wait for each job, join it if it is still open, run chunks, leave
/// it; exit at shutdown.
pub(super) fn main(sh: &Shared, me: usize) {
    #[cfg(target_vendor = "apple")]
    // SAFETY: sets the calling thread's own QoS class; no pointers involved. A failure only
    // leaves the default class, so the return value is ignored.
    unsafe {
        libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_USER_INTERACTIVE, 0);
    }
    #[cfg(not(loom))]
    sh.started.fetch_add(1, core::sync::atomic::Ordering::Release);
    // Generation 0 is the pool's initial state: a job published before this thread got to run
    // is still seen as new (and joined if it is still open).
    let mut seen = state::generation(state::open(0));
    loop {
        let s = wait_for_job(sh, me, seen);
        if sh.announce.shutdown.load(Ordering::Relaxed) {
            return;
        }
        if let Some(hook) = sh.before_join {
            hook(me);
        }
        match join(sh, s) {
            Ok(g) => {
                seen = g;
                // SAFETY: we joined the job: the caller wrote `desc` before publishing it
                // (Release; our join read that value or a later RMW of its release sequence,
                // Acquire), and writes it again only after our `done` increment below.
                let desc = unsafe { sh.announce.desc.read() };
                // SAFETY: the caller keeps the job (and `f`) alive until `done` reaches its
                // target, which counts our increment below; nothing touches the job after it.
                let job = unsafe { &*desc.job };
                #[cfg(not(loom))]
                let start = sh.timing.then(std::time::Instant::now);
                run_chunks(sh, desc.f, &desc.plan, job, me);
                // Counted before leaving the job, so the caller's next `stats` includes it.
                #[cfg(not(loom))]
                if let Some(t) = start {
                    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    sh.slots[me].busy_ns.fetch_add(ns, Relaxed);
                }
                sh.done.fetch_add(1, Ordering::Release);
            }
            Err(g) => {
                // Closed before we arrived: every chunk was claimed without us, and the caller
                // does not wait for us. We touched nothing of the job.
                seen = g;
                sh.slots[me].missed.fetch_add(1, Relaxed);
                // `g` may be the shutdown generation (read with Acquire, so `shutdown` shows).
                if sh.announce.shutdown.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
    }
}

/// Joins the job whose state we read as `s`: adds one to its joined count unless it is closed.
/// Returns the generation joined, or (`Err`) the generation found closed. A failed CAS means
/// another worker joined, the caller closed, or a newer job was published: retry on the value
/// it read (bounded: each retry follows another thread's progress).
fn join(sh: &Shared, mut s: usize) -> Result<usize, usize> {
    loop {
        if s & state::CLOSED != 0 {
            return Err(state::generation(s));
        }
        match sh.announce.state.compare_exchange(
            s,
            s + state::JOIN_ONE,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(state::generation(s)),
            Err(now) => s = now,
        }
    }
}

/// Returns the first job state whose generation differs from `seen`: polls for up to the spin
/// time, then sleeps on the condvar.
fn wait_for_job(sh: &Shared, me: usize, seen: usize) -> usize {
    let word = &sh.announce.state;
    #[cfg(not(loom))]
    if !sh.spin.is_zero() {
        let start = std::time::Instant::now();
        let mut polls = 0u32;
        loop {
            let s = word.load(Ordering::Acquire);
            if state::generation(s) != seen {
                return s;
            }
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY == 0 {
                if start.elapsed() >= sh.spin {
                    break;
                }
                // Hand the CPU to any other runnable thread: on a loaded or oversubscribed
                // machine the caller, or a worker with chunks in hand, may be waiting for this
                // very CPU. With nothing else runnable this returns at once.
                std::thread::yield_now();
            }
            spin_hint();
        }
    }
    #[cfg(loom)]
    for _ in 0..LOOM_SPIN_POLLS {
        let s = word.load(Ordering::Acquire);
        if state::generation(s) != seen {
            return s;
        }
        spin_hint();
    }

    // Sleep. The increment of `sleeping` and our next read of the state are separated by a
    // SeqCst fence, as are the caller's publication and its read of `sleeping`: so either we
    // read the new generation here, or the caller reads our increment and notifies — and it
    // notifies under `sleep_lock`, which we hold from before the increment until `wait`
    // atomically releases it, so the notification cannot fall between our check and our wait.
    let mut guard = lock(&sh.sleep_lock);
    sh.sleeping.fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    sh.slots[me].sleeps.fetch_add(1, Relaxed);
    loop {
        let s = word.load(Ordering::SeqCst);
        if state::generation(s) != seen {
            sh.sleeping.fetch_sub(1, Ordering::SeqCst);
            return s;
        }
        guard = wait(&sh.wake, guard);
    }
}

/// Runs chunks of `plan` with `f` as thread `me` (0 = the caller) until none is left to claim
/// (or a chunk has panicked), catching panics into `job`. Owned plans: our share from the
/// front, then other shares from the back, each until a claim fails. Other plans: the shared
/// counter until it passes the last chunk.
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
    let mut run = |c: usize, steal: bool| {
        job.live.check();
        let range = plan.chunk(c);
        if let Err(payload) = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| f(range))) {
            job.record_panic(payload);
            // Nobody claims another chunk of this job.
            if plan.is_owned() {
                claims::empty_shares(sh);
            } else {
                sh.next_chunk.store(STOP_CLAIMS, Ordering::Relaxed);
            }
        }
        ran += 1;
        stolen += usize::from(steal);
    };
    // Every claim counts as touching the job (under loom: a claim after the caller returned
    // could take a unit of the caller's next job).
    let claim = |word: &AtomicU64, from_front: bool| {
        job.live.check();
        if from_front {
            claims::front(word)
        } else {
            claims::back(word)
        }
    };
    if plan.is_owned() {
        let (per, _) = claims::units(plan);
        let mut run_unit = |u: usize, steal: bool| {
            let first = u * per;
            for c in first..(first + per).min(plan.num_chunks()) {
                run(c, steal);
            }
        };
        while let Some(u) = claim(&sh.shares[me], true) {
            run_unit(u, false);
        }
        for d in 1..threads {
            let victim = &sh.shares[(me + d) % threads];
            while let Some(u) = claim(victim, false) {
                run_unit(u, true);
            }
        }
    } else {
        let mine = plan.share(me);
        loop {
            job.live.check();
            let c = sh.next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= plan.num_chunks() {
                break;
            }
            run(c, !mine.contains(&c));
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
