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
    /// `mask_ack_irq()` on an MSI-X vector, which `handle_edge_irq()` does
    /// when a lazily disabled interrupt fires (GSIM's moderation): the write of
    /// the vector control word and the read that flushes it
    /// (`pci_msix_mask` → `pci_msix_write_vector_ctrl`, `readl`), a non-posted
    /// PCIe round trip. Paid between the IRQ entry and exit.
    #[serde(default)]
    pub msix_mask: Time,
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

fn default_timeslice() -> Time {
    Time(3 * crate::engine::time::PS_PER_MS)
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
