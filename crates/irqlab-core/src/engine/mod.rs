//! The discrete-event engine. It knows nothing about interrupts: it orders
//! events in time, hands them to a model, and offers the bookkeeping every model
//! needs (RNG streams, statistics, a Perfetto trace writer).

pub mod adaptive;
pub mod protocol;
pub mod queue;
pub mod radix;
pub mod rng;
pub mod sim;
pub mod stats;
pub mod time;
pub mod trace;

pub use adaptive::EventSet;
pub use protocol::{Outcome, Protocol, Span};
pub use queue::{EventQueue, HeapQueue};
pub use radix::RadixQueue;
pub use sim::{prefetch_lines, Model, Scheduler, TimerHandle};
pub use time::Ps;
