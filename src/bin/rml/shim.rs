//! TEMPORARY: stands in for rml::exec::ThreadPool / tune::cached / kernels::active until they land.
use rml::exec::{Executor, InlineExecutor, Schedule};
use rml::Result;
use std::ops::Range;
pub struct ThreadPool {
    sched: Schedule,
}
pub struct Builder {
    sched: Schedule,
}
impl Builder {
    pub fn threads(self, _t: usize) -> Self {
        self
    }
    pub fn schedule(mut self, s: Schedule) -> Self {
        self.sched = s;
        self
    }
    pub fn build(self) -> Result<ThreadPool> {
        Ok(ThreadPool { sched: self.sched })
    }
}
impl ThreadPool {
    pub fn builder() -> Builder {
        Builder { sched: Schedule::Proportional4 }
    }
    pub fn default_threads() -> usize {
        1
    }
    pub fn threads(&self) -> usize {
        1
    }
    pub fn schedule(&self) -> Schedule {
        self.sched
    }
}
impl Executor for ThreadPool {
    fn threads(&self) -> usize {
        1
    }
    fn schedule(&self) -> Schedule {
        self.sched
    }
    fn parallel_for(&self, r: Range<usize>, s: Schedule, f: &(dyn Fn(Range<usize>) + Sync)) {
        InlineExecutor.parallel_for(r, s, f)
    }
}
pub struct Best {
    pub threads: usize,
    pub schedule: Schedule,
}
pub fn cached(_k: &str) -> Option<Best> {
    None
}
pub struct Isa;
impl Isa {
    pub fn name(&self) -> &'static str {
        "scalar"
    }
}
pub fn active() -> Isa {
    Isa
}
pub fn parse_schedule(s: &str) -> Result<Schedule> {
    match s {
        "proportional2" => Ok(Schedule::Proportional2),
        "static" => Ok(Schedule::Static),
        _ => Err(rml::Error::invalid_argument(format!("schedule {s:?}"))),
    }
}
pub fn name(s: Schedule) -> String {
    format!("{s:?}").to_lowercase()
}
