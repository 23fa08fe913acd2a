//! `[posted_msi]`: Intel posted MSI for the host's device interrupts (Linux
//! 6.10+, `intremap=posted_msi`, `CONFIG_X86_POSTED_MSI`).

use crate::scenario::check::{err, Check};
use crate::scenario::units::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn d_pir_scan() -> Time {
    Time(100 * crate::engine::time::PS_PER_NS)
}
fn d_pir_hit() -> Time {
    Time(5 * crate::engine::time::PS_PER_NS)
}
fn d_per_vector() -> Time {
    Time(50 * crate::engine::time::PS_PER_NS)
}
fn d_loops() -> u32 {
    3
}
fn yes() -> bool {
    true
}

/// Device MSIs posted into a per-CPU posted-interrupt descriptor; the CPU gets
/// one notification (`POSTED_MSI_NOTIFICATION_VECTOR`) for a burst of them.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostedMsi {
    /// Off: the section stays, the vectors go through the local APIC (for variants).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// One `handle_pending_pir()` pass that finds vectors: read the 256-bit
    /// PIR and exchange the non-zero words, on a cache line the IOMMU's posting
    /// took away (assumption: one cache miss, ~100 ns), besides the handlers.
    #[serde(default = "d_pir_scan")]
    pub pir_scan: Time,
    /// A pass that finds the PIR empty: nothing was posted since the last
    /// pass, so the line is still in this CPU's cache (assumption: four L1 loads).
    #[serde(default = "d_pir_hit")]
    pub pir_hit: Time,
    /// The flow handler each vector a pass took still runs (`call_irq_handler`
    /// → `handle_edge_irq`: the descriptor's lock, `irq_chip_ack_parent` →
    /// `intel_ack_posted_msi_irq` with no EOI, `handle_irq_event`'s
    /// in-progress flag), besides its driver handler: the part of `irq_entry`
    /// that a remapped vector pays and posting does not share (drivers/iommu/intel/irq_remapping.c:
    /// "only the APIC EOI is omitted"). Assumption: ~50 ns, a few uncontended
    /// locked operations and loads.
    #[serde(default = "d_per_vector")]
    pub per_vector: Time,
    /// `MAX_POSTED_MSI_COALESCING_LOOP` (arch/x86/kernel/irq.c): passes with
    /// the notification bit still set, counting the last pass after it is cleared.
    #[serde(default = "d_loops")]
    pub loops: u32,
}

impl PostedMsi {
    pub fn check(&self) -> Check {
        if self.pir_scan.ps() == 0 {
            return err("posted_msi.pir_scan", "must be above 0 (a pass reads the PIR)");
        }
        if self.pir_hit.ps() == 0 {
            return err("posted_msi.pir_hit", "must be above 0 (a pass reads the PIR)");
        }
        if !(1..=64).contains(&self.loops) {
            return err("posted_msi.loops", format!("{}: expected 1 to 64 (the kernel uses 3)", self.loops));
        }
        Ok(())
    }
}
