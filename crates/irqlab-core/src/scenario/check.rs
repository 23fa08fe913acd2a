//! What a section's check needs: the result type, a one-line error with its
//! key path, the facts of the core it checks against (`Ctx`: CPUs,
//! sockets, the run's span, which pCPUs host vCPUs), and the run's cost
//! estimate each section adds to (`Estimate`). Components' parameter
//! checks live beside their parameters and see only this.

use super::units::Time;

pub type Check = Result<(), (String, String)>;

pub fn err<T>(path: impl Into<String>, msg: impl Into<String>) -> Result<T, (String, String)> {
    Err((path.into(), msg.into()))
}

/// The core's facts, checked first, that components' sections are checked against.
pub struct Ctx {
    pub cpus: u32,
    pub sockets: u32,
    pub iommus_per_socket: u32,
    pub warmup: Time,
    pub duration: Time,
    /// Masking by priority (pseudo-NMI) is on (`cpu.masking = "pmr"`).
    pub pmr: bool,
    /// Per pCPU: the VM whose vCPU it runs, if any.
    pub hosted: Vec<Option<String>>,
    /// VM names and their vCPU counts.
    pub vms: Vec<(String, u32)>,
    /// The hypervisor component's pCPUs (`vcpu_sched.pcpus`; 0 without it):
    /// it models CPUs 0 … `hyp_pcpus`-1 itself, so host placements start above.
    pub hyp_pcpus: u32,
    /// Per CPU: a host `[[task]]` instance runs there (its name).
    pub task_on: Vec<Option<String>>,
}

impl Ctx {
    pub fn vm_vcpus(&self, name: &str) -> Option<u32> {
        self.vms.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// A device's remapping unit (`platform.iommus_per_socket`).
pub fn iommu(path: String, unit: u32, ctx: &Ctx) -> Check {
    if unit >= ctx.iommus_per_socket {
        return err(path, format!("{unit}: expected 0 to platform.iommus_per_socket - 1 ({})", ctx.iommus_per_socket - 1));
    }
    Ok(())
}

/// Why host work may not go on pCPU `c` of a hypervisor with `pcpus` pCPUs.
pub fn hypervisor_pcpu(c: u32, pcpus: u32) -> String {
    format!(
        "cpu {c} is one of the hypervisor's pCPUs (vcpu_sched.pcpus = {pcpus}); the core's tasks and interrupts use CPUs {pcpus} and up"
    )
}

/// Work that runs only where the CPU would idle (`os/thread.rs`: fio's jobs,
/// ksoftirqd) may not share a host CPU with a `[[task]]`, which never sleeps
/// and would starve it: `what` says whose work, for the one-line error.
pub fn beside_task(p: &str, cpus: &[u32], what: &str, ctx: &Ctx) -> Check {
    for (k, &c) in cpus.iter().enumerate() {
        if let Some(Some(task)) = ctx.task_on.get(c as usize) {
            return err(
                format!("{p}.cpus[{k}]"),
                format!("cpu {c} also runs task \"{task}\", which would starve {what} there (it runs only when the CPU would idle): expected CPUs without a [[task]]"),
            );
        }
    }
    Ok(())
}

/// A placement: pCPUs on the host (not ones that run a vCPU or belong to the
/// hypervisor component), vCPU indices in a VM. Every section that places
/// host work on CPUs checks it here, so a new one gets both refusals.
pub fn targets(p: &str, list: &[u32], vm: Option<&str>, ctx: &Ctx) -> Check {
    if list.is_empty() {
        return err(format!("{p}.cpus"), "must list at least one CPU");
    }
    match vm {
        Some(name) => {
            let Some(n) = ctx.vm_vcpus(name) else {
                return err(format!("{p}.vm"), format!("no VM named \"{name}\" (declare it in a [[vm]] table)"));
            };
            for (j, &c) in list.iter().enumerate() {
                if c >= n {
                    return err(format!("{p}.cpus[{j}]"), format!("vCPU {c} does not exist ({name} has {n})"));
                }
            }
        }
        None => {
            let cpus = ctx.cpus;
            for (j, &c) in list.iter().enumerate() {
                if c >= cpus {
                    return err(format!("{p}.cpus[{j}]"), format!("cpu {c} does not exist (platform.cpus = {cpus})"));
                }
                if c < ctx.hyp_pcpus {
                    return err(format!("{p}.cpus[{j}]"), hypervisor_pcpu(c, ctx.hyp_pcpus));
                }
                if let Some(owner) = &ctx.hosted[c as usize] {
                    // The host side of a pCPU that runs a pinned vCPU is not modelled yet.
                    return err(
                        format!("{p}.cpus[{j}]"),
                        format!("cpu {c} runs a vCPU of {owner}; host tasks and host interrupts cannot target it"),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Bytes of state per item, generous: an interrupt source or queue, a task or
/// vCPU, a pending I/O or event, a ring descriptor.
pub const BYTES_PER_SOURCE: f64 = 512.0;
pub const BYTES_PER_TASK: f64 = 256.0;
pub const BYTES_PER_PENDING: f64 = 64.0;
pub const BYTES_PER_DESCRIPTOR: f64 = 16.0;

/// What a run will cost (`budget.rs`): every section adds what it schedules
/// (events over the run) and the state it sizes, each blamed on the key that
/// sets it, so that a refusal names that key; with the part that contributes
/// most to each figure.
#[derive(Clone, Debug, Default)]
pub struct Estimate {
    pub events: f64,
    pub memory: f64,
    pub top_events: (String, f64),
    pub top_memory: (String, f64),
    /// Memory by the key that sizes it (per-item state: CPUs, sources, I/Os, rings...).
    pub memory_parts: Vec<(String, f64)>,
}

impl Estimate {
    /// A part's events (blamed on `key`) and memory (on `mem_key`).
    pub fn add(&mut self, key: &str, events: f64, mem_key: &str, memory: f64) {
        self.events += events;
        self.memory += memory;
        if memory > 0.0 {
            self.memory_parts.push((mem_key.to_string(), memory));
        }
        if events > self.top_events.1 {
            self.top_events = (key.to_string(), events);
        }
        if memory > self.top_memory.1 {
            self.top_memory = (mem_key.to_string(), memory);
        }
    }
}
