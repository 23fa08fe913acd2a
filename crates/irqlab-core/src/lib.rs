//! irqlab-core: a deterministic discrete-event engine and the interrupt-delivery
//! models built on it. Pure Rust; the Python bindings live in `irqlab-py`.
//!
//! - [`engine`]: time, event queue, timers, RNG streams, stats, Perfetto trace.
//! - [`scenario`]: the scenario schema, loading and validation.
//! - [`hw`], [`os`], [`virt`], [`workload`]: the machine model's parts.
//! - [`nmi`]: M1, pseudo-NMI costs and cross-CPU requests.
//! - [`machine`]: wiring and event dispatch; [`run`]: a scenario end to end.

pub mod bench;
pub mod components;
pub mod engine;
pub mod os;
pub mod platform;
pub mod run;
pub mod scenario;
pub mod workload;

pub use run::{run, run_replay, to_json, RunOptions, RunOutput};
pub use scenario::{load, Scenario, ScenarioError};
