//! The CPU's costs: exception entry and exit, masking (DAIF or pseudo-NMI's
//! PMR, with what each access costs), scheduling, SDEI and SGI delivery.

use super::check::{err, Check};
use super::units::{CpuTime, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Time a task runs before it is preempted for another runnable one
    /// (checked on return to user). Unset: Linux 6.12's base slice, 0.7 ms ×
    /// (1 + log2 of the CPUs, up to 8): 2.8 ms from 8 CPUs on.
    #[serde(default)]
    pub timeslice: Option<Time>,
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
    /// `mask_ack_irq()` on an MSI-X vector, which `handle_edge_irq()` does
    /// when a lazily disabled interrupt fires (GSIM's moderation): the write of
    /// the vector control word and the read that flushes it
    /// (`pci_msix_mask` → `pci_msix_write_vector_ctrl`, `readl`), a non-posted
    /// PCIe round trip. Paid between the IRQ entry and exit.
    #[serde(default)]
    pub msix_mask: Time,
    /// The CPU's idle states (cpuidle's `stateN`), shallowest first. An
    /// interrupt, or a thread's wake-up, that finds the CPU in its idle loop
    /// waits for the exit of the state the idle period reached. None (the
    /// default): the CPU wakes at no cost, as with C-states off or `idle=poll`.
    #[serde(default)]
    pub idle_state: Vec<IdleState>,
    /// A PM QoS resume latency limit (`/dev/cpu_dma_latency`,
    /// `cpuidle_governor_latency_req`): the governor skips every state whose
    /// exit latency is above it. None (the default): no limit.
    #[serde(default)]
    pub idle_latency_limit: Option<Time>,
}

/// One idle state, as the kernel's cpuidle driver describes it
/// (`struct cpuidle_state`; e.g. `drivers/idle/intel_idle.c`'s tables).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdleState {
    /// The state's name in reports (`C1`, `C1E`, `C6`).
    pub name: String,
    /// `exit_latency`: from the wake-up event to the CPU running code again.
    pub exit: Time,
    /// `target_residency`: the shortest idle period the state pays off for.
    /// The governor is taken as ideal (it knows the period's length): the CPU
    /// is in the deepest state whose residency the period reaches.
    pub residency: Time,
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
    /// One SMC on the requester into EL3 until the event is marked for one target
    /// PE: `SDEI_EVENT_SIGNAL` names a single PE, so signalling n targets takes n
    /// SMCs one after another on the requesting CPU. An assumption (no figure).
    #[serde(default)]
    pub signal: Time,
    /// Firmware entry on the target PE and dispatch to the registered EL1 handler. An assumption.
    #[serde(default)]
    pub dispatch: Time,
    /// `SDEI_EVENT_COMPLETE`: the handler's SMC back to firmware and the return to the interrupted context.
    #[serde(default)]
    pub complete: Time,
}

/// Linux 6.12's `sysctl_sched_base_slice` on `cpus` CPUs: 0.7 ms times
/// `1 + ilog2(min(cpus, 8))` (`normalized_sysctl_sched_base_slice` scaled by
/// `get_update_sysctl_factor` under the default `SCHED_TUNABLESCALING_LOG`,
/// kernel/sched/fair.c), so 0.7 ms on one CPU and 2.8 ms from 8 on.
pub fn base_slice(cpus: u32) -> crate::engine::Ps {
    let factor = 1 + u64::from(cpus.clamp(1, 8).ilog2());
    factor * 700 * crate::engine::time::PS_PER_US
}

impl CpuCosts {
    pub(super) fn check(&self) -> Check {
        if let Some(g) = self.ghz {
            if !(g.is_finite() && g > 0.0) {
                return err("cpu.ghz", format!("{g}: expected a clock above 0 GHz, like 3.4"));
            }
        }
        for (key, c) in [("cpu.pmr.access", self.pmr.access), ("cpu.pmr.dsb", self.pmr.dsb)] {
            if c.ps(self.ghz).is_none() {
                return err(key, "is given in cycles, so cpu.ghz must be set to convert it");
            }
        }
        for (k, w) in self.idle_state.windows(2).enumerate() {
            if w[1].residency.ps() <= w[0].residency.ps() {
                return err(
                    format!("cpu.idle_state[{}].residency", k + 1),
                    format!(
                        "{} is not above {}'s {}: expected the states shallowest first, each with a longer target residency",
                        w[1].residency, w[0].name, w[0].residency
                    ),
                );
            }
        }
        if self.idle_latency_limit.is_some() && self.idle_state.is_empty() {
            return err(
                "cpu.idle_latency_limit",
                "limits the idle states, and cpu.idle_state lists none: expected [[cpu.idle_state]] entries",
            );
        }
        for (k, st) in self.idle_state.iter().enumerate() {
            if st.name.trim().is_empty() {
                return err(format!("cpu.idle_state[{k}].name"), "empty: expected the state's name, like \"C1E\"");
            }
            // Each names its metrics (`cpuidle.NAME.wakes_per_s`).
            if self.idle_state[..k].iter().any(|o| o.name == st.name) {
                return err(format!("cpu.idle_state[{k}].name"), format!("\"{}\" is used twice", st.name));
            }
        }
        // A PMHE=1 part with a free DSB is a PMHE=0 part: the user asked for the
        // synchronisation's cost and would silently get none (a review).
        if self.masking == Masking::Pmr && self.pmr.pmhe && self.pmr.dsb.ps(self.ghz) == Some(0) {
            return err(
                "cpu.pmr.dsb",
                "0 with cpu.pmr.pmhe = true: a PMHE=1 part pays a synchronising `dsb sy` on every unmasking; \
                 give its cost (a time, or cycles with cpu.ghz), or set cpu.pmr.pmhe = false",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_base_slice_scales_with_the_log_of_the_cpus_up_to_eight() {
        let ms = |cpus| super::base_slice(cpus) as f64 / crate::engine::time::PS_PER_MS as f64;
        let got: Vec<f64> = [1, 2, 3, 4, 7, 8, 72].into_iter().map(ms).collect();
        assert_eq!(got, [0.7, 1.4, 1.4, 2.1, 2.1, 2.8, 2.8]);
    }

    #[test]
    fn two_tasks_on_one_cpu_take_turns_at_the_kernels_slice_or_the_scenarios() {
        // Two syscall loops share CPU 0; the switches per second are one per slice.
        let switches = |cpus: u32, slice: &str| {
            let text = format!(
                "name = \"t\"\nduration = \"100ms\"\n[platform]\ncpus = {cpus}\n[cpu]\ncontext_switch = \"1us\"\n{slice}\n\
                 [[task]]\nname = \"spin\"\ncount = 2\ncpus = [0]\nwork = \"1us\"\nexception = \"syscall\"\nbody = \"50ns\"\n"
            );
            let sc = crate::load(&text, "t.toml", &[]).unwrap();
            1.0 / crate::run(&sc, Default::default()).report.metrics["context_switches_per_s"]
        };
        // Whole switches in 100 ms (35 of 2.8 ms read as 2.86 ms): within 4 %,
        // which still tells 2.8 ms from the 3 ms of Linux 6.6's 0.75 ms base.
        let near = |got: f64, ms: f64| (got * 1e3 - ms).abs() < 0.04 * ms;
        assert!(near(switches(1, ""), 0.7), "{}", switches(1, ""));
        assert!(near(switches(8, ""), 2.8), "{}", switches(8, ""));
        assert!(near(switches(8, "timeslice = \"200us\""), 0.2), "{}", switches(8, "timeslice = \"200us\""));
    }
}
