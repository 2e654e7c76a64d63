//! Executors: how a parallel loop over a range of output rows is split and run.
//!
//! [`Executor::parallel_for`] splits a range into chunks (see [`Schedule`] and the chunk
//! planner in `chunks.rs`) and runs a closure on each. Chunk boundaries are a pure function of
//! (range, schedule, thread count), so a kernel that writes each output element inside one
//! chunk and reduces in a fixed order gives bit-identical results for every schedule and thread
//! count. [`InlineExecutor`] (no_std) runs everything on the caller; the `std` layer adds a
//! persistent `ThreadPool` (spin, then sleep; allocation-free dispatch; nested loops inline) and
//! an auto-tuner (`tune`) that picks a thread count and schedule for a workload.
//!
//! Where this layer sits and what it promises the others: docs/architecture.md ("Layers",
//! "Threads and schedules", "Bit-identity").

use core::fmt;
use core::ops::Range;
use core::str::FromStr;

mod chunks;
mod inline;
#[cfg(feature = "std")]
mod pool;
#[cfg(feature = "std")]
pub mod tune;

pub use chunks::ChunkPlan;
pub use inline::InlineExecutor;
#[cfg(feature = "std")]
pub use pool::{JoinHook, PoolStats, ThreadPool, ThreadPoolBuilder, DEFAULT_SPIN_US};

/// How [`Executor::parallel_for`] cuts a range of `n` items into chunks for `threads` threads.
///
/// The formulas are in `chunks.rs`' module docs ([`ChunkPlan`]); docs/architecture.md
/// ("Threads and schedules") says how schedules fit the rest of rml.
///
/// **The default** ([`Schedule::default`]) is [`Schedule::Static`], and it is the one default
/// everywhere: [`Executor::schedule`], a fresh [`ThreadPool`], the `rml` command line (without
/// `--schedule` or a tuned winner) and the C ABI (`RML_SCHEDULE_DEFAULT`, value 0). Why: it
/// was the fastest measured. In interleaved `rml bench` runs (SmolLM2 and Gemma 3 270M, two
/// threads) it decoded a few percent faster than `Proportional2` or level with it, and
/// `Owned` and finer chunks (`Proportional4`, `Grain(1)`) were slower: each chunk restarts the
/// GEMV's row streams and is claimed from a shared counter. The figures, machines and dates
/// are in docs/perf/notes-cli-exec.md ("The default schedule"). With one thread every
/// schedule runs one chunk, so the choice cannot matter there. Results are the same bits
/// under every schedule.
///
/// **Integer codes** ([`Schedule::code`], [`Schedule::from_code`]): the one integer encoding,
/// used by the C ABI's `RmlSchedule` and the pool's stored default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// `num_chunks = clamp(n / g, 1, 4 * threads)`, `chunk = ceil(n / num_chunks)`; one chunk
    /// when there are no workers or the caller is already inside a chunk.
    Grain(usize),
    /// The default: one contiguous block per thread; a thread that has not arrived by the time
    /// the others run dry has its block run by one of them.
    Static,
    /// Chunks of 8 rows, claimed dynamically.
    Fixed8,
    /// Chunks of 16 rows, claimed dynamically.
    Fixed16,
    /// Chunks of 32 rows, claimed dynamically.
    Fixed32,
    /// `chunk = ceil(n / (2 * threads))`.
    Proportional2,
    /// `chunk = ceil(n / (4 * threads))`.
    Proportional4,
    /// `Proportional4` with a floor of 16 rows per chunk.
    Adaptive,
    /// Row ownership: `Proportional4`'s chunks, with thread `i` owning the contiguous share
    /// [`ChunkPlan::share`]`(i)` (so the same rows, and their weights in its caches, on every
    /// call with the same range); it runs its share front to back, then takes chunks from the
    /// far end of other threads' shares.
    Owned,
}

/// [`Schedule::Static`]: the fastest measured (see [`Schedule`]).
impl Default for Schedule {
    fn default() -> Self {
        Schedule::Static
    }
}

impl Schedule {
    /// The code [`Schedule::from_code`] reads for "the default" ([`Schedule::default`]);
    /// [`Schedule::code`] never returns it.
    pub const DEFAULT_CODE: u32 = 0;

    /// This schedule's integer code (the grain of `Grain(g)` travels apart, see
    /// [`Schedule::grain`]): `Grain` 1, `Static` 2, `Fixed8` 3, `Fixed16` 4, `Fixed32` 5,
    /// `Proportional4` 6, `Adaptive` 7, `Proportional2` 8, `Owned` 9. These are the values of
    /// the C ABI's `RmlSchedule`; 0 is [`Schedule::DEFAULT_CODE`].
    pub const fn code(self) -> u32 {
        match self {
            Schedule::Grain(_) => 1,
            Schedule::Static => 2,
            Schedule::Fixed8 => 3,
            Schedule::Fixed16 => 4,
            Schedule::Fixed32 => 5,
            Schedule::Proportional4 => 6,
            Schedule::Adaptive => 7,
            Schedule::Proportional2 => 8,
            Schedule::Owned => 9,
        }
    }

    /// `g` for `Grain(g)`, 0 for every other schedule.
    pub const fn grain(self) -> usize {
        match self {
            Schedule::Grain(g) => g,
            _ => 0,
        }
    }

    /// The schedule with integer code `code` ([`Schedule::code`]; 0 is [`Schedule::default`]),
    /// `grain` giving `g` of `Grain(g)` (ignored for the other codes).
    ///
    /// ```
    /// use rml::Schedule;
    /// for s in Schedule::ALL {
    ///     assert_eq!(Schedule::from_code(s.code(), s.grain()).unwrap(), s);
    /// }
    /// assert_eq!(Schedule::from_code(0, 0).unwrap(), Schedule::default());
    /// assert!(Schedule::from_code(10, 0).is_err());
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` for a code above 9.
    pub fn from_code(code: u32, grain: usize) -> crate::Result<Schedule> {
        Ok(match code {
            Self::DEFAULT_CODE => Schedule::default(),
            1 => Schedule::Grain(grain),
            2 => Schedule::Static,
            3 => Schedule::Fixed8,
            4 => Schedule::Fixed16,
            5 => Schedule::Fixed32,
            6 => Schedule::Proportional4,
            7 => Schedule::Adaptive,
            8 => Schedule::Proportional2,
            9 => Schedule::Owned,
            c => {
                return Err(crate::Error::invalid_argument(format_args!(
                    "schedule code {c}: expected 0 (default), 1 (grain), 2 (static), 3 (fixed8), \
                     4 (fixed16), 5 (fixed32), 6 (proportional4), 7 (adaptive), \
                     8 (proportional2) or 9 (owned)"
                )))
            }
        })
    }

    /// Every policy: `Grain(1)` then the eight fixed policies, in declaration order.
    pub const ALL: [Schedule; 9] = [
        Schedule::Grain(1),
        Schedule::Static,
        Schedule::Fixed8,
        Schedule::Fixed16,
        Schedule::Fixed32,
        Schedule::Proportional2,
        Schedule::Proportional4,
        Schedule::Adaptive,
        Schedule::Owned,
    ];
}

/// Writes the name [`FromStr`] reads back: `grain:G`, `static`, `fixed8`, `fixed16`, `fixed32`,
/// `proportional2`, `proportional4`, `adaptive`, `owned`.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Grain(g) => write!(f, "grain:{g}"),
            Schedule::Static => f.write_str("static"),
            Schedule::Fixed8 => f.write_str("fixed8"),
            Schedule::Fixed16 => f.write_str("fixed16"),
            Schedule::Fixed32 => f.write_str("fixed32"),
            Schedule::Proportional2 => f.write_str("proportional2"),
            Schedule::Proportional4 => f.write_str("proportional4"),
            Schedule::Adaptive => f.write_str("adaptive"),
            Schedule::Owned => f.write_str("owned"),
        }
    }
}

/// Parses the names [`Display`](fmt::Display) writes, ASCII case-insensitively; a bare `grain`
/// means `grain:1`.
///
/// ```
/// use rml::Schedule;
/// assert_eq!("grain:16".parse::<Schedule>().unwrap(), Schedule::Grain(16));
/// assert_eq!("Proportional2".parse::<Schedule>().unwrap(), Schedule::Proportional2);
/// assert!("fixed7".parse::<Schedule>().is_err());
/// ```
impl FromStr for Schedule {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        let t = s.trim();
        let fixed = [
            ("static", Schedule::Static),
            ("fixed8", Schedule::Fixed8),
            ("fixed16", Schedule::Fixed16),
            ("fixed32", Schedule::Fixed32),
            ("proportional2", Schedule::Proportional2),
            ("proportional4", Schedule::Proportional4),
            ("adaptive", Schedule::Adaptive),
            ("owned", Schedule::Owned),
            ("grain", Schedule::Grain(1)),
        ];
        if let Some((_, sched)) = fixed.iter().find(|(name, _)| t.eq_ignore_ascii_case(name)) {
            return Ok(*sched);
        }
        if let (Some(head), Some(tail)) = (t.get(..6), t.get(6..)) {
            if head.eq_ignore_ascii_case("grain:") {
                if let Ok(g) = tail.parse::<usize>() {
                    return Ok(Schedule::Grain(g));
                }
            }
        }
        Err(crate::Error::invalid_argument(format_args!(
            "schedule {s:?}: expected grain:G, static, fixed8, fixed16, fixed32, proportional2, \
             proportional4, adaptive or owned"
        )))
    }
}

/// Runs a closure over chunks of a range, possibly in parallel.
pub trait Executor: Sync {
    /// Threads that work on a `parallel_for`, the caller included (1 for inline).
    fn threads(&self) -> usize;

    /// The schedule GEMV/GEMM use when the caller gives none ([`Schedule::default`] unless
    /// the executor says otherwise).
    fn schedule(&self) -> Schedule {
        Schedule::default()
    }

    /// Calls `f` on chunks that tile `range` in order with no gap or overlap, and returns when
    /// all have run. Chunks may run on several threads at once.
    fn parallel_for(
        &self,
        range: Range<usize>,
        schedule: Schedule,
        f: &(dyn Fn(Range<usize>) + Sync),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn schedule_names_round_trip() {
        for s in Schedule::ALL.into_iter().chain([Schedule::Grain(0), Schedule::Grain(4096)]) {
            assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
            assert_eq!(s.to_string().to_ascii_uppercase().parse::<Schedule>(), Ok(s));
        }
        assert_eq!("grain".parse::<Schedule>(), Ok(Schedule::Grain(1)));
        for s in Schedule::ALL.into_iter().chain([Schedule::Grain(0), Schedule::Grain(4096)]) {
            assert_ne!(s.code(), Schedule::DEFAULT_CODE);
            assert_eq!(Schedule::from_code(s.code(), s.grain()), Ok(s));
        }
        for bad in ["", "grain:", "grain:x", "grain:-1", "fixed7", "grainé:1", "静的静的静的"]
        {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert_eq!(e.code(), crate::Code::InvalidArgument, "{bad:?}");
        }
    }
}
