//! Hardware: CPUs (execution and masking), the interrupt controller's pending
//! state, the platform interrupt fabric, MSI sources, and the devices behind
//! them (NVMe SSDs, NIC receive queues).

pub mod cpu;
pub mod devices;
pub mod fabric;
pub mod irqchip;
pub mod exec;
pub mod msi;
pub mod nic;
pub mod nvme;
