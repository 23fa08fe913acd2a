//! The hypervisor layer: VMs (vCPUs pinned to pCPUs) and the trap-and-emulate
//! injection path's costs.

use super::units::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Trap-and-emulate injection costs: a physical interrupt for a running guest exits to the hypervisor.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HypervisorCosts {
    /// Guest exit to the hypervisor (EL2 / VMX root).
    #[serde(default)]
    pub exit: Time,
    /// Hypervisor handling: acknowledge/EOI the physical interrupt, look up the virtual one.
    #[serde(default)]
    pub handler: Time,
    /// Injection: write a list register (arm64) or the VMCS event field (x86).
    #[serde(default)]
    pub inject: Time,
    /// Guest entry (`eret` to EL1 / VMRESUME).
    #[serde(default)]
    pub entry: Time,
}

/// A VM whose vCPUs are pinned 1:1 to `pcpus`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    pub name: String,
    pub vcpus: u32,
    pub pcpus: Vec<u32>,
}
