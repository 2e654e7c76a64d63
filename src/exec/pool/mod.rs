//! [`ThreadPool`]: a persistent pool for many small parallel loops (std). The protocol, with the
//! ordering of every atomic and the argument that no wake-up is lost, is in `README.md` here.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::any::Any;
use core::cell::UnsafeCell;
use core::fmt;
use core::ops::{Deref, Range};
use core::sync::atomic::AtomicUsize as CounterAtomic;
use core::time::Duration;

use self::sync::{
    fence, lock, spin_hint, thread, Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Liveness,
    Mutex, Ordering, RacyCell,
};
use super::{ChunkPlan, Executor, Schedule};
use crate::{Error, Result};

mod sync;
#[cfg(not(loom))]
mod topology;
mod worker;

/// How long (µs) an idle worker keeps polling for the next job before it sleeps, unless
/// `RML_THREAD_SPIN_US` or [`ThreadPoolBuilder::spin_time`] says otherwise.
///
/// About twice the longest regular gap between a decode's consecutive parallel loops, so a
/// decode keeps its workers awake while an idle pool goes quiet 0.2 ms after its last job (the
/// measurement: `docs/perf/notes-cli-exec.md`; the protocol: `src/exec/pool/README.md`).
pub const DEFAULT_SPIN_US: u64 = 200;

/// Polls of the `done` counter the caller makes before it starts yielding its time slice.
const CALLER_SPIN_POLLS: u32 = 256;

/// Back-off under contention: a dispatch counts as stalled when the caller, after running its
/// own chunks, waited more than this for workers that had joined it, and more than twice its
/// own work time (so that ordinary imbalance in long jobs does not count).
#[cfg(not(loom))]
const STALL: Duration = Duration::from_micros(500);

/// Stalled dispatches among the last 32 that make the pool back off.
#[cfg(not(loom))]
const STALLS_TO_BACK_OFF: u32 = 2;

/// The first back-off runs this many `parallel_for` calls on the caller alone; each back-off
/// that follows within [`CLEAN_TO_RESET`] dispatches of the last doubles it, up to
/// [`BACK_OFF_MAX`].
#[cfg(not(loom))]
const BACK_OFF_MIN: u32 = 256;
#[cfg(not(loom))]
const BACK_OFF_MAX: u32 = 16384;
/// Stall-free dispatches in a row after which the back-off length returns to its minimum.
#[cfg(not(loom))]
const CLEAN_TO_RESET: u32 = 256;

/// The caller's memory of recent stalls (see [`ThreadPoolBuilder::contention_backoff`]).
///
/// When another process keeps the cores busy, the OS preempts a worker in the middle of its
/// chunk and the caller waits a whole time slice (milliseconds) for it, dispatch after
/// dispatch; the pool then does better running on the calling thread alone for a while (its
/// workers spin out their window and sleep, leaving the cores to the caller and the load).
/// Results do not change: every kernel gives the same bits for any chunking.
#[cfg(not(loom))]
#[derive(Debug, Default)]
struct Backoff {
    /// One bit per recent dispatch, 1 = stalled, the newest in bit 0.
    recent: u32,
    /// `parallel_for` calls still to run on the caller alone.
    inline_left: u32,
    /// Length of the next back-off (0 = not yet set: [`BACK_OFF_MIN`]).
    next: u32,
    /// Stall-free dispatches since the last stall.
    clean: u32,
}

#[cfg(not(loom))]
impl Backoff {
    /// Whether this call runs on the caller alone (counting it down).
    fn take_inline(&mut self) -> bool {
        if self.inline_left == 0 {
            return false;
        }
        self.inline_left -= 1;
        true
    }

    /// Records whether a dispatch stalled; starts a back-off when [`STALLS_TO_BACK_OFF`] of
    /// the last 32 did.
    fn record(&mut self, stalled: bool) {
        self.recent = (self.recent << 1) | u32::from(stalled);
        if stalled {
            self.clean = 0;
        } else {
            self.clean = self.clean.saturating_add(1);
            if self.clean >= CLEAN_TO_RESET {
                self.next = BACK_OFF_MIN;
            }
        }
        if self.recent.count_ones() >= STALLS_TO_BACK_OFF {
            let len = self.next.max(BACK_OFF_MIN);
            self.inline_left = len;
            self.next = (len * 2).min(BACK_OFF_MAX);
            self.recent = 0;
        }
    }
}

/// The most threads a pool may have (the caller included): the job state word counts joined
/// workers in 16 bits.
pub(crate) const MAX_THREADS: usize = 1 << 16;

/// The job state word `announce.state`: bit 0 says the job is closed (no worker may join it any
/// more), bits 1..=16 count the workers that joined it, the bits above hold its generation
/// (wrapping; a worker compares generations only for equality).
mod state {
    /// Set by the caller when it has no chunk left to claim; a worker's join fails from then on.
    pub(super) const CLOSED: usize = 1;
    /// One joined worker.
    pub(super) const JOIN_ONE: usize = 1 << 1;
    const JOINED_MASK: usize = 0xFFFF;
    const GEN_SHIFT: u32 = 17;

    /// The state of a freshly published job of generation `g`: open, nobody joined.
    #[inline(always)]
    pub(super) fn open(g: usize) -> usize {
        g << GEN_SHIFT
    }

    /// The generation bits of `s` (what a worker remembers as the last job it saw).
    #[inline(always)]
    pub(super) fn generation(s: usize) -> usize {
        s >> GEN_SHIFT
    }

    /// Workers that joined the job.
    #[inline(always)]
    pub(super) fn joined(s: usize) -> usize {
        (s >> 1) & JOINED_MASK
    }
}

/// A value on its own cache line (128 bytes on x86_64 and aarch64, where the adjacent-line
/// prefetcher pairs lines; 64 elsewhere), so threads fighting over it do not false-share.
#[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64"), repr(align(128)))]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), repr(align(64)))]
#[derive(Default)]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What the caller publishes: written before the job's state is stored, read by workers after
/// they joined it. One cache line, so a worker that sees a new job has the whole job
/// description in the same transfer.
struct Announce {
    /// The job state word (module `state`): a new generation, open, per job and once at
    /// shutdown (a Release store followed by a SeqCst fence); +1 joined per worker that joins
    /// (CAS, Acquire); closed by the caller (`fetch_or`) once it has no chunk left to claim.
    state: AtomicUsize,
    /// Set before the last state store, by `Drop`.
    shutdown: AtomicBool,
    /// The current job. Written only while no worker is inside a job, read by a worker only
    /// after it joined the job.
    desc: RacyCell<JobDesc>,
}

/// What a worker needs to run its part of a job: the loop body, the chunk plan, and where the
/// caller's `Job` (panic slot) lives.
#[derive(Clone, Copy)]
struct JobDesc {
    /// The caller's `&dyn Fn` (data pointer + vtable). Its real lifetime is the dispatch: a
    /// worker calls it only between its join and its `done` increment.
    f: &'static (dyn Fn(Range<usize>) + Sync),
    plan: ChunkPlan,
    job: *const Job,
}

// SAFETY: `job` points to a `Job` (atomics and a panic slot that only one thread writes) that
// the caller keeps alive until every worker that joined it has left; the rest is Send already.
unsafe impl Send for JobDesc {}

/// The `call` mutex's data: one caller at a time, and what that caller needs to remember.
struct CallState {
    /// The last generation published.
    generation: usize,
    /// The value `done` reaches when every worker that joined the last job has left it.
    done_target: usize,
    /// Recent stalls and the running back-off (only with `contention_backoff`).
    #[cfg(not(loom))]
    backoff: Backoff,
}

/// Per-thread statistics, written only by the thread that owns the slot (slot 0: whoever holds
/// the `call` mutex; slot `i`: worker `i`).
#[derive(Default)]
struct Slot {
    chunks: CounterAtomic,
    steals: CounterAtomic,
    sleeps: CounterAtomic,
    missed: CounterAtomic,
    /// Nanoseconds inside jobs (workers; only with `timing`).
    busy_ns: core::sync::atomic::AtomicU64,
}

/// Statistics any thread may bump.
#[derive(Default)]
struct Counters {
    dispatches: CounterAtomic,
    inline_runs: CounterAtomic,
    wakeups: CounterAtomic,
    backed_off: CounterAtomic,
    /// Only with `timing`: nanoseconds from publishing a job to the last worker leaving it,
    /// and the part of them after the caller's own chunks.
    dispatch_ns: core::sync::atomic::AtomicU64,
    caller_wait_ns: core::sync::atomic::AtomicU64,
}

/// A hook a worker calls with its index each time it sees a new job, before it tries to join
/// ([`ThreadPoolBuilder::before_join`]).
pub type JoinHook = fn(usize);

/// Everything the caller and the workers share.
struct Shared {
    announce: Padded<Announce>,
    /// Next chunk index to claim (shared-counter schedules). Reset by the caller before
    /// publishing; pushed past every plan (`STOP_CLAIMS`) when a chunk panics.
    next_chunk: Padded<AtomicUsize>,
    /// Owned schedules: one claim word per thread, its share of the job's claim units as
    /// `front | back << 32` (biased by `claims::BIAS`); the owner takes `front`, others `back`.
    /// Reset by the caller before publishing; emptied when a chunk panics.
    shares: Box<[Padded<AtomicU64>]>,
    /// Jobs left by workers, counted over the pool's life: each worker that joined a job adds 1
    /// (Release) when it leaves it, so `pending_workers = done_target - done`. Monotonic, so
    /// the caller never writes it.
    done: Padded<AtomicUsize>,
    /// Workers inside the sleep protocol (between their increment and decrement).
    sleeping: Padded<AtomicUsize>,
    /// One caller at a time.
    call: Mutex<CallState>,
    /// Guards the sleep/wake handshake with `wake`.
    sleep_lock: Mutex<()>,
    wake: Condvar,
    counters: Padded<Counters>,
    slots: Box<[Padded<Slot>]>,
    /// The pool's default schedule, encoded by `encode_schedule`.
    schedule: CounterAtomic,
    /// Threads including the caller.
    threads: usize,
    /// How long a worker polls before sleeping.
    spin: Duration,
    /// Called by a worker before each join (tests: hold a worker outside the job).
    before_join: Option<JoinHook>,
    /// Whether the caller backs off to running alone after repeated stalls.
    #[cfg_attr(loom, allow(dead_code))]
    backoff: bool,
    /// Whether dispatches and jobs are timed (`dispatch_ns`, `caller_wait_ns`, `busy_ns`).
    #[cfg_attr(loom, allow(dead_code))]
    timing: bool,
    /// Workers that have started running `worker::main` (the builder waits for all of them;
    /// not under loom, whose model threads start when the model schedules them).
    #[cfg(not(loom))]
    started: CounterAtomic,
}

/// `next_chunk` after a panic: past any plan's chunk count, with room for every thread's
/// last failed claim.
const STOP_CLAIMS: usize = usize::MAX / 2;

/// One `parallel_for`'s panic slot, on the caller's stack.
struct Job {
    /// Set by the first chunk that panics.
    panicked: AtomicBool,
    /// The first panic's payload, written only by the thread that set `panicked`, read by the
    /// caller after every worker that joined has left.
    payload: UnsafeCell<Option<Box<dyn Any + Send>>>,
    live: Liveness,
}

impl Job {
    fn record_panic(&self, payload: Box<dyn Any + Send>) {
        if !self.panicked.swap(true, Ordering::AcqRel) {
            // SAFETY: only the one thread that flipped `panicked` from false writes `payload`,
            // and the caller reads it only after every worker that joined left the job (`done`
            // reached its target, Acquire, pairing with each worker's Release increment).
            unsafe { *self.payload.get() = Some(payload) };
        }
    }
}

/// Counters of one pool since it was created ([`ThreadPool::stats`]); relaxed, so a snapshot
/// taken while a dispatch runs may be mid-update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// `parallel_for` calls that published a job to the workers.
    pub dispatches: u64,
    /// Chunks run inside those dispatches, by the caller and the workers.
    pub chunks: u64,
    /// `parallel_for` calls that ran on the calling thread alone: nested inside a chunk, one
    /// chunk in the plan, or a pool without workers. (Empty ranges are not counted.)
    pub inline_runs: u64,
    /// Times a worker finished its spin window without a job and went to sleep.
    pub sleeps: u64,
    /// Dispatches that found sleeping workers and signalled the condvar to wake them.
    pub wakeups: u64,
    /// Chunks run by a thread other than the owner of their share ([`ChunkPlan::share`], the
    /// caller being thread 0): under `Static` and `Owned`, chunks taken from the far end of
    /// another thread's share; under the shared-counter schedules, chunks that landed outside
    /// their owner's share.
    pub steals: u64,
    /// Jobs a worker arrived at after the caller had closed them (every chunk was already
    /// claimed), so it took no part: a worker that the OS ran late, or that woke late.
    pub missed: u64,
    /// `parallel_for` calls of two or more chunks that ran on the calling thread alone because
    /// the pool was backing off after repeated stalls on preempted workers
    /// ([`ThreadPoolBuilder::contention_backoff`]). Not counted in `dispatches`.
    pub backed_off: u64,
    /// Nanoseconds the dispatches took, from publishing each job to the last worker leaving
    /// it (the caller's clock). With the wall time of a run of calls, `dispatch_ns / wall` is
    /// the share spent in parallel loops; the rest ran on the calling thread alone. 0 unless
    /// the pool was built with [`ThreadPoolBuilder::timing`].
    pub dispatch_ns: u64,
    /// The part of `dispatch_ns` after the caller ran out of chunks to claim: waiting for the
    /// workers still running theirs (load imbalance, a worker that joined late). 0 without
    /// [`ThreadPoolBuilder::timing`].
    pub caller_wait_ns: u64,
    /// Nanoseconds workers spent inside jobs (from joining one to leaving it), summed over the
    /// workers; `worker_busy_ns / (wall × workers)` is how busy they were. 0 without
    /// [`ThreadPoolBuilder::timing`].
    pub worker_busy_ns: u64,
}

impl PoolStats {
    /// The counts accumulated since `earlier` (a snapshot of the same pool).
    pub fn since(&self, earlier: &PoolStats) -> PoolStats {
        PoolStats {
            dispatches: self.dispatches.wrapping_sub(earlier.dispatches),
            chunks: self.chunks.wrapping_sub(earlier.chunks),
            inline_runs: self.inline_runs.wrapping_sub(earlier.inline_runs),
            sleeps: self.sleeps.wrapping_sub(earlier.sleeps),
            wakeups: self.wakeups.wrapping_sub(earlier.wakeups),
            steals: self.steals.wrapping_sub(earlier.steals),
            missed: self.missed.wrapping_sub(earlier.missed),
            backed_off: self.backed_off.wrapping_sub(earlier.backed_off),
            dispatch_ns: self.dispatch_ns.wrapping_sub(earlier.dispatch_ns),
            caller_wait_ns: self.caller_wait_ns.wrapping_sub(earlier.caller_wait_ns),
            worker_busy_ns: self.worker_busy_ns.wrapping_sub(earlier.worker_busy_ns),
        }
    }
}

/// Configures a [`ThreadPool`]; every setting has a default.
#[derive(Clone, Debug, Default)]
pub struct ThreadPoolBuilder {
    threads: Option<usize>,
    spin: Option<Duration>,
    schedule: Option<Schedule>,
    before_join: Option<JoinHook>,
    backoff: Option<bool>,
    timing: bool,
}

impl ThreadPoolBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Threads including the caller (0 is taken as 1). Default: [`default_threads`]
    /// (`RML_NUM_THREADS`, else the number of performance cores).
    ///
    /// [`default_threads`]: ThreadPool::default_threads
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// How long an idle worker polls for the next job before sleeping on a condvar. Default:
    /// `RML_THREAD_SPIN_US` microseconds, else [`DEFAULT_SPIN_US`]. Zero sleeps at once.
    pub fn spin_time(mut self, spin: Duration) -> Self {
        self.spin = Some(spin);
        self
    }

    /// The pool's default schedule ([`ThreadPool::schedule`]); default [`Schedule::default`].
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// A function each worker calls with its index (1..threads) every time it sees a new job,
    /// before it tries to join it. For tests and diagnostics: a hook that blocks stands for a
    /// worker the operating system has not run yet, which the caller must not wait for. Default:
    /// none.
    pub fn before_join(mut self, hook: JoinHook) -> Self {
        self.before_join = Some(hook);
        self
    }

    /// Whether the pool backs off under contention. Default: on. When the caller of a
    /// dispatch, after running its own chunks, waits more than 500 µs (and more than twice its
    /// own work) for workers that joined — a worker preempted mid-chunk by another process — in
    /// 2 of the last 32 dispatches, the next 256 `parallel_for` calls run on the calling thread
    /// alone (counted in [`PoolStats::backed_off`]), then the pool tries its workers again;
    /// each back-off that follows within 256 stall-free dispatches doubles the length, up to
    /// 16,384. Results are the same bits either way (the kernels' chunking contract). Off: every
    /// call of two or more chunks is dispatched (tests of the protocol turn it off).
    pub fn contention_backoff(mut self, on: bool) -> Self {
        self.backoff = Some(on);
        self
    }

    /// Whether the pool times its dispatches: [`PoolStats::dispatch_ns`],
    /// [`PoolStats::caller_wait_ns`] and [`PoolStats::worker_busy_ns`] (`rml bench` shows them
    /// as shares of the decode time). Costs two clock reads per dispatch on the caller and two
    /// per job on each worker that joins (some 50 ns with a vDSO clock). Default: off (the three
    /// fields stay 0). Not under `--cfg loom`, which has no clock.
    pub fn timing(mut self, on: bool) -> Self {
        self.timing = on;
        self
    }

    /// Starts the workers.
    ///
    /// # Errors
    /// `InvalidArgument` for more than 65,536 threads; `Io` when the operating system refuses a
    /// thread (workers already started are stopped).
    pub fn build(self) -> Result<ThreadPool> {
        #[cfg(not(loom))]
        let threads = self.threads.unwrap_or_else(ThreadPool::default_threads).max(1);
        #[cfg(loom)]
        let threads = self.threads.unwrap_or(1).max(1);
        if threads > MAX_THREADS {
            return Err(Error::invalid_argument(format_args!(
                "thread pool of {threads} threads: at most {MAX_THREADS} are supported"
            )));
        }
        let spin = self.spin.unwrap_or_else(|| {
            Duration::from_micros(env_number("RML_THREAD_SPIN_US").unwrap_or(DEFAULT_SPIN_US))
        });
        let shared = Arc::new(Shared {
            announce: Padded(Announce {
                state: AtomicUsize::new(state::open(0)),
                shutdown: AtomicBool::new(false),
                desc: RacyCell::new(JobDesc {
                    f: &|_| {},
                    plan: ChunkPlan::new(0..0, Schedule::Static, 1, false),
                    job: core::ptr::null(),
                }),
            }),
            next_chunk: Padded(AtomicUsize::new(0)),
            shares: (0..threads).map(|_| Padded(AtomicU64::new(claims::EMPTY))).collect(),
            done: Padded(AtomicUsize::new(0)),
            sleeping: Padded(AtomicUsize::new(0)),
            call: Mutex::new(CallState {
                generation: 0,
                done_target: 0,
                #[cfg(not(loom))]
                backoff: Backoff::default(),
            }),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            counters: Padded::default(),
            slots: (0..threads).map(|_| Padded::default()).collect(),
            schedule: CounterAtomic::new(encode_schedule(self.schedule.unwrap_or_default())),
            threads,
            spin,
            before_join: self.before_join,
            backoff: self.backoff.unwrap_or(true),
            timing: self.timing,
            #[cfg(not(loom))]
            started: CounterAtomic::new(0),
        });
        let mut pool = ThreadPool { shared, workers: Vec::with_capacity(threads - 1) };
        for index in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let spawned = thread::Builder::new()
                .name(alloc::format!("rml-worker-{index}"))
                .spawn(move || worker::main(&shared, index));
            match spawned {
                Ok(handle) => pool.workers.push(handle),
                // Dropping `pool` stops and joins the workers started so far.
                Err(e) => {
                    return Err(Error::from(e)
                        .context(format_args!("starting worker {index} of {threads}")))
                }
            }
        }
        // Return only once every worker runs: a thread's start-up (its thread-locals, the
        // test harness's output capture) may allocate, and with the join/close protocol a
        // dispatch no longer waits for a worker that has not started, so without this wait
        // that start-up could land in the middle of later, allocation-free dispatches. Each
        // poll yields; it ends as soon as the OS has run every new thread once.
        #[cfg(not(loom))]
        while pool.shared.started.load(core::sync::atomic::Ordering::Acquire) < threads - 1 {
            thread::yield_now();
        }
        Ok(pool)
    }
}

/// A persistent thread pool for many small parallel loops.
///
/// A pool of `threads` has `threads - 1` worker threads; the thread that calls
/// [`parallel_for`](Self::parallel_for) works too. A dispatch builds the job on the caller's
/// stack (a `&dyn Fn` — data pointer plus vtable — and the [`ChunkPlan`]), publishes its
/// address, wakes sleeping workers only if there are any, and runs chunks itself. Workers join
/// the job as they arrive; once no chunk is left to claim the caller closes the job (a worker
/// arriving later does not touch it) and returns when the workers that joined have left. So a
/// worker that the operating system has not scheduled never delays a dispatch. Nothing is
/// allocated per dispatch. Workers spin for a while
/// after each job (`RML_THREAD_SPIN_US`, default [`DEFAULT_SPIN_US`]) and then sleep on a
/// condvar, so an idle pool costs no CPU. The protocol — who writes which atomic with which
/// ordering, and why no wake-up is lost — is written up in `src/exec/pool/README.md` and
/// model-checked by `tests/loom.rs`.
///
/// ```
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use rml::exec::{Schedule, ThreadPool};
///
/// let pool = ThreadPool::new(2);
/// let sum = AtomicUsize::new(0);
/// pool.parallel_for(0..1000, Schedule::Grain(10), &|r| {
///     sum.fetch_add(r.sum::<usize>(), Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), 999 * 1000 / 2);
/// ```
///
/// `ThreadPool` implements [`Executor`]; GEMV/GEMM use [`schedule`](Self::schedule) when their
/// caller passes no schedule. Concurrent callers take turns (one job at a time); a
/// `parallel_for` called from inside a chunk (of any pool) runs inline on that thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl ThreadPool {
    /// A pool of `threads` threads including the caller (`threads - 1` workers; 0 is taken as
    /// 1, and `new(1)` runs everything inline), with the default spin time and schedule.
    ///
    /// # Panics
    /// If the operating system refuses to start a thread; [`ThreadPoolBuilder::build`] returns
    /// that as an error instead.
    pub fn new(threads: usize) -> Self {
        match ThreadPoolBuilder::new().threads(threads).build() {
            Ok(pool) => pool,
            Err(e) => panic!("rml ThreadPool::new({threads}): {e}"),
        }
    }

    /// A builder for a pool with a custom spin time or default schedule.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder::new()
    }

    /// The process-wide pool, created on first use with [`default_threads`] threads and never
    /// destroyed.
    ///
    /// # Panics
    /// If the operating system refuses to start its threads on first use.
    ///
    /// [`default_threads`]: Self::default_threads
    #[cfg(not(loom))]
    pub fn global() -> &'static ThreadPool {
        static GLOBAL: std::sync::OnceLock<ThreadPool> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(|| ThreadPool::new(Self::default_threads()))
    }

    /// The thread count a pool gets by default: `RML_NUM_THREADS` when it is set to a positive
    /// integer, else the number of performance cores (Linux: the CPUs whose sysfs
    /// `cpu_capacity`, or failing that `cpufreq/cpuinfo_max_freq`, is near the maximum; Apple:
    /// `hw.perflevel0.logicalcpu`), capped by `std::thread::available_parallelism`.
    #[cfg(not(loom))]
    pub fn default_threads() -> usize {
        env_number("RML_NUM_THREADS")
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(topology::performance_cores)
    }

    /// Threads that work on a dispatch, the caller included.
    #[inline]
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// How long an idle worker polls before it sleeps.
    pub fn spin_time(&self) -> Duration {
        self.shared.spin
    }

    /// The schedule GEMV/GEMM use on this pool when their caller passes none (a fresh pool:
    /// [`Schedule::default`]).
    #[inline]
    pub fn schedule(&self) -> Schedule {
        decode_schedule(self.shared.schedule.load(core::sync::atomic::Ordering::Relaxed))
    }

    /// Sets the default schedule (takes effect for the next call that uses it).
    pub fn set_schedule(&self, schedule: Schedule) {
        self.shared
            .schedule
            .store(encode_schedule(schedule), core::sync::atomic::Ordering::Relaxed);
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        use core::sync::atomic::Ordering::Relaxed;
        let sh = &*self.shared;
        let mut s = PoolStats {
            dispatches: sh.counters.dispatches.load(Relaxed) as u64,
            inline_runs: sh.counters.inline_runs.load(Relaxed) as u64,
            backed_off: sh.counters.backed_off.load(Relaxed) as u64,
            wakeups: sh.counters.wakeups.load(Relaxed) as u64,
            dispatch_ns: sh.counters.dispatch_ns.load(Relaxed),
            caller_wait_ns: sh.counters.caller_wait_ns.load(Relaxed),
            ..PoolStats::default()
        };
        for slot in sh.slots.iter() {
            s.chunks += slot.chunks.load(Relaxed) as u64;
            s.steals += slot.steals.load(Relaxed) as u64;
            s.sleeps += slot.sleeps.load(Relaxed) as u64;
            s.missed += slot.missed.load(Relaxed) as u64;
            s.worker_busy_ns += slot.busy_ns.load(Relaxed);
        }
        s
    }

    /// Runs `f` on chunks of `range` cut by `schedule` (see [`ChunkPlan`]) and returns when all
    /// have run. Runs inline, as one call `f(range)`, when the pool has no workers, the plan
    /// has one chunk, or the calling thread is already inside a chunk.
    ///
    /// # Panics
    /// If `f` panics, the first panic is re-raised here once every thread that joined the job
    /// has left it (chunks not yet claimed by then are not run); the pool stays usable.
    pub fn parallel_for(
        &self,
        range: Range<usize>,
        schedule: Schedule,
        f: &(dyn Fn(Range<usize>) + Sync),
    ) {
        let nested = sync::in_chunk();
        let plan = ChunkPlan::new(range, schedule, self.shared.threads, nested);
        match plan.num_chunks() {
            0 => {}
            1 => {
                self.shared
                    .counters
                    .inline_runs
                    .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                f(plan.range());
            }
            _ => self.dispatch(plan, f),
        }
    }

    /// Publishes a job of two or more chunks to the workers, works on it until no chunk is left
    /// to claim, closes it, and waits for the workers that joined it to leave.
    fn dispatch(&self, plan: ChunkPlan, f: &(dyn Fn(Range<usize>) + Sync)) {
        let sh = &*self.shared;
        let mut call = lock(&sh.call);
        #[cfg(not(loom))]
        if sh.backoff && call.backoff.take_inline() {
            drop(call);
            sh.counters.backed_off.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            f(plan.range());
            return;
        }
        let job = Job {
            panicked: AtomicBool::new(false),
            payload: UnsafeCell::new(None),
            live: Liveness::new(),
        };
        // SAFETY: only the lifetime changes. A worker calls `f` only between its join and its
        // `done` increment, and this function returns only after the increment (Acquire) of
        // every worker that joined; a worker that did not join never reads `desc`.
        let f_static = unsafe {
            core::mem::transmute::<
                &(dyn Fn(Range<usize>) + Sync),
                &'static (dyn Fn(Range<usize>) + Sync),
            >(f)
        };
        let desc = JobDesc { f: f_static, plan, job: &job };
        // SAFETY: every worker that joined the previous job left it (its `done` increment
        // happened-before our Acquire read that ended the previous dispatch, under this same
        // mutex); a worker reads `desc` only after joining the job published below.
        unsafe { sh.announce.desc.write(desc) };
        if plan.is_owned() {
            claims::reset_shares(sh, &plan);
        } else {
            sh.next_chunk.store(0, Ordering::Relaxed);
        }
        // Publish (Release: the stores above are visible to a worker whose join reads this
        // value or a later one — the joins and the close are RMWs, so they continue its
        // release sequence).
        call.generation = call.generation.wrapping_add(1);
        sh.announce.state.store(state::open(call.generation), Ordering::Release);
        // Either a worker going to sleep sees the new generation, or we see its `sleeping`
        // increment (the two SeqCst fences; README "Why no wake-up is lost").
        fence(Ordering::SeqCst);
        if sh.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = lock(&sh.sleep_lock);
            sh.wake.notify_all();
            sh.counters.wakeups.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
        sh.counters.dispatches.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        #[cfg(not(loom))]
        let started = (sh.backoff || sh.timing).then(std::time::Instant::now);
        worker::run_chunks(sh, f, &plan, &job, 0);
        #[cfg(not(loom))]
        let own_end = sh.timing.then(std::time::Instant::now);
        // Every chunk is claimed (or a chunk panicked): close the job. The joins before the
        // close in the state word's modification order are exactly the workers we wait for;
        // a join after it fails, and that worker never touches the job.
        let closed = sh.announce.state.fetch_or(state::CLOSED, Ordering::Relaxed);
        call.done_target = call.done_target.wrapping_add(state::joined(closed));
        // Wait (spin, then yield) for the workers that joined to leave: each one's Release
        // increment is after its last access to the job, so once our Acquire load reads the
        // target, no worker touches the job again and this frame (and `job`) may die.
        let mut polls = 0u32;
        #[cfg(not(loom))]
        let mut waiting_since = None;
        while sh.done.load(Ordering::Acquire) != call.done_target {
            if polls < CALLER_SPIN_POLLS {
                polls += 1;
                spin_hint();
            } else {
                #[cfg(not(loom))]
                if sh.backoff && waiting_since.is_none() {
                    waiting_since = Some(std::time::Instant::now());
                }
                thread::yield_now();
            }
        }
        job.live.kill();
        #[cfg(not(loom))]
        if let (Some(t0), Some(t1)) = (started, own_end) {
            use core::sync::atomic::Ordering::Relaxed;
            let end = std::time::Instant::now();
            let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            sh.counters.dispatch_ns.fetch_add(ns(end - t0), Relaxed);
            sh.counters.caller_wait_ns.fetch_add(ns(end - t1), Relaxed);
        }
        // A stall: the spin ran out and the wait (from the end of the caller's own chunks,
        // approximated by the start of its yields) was long against both STALL and the
        // caller's own work.
        #[cfg(not(loom))]
        if let Some(t0) = started.filter(|_| sh.backoff) {
            let stalled = waiting_since.is_some_and(|t1| {
                let (work, waited) = (t1 - t0, t1.elapsed());
                waited > STALL && waited > 2 * work
            });
            call.backoff.record(stalled);
        }
        drop(call);
        if job.panicked.load(Ordering::Relaxed) {
            if let Some(payload) = job.payload.into_inner() {
                std::panic::resume_unwind(payload);
            }
        }
    }
}

/// Claim words of the owned schedules (`Static`, `Owned`). Each thread's share of the job is a
/// range of claim units `[front, back)` packed into one `AtomicU64` as `front | back << 32`,
/// both biased by `BIAS`. The owner claims `front` with `fetch_add(1)`, any other thread
/// claims `back - 1` with `fetch_sub(1 << 32)`; a claim succeeds iff `front < back` in the
/// value the RMW read. RMWs on one word are totally ordered, so the two ends never hand out
/// the same unit, and once `front >= back` no claim succeeds again. Each thread makes at most
/// one failing claim per share and job (it moves on after a failure), so `back` never drops
/// below `BIAS - MAX_THREADS >= 0` and `front` never reaches bit 32.
pub(super) mod claims {
    use super::{AtomicU64, ChunkPlan, Ordering, Shared, MAX_THREADS};

    pub(super) const BIAS: u64 = MAX_THREADS as u64;
    const LOW: u64 = (1 << 32) - 1;
    const BACK_ONE: u64 = 1 << 32;
    /// Most claim units per job; a plan with more chunks groups consecutive chunks into units.
    const MAX_UNITS: usize = 1 << 31;
    /// A share with nothing left.
    pub(super) const EMPTY: u64 = BIAS | BIAS << 32;

    /// Chunks per claim unit (1 unless the plan has more than `MAX_UNITS` chunks) and the
    /// number of units.
    #[inline]
    pub(super) fn units(plan: &ChunkPlan) -> (usize, usize) {
        let per = plan.num_chunks().div_ceil(MAX_UNITS).max(1);
        (per, plan.num_chunks().div_ceil(per))
    }

    /// Gives every thread its share of `plan`'s units (caller, before publishing the job).
    pub(super) fn reset_shares(sh: &Shared, plan: &ChunkPlan) {
        let (_, units) = units(plan);
        for (i, word) in sh.shares.iter().enumerate() {
            let r = crate::exec::chunks::share_range(units, sh.threads, i);
            word.store((BIAS + r.start as u64) | (BIAS + r.end as u64) << 32, Ordering::Relaxed);
        }
    }

    /// Empties every share: after a panic nobody claims another unit.
    pub(super) fn empty_shares(sh: &Shared) {
        for word in sh.shares.iter() {
            word.store(EMPTY, Ordering::Relaxed);
        }
    }

    /// The owner's claim: the front unit of its share, if any is left.
    #[inline]
    pub(super) fn front(word: &AtomicU64) -> Option<usize> {
        let old = word.fetch_add(1, Ordering::Relaxed);
        let (f, b) = (old & LOW, old >> 32);
        (f < b).then(|| (f - BIAS) as usize)
    }

    /// Another thread's claim: the back unit of a share, if any is left.
    #[inline]
    pub(super) fn back(word: &AtomicU64) -> Option<usize> {
        let old = word.fetch_sub(BACK_ONE, Ordering::Relaxed);
        let (f, b) = (old & LOW, old >> 32);
        (f < b).then(|| (b - 1 - BIAS) as usize)
    }
}

impl Executor for ThreadPool {
    fn threads(&self) -> usize {
        ThreadPool::threads(self)
    }

    fn schedule(&self) -> Schedule {
        ThreadPool::schedule(self)
    }

    fn parallel_for(
        &self,
        range: Range<usize>,
        schedule: Schedule,
        f: &(dyn Fn(Range<usize>) + Sync),
    ) {
        ThreadPool::parallel_for(self, range, schedule, f)
    }
}

impl fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .field("spin", &self.shared.spin)
            .field("schedule", &self.schedule())
            .finish()
    }
}

impl Drop for ThreadPool {
    /// Stops and joins every worker, waking sleeping ones; returns within about one wake-up.
    fn drop(&mut self) {
        let sh = &*self.shared;
        sh.announce.shutdown.store(true, Ordering::Relaxed);
        let generation = lock(&sh.call).generation.wrapping_add(1);
        // A new generation, closed: workers see it, read `shutdown`, and exit without joining.
        sh.announce.state.store(state::open(generation) | state::CLOSED, Ordering::Release);
        fence(Ordering::SeqCst);
        {
            let _g = lock(&sh.sleep_lock);
            sh.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            // A worker never panics (chunk panics are caught), so there is nothing to report.
            let _ = handle.join();
        }
    }
}

/// Reads a non-negative integer from the environment variable `name`; absent or unparsable
/// values give `None`.
fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

const TAG_BITS: u32 = 4;

/// The pool's stored default: [`Schedule::code`] in the low [`TAG_BITS`] bits, the grain
/// above them (saturated).
fn encode_schedule(s: Schedule) -> usize {
    const _: () = assert!(Schedule::Owned.code() < 1 << TAG_BITS);
    (s.grain().min(usize::MAX >> TAG_BITS) << TAG_BITS) | s.code() as usize
}

fn decode_schedule(v: usize) -> Schedule {
    // Every stored value came from `encode_schedule`, so the code is valid.
    Schedule::from_code((v & ((1 << TAG_BITS) - 1)) as u32, v >> TAG_BITS).unwrap_or_default()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Runs `n` records of `stalled` and returns how many calls then run inline.
    fn inline_after(b: &mut Backoff, stalled: &[bool]) -> u32 {
        for &s in stalled {
            b.record(s);
        }
        let mut n = 0;
        while b.take_inline() {
            n += 1;
        }
        n
    }

    #[test]
    fn backoff_starts_after_two_stalls_in_32_and_doubles_until_a_clean_run() {
        assert_eq!(STALLS_TO_BACK_OFF, 2, "the cases below are written for 2");
        let mut b = Backoff::default();
        // One stall among 32 dispatches: no back-off.
        let mut one = [false; 31];
        one[3] = true;
        assert_eq!(inline_after(&mut b, &one), 0);
        // The second within the window: the first back-off.
        assert_eq!(inline_after(&mut b, &[true]), BACK_OFF_MIN);
        // The window was cleared: two more stalls back off again, twice as long.
        assert_eq!(inline_after(&mut b, &[true, false]), 0);
        assert_eq!(inline_after(&mut b, &[true]), 2 * BACK_OFF_MIN);
        // Stalls 32 or more dispatches apart never back off.
        let mut spread = [false; 32 * 8];
        spread.iter_mut().step_by(32).for_each(|s| *s = true);
        assert_eq!(inline_after(&mut b, &spread), 0);
        // CLEAN_TO_RESET clean dispatches reset the length; the cap holds.
        inline_after(&mut b, &[false; CLEAN_TO_RESET as usize]);
        assert_eq!(inline_after(&mut b, &[true; 2]), BACK_OFF_MIN);
        for _ in 0..20 {
            inline_after(&mut b, &[true; 2]);
        }
        assert_eq!(inline_after(&mut b, &[true; 2]), BACK_OFF_MAX);
    }

    #[test]
    fn schedule_encoding_round_trips() {
        for s in Schedule::ALL.into_iter().chain([Schedule::Grain(0), Schedule::Grain(1 << 40)]) {
            assert_eq!(decode_schedule(encode_schedule(s)), s);
        }
        assert_eq!(
            decode_schedule(encode_schedule(Schedule::Grain(usize::MAX))),
            Schedule::Grain(usize::MAX >> TAG_BITS)
        );
    }

    #[test]
    fn padded_is_a_cache_line() {
        assert!(core::mem::align_of::<Padded<AtomicUsize>>() >= 64);
        assert_eq!(core::mem::size_of::<Padded<AtomicUsize>>() % 64, 0);
    }

    #[test]
    fn fresh_pool_defaults() {
        let pool = ThreadPool::new(2);
        assert_eq!(pool.threads(), 2);
        assert_eq!(pool.schedule(), Schedule::default());
        assert_eq!(Executor::schedule(&pool), Schedule::default());
        pool.set_schedule(Schedule::Grain(32));
        assert_eq!(Executor::schedule(&pool), Schedule::Grain(32));
        assert_eq!(ThreadPool::new(0).threads(), 1);
    }
}
