//! The `[kvm]` section (M4): a KVM x86 guest's vCPUs, the order in which
//! `vcpu_enter_guest()` services requests, what raises them, and the costs.

use crate::scenario::check::{err, Check};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::requests::{Lvtpc, Order};

/// Per-vCPU rates of what makes requests and exits.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvmRates {
    /// Guest PMU counter overflows (sampling), per second of guest time.
    #[serde(default)]
    pub pmu_overflow: Rate,
    /// IPIs this vCPU sends to another vCPU of its VM.
    #[serde(default)]
    pub ipi: Rate,
    /// LAPIC timer expiries.
    #[serde(default)]
    pub timer: Rate,
    /// NMIs from other sources (`kvm_inject_nmi`: NMI watchdog, injected by userspace).
    #[serde(default)]
    pub nmi: Rate,
    /// SMIs.
    #[serde(default)]
    pub smi: Rate,
    /// Other VM exits (MMIO, CPUID, MSR, EPT violations): handled, no request.
    #[serde(default)]
    pub other_exits: Rate,
}

/// Costs on the host side of a vCPU's loop.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvmCosts {
    /// VM exit and its handling up to `vcpu_enter_guest()`.
    #[serde(default)]
    pub exit: Time,
    /// Servicing one pending request (`kvm_check_request` true and its handler).
    #[serde(default)]
    pub service: Time,
    /// Event injection (`kvm_check_and_inject_events`) when KVM_REQ_EVENT is pending.
    #[serde(default)]
    pub inject: Time,
    /// `preempt_disable`, `local_irq_disable`, mode = IN_GUEST_MODE, SRCU unlock, up to the final check.
    #[serde(default)]
    pub irqs_off: Time,
    /// VM-enter (VMLAUNCH/VMRESUME with state load).
    #[serde(default)]
    pub entry: Time,
    /// A cancelled VM-enter's unwind: `vmx_cancel_injection`, interrupts back on, SRCU relock.
    #[serde(default)]
    pub cancel: Time,
    /// Extra handling of an "other" exit.
    #[serde(default)]
    pub other_exit: Time,
    /// The guest's NMI handler, during which further NMIs are blocked (until IRET).
    #[serde(default)]
    pub guest_nmi_handler: Time,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kvm {
    /// VMs, each with `vcpus` vCPUs (pinned: the host side of their pCPUs is not modelled).
    #[serde(default = "crate::scenario::units::one_u32")]
    pub vms: u32,
    pub vcpus: u32,
    #[serde(default)]
    pub order: Order,
    #[serde(default)]
    pub lvtpc: Lvtpc,
    #[serde(default)]
    pub rates: KvmRates,
    #[serde(default)]
    pub costs: KvmCosts,
}

impl Kvm {
    /// Ranges, and request names the model's request table knows.
    pub fn check(&self) -> Check {
        let k = self;
        if k.vms == 0 || k.vms > 64 {
            return err("kvm.vms", format!("{}: expected 1 to 64", k.vms));
        }
        if k.vcpus == 0 || k.vcpus > 1024 {
            return err("kvm.vcpus", format!("{}: expected 1 to 1024", k.vcpus));
        }
        super::requests::resolve(&k.order).map_err(|(path, msg)| (format!("kvm.order{path}"), msg))?;
        Ok(())
    }
}
