//! `[vcpu_sched]`: the hypervisor's vCPU scheduler (M3): how many vCPUs share
//! which pCPUs, the scheduling policy, and how a guest's idle WFI is handled.

use crate::scenario::check::{err, Check, Ctx};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The scheduling policy (Xen's `sched=`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SchedKind {
    /// `xen/common/sched/credit2.c`: credits, one runqueue for the socket,
    /// rate limit, wake-up preemption (`runq_tickle`); vCPUs move between pCPUs.
    Credit2,
    /// `xen/common/sched/null.c`: each vCPU is assigned one pCPU, for good.
    Null,
}

/// What a guest's idle WFI does (Xen's `vwfi=`, HCR_EL2.TWI).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Vwfi {
    /// Xen's default: WFI traps, the vCPU blocks and is descheduled (`vcpu_block_unless_event_pending`).
    Trap,
    /// WFI does not trap: the guest idles in place and keeps its pCPU.
    Native,
    /// The review's proposal: trap only while another vCPU is runnable on this pCPU.
    Adaptive,
    /// KVM arm64: no trap while the vCPU is the only runnable task here and has
    /// direct vLPIs (`kvm_vcpu_should_clear_twi`); otherwise trap.
    Kvm,
}

/// The vCPU scheduler's section (Xen defaults from `credit2.c` and `sched/private.h`).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VcpuSched {
    /// pCPUs the hypervisor schedules vCPUs on: platform CPUs 0 … pcpus-1.
    pub pcpus: u32,
    /// vCPUs of the guest (dom0 or a domU).
    pub vcpus: u32,
    #[serde(default = "d_kind")]
    pub scheduler: SchedKind,
    #[serde(default = "d_vwfi")]
    pub vwfi: Vwfi,
    /// Hard affinity: vCPU i may run only on `pin[i]` (null: the pCPU it is assigned).
    /// Default: credit2 lets every vCPU run anywhere; null assigns vCPU i to pCPU i % pcpus.
    #[serde(default)]
    pub pin: Option<Vec<u32>>,
    /// `sched_ratelimit_us` (SCHED_DEFAULT_RATELIMIT_US = 1000): a running vCPU is not preempted sooner.
    #[serde(default = "d_ratelimit")]
    pub ratelimit: Time,
    /// `CSCHED2_MIGRATE_RESIST` (`sched_credit2_migrate_resist`, 500 µs of credit).
    #[serde(default = "d_resist")]
    pub migrate_resist: Time,
    /// `CSCHED2_CREDIT_INIT` (10 ms): credit given at each reset, and the longest slice.
    #[serde(default = "d_credit")]
    pub credit_init: Time,
    /// `CSCHED2_MIN_TIMER` (500 µs): the shortest slice.
    #[serde(default = "d_min_timer")]
    pub min_timer: Time,
    /// With `vwfi = "kvm"`: KVM's `halt_poll_ns`, the longest a halted vCPU's
    /// thread polls for a wake-up before it sleeps (`KVM_HALT_POLL_NS_DEFAULT`,
    /// 500 µs on arm64); 0 turns halt polling off. Each vCPU's own window grows
    /// and shrinks within it (`kvm_vcpu_halt`).
    #[serde(default = "d_halt_poll")]
    pub halt_poll: Time,
    #[serde(default)]
    pub costs: SchedCosts,
    /// A what-if, off by default: stretches in which the hypervisor runs on one
    /// pCPU with interrupts masked, so that interrupts and work for that pCPU
    /// wait behind them (a hardware domain's console writes under Xen's
    /// `console_lock` with IRQs off, `xen/drivers/char/console.c`,
    /// `guest_console_write`; other platform work). No rate or length is known
    /// for a measured host: docs/m3-gicv4-direct-injection.md.
    #[serde(default)]
    pub masked: Option<MaskedStretches>,
}

/// `[vcpu_sched.masked]`: Poisson stretches of masked hypervisor time on a pCPU.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaskedStretches {
    /// The pCPU (default 0, where Xen routes every host LPI).
    #[serde(default)]
    pub cpu: u32,
    /// Stretches per second (Poisson).
    pub rate: Rate,
    /// Each stretch's length.
    pub length: Time,
}

/// CPU time of the hypervisor's scheduling paths (guest exit and entry are `[hypervisor]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedCosts {
    /// `schedule()` + `context_switch()`: pick the next unit, save one vCPU's EL1,
    /// timer and vGIC state and restore another's. A switch to or from the
    /// idle vCPU pays half: it only saves, or only restores.
    #[serde(default)]
    pub context_switch: Time,
    /// A trapped WFI: `vcpu_block_unless_event_pending` before the schedule.
    #[serde(default)]
    pub block: Time,
    /// `vcpu_wake` → the scheduler's wake hook and `runq_tickle`.
    #[serde(default)]
    pub wake: Time,
    /// A pCPU idle in Xen's idle loop (`wfi`) taking an interrupt.
    #[serde(default)]
    pub idle_exit: Time,
}

fn d_kind() -> SchedKind {
    SchedKind::Credit2
}
fn d_vwfi() -> Vwfi {
    Vwfi::Trap
}
fn d_ratelimit() -> Time {
    Time(1_000_000_000)
}
fn d_resist() -> Time {
    Time(500_000_000)
}
fn d_credit() -> Time {
    Time(10_000_000_000)
}
fn d_min_timer() -> Time {
    Time(500_000_000)
}
fn d_halt_poll() -> Time {
    Time(500_000_000)
}

impl VcpuSched {
    /// The pCPU(s) vCPU `v` may run on: `None` for any.
    pub fn pinned(&self, v: u32) -> Option<u32> {
        match (&self.pin, self.scheduler) {
            (Some(p), _) => Some(p[v as usize]),
            (None, SchedKind::Null) => Some(v % self.pcpus),
            (None, SchedKind::Credit2) => None,
        }
    }

    pub fn check(&self, ctx: &Ctx) -> Check {
        let p = "vcpu_sched";
        if self.pcpus == 0 {
            return err(format!("{p}.pcpus"), "must be at least 1");
        }
        if self.pcpus > ctx.cpus {
            return err(format!("{p}.pcpus"), format!("{} pCPUs do not exist (platform.cpus = {})", self.pcpus, ctx.cpus));
        }
        if self.vcpus == 0 || self.vcpus > 4096 {
            return err(format!("{p}.vcpus"), "must be between 1 and 4096");
        }
        if let Some(pin) = &self.pin {
            if pin.len() != self.vcpus as usize {
                return err(format!("{p}.pin"), format!("lists {} pCPUs, expected one per vCPU ({})", pin.len(), self.vcpus));
            }
            for (j, &c) in pin.iter().enumerate() {
                if c >= self.pcpus {
                    return err(format!("{p}.pin[{j}]"), format!("pCPU {c} does not exist (vcpu_sched.pcpus = {})", self.pcpus));
                }
            }
        }
        if self.scheduler == SchedKind::Null {
            // null keeps a vCPU on its pCPU even while it is blocked: a second one there would never run.
            let mut used = vec![false; self.pcpus as usize];
            for v in 0..self.vcpus {
                let c = self.pinned(v).expect("null assigns every vCPU") as usize;
                if std::mem::replace(&mut used[c], true) {
                    return err(
                        format!("{p}.scheduler"),
                        format!("\"null\" runs one vCPU per pCPU, but vCPU {v} shares pCPU {c} (give more pcpus or use \"credit2\")"),
                    );
                }
            }
        }
        for (k, t) in [("ratelimit", self.ratelimit), ("min_timer", self.min_timer), ("credit_init", self.credit_init)] {
            if t.ps() > 1_000_000_000_000_000 {
                return err(format!("{p}.{k}"), "must be at most 1000s");
            }
        }
        if let Some(x) = &self.masked {
            if x.cpu >= self.pcpus {
                return err(format!("{p}.masked.cpu"), format!("pCPU {} does not exist (vcpu_sched.pcpus = {})", x.cpu, self.pcpus));
            }
            if x.rate.0 > 0.0 && x.length.ps() == 0 {
                return err(format!("{p}.masked.length"), "must be above 0 when the rate is");
            }
            if x.length.ps() > 1_000_000_000_000 || x.rate.0 * x.length.ps() as f64 / 1e12 >= 1.0 {
                return err(format!("{p}.masked.length"), "at most 1s, and rate × length under 1 (the pCPU must run something else)");
            }
        }
        if self.credit_init.ps() == 0 {
            return err(format!("{p}.credit_init"), "must be above 0 (and at least min_timer)");
        }
        if self.min_timer.ps() == 0 || self.min_timer > self.credit_init {
            return err(format!("{p}.min_timer"), "must be above 0 and at most credit_init");
        }
        Ok(())
    }
}
