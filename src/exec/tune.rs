//! The auto-tuner (std): measures a workload over thread counts and schedules and picks the
//! fastest, caching the answer per machine and workload.
//!
//! [`tune`] runs the caller's workload closure on a [`ThreadPool`] of each thread count
//! `1..=max_threads` (default `min(cores, 16)`) with each candidate schedule set as the pool's
//! default ([`ThreadPool::schedule`], which GEMV/GEMM use when given none; a workload that
//! calls `parallel_for` itself should pass `pool.schedule()`). Each configuration runs
//! `repeats` times, interleaved across schedules so that drift in machine load spreads evenly,
//! and is ranked by its median. With one thread every schedule gives a single chunk, so only
//! one schedule is measured there.
//!
//! The result is stored in `$XDG_CACHE_HOME/rml/` (else `$HOME/.cache/rml/`) in a small text
//! file keyed by the CPU model, the core count and the caller's workload key, and reused on the
//! next run. `RML_TUNE=off` turns tuning off ([`tune`] returns `None` and measures nothing);
//! `RML_TUNE=refresh` measures again and overwrites the cache.
//!
//! ```no_run
//! use rml::exec::tune::{tune, TuneOptions};
//! use rml::exec::Executor;
//!
//! let rows = vec![0f32; 4096 * 512];
//! let mut out = vec![0f32; 4096];
//! let opts = TuneOptions { max_threads: 4, ..TuneOptions::default() };
//! if let Some(report) = tune("sum-rows-4096x512", &opts, |pool| {
//!     let out_ptr = out.as_mut_ptr() as usize;
//!     pool.parallel_for(0..4096, pool.schedule(), &|r| {
//!         for i in r {
//!             let s: f32 = rows[i * 512..(i + 1) * 512].iter().sum();
//!             // SAFETY: each row index is written by one chunk only.
//!             unsafe { *(out_ptr as *mut f32).add(i) = s };
//!         }
//!     });
//! })? {
//!     println!("{report}");
//!     let pool = report.build_pool()?;
//! }
//! # Ok::<(), rml::Error>(())
//! ```

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Schedule, ThreadPool};
use crate::{Error, Result};

/// Whether [`tune`] measures, reuses the cache, or does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneMode {
    /// Reuse a cached result for this machine and key; otherwise measure and cache.
    Cached,
    /// Measure even if a cached result exists, and overwrite it.
    Refresh,
    /// Do nothing: [`tune`] returns `Ok(None)`.
    Off,
}

impl TuneMode {
    /// Reads `RML_TUNE`: `off`, `0`, `false` or `no` → [`Off`](Self::Off); `refresh` →
    /// [`Refresh`](Self::Refresh); unset or anything else → [`Cached`](Self::Cached).
    pub fn from_env() -> Self {
        Self::parse(std::env::var("RML_TUNE").ok().as_deref().unwrap_or(""))
    }

    /// Parses an `RML_TUNE` value (see [`from_env`](Self::from_env)).
    pub fn parse(value: &str) -> Self {
        let v = value.trim();
        if ["off", "0", "false", "no"].iter().any(|o| v.eq_ignore_ascii_case(o)) {
            TuneMode::Off
        } else if v.eq_ignore_ascii_case("refresh") {
            TuneMode::Refresh
        } else {
            TuneMode::Cached
        }
    }
}

/// What [`tune`] sweeps and how long it may take.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Largest thread count tried (counts `1..=max_threads`). Default `min(cores, 16)`.
    pub max_threads: usize,
    /// Candidate schedules. Default: [`Schedule::ALL`] (`Grain(1)` and the other policies).
    pub schedules: Vec<Schedule>,
    /// Timed runs per configuration (after one untimed warm-up run). Default 5.
    pub repeats: usize,
    /// Stop starting new thread counts once this much time has passed; the result then covers
    /// the counts measured so far and is not cached. Default 60 s; `None` for no limit.
    pub budget: Option<Duration>,
    /// Worker spin time of the pools the sweep builds (`None`: the pool default).
    pub spin: Option<Duration>,
    /// Cache directory. Default `None`: `$XDG_CACHE_HOME/rml`, else `$HOME/.cache/rml`.
    pub cache_dir: Option<PathBuf>,
    /// Default: [`TuneMode::from_env`].
    pub mode: TuneMode,
}

impl Default for TuneOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        TuneOptions {
            max_threads: cores.min(16),
            schedules: Schedule::ALL.to_vec(),
            repeats: 5,
            budget: Some(Duration::from_secs(60)),
            spin: None,
            cache_dir: None,
            mode: TuneMode::from_env(),
        }
    }
}

/// One measured configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TuneEntry {
    /// Threads of the pool, the caller included.
    pub threads: usize,
    /// The pool's default schedule during the runs.
    pub schedule: Schedule,
    /// Median wall time of one workload run.
    pub median: Duration,
}

/// The outcome of [`tune`]: the winner and every configuration measured.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The configuration with the smallest median (the fewest threads among equals).
    pub best: TuneEntry,
    /// Every configuration, ordered by thread count, then schedule as given.
    pub table: Vec<TuneEntry>,
    /// `true` when the report was read from the cache instead of measured.
    pub from_cache: bool,
    /// `false` when the budget stopped the sweep before `max_threads`.
    pub complete: bool,
    /// The cache file read or written, if any.
    pub cache_file: Option<PathBuf>,
}

impl TuneReport {
    /// A pool configured as the winner: `best.threads` threads, `best.schedule` by default.
    ///
    /// # Errors
    /// `Io` if the operating system refuses a thread.
    pub fn build_pool(&self) -> Result<ThreadPool> {
        ThreadPool::builder().threads(self.best.threads).schedule(self.best.schedule).build()
    }
}

/// A table: one row per configuration, median in microseconds, the winner marked with `*`.
impl fmt::Display for TuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:>7}  {:<14} {:>12}", "threads", "schedule", "median µs")?;
        for e in &self.table {
            let mark = if *e == self.best { " *" } else { "" };
            let us = e.median.as_secs_f64() * 1e6;
            writeln!(f, "{:>7}  {:<14} {:>12.1}{mark}", e.threads, e.schedule.to_string(), us)?;
        }
        let source = if self.from_cache { "cached" } else { "measured" };
        write!(f, "best: {} threads, {} ({source})", self.best.threads, self.best.schedule)
    }
}

/// Finds the fastest (threads, schedule) for `workload`, identified by `key` in the cache.
///
/// `workload` runs one unit of the work (one decode step, one GEMV) on the pool it is given,
/// using `pool.schedule()` wherever it would otherwise pick a schedule. Returns `Ok(None)`
/// when `options.mode` is [`TuneMode::Off`]. A cache file that is missing, unreadable or for
/// another machine is ignored; failing to write the cache is not an error (the report's
/// `cache_file` is then `None`).
///
/// # Errors
/// `InvalidArgument` if `options` has no schedules or zero repeats; `Io` if a pool cannot
/// start its threads.
pub fn tune<F>(key: &str, options: &TuneOptions, mut workload: F) -> Result<Option<TuneReport>>
where
    F: FnMut(&ThreadPool),
{
    if options.mode == TuneMode::Off {
        return Ok(None);
    }
    if options.schedules.is_empty() || options.repeats == 0 {
        return Err(Error::invalid_argument(format_args!(
            "tune {key:?}: need at least one schedule and one repeat (got {} and {})",
            options.schedules.len(),
            options.repeats
        )));
    }
    let id = MachineKey::current(key);
    let dir = options.cache_dir.clone().or_else(default_cache_dir);
    let file = dir.as_ref().map(|d| d.join(id.file_name()));
    if options.mode == TuneMode::Cached {
        if let Some(report) = file.as_deref().and_then(|p| read_cache(p, &id)) {
            return Ok(Some(report));
        }
    }

    let start = Instant::now();
    let mut table = Vec::new();
    let mut complete = true;
    for threads in 1..=options.max_threads.max(1) {
        if threads > 1 && options.budget.is_some_and(|b| start.elapsed() >= b) {
            complete = false;
            break;
        }
        let mut builder = ThreadPool::builder().threads(threads);
        if let Some(spin) = options.spin {
            builder = builder.spin_time(spin);
        }
        let pool = builder.build()?;
        let schedules = if threads == 1 { &options.schedules[..1] } else { &options.schedules };
        let mut samples = alloc::vec![Vec::with_capacity(options.repeats); schedules.len()];
        for &s in schedules {
            pool.set_schedule(s);
            workload(&pool);
        }
        for _ in 0..options.repeats {
            for (i, &s) in schedules.iter().enumerate() {
                pool.set_schedule(s);
                let t = Instant::now();
                workload(&pool);
                samples[i].push(t.elapsed());
            }
        }
        for (&schedule, mut times) in schedules.iter().zip(samples) {
            table.push(TuneEntry { threads, schedule, median: median(&mut times) });
        }
    }
    let best = pick_best(&table);
    let mut report = TuneReport { best, table, from_cache: false, complete, cache_file: None };
    if complete {
        if let Some(path) = file {
            if write_cache(&path, &id, &report).is_ok() {
                report.cache_file = Some(path);
            }
        }
    }
    Ok(Some(report))
}

/// The cached winner for `key` on this machine, without measuring: `None` when there is no
/// usable cache file (absent, unreadable, for another machine) or when `options.mode` is not
/// [`TuneMode::Cached`]. (The `rml` command line uses it to start with the tuned pool.)
pub fn cached(key: &str, options: &TuneOptions) -> Option<TuneReport> {
    if options.mode != TuneMode::Cached {
        return None;
    }
    let id = MachineKey::current(key);
    let dir = options.cache_dir.clone().or_else(default_cache_dir)?;
    read_cache(&dir.join(id.file_name()), &id)
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2
    }
}

/// The smallest median; ties go to fewer threads, then the earlier schedule.
fn pick_best(table: &[TuneEntry]) -> TuneEntry {
    let mut best = table[0];
    for e in &table[1..] {
        if e.median < best.median {
            best = *e;
        }
    }
    best
}

/// What a cache file is keyed by.
struct MachineKey {
    cpu: String,
    cores: usize,
    key: String,
}

impl MachineKey {
    fn current(key: &str) -> Self {
        MachineKey {
            cpu: one_line(&cpu_model()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            key: one_line(key),
        }
    }

    /// `tune-<16 hex digits>.txt`, an FNV-1a hash of the three fields.
    fn file_name(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let text = alloc::format!("{}\n{}\n{}", self.cpu, self.cores, self.key);
        for b in text.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        alloc::format!("tune-{h:016x}.txt")
    }
}

/// Newlines and tabs would break the line-based file; fold them into spaces.
fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_string()
}

/// The CPU's model name (Linux: `/proc/cpuinfo`), else the architecture's name.
fn cpu_model() -> String {
    let from_cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|info| {
        info.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            let k = k.trim();
            (k == "model name" || k == "Hardware" || k == "Model" || k == "cpu model")
                .then(|| v.trim().to_string())
        })
    });
    from_cpuinfo
        .unwrap_or_else(|| alloc::format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS))
}

fn default_cache_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    let base = xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("rml"))
}

const MAGIC: &str = "rml-tune 1";

fn write_cache(path: &Path, id: &MachineKey, report: &TuneReport) -> std::io::Result<()> {
    use core::fmt::Write as _;
    let mut text = String::new();
    let entry =
        |e: &TuneEntry| alloc::format!("{} {} {}", e.threads, e.schedule, e.median.as_nanos());
    // Writing to a String cannot fail.
    let _ = writeln!(text, "{MAGIC}\ncpu\t{}\ncores\t{}\nkey\t{}", id.cpu, id.cores, id.key);
    let _ = writeln!(text, "best\t{}", entry(&report.best));
    for e in &report.table {
        let _ = writeln!(text, "row\t{}", entry(e));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Write aside, then rename: a reader never sees half a file.
    let tmp = path.with_extension(alloc::format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn read_cache(path: &Path, id: &MachineKey) -> Option<TuneReport> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let mut field = |name: &str| -> Option<String> {
        let (k, v) = lines.next()?.split_once('\t')?;
        (k == name).then(|| v.to_string())
    };
    let (cpu, cores, key) = (field("cpu")?, field("cores")?, field("key")?);
    if cpu != id.cpu || cores.parse::<usize>().ok()? != id.cores || key != id.key {
        return None;
    }
    let parse_entry = |s: &str| -> Option<TuneEntry> {
        let mut it = s.split(' ');
        let threads = it.next()?.parse().ok()?;
        let schedule = it.next()?.parse().ok()?;
        let nanos: u64 = it.next()?.parse().ok()?;
        (threads > 0 && it.next().is_none()).then_some(TuneEntry {
            threads,
            schedule,
            median: Duration::from_nanos(nanos),
        })
    };
    let best = parse_entry(lines.next()?.strip_prefix("best\t")?)?;
    let table = lines.map(|l| parse_entry(l.strip_prefix("row\t")?)).collect::<Option<Vec<_>>>()?;
    if !table.contains(&best) {
        return None;
    }
    Some(TuneReport {
        best,
        table,
        from_cache: true,
        complete: true,
        cache_file: Some(path.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(TuneMode::parse("off"), TuneMode::Off);
        assert_eq!(TuneMode::parse(" OFF "), TuneMode::Off);
        assert_eq!(TuneMode::parse("0"), TuneMode::Off);
        assert_eq!(TuneMode::parse("refresh"), TuneMode::Refresh);
        assert_eq!(TuneMode::parse(""), TuneMode::Cached);
        assert_eq!(TuneMode::parse("on"), TuneMode::Cached);
    }

    #[test]
    fn medians_and_best() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(median(&mut [ms(4), ms(1), ms(2), ms(100)]), ms(3));
        let e = |threads, median| TuneEntry { threads, schedule: Schedule::Static, median };
        assert_eq!(pick_best(&[e(1, ms(5)), e(2, ms(3)), e(3, ms(3)), e(4, ms(4))]), e(2, ms(3)));
    }

    #[test]
    fn keys_fold_control_characters() {
        assert_eq!(one_line(" a\tb\nc "), "a b c");
        let a = MachineKey { cpu: "x".into(), cores: 2, key: "k".into() };
        let b = MachineKey { cpu: "x".into(), cores: 4, key: "k".into() };
        assert_ne!(a.file_name(), b.file_name());
        assert!(a.file_name().starts_with("tune-") && a.file_name().ends_with(".txt"));
    }
}
