//! irqlab-core: a deterministic discrete-event engine and the interrupt-delivery
//! models built on it. Pure Rust; the Python bindings live in `irqlab-py`.

pub mod engine;
pub mod scenario;
