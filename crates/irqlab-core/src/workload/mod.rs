//! Workloads that run on CPUs. Tasks loop forever: user work, then (optionally)
//! an exception — a syscall, a page fault, or `sched_yield()`.

mod task;

pub use task::TaskState;
