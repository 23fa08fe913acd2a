//! The `[kvm]` section (M4): a KVM x86 guest's vCPUs, the order in which
//! `vcpu_enter_guest()` services requests, what raises them, and the costs.

use crate::scenario::check::{err, Check, Estimate, BYTES_PER_TASK};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::requests::{Lvtpc, Order};

/// The top-level keys a `[kvm]` scenario may have: the run's own and `[kvm]`.
/// The model reads nothing else (no CPU costs, sources, devices or other
/// components), so any other section beside it is refused by name
/// (`scenario::load`) rather than silently ignored, a new component's too.
pub const SECTIONS_READ: &[&str] =
    &["name", "description", "duration", "warmup", "seed", "kvm", "stats", "trace", "expect", "variants", "cite"];

/// Per-vCPU rates of what makes requests and exits.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvmRates {
    /// Guest PMU hardware counter overflows (sampling), per second of guest time:
    /// the host PMI's perf callback (`kvm_perf_overflow`) raises KVM_REQ_PMI, then KVM_REQ_PMU.
    #[serde(default)]
    pub pmu_overflow: Rate,
    /// Emulated counter increments that overflow (`kvm_pmu_incr_counter`, on an
    /// emulated instruction's exit), per second of guest time: servicing
    /// KVM_REQ_PMU then raises KVM_REQ_PMI.
    #[serde(default)]
    pub pmu_emulated_overflow: Rate,
    /// IPIs this vCPU sends to another vCPU of its VM.
    #[serde(default)]
    pub ipi: Rate,
    /// Device interrupts (MSIs of an assigned or emulated device) for this vCPU,
    /// raised from another CPU: posted with APICv, KVM_REQ_EVENT + kick without.
    #[serde(default)]
    pub device: Rate,
    /// LAPIC timer expiries.
    #[serde(default)]
    pub timer: Rate,
    /// Host reschedules or signals for the vCPU's thread (TIF_NEED_RESCHED set by
    /// another CPU): an exit in the guest, a cancel if set before the final check.
    #[serde(default)]
    pub host_resched: Rate,
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
    /// The host's `schedule()` detour when a reschedule is pending before VM-enter
    /// (`xfer_to_guest_mode_handle_work`, kernel/entry/kvm.c); the other task's time is not modelled.
    #[serde(default)]
    pub host_resched: Time,
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
    /// APICv with posted interrupts (KVM's `enable_apicv`, on by default where the
    /// CPU has it, e.g. Sapphire Rapids): IPIs and device interrupts set bits in the
    /// posted-interrupt descriptor (`vmx_deliver_posted_interrupt`), need no
    /// KVM_REQ_EVENT, reach a running guest without an exit, and a notification
    /// arriving with interrupts off is taken at VM entry instead of cancelling it.
    #[serde(default = "crate::scenario::units::yes")]
    pub apicv: bool,
    /// Timer interrupts are posted too (`kvm_can_post_timer_interrupt`: APICv,
    /// `pi_inject_timer` — on by default only with nohz_full housekeeping — and HLT
    /// or MWAIT in the guest). Off: the timer raises a request as without APICv.
    #[serde(default)]
    pub post_timer: bool,
    /// The guest's LAPIC timer runs on the VMX preemption timer (`enable_preemption_timer`,
    /// on by default where the CPU has it, as on Sapphire Rapids; `kvm_can_use_hv_timer`
    /// when the timer is not posted, with or without APICv). Its expiry is a VM exit on the
    /// vCPU itself (`apic_timer_expired(apic, false)`: injected there with APICv, before
    /// the next pass without): no request from outside, so a timer never cancels a
    /// VM-enter. Off: an hrtimer on the vCPU's own pCPU that raises a request and kicks.
    #[serde(default = "crate::scenario::units::yes")]
    pub hv_timer: bool,
    #[serde(default)]
    pub rates: KvmRates,
    #[serde(default)]
    pub costs: KvmCosts,
}

impl Kvm {
    /// Ranges, and request names the model's request table knows.
    /// What the vCPUs cost a run of `secs` (`budget.rs`): each source's rate,
    /// about 8 events an exit or request (a pass through the loop).
    pub fn estimate(&self, secs: f64, e: &mut Estimate) {
        let r = &self.rates;
        let per_vcpu = r.pmu_overflow.0
            + r.pmu_emulated_overflow.0
            + r.ipi.0
            + r.device.0
            + r.timer.0
            + r.host_resched.0
            + r.nmi.0
            + r.smi.0
            + r.other_exits.0;
        let vcpus = self.vms as f64 * self.vcpus as f64;
        e.add("kvm.rates", vcpus * per_vcpu * secs * 8.0, "kvm.vcpus", vcpus * BYTES_PER_TASK * 4.0);
    }

    pub fn check(&self) -> Check {
        let k = self;
        if k.vms == 0 || k.vms > 64 {
            return err("kvm.vms", format!("{}: expected 1 to 64", k.vms));
        }
        if k.vcpus == 0 || k.vcpus > 1024 {
            return err("kvm.vcpus", format!("{}: expected 1 to 1024", k.vcpus));
        }
        super::requests::resolve(&k.order).map_err(|(path, msg)| (format!("kvm.order{path}"), msg))?;
        if k.post_timer && !k.apicv {
            return err("kvm.post_timer", "true needs kvm.apicv = true: KVM posts timer interrupts only with APICv");
        }
        Ok(())
    }
}
