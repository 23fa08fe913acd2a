//! The OS: the generic interrupt flow (hardirq, then softirq on irq exit) and
//! the scheduler (run queues, time slices, context switches).

pub mod irq;
pub mod manage;
pub mod napi;
pub mod sched;
