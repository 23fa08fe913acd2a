//! The OS: the generic interrupt flow (hardirq, then softirq on irq exit) and
//! the scheduler (run queues, time slices, context switches); components'
//! threads in the kernel (`thread`).

pub mod irq;
pub mod manage;
pub mod napi;
pub mod sched;
pub mod thread;
