//! The scenario schema: the single source of truth for what a scenario may say.
//! Serde types with `deny_unknown_fields`; [`load`] adds `--set` overrides and
//! the checks serde cannot express, and every error names the key path.

mod kvm;
mod m5;
mod overrides;
mod units;
mod validate;

pub use kvm::{Kvm, KvmCosts, KvmRates, Lvtpc, Order};
pub use m5::{Fio, Gsim, GsimChange, Moderation, ModerationKind, Nic, Nvme};
pub use units::{CpuTime, Rate, Time};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn one() -> u64 {
    1
}
fn one_u32() -> u32 {
    1
}
fn cpu0() -> Vec<u32> {
    vec![0]
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
    #[serde(default = "one")]
    pub seed: u64,
    #[serde(default)]
    pub platform: Platform,
    #[serde(default)]
    pub cpu: CpuCosts,
    #[serde(default)]
    pub fabric: Fabric,
    #[serde(default)]
    pub hypervisor: HypervisorCosts,
    /// MSI sources: device queues that raise interrupts.
    #[serde(default, rename = "source")]
    pub sources: Vec<Source>,
    /// Tasks: loops of user work and exceptions.
    #[serde(default, rename = "task")]
    pub tasks: Vec<Task>,
    #[serde(default, rename = "vm")]
    pub vms: Vec<Vm>,
    /// Global software interrupt moderation (M5).
    #[serde(default)]
    pub gsim: Option<Gsim>,
    /// NVMe SSDs with fio-like jobs (M5).
    #[serde(default)]
    pub nvme: Vec<Nvme>,
    /// NIC receive queues (M5).
    #[serde(default)]
    pub nic: Vec<Nic>,
    /// A KVM x86 guest's VM-enter loop (M4); runs as a model of its own.
    #[serde(default)]
    pub kvm: Option<Kvm>,
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
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// Physical CPUs.
    #[serde(default = "one_u32")]
    pub cpus: u32,
    #[serde(default = "one_u32")]
    pub sockets: u32,
}

impl Default for Platform {
    fn default() -> Self {
        Self { cpus: 1, sockets: 1 }
    }
}

/// How the kernel masks interrupts (arm64): PSTATE.DAIF, or GIC priority via ICC_PMR_EL1 (pseudo-NMI).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Masking {
    #[default]
    Daif,
    Pmr,
}

/// Per-CPU costs of the exception and scheduling paths. Zero unless given.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuCosts {
    #[serde(default)]
    pub masking: Masking,
    /// IRQ exception entry: vector, register save (`el1_interrupt` / `el0_interrupt` up to the handler).
    #[serde(default)]
    pub irq_entry: Time,
    /// IRQ exception exit: register restore and `eret`.
    #[serde(default)]
    pub irq_exit: Time,
    /// Synchronous exception (syscall, fault) entry.
    #[serde(default)]
    pub exception_entry: Time,
    #[serde(default)]
    pub exception_exit: Time,
    /// `__schedule()` + `context_switch()` when the task changes.
    #[serde(default)]
    pub context_switch: Time,
    /// Time a task runs before it is preempted for another runnable one (checked on return to user).
    #[serde(default = "default_timeslice")]
    pub timeslice: Time,
    /// Core clock in GHz, needed only for costs written in cycles (`"46cycles"`).
    #[serde(default)]
    pub ghz: Option<f64>,
    /// What pseudo-NMI costs on every exception (used when `masking = "pmr"`).
    #[serde(default)]
    pub pmr: PmrCosts,
    /// SDEI (firmware-dispatched event) costs, for cross-calls that use it.
    #[serde(default)]
    pub sdei: SdeiCosts,
    /// SGI delivery: from the `ICC_SGI1R_EL1` write to the target's redistributor.
    #[serde(default)]
    pub sgi_latency: Time,
}

/// Costs of masking by GIC priority (`irqchip.gicv3_pseudo_nmi=1`). The model
/// counts the places the kernel touches `ICC_PMR_EL1`/`ICC_RPR_EL1` per
/// exception; only the cost of one access and of the DSB are parameters.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PmrCosts {
    /// One system-register access to `ICC_PMR_EL1` (read or write) or `ICC_RPR_EL1`.
    #[serde(default)]
    pub access: CpuTime,
    /// The synchronising `dsb sy` after unmasking, paid only when `pmhe` is set.
    #[serde(default)]
    pub dsb: CpuTime,
    /// `ICC_CTLR_EL1.PMHE`: priority-mask hint enable. With 0 the kernel patches the DSB to a NOP.
    #[serde(default)]
    pub pmhe: bool,
}

/// SDEI software-signalled event 0 (`SDEI_EVENT_SIGNAL`, SMC 0xC400002F). No
/// published figure exists: every default is 0 and a scenario states its assumption.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SdeiCosts {
    /// The requester's SMC into EL3 until the event is marked for the target PE.
    #[serde(default)]
    pub signal: Time,
    /// Firmware entry on the target PE and dispatch to the registered EL1 handler.
    #[serde(default)]
    pub dispatch: Time,
    /// `SDEI_EVENT_COMPLETE`: the handler's SMC back to firmware and the return to the interrupted context.
    #[serde(default)]
    pub complete: Time,
}

fn default_timeslice() -> Time {
    Time(3 * crate::engine::time::PS_PER_MS)
}

/// The platform interrupt fabric (PCIe root port, IOMMU interrupt remapping): every
/// MSI write occupies one of `slots` for `msi_write`; beyond capacity writes queue.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    #[serde(default)]
    pub msi_write: Time,
    #[serde(default = "one_u32")]
    pub slots: u32,
    /// Fixed delay after the write leaves the fabric, before the interrupt controller sees it.
    #[serde(default)]
    pub latency: Time,
    /// Each device DMA write (an NVMe completion's data + CQE, a received packet)
    /// occupies the path this long. With DMA, MSI writes go ahead of queued DMA
    /// and hold it back for `msi_write` each (docs/m5-global-interrupt-moderation.md).
    #[serde(default)]
    pub dma_write: Time,
    /// A received packet's DMA: this much per KiB on top of `dma_write` (NIC).
    #[serde(default)]
    pub dma_per_kib: Time,
}

impl Default for Fabric {
    fn default() -> Self {
        Self { msi_write: Time(0), slots: 1, latency: Time(0), dma_write: Time(0), dma_per_kib: Time(0) }
    }
}

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

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    #[default]
    Poisson,
    Periodic,
}

/// A device queue's interrupt (an MSI-X vector). `count` > 1 makes instances `name.0`, `name.1`, ...
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub name: String,
    #[serde(default = "one_u32")]
    pub count: u32,
    /// Interrupts per second, per instance.
    pub rate: Rate,
    #[serde(default)]
    pub arrival: Arrival,
    /// Target CPUs (vCPU indices if `vm` is set); instance i goes to `cpus[i % len]`.
    #[serde(default = "cpu0")]
    pub cpus: Vec<u32>,
    /// Assign the device to this VM: its interrupts take the injection path.
    #[serde(default)]
    pub vm: Option<String>,
    /// Hardirq handler body.
    pub handler: Time,
    /// Softirq work raised per interrupt (e.g. a NAPI poll), run on irq exit.
    #[serde(default)]
    pub softirq: Time,
    /// NMI priority: gets through PMR masking (pseudo-NMI), not DAIF.
    #[serde(default)]
    pub nmi: bool,
    /// No arrivals from this time on (lets a run drain).
    #[serde(default)]
    pub stop: Option<Time>,
    /// `irqlab replay`: take the arrivals from the recorded interrupt with this
    /// name or number instead of `rate` (a single instance).
    #[serde(default)]
    pub replay: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExceptionKind {
    /// Pure user-mode compute loop.
    #[default]
    None,
    Syscall,
    Pagefault,
    /// A `sched_yield()` syscall: the scheduler picks the next runnable task.
    Yield,
}

/// A task looping forever: `work` in user mode, then an exception with `body` of kernel work.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub name: String,
    #[serde(default = "one_u32")]
    pub count: u32,
    /// CPUs (vCPU indices if `vm` is set); instance i runs on `cpus[i % len]`.
    #[serde(default = "cpu0")]
    pub cpus: Vec<u32>,
    #[serde(default)]
    pub vm: Option<String>,
    pub work: Time,
    #[serde(default)]
    pub exception: ExceptionKind,
    /// Kernel work in the exception, interrupts enabled.
    #[serde(default)]
    pub body: Time,
    /// A critical section at the start of the body with interrupts masked (`local_irq_disable`).
    #[serde(default)]
    pub irqs_off: Time,
    /// How that section masks: `cpu.masking` by default; `"daif"` is code that
    /// sets PSTATE.I itself (`local_daif_mask`), which pseudo-NMI cannot reach.
    #[serde(default)]
    pub irqs_off_with: Option<Masking>,
    /// `local_irq_disable/enable` pairs on one pass of the exception path; by
    /// default syscall 1, pagefault 1, yield 3, none 0 (docs/m1-masking-and-nmi.md).
    #[serde(default)]
    pub irq_pairs: Option<u32>,
}

/// How a cross-call reaches its target CPUs.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// An ordinary SGI: held back by any IRQ mask.
    Ipi,
    /// An NMI-priority SGI: gets through PMR masking, not DAIF (needs `cpu.masking = "pmr"`).
    PseudoNmi,
    /// SDEI software-signalled event 0, dispatched by EL3 firmware whatever DAIF says.
    Sdei,
    /// FEAT_NMI (Armv8.8): a superpriority SGI that gets through DAIF.I.
    Nmi,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Ipi => "ipi",
            Mechanism::PseudoNmi => "pseudo-nmi",
            Mechanism::Sdei => "sdei",
            Mechanism::Nmi => "nmi",
        }
    }
}

/// One CPU asks others to run a handler (`arch_trigger_cpumask_backtrace`,
/// `smp_send_stop`): it signals with the first mechanism, and after `timeout`
/// signals the CPUs that have not answered with the next one.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrossCall {
    pub name: String,
    /// When the request is made (at or after warm-up).
    pub at: Time,
    /// The requesting CPU.
    #[serde(default)]
    pub from: u32,
    /// Target CPUs; default every CPU but `from`.
    #[serde(default)]
    pub targets: Option<Vec<u32>>,
    /// Mechanisms in escalation order, e.g. `["ipi", "sdei"]`.
    pub mechanisms: Vec<Mechanism>,
    /// How long to wait for every target before escalating (needed with more than one mechanism).
    #[serde(default)]
    pub timeout: Option<Time>,
    /// Signals sent per mechanism (a retrying requester); edge-triggered delivery may merge them.
    #[serde(default = "one_u32")]
    pub signals: u32,
    /// Gap between repeated signals.
    #[serde(default)]
    pub signal_interval: Time,
    /// The handler on the target (e.g. dumping a backtrace).
    pub handler: Time,
}

/// A VM whose vCPUs are pinned 1:1 to `pcpus`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    pub name: String,
    pub vcpus: u32,
    pub pcpus: Vec<u32>,
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

/// Parses, overrides (`key.path=value`), deserializes and validates a scenario.
/// `origin` names the file in messages.
pub fn load(text: &str, origin: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    let mut value: toml::Value = text.parse::<toml::Table>().map(toml::Value::Table).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
        ScenarioError(format!("{origin}:{line}:{col}: malformed TOML: {}", one_line(e.message())))
    })?;
    for o in overrides {
        overrides::apply(&mut value, o).map_err(|m| ScenarioError(format!("--set {}: {}", escaped(o), one_line(&m))))?;
    }
    let mut sc: Scenario = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = escaped(&e.path().to_string());
        // toml appends "\nin `key`", which the path already says.
        let inner = e.inner().to_string();
        let msg = one_line(inner.split("\nin `").next().unwrap_or(&inner));
        if path == "." {
            ScenarioError(format!("{origin}: {msg}"))
        } else {
            ScenarioError(format!("{origin}: {path}: {msg}"))
        }
    })?;
    validate::check(&sc).map_err(|(path, msg)| ScenarioError(format!("{origin}: {path}: {msg}")))?;
    for e in &mut sc.expect {
        if e.name.is_empty() {
            e.name = sc.name.clone();
        }
    }
    Ok(sc)
}

/// The JSON Schema of the scenario format, generated from the types above.
pub fn json_schema() -> String {
    serde_json::to_string_pretty(&schemars::schema_for!(Scenario)).expect("schema serializes")
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// Messages are one line: white space, newlines included, folds to one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the user typed (a key path, a --set), with control characters escaped
/// so that it stays on one line and shows exactly what was given.
fn escaped(s: &str) -> String {
    s.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}

#[cfg(test)]
mod tests;
