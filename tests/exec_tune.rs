//! The auto-tuner: sweeps every thread count and schedule, picks the smallest median, caches
//! the result per machine and workload key, reuses it, and does nothing when turned off.
#![cfg(feature = "std")]

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use core::time::Duration;
use std::collections::HashSet;

use rml::exec::tune::{tune, TuneMode, TuneOptions};
use rml::exec::{Schedule, ThreadPool};

fn options(dir: &std::path::Path, mode: TuneMode) -> TuneOptions {
    TuneOptions {
        max_threads: 3,
        schedules: Schedule::ALL.to_vec(),
        repeats: 3,
        budget: None,
        spin: None,
        cache_dir: Some(dir.to_path_buf()),
        mode,
    }
}

/// A workload whose cost depends on the configuration in a known way: it sleeps longer for
/// every thread short of 3 and for every schedule but Fixed16 (3 ms a step), so (3, Fixed16)
/// must win.
fn workload<'a>(
    calls: &'a AtomicUsize,
    seen: &'a std::sync::Mutex<HashSet<(usize, Schedule)>>,
) -> impl FnMut(&ThreadPool) + 'a {
    move |pool: &ThreadPool| {
        calls.fetch_add(1, Relaxed);
        seen.lock().unwrap().insert((pool.threads(), pool.schedule()));
        let penalty = (3 - pool.threads()) * 2 + usize::from(pool.schedule() != Schedule::Fixed16);
        std::thread::sleep(Duration::from_millis(1 + 3 * penalty as u64));
        let rows = AtomicUsize::new(0);
        pool.parallel_for(0..64, pool.schedule(), &|r| {
            rows.fetch_add(r.len(), Relaxed);
        });
        assert_eq!(rows.load(Relaxed), 64);
    }
}

#[test]
fn sweeps_picks_caches_and_reuses() {
    let dir = std::env::temp_dir().join(format!("rml-tune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let calls = AtomicUsize::new(0);
    let seen = std::sync::Mutex::new(HashSet::new());

    let report = tune("test-workload", &options(&dir, TuneMode::Cached), workload(&calls, &seen))
        .unwrap()
        .expect("tuning is on");
    // 1 thread: one schedule; 2 and 3 threads: every schedule. Warm-up + 3 repeats each.
    assert_eq!(report.table.len(), 1 + 2 * Schedule::ALL.len());
    assert_eq!(calls.load(Relaxed), report.table.len() * 4);
    assert_eq!(seen.lock().unwrap().len(), report.table.len());
    assert!(!report.from_cache && report.complete);
    assert_eq!((report.best.threads, report.best.schedule), (3, Schedule::Fixed16), "\n{report}");
    assert!(report.table.iter().all(|e| e.median >= report.best.median));
    let file = report.cache_file.clone().expect("cache written");
    assert!(file.starts_with(&dir));
    let text = report.to_string();
    assert!(text.contains("fixed16") && text.contains("best: 3 threads"), "{text}");

    // Second run: read from the cache, the workload never runs.
    calls.store(0, Relaxed);
    let again = tune("test-workload", &options(&dir, TuneMode::Cached), workload(&calls, &seen))
        .unwrap()
        .unwrap();
    assert!(again.from_cache);
    assert_eq!(calls.load(Relaxed), 0);
    assert_eq!(again.best, report.best);
    assert_eq!(again.table, report.table);
    let pool = again.build_pool().unwrap();
    assert_eq!((pool.threads(), pool.schedule()), (3, Schedule::Fixed16));

    // Another workload key is measured afresh, into another file.
    let other = tune("other-workload", &options(&dir, TuneMode::Cached), workload(&calls, &seen))
        .unwrap()
        .unwrap();
    assert!(!other.from_cache);
    assert_ne!(other.cache_file, report.cache_file);

    // Refresh measures again even though a cache exists.
    calls.store(0, Relaxed);
    let fresh = tune("test-workload", &options(&dir, TuneMode::Refresh), workload(&calls, &seen))
        .unwrap()
        .unwrap();
    assert!(!fresh.from_cache);
    assert!(calls.load(Relaxed) > 0);

    // A corrupt cache file is ignored and rewritten.
    std::fs::write(&file, "rml-tune 1\ncpu\tnonsense\n").unwrap();
    let redo = tune("test-workload", &options(&dir, TuneMode::Cached), workload(&calls, &seen))
        .unwrap()
        .unwrap();
    assert!(!redo.from_cache);
    assert!(std::fs::read_to_string(&file).unwrap().lines().count() > 5);

    // Off: nothing measured, nothing returned.
    calls.store(0, Relaxed);
    let off =
        tune("test-workload", &options(&dir, TuneMode::Off), workload(&calls, &seen)).unwrap();
    assert!(off.is_none());
    assert_eq!(calls.load(Relaxed), 0);

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn budget_bounds_the_sweep_and_bad_options_are_errors() {
    let dir = std::env::temp_dir().join(format!("rml-tune-budget-{}", std::process::id()));
    let mut opts = options(&dir, TuneMode::Refresh);
    opts.max_threads = 8;
    opts.budget = Some(Duration::ZERO);
    let report = tune("budget", &opts, |_| {}).unwrap().unwrap();
    // The budget is checked before each thread count after the first.
    assert!(!report.complete);
    assert_eq!(report.table.len(), 1);
    assert!(report.cache_file.is_none(), "an incomplete sweep is not cached");

    opts.schedules.clear();
    let e = tune("budget", &opts, |_| {}).unwrap_err();
    assert_eq!(e.code(), rml::Code::InvalidArgument);
    let _ = std::fs::remove_dir_all(&dir);
}
