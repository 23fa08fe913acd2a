//! The scenario schema: the single source of truth for what a scenario may say.
//! Serde types with `deny_unknown_fields`; [`load`] adds `--set` overrides and
//! the checks serde cannot express, and every error names the key path.

//!
//! Split by concept: the core here (platform, fabric, stats, trace, figures)
//! with `cpu`, `hypervisor` and `workload` (sources, tasks); each component's
//! section lives with the component (`components/*/params.rs`) and is listed
//! in `Scenario` below with its check in `check_components`.

pub mod budget;
pub mod check;
mod cpu;
mod hypervisor;
mod load;
mod overrides;
pub mod provenance;
pub mod units;
mod validate;
mod workload;

pub use crate::components::crosscall::params::{CrossCall, Mechanism};
pub use crate::components::gicv4::params::{DoorbellWhen, Gic, GicCosts, GicVersion};
pub use crate::components::hypervisor::params::{SchedCosts, SchedKind, VcpuSched, Vwfi};
pub use crate::components::kvm_x86::params::{Kvm, KvmCosts, KvmRates, Lvtpc, Order};
pub use crate::components::moderation::params::{Gsim, GsimChange, Moderation, ModerationKind};
pub use crate::components::nic::params::Nic;
pub use crate::components::nvme::params::{Fio, Nvme};
pub use crate::components::spe::params::{Policy as SpePolicy, Size, Spe};
pub use crate::components::vblk::params::Vblk;
pub use cpu::{base_slice, CpuCosts, IdleState, Masking, PmrCosts, SdeiCosts};
pub use hypervisor::{GuestIdle, HypervisorCosts, Vm};
pub use load::{json_schema, load, load_json, parse_rate, parse_time};
pub use units::{CpuTime, Rate, Time};
pub use workload::{Arrival, ExceptionKind, PagefaultCosts, Source, Task};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn one() -> u64 {
    1
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, used in reports.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Simulated time, warm-up included.
    pub duration: Time,
    /// Initial part of the run excluded from every metric.
    #[serde(default)]
    pub warmup: Time,
    #[serde(default = "one", deserialize_with = "units::seed")]
    #[schemars(schema_with = "units::seed_schema")]
    pub seed: u64,
    #[serde(default)]
    pub platform: Platform,
    #[serde(default)]
    pub cpu: CpuCosts,
    #[serde(default)]
    pub fabric: Fabric,
    /// The network stack's softirq budgets (sysctl net.core.*).
    #[serde(default)]
    pub net: NetBudget,
    #[serde(default)]
    pub hypervisor: HypervisorCosts,
    /// MSI sources: device queues that raise interrupts.
    #[serde(default, rename = "source")]
    pub sources: Vec<Source>,
    /// Tasks: loops of user work and exceptions.
    #[serde(default, rename = "task")]
    pub tasks: Vec<Task>,
    /// A page fault's kernel work in parts, for page-fault tasks without a `body`.
    #[serde(default)]
    pub pagefault: PagefaultCosts,
    #[serde(default, rename = "vm")]
    pub vms: Vec<Vm>,
    /// Global software interrupt moderation (M5).
    #[serde(default)]
    pub gsim: Option<Gsim>,
    /// Intel posted MSI for the host's device interrupts (M5).
    #[serde(default)]
    pub posted_msi: Option<crate::components::posted_msi::params::PostedMsi>,
    /// NVMe SSDs with fio-like jobs (M5).
    #[serde(default)]
    pub nvme: Vec<Nvme>,
    /// NIC receive queues (M5).
    #[serde(default)]
    pub nic: Vec<Nic>,
    /// A KVM x86 guest's VM-enter loop (M4); runs as a model of its own.
    #[serde(default)]
    pub kvm: Option<Kvm>,
    /// The hypervisor's vCPU scheduler (M3).
    #[serde(default)]
    pub vcpu_sched: Option<VcpuSched>,
    /// The GICv3/v4 and its ITSs, for a guest's device interrupts (M3).
    #[serde(default)]
    pub gic: Option<Gic>,
    /// fio jobs in the guest against a provisioned-IOPS volume (M3).
    #[serde(default)]
    pub vblk: Option<Vblk>,
    /// A task profiled with SPE, on the host or in a guest, and KVM's buffer pinning policy (M2).
    #[serde(default)]
    pub spe: Option<Spe>,
    /// Cross-CPU requests (backtrace, crash-dump stop) and how they escalate.
    #[serde(default, rename = "crosscall")]
    pub crosscalls: Vec<CrossCall>,
    #[serde(default)]
    pub stats: StatsCfg,
    #[serde(default)]
    pub trace: TraceCfg,
    /// Published figures this scenario reproduces, checked by `irqlab reproduce`.
    #[serde(default)]
    pub expect: Vec<Expect>,
    /// Runs of this scenario with overrides and no published figure: `irqlab
    /// reproduce` runs them and reports the listed metrics side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<Variants>,
    /// Where a value comes from, by key path (`"kvm.vcpus" = "M4 brief"`,
    /// `"cpu.pmr.pmhe" = "Grace: relaxed PMR sync (M1 brief)"`): results report
    /// these parameters as sourced; other written values are assumptions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub cite: std::collections::BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// Physical CPUs.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub cpus: u32,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub sockets: u32,
    /// Interrupt-remapping units per socket (Intel VT-d: a DMAR unit per IIO
    /// stack, each an ACPI DMAR table DRHD entry; AMD: an IOMMU per root
    /// complex), each with its own posted-write path for DMA and MSIs
    /// (`fabric.msi_write`, `dma_write` are per unit). Devices say which
    /// (`[[nvme]] iommus`, `[[nic]] iommu`). Default 1: one path per socket.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub iommus_per_socket: u32,
}

impl Platform {
    /// The DMA path (socket's remapping unit) a device on `socket`, unit `iommu` writes through.
    pub fn path(&self, socket: u32, iommu: u32) -> u32 {
        socket * self.iommus_per_socket + iommu
    }
}

impl Default for Platform {
    fn default() -> Self {
        Self { cpus: 1, sockets: 1, iommus_per_socket: 1 }
    }
}

/// The platform interrupt fabric (PCIe root port, IOMMU interrupt remapping): every
/// `net_rx_action`'s budgets, sysctl `net.core.netdev_budget` and
/// `net.core.netdev_budget_usecs` (defaults in net/core/hotdata.c: 300, and two
/// jiffies at HZ=1000): one `net_rx_action` polls up to this many packets, or
/// for this long, then re-raises NET_RX.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetBudget {
    #[serde(default = "d_netdev_budget")]
    pub netdev_budget: u32,
    #[serde(default = "d_netdev_budget_usecs")]
    pub netdev_budget_usecs: u32,
}

fn d_netdev_budget() -> u32 {
    300
}
fn d_netdev_budget_usecs() -> u32 {
    2000
}

impl Default for NetBudget {
    fn default() -> Self {
        NetBudget { netdev_budget: d_netdev_budget(), netdev_budget_usecs: d_netdev_budget_usecs() }
    }
}

/// MSI write occupies one of `slots` for `msi_write`; beyond capacity writes queue.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    #[serde(default)]
    pub msi_write: Time,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub slots: u32,
    /// Fixed delay after the write leaves the fabric, before the interrupt controller sees it.
    #[serde(default)]
    pub latency: Time,
    /// Each device DMA write (an NVMe completion's data + CQE, a received packet)
    /// occupies the path this long. With DMA, each device's writes, its MSIs among
    /// them, go through in the order it sent them (PCIe ordering), the devices
    /// served in turn, and an MSI holds every device's DMA back for `msi_write`
    /// (docs/m5-global-interrupt-moderation.md). An NVMe disk's write (a 4 KiB
    /// read's data and entry) costs this whole.
    #[serde(default)]
    pub dma_write: Time,
    /// A received packet's DMA: this much per KiB on top of `dma_write` (NIC only;
    /// NVMe has no I/O size).
    #[serde(default)]
    pub dma_per_kib: Time,
}

impl Default for Fabric {
    fn default() -> Self {
        Self { msi_write: Time(0), slots: 1, latency: Time(0), dma_write: Time(0), dma_per_kib: Time(0) }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsCfg {
    /// Sampling interval of time series; default: 1/100 of the measured span.
    #[serde(default)]
    pub series_interval: Option<Time>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceCfg {
    /// Start of the traced window; default: end of warm-up.
    #[serde(default)]
    pub start: Option<Time>,
    /// End of the traced window; default: end of the run.
    #[serde(default)]
    pub end: Option<Time>,
    /// At most this many trace events (slice ends of recorded slices excepted).
    #[serde(default = "default_max_events")]
    pub max_events: u64,
}

fn default_max_events() -> u64 {
    1_000_000
}

// By hand: a derived Default would give max_events = 0 to scenarios without [trace].
impl Default for TraceCfg {
    fn default() -> Self {
        Self { start: None, end: None, max_events: default_max_events() }
    }
}

/// A published figure: `metric` of this run should be `published` within `tolerance` (relative).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Figure label; default: the scenario name.
    #[serde(default)]
    pub name: String,
    pub metric: String,
    pub published: f64,
    #[serde(default)]
    pub unit: String,
    pub tolerance: f64,
    pub source: String,
    /// Overrides (`KEY.PATH=VALUE`, as `--set`) for the run this figure is read from:
    /// one scenario file can hold a figure's variants (policies, masking modes).
    #[serde(default)]
    pub set: Vec<String>,
    /// `"fit"` if any value of the scenario was tuned on this figure, or if it
    /// equals (within its tolerance) an input copied from a published number;
    /// otherwise `"prediction"`.
    pub kind: ExpectKind,
    /// For a fit: the parameters (key paths, as `--set` writes them) fitted on it.
    #[serde(default)]
    pub fitted: Vec<String>,
    /// A relative effect: `published` is this variant's metric divided by the
    /// same metric of the variant with these overrides (e.g. feature off).
    #[serde(default)]
    pub relative_to: Option<Vec<String>>,
    /// Where the figure's result is discussed (why it misses, what it rests
    /// on): a docs page and its section, shown beside the figure in the report.
    #[serde(default)]
    pub doc: Option<String>,
}

/// A study: the same scenario under several overrides, results without expectations.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Variants {
    /// Metrics (or `HISTOGRAM.STAT`) reported for every run.
    pub metrics: Vec<String>,
    #[serde(rename = "run")]
    pub runs: Vec<Variant>,
    /// A plot of the study in the report: `y` against `x`, one line per run `group`.
    #[serde(default)]
    pub plot: Option<StudyPlot>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StudyPlot {
    pub x: String,
    pub y: String,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub log_y: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// Overrides (`KEY.PATH=VALUE`, as `--set`).
    #[serde(default)]
    pub set: Vec<String>,
    /// The line this run belongs to in the study's plot.
    #[serde(default)]
    pub group: Option<String>,
}

/// Whether a figure confirms the model (a prediction) or only shows that a
/// fitted value was fitted (a fit).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExpectKind {
    Fit,
    Prediction,
}

impl Scenario {
    /// The components' sections, each checked by its own `check` (the list of
    /// components, as in `Scenario`'s fields above).
    fn check_components(&self, ctx: &check::Ctx) -> check::Check {
        crate::components::crosscall::params::check(&self.crosscalls, ctx)?;
        let mut device_names = std::collections::HashSet::new();
        crate::components::nvme::params::check(&self.nvme, ctx, &mut device_names)?;
        crate::components::nic::params::check(&self.nic, ctx, &mut device_names)?;
        if let Some(g) = &self.gsim {
            g.check(ctx)?;
        }
        if let Some(p) = &self.posted_msi {
            p.check()?;
            // VT-d's posted interrupts: an x86 host's (intel/irq_remapping.c).
            let arm = if self.gic.is_some() {
                Some("[gic]")
            } else if self.spe.is_some() {
                Some("[spe]")
            } else if self.cpu.masking == cpu::Masking::Pmr {
                Some("cpu.masking = \"pmr\"")
            } else {
                None
            };
            if let Some(what) = arm {
                return check::err(
                    "posted_msi",
                    format!("Intel posted MSI (VT-d) is x86, and {what} makes this an arm64 machine: expected one or the other"),
                );
            }
        }
        if let Some(k) = &self.kvm {
            k.check()?;
        }
        if let Some(v) = &self.vcpu_sched {
            v.check(ctx)?;
            self.check_hypervisor_pcpus(v.pcpus)?;
        }
        if let Some(g) = &self.gic {
            g.check(self.vcpu_sched.as_ref().map(|v| v.pcpus))?;
        }
        if let Some(x) = &self.spe {
            x.check(self.vcpu_sched.as_ref().map(|v| v.vcpus), ctx)?;
        }
        if let Some(b) = &self.vblk {
            b.check(self.vcpu_sched.as_ref().map(|v| v.vcpus), self.gic.is_some())?;
        }
        Ok(())
    }
}

impl Scenario {
    /// What the components' sections add to the run's cost estimate
    /// (budget.rs, `estimate`), each from its params beside its check.
    pub(crate) fn estimate_components(&self, secs: f64, e: &mut check::Estimate) {
        crate::components::nvme::params::estimate(&self.nvme, self.platform.cpus, secs, e);
        crate::components::nic::params::estimate(&self.nic, secs, e);
        crate::components::crosscall::params::estimate(&self.crosscalls, secs, e);
        if let Some(k) = &self.kvm {
            k.estimate(secs, e);
        }
        if let (Some(b), Some(v)) = (&self.vblk, &self.vcpu_sched) {
            b.estimate(v.vcpus + v.pcpus, secs, e);
        }
    }

    /// The hypervisor component models pCPUs 0 … `pcpus`-1 itself: pinned VMs
    /// may not run there (host placements are refused by `check::targets`).
    fn check_hypervisor_pcpus(&self, pcpus: u32) -> check::Check {
        for (i, vm) in self.vms.iter().enumerate() {
            if let Some((j, &c)) = vm.pcpus.iter().enumerate().find(|(_, &c)| c < pcpus) {
                return check::err(format!("vm[{i}].pcpus[{j}]"), check::hypervisor_pcpu(c, pcpus));
            }
        }
        Ok(())
    }
}

/// A load error: one line, naming the file, the key path and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError(pub String);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ScenarioError {}

#[cfg(test)]
mod tests;
