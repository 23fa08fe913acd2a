//! The pseudo-NMI tax. With `irqchip.gicv3_pseudo_nmi=1` arm64 Linux masks IRQs
//! by writing the GIC priority mask (`ICC_PMR_EL1`) instead of setting
//! PSTATE.I, so an NMI-priority interrupt can still be taken. The price is paid
//! on every exception, whether or not an NMI ever comes; the model counts the
//! register accesses on each path (from `arch/arm64/kernel/entry.S`,
//! `arch/arm64/include/asm/irqflags.h`, `drivers/irqchip/irq-gic-v3.c`) and takes
//! the cost of one access and of the DSB as parameters.

use crate::engine::Ps;
use crate::scenario::ExceptionKind;

/// `kernel_entry`: read `ICC_PMR_EL1` into `pt_regs`, write `GIC_PRIO_IRQON`.
pub const ENTRY_ACCESSES: u64 = 2;
/// `kernel_exit`: restore `ICC_PMR_EL1` from `pt_regs` (then `dsb sy` unless relaxed).
pub const EXIT_ACCESSES: u64 = 1;
/// `local_irq_disable()` + `local_irq_enable()`: two PMR writes (then `pmr_sync()` on enable).
pub const PAIR_ACCESSES: u64 = 2;
/// `__gic_handle_irq_from_irqson()`: read `ICC_RPR_EL1` to spot an NMI, then
/// `gic_pmr_mask_irqs()` so that the handler runs with NMIs enabled, IRQs masked.
pub const IRQ_ACCESSES: u64 = 2;

/// `local_irq_disable/enable` pairs on one pass of each exception path. These
/// are readings of the kernel source, i.e. assumptions (docs/m1-masking-and-nmi.md):
/// a syscall's `exit_to_user_mode()` masks once; `do_sched_yield()` takes the
/// run-queue lock with IRQs off, and `schedule()` masks again around `__schedule()`
/// and on the way out; a page fault is taken like a syscall.
pub fn default_irq_pairs(kind: ExceptionKind) -> u32 {
    match kind {
        ExceptionKind::None => 0,
        ExceptionKind::Syscall | ExceptionKind::Pagefault => 1,
        ExceptionKind::Yield => 3,
    }
}

/// Extra time per path under pseudo-NMI; all zero under DAIF masking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmrTax {
    /// Added to every exception entry (synchronous or IRQ).
    pub entry: Ps,
    /// Added to every exception exit.
    pub exit: Ps,
    /// Added to an IRQ's handling (the GIC driver's RPR read and PMR mask).
    pub irq: Ps,
    /// Per `local_irq_disable/enable` pair.
    pub pair: Ps,
}

impl PmrTax {
    /// `pmhe`: `ICC_CTLR_EL1.PMHE`; with 0 the DSB after unmasking is patched
    /// to a NOP ("relaxed ICC_PMR_EL1 synchronisation").
    pub fn new(access: Ps, dsb: Ps, pmhe: bool) -> Self {
        let sync = if pmhe { dsb } else { 0 };
        PmrTax {
            entry: ENTRY_ACCESSES * access,
            exit: EXIT_ACCESSES * access + sync,
            irq: IRQ_ACCESSES * access,
            pair: PAIR_ACCESSES * access + sync,
        }
    }

    /// The tax on one pass of a task's loop with `pairs` IRQs-off sections.
    pub fn per_op(&self, pairs: u32) -> Ps {
        self.entry + self.exit + pairs as Ps * self.pair
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_counts_per_path() {
        let t = PmrTax::new(10, 1000, false);
        // gettid: entry 2 + exit 1 + one pair 2 = 5 accesses.
        assert_eq!(t.per_op(default_irq_pairs(ExceptionKind::Syscall)), 50);
        // sched_yield: 2 + 1 + 3 pairs of 2 = 9 accesses.
        assert_eq!(t.per_op(default_irq_pairs(ExceptionKind::Yield)), 90);
        assert_eq!(t.irq, 20);
    }

    #[test]
    fn dsb_only_with_pmhe() {
        let relaxed = PmrTax::new(10, 1000, false);
        let synced = PmrTax::new(10, 1000, true);
        // One DSB on exit and one per pair (on the enable).
        assert_eq!(synced.per_op(1) - relaxed.per_op(1), 2000);
        assert_eq!(synced.entry, relaxed.entry);
    }
}
