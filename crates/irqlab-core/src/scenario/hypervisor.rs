//! The hypervisor layer: VMs (vCPUs pinned to pCPUs) and the trap-and-emulate
//! injection path's costs.

use super::units::Time;
use crate::engine::time::PS_PER_US;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Trap-and-emulate injection costs: a physical interrupt for a running guest exits to the hypervisor.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
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
    /// What an idle `[[vm]]` vCPU does: wait in place in guest mode (`spin`,
    /// as with the guest's `idle=poll` or cpuidle-haltpoll), or execute HLT/WFI,
    /// exit, and halt in the host (`hlt`, KVM's `kvm_vcpu_halt`: halt-poll,
    /// then block until an interrupt wakes it).
    #[serde(default)]
    pub guest_idle: GuestIdle,
    /// KVM's `halt_poll_ns`: the most a halted vCPU polls before it blocks
    /// (`KVM_HALT_POLL_NS_DEFAULT`, 200 µs on x86). Each vCPU's own window
    /// adapts under it as `kvm_vcpu_halt` grows and shrinks it.
    #[serde(default = "default_halt_poll")]
    pub halt_poll: Time,
    /// `halt_poll_ns_grow_start` (10 µs): a window grows from 0 to this first.
    #[serde(default = "default_halt_poll_grow_start")]
    pub halt_poll_grow_start: Time,
    /// Waking a blocked vCPU, before its VM entry: the host's wake-up
    /// interrupt (`pi_wakeup_handler`), `try_to_wake_up`, `schedule()` to the
    /// vCPU's thread and `vcpu_load`. An assumption.
    #[serde(default = "default_wake")]
    pub wake: Time,
}

/// What an idle vCPU of a `[[vm]]` does.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GuestIdle {
    /// Waits in place in guest mode: an interrupt reaches it with no wake-up.
    #[default]
    Spin,
    /// HLT (x86) or a trapped WFI (arm64) exits, and the host halts the vCPU.
    Hlt,
}

fn default_halt_poll() -> Time {
    Time(200 * PS_PER_US)
}

fn default_halt_poll_grow_start() -> Time {
    Time(10 * PS_PER_US)
}

fn default_wake() -> Time {
    Time(3 * PS_PER_US)
}

impl Default for HypervisorCosts {
    fn default() -> Self {
        HypervisorCosts {
            exit: Time(0),
            handler: Time(0),
            inject: Time(0),
            entry: Time(0),
            guest_idle: GuestIdle::Spin,
            halt_poll: default_halt_poll(),
            halt_poll_grow_start: default_halt_poll_grow_start(),
            wake: default_wake(),
        }
    }
}

/// A VM whose vCPUs are pinned 1:1 to `pcpus`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    pub name: String,
    pub vcpus: u32,
    pub pcpus: Vec<u32>,
}
