//! Hardware: CPUs (execution and masking), the interrupt controller's pending
//! state, the platform interrupt fabric, and MSI sources.

pub mod cpu;
pub mod fabric;
pub mod irqchip;
pub mod exec;
pub mod msi;
