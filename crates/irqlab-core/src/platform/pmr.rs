//! The pseudo-NMI tax. With `irqchip.gicv3_pseudo_nmi=1` arm64 Linux masks IRQs
//! by writing the GIC priority mask (`ICC_PMR_EL1`) instead of setting
//! PSTATE.I, so an NMI-priority interrupt can still be taken. The price is paid
//! on every exception, whether or not an NMI ever comes. The model counts the
//! register accesses on each path as Linux 6.12 makes them (Debian's arm64
//! config with `CONFIG_ARM64_PSEUDO_NMI=y`), every count with the kernel
//! functions it comes from in docs/m1-exception-paths.md, and takes the cost of
//! one access and of one DSB as parameters.

use crate::engine::Ps;
use crate::scenario::ExceptionKind;

/// `ICC_PMR_EL1` reads and writes and `ICC_RPR_EL1` reads on one pass of a
/// path, and the places a `pmr_sync()` (`dsb sy`) runs when PMHE=1. Fractions
/// are batched work spread over the passes of its batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accesses {
    pub reads: f64,
    pub writes: f64,
    pub syncs: f64,
}

const fn acc(reads: f64, writes: f64, syncs: f64) -> Accesses {
    Accesses { reads, writes, syncs }
}

impl Accesses {
    pub const NONE: Accesses = acc(0.0, 0.0, 0.0);

    pub fn plus(self, o: Accesses) -> Accesses {
        acc(self.reads + o.reads, self.writes + o.writes, self.syncs + o.syncs)
    }

    pub fn times(self, k: f64) -> Accesses {
        acc(self.reads * k, self.writes * k, self.syncs * k)
    }

    pub fn count(self) -> f64 {
        self.reads + self.writes
    }

    /// Every access costs `access`; a sync costs `dsb` (0 when PMHE=0 patches it to a NOP).
    fn cost(self, access: Ps, dsb: Ps) -> Ps {
        (self.count() * access as f64 + self.syncs * dsb as f64).round() as Ps
    }
}

/// Synchronous exception from EL0, entry: `kernel_entry` saves PMR to `pt_regs`
/// and writes 0xf0 (R1 W1); `el0_svc`/`el0_da` unmask with
/// `local_daif_restore(DAIF_PROCCTX)` (W1, sync).
pub const SYNC_ENTRY: Accesses = acc(1.0, 2.0, 1.0);
/// Return to EL0: `exit_to_user_mode_prepare`'s `local_irq_disable()` (W1) and
/// `local_daif_mask()` (W1), then `kernel_exit` restores PMR (W1, its `dsb sy`).
pub const EXIT_TO_EL0: Accesses = acc(0.0, 3.0, 1.0);
/// IRQ from EL0, entry: `kernel_entry` (R1 W1), then the GIC driver's extra
/// work under pseudo-NMI in `__gic_handle_irq_from_irqson`: `gic_read_rpr()`
/// (R1, an `ICC_RPR_EL1` read) and `gic_pmr_mask_irqs()` (W1).
pub const IRQ_ENTRY: Accesses = acc(2.0, 2.0, 0.0);

/// Return from an IRQ (or NMI) to EL1 (kernel code, the idle loop): `ret_to_kernel`
/// → `kernel_exit 1` restores the PMR saved at entry (W1, its `dsb sy` alternative).
/// Only a return to EL0 pays `exit_to_user_mode`'s two writes on top (`EXIT_TO_EL0`).
pub const EXIT_TO_EL1: Accesses = acc(0.0, 1.0, 1.0);
/// Every IRQ taken in the idle loop with its tick stopped (as
/// `cpuidle_idle_call` stops it before `default_idle_call`): before the
/// handler, `irq_enter_rcu` → `tick_irq_enter` → `tick_nohz_irq_enter` calls
/// `tick_nohz_update_jiffies`, a nested `local_irq_save`/`restore` (R1 W1,
/// sync; kernel/time/tick-sched.c). `tick_nohz_irq_exit` leaves the tick
/// stopped, so an IRQ still pending as the one before returns pays it too.
pub const IDLE_TICK: Accesses = acc(1.0, 1.0, 1.0);
/// An IRQ that wakes an idle CPU: after `wfi`, `cpu_do_idle`'s
/// `arm_cpuidle_restore_irq_context` writes the saved PMR back (W1), then
/// `default_idle_call`'s `local_irq_enable()` unmasks (W1, sync), and only then
/// is the IRQ taken (arch/arm64/kernel/idle.c, asm/cpuidle.h, kernel/sched/idle.c);
/// then `IDLE_TICK`. (The R1 W1 that save the context before `wfi` are idle
/// time either way.)
pub const IDLE_WAKE: Accesses = acc(1.0, 3.0, 2.0);
/// One pass of `handle_softirqs()`: `local_irq_enable()` before the handlers,
/// `local_irq_disable()` after them (kernel/softirq.c).
pub const SOFTIRQ_PASS: Accesses = acc(0.0, 2.0, 1.0);
/// What ksoftirqd adds to its pass: `run_ksoftirqd` brackets `handle_softirqs`
/// with `ksoftirqd_run_begin()` (`local_irq_disable`, W1) and
/// `ksoftirqd_run_end()` (`local_irq_enable`, W1, sync; kernel/softirq.c).
pub const KSOFTIRQD_RUN: Accesses = acc(0.0, 2.0, 1.0);
/// A context switch to a user task, on top of the `__schedule` sections the
/// exception's body counts: `fpsimd_thread_switch`'s
/// `WARN_ON_ONCE(!irqs_disabled())` reads PMR (R1; arch/arm64/kernel/fpsimd.c),
/// and it sets `TIF_FOREIGN_FPSTATE` on the task switched in (the CPU's FPSIMD
/// registers hold the other task's), so its return to EL0 takes one pass of
/// `do_notify_resume`: `local_irq_enable()` (W1, sync) … `local_irq_disable()`
/// (W1; arch/arm64/kernel/entry-common.c).
pub const SWITCH: Accesses = acc(1.0, 2.0, 1.0);

/// An IRQs-off section opened with IRQs on by `local_irq_save`/`spin_lock_irqsave`
/// (R1 W1) and closed by `local_irq_restore` (W1, sync).
pub const SAVE_SECTION: Accesses = acc(1.0, 2.0, 1.0);
/// The same inside a section: the save reads but does not write (R1, W1 S1 on restore).
pub const NESTED_SECTION: Accesses = acc(1.0, 1.0, 1.0);
/// `local_irq_disable()` (W1) … `local_irq_enable()` (W1, sync), as `spin_lock_irq` does.
pub const DISABLE_SECTION: Accesses = acc(0.0, 2.0, 1.0);

/// `invoke_syscall` → `choose_random_kstack_offset(get_random_u16())`
/// (randomize_kstack_offset, on by default in Debian): `local_lock_irqsave` on
/// the per-CPU entropy batch, refilled (a nested section in `crng_make_state`)
/// once per 48 calls (`CHACHA_BLOCK_SIZE * 3 / (2 * sizeof(u16))`).
fn kstack_rng() -> Accesses {
    SAVE_SECTION.plus(NESTED_SECTION.times(1.0 / 48.0))
}

/// The IRQs-off sections in C on one pass of each exception's kernel work.
pub fn body_accesses(kind: ExceptionKind) -> Accesses {
    match kind {
        ExceptionKind::None => Accesses::NONE,
        // gettid: only the kstack offset's RNG.
        ExceptionKind::Syscall => kstack_rng(),
        // sched_yield with one runnable task: do_sched_yield's this_rq_lock_irq/
        // rq_unlock_irq, then __schedule's local_irq_disable/raw_spin_rq_unlock_irq.
        ExceptionKind::Yield => kstack_rng().plus(DISABLE_SECTION.times(2.0)),
        // A first-touch anonymous fault (4 KiB, do_anonymous_page): memcg's
        // consume_stock and count_memcg_events sections, plus batched work, each a
        // save section: the memcg stock refill (1/64, MEMCG_CHARGE_BATCH), the LRU
        // batch drain (1/31, PAGEVEC_SIZE), the rss counter fold (1/32,
        // percpu_counter_batch), the pcp list refill (1/63, zone_batchsize) and a
        // page-table page (3/512).
        ExceptionKind::Pagefault => {
            let batched = 1.0 / 64.0 + 1.0 / 31.0 + 1.0 / 32.0 + 1.0 / 63.0 + 3.0 / 512.0;
            SAVE_SECTION.times(2.0 + batched)
        }
    }
}

/// Extra time per path under pseudo-NMI; all zero under DAIF masking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmrTax {
    /// Added to every synchronous exception entry from EL0.
    pub entry: Ps,
    /// Added to every return to EL0 (from an exception or an IRQ).
    pub exit: Ps,
    /// Added to an IRQ's entry (`kernel_entry` and the GIC driver's RPR read and PMR mask).
    pub irq_entry: Ps,
    /// Added to an IRQ's exit when it returns to EL1 (`exit` is a return to EL0's).
    pub exit_to_el1: Ps,
    /// Added before the IRQ entry of an IRQ that wakes an idle CPU, and of one
    /// taken in the idle loop on the `eret` of the one before.
    pub idle_wake: Ps,
    pub idle_tick: Ps,
    /// Added to each `__do_softirq` pass, and on top of it to a ksoftirqd run.
    pub softirq: Ps,
    pub ksoftirqd: Ps,
    /// Added to each context switch between tasks.
    pub switch: Ps,
    /// One nested IRQs-off section (a `spin_lock_irqsave` in a handler).
    pub nested: Ps,
    /// One access and one sync, for the body's sections.
    access: Ps,
    dsb: Ps,
}

impl PmrTax {
    /// `pmhe`: `ICC_CTLR_EL1.PMHE`; with 0 the DSB after unmasking is patched
    /// to a NOP ("relaxed ICC_PMR_EL1 synchronisation").
    pub fn new(access: Ps, dsb: Ps, pmhe: bool) -> Self {
        let dsb = if pmhe { dsb } else { 0 };
        PmrTax {
            entry: SYNC_ENTRY.cost(access, dsb),
            exit: EXIT_TO_EL0.cost(access, dsb),
            irq_entry: IRQ_ENTRY.cost(access, dsb),
            exit_to_el1: EXIT_TO_EL1.cost(access, dsb),
            idle_wake: IDLE_WAKE.cost(access, dsb),
            idle_tick: IDLE_TICK.cost(access, dsb),
            softirq: SOFTIRQ_PASS.cost(access, dsb),
            ksoftirqd: KSOFTIRQD_RUN.cost(access, dsb),
            switch: SWITCH.cost(access, dsb),
            nested: NESTED_SECTION.cost(access, dsb),
            access,
            dsb,
        }
    }

    /// The tax on one pass of an exception's kernel work: the kernel's own
    /// sections for `kind`, or `pairs` local_irq_disable/enable sections instead.
    pub fn body(&self, kind: ExceptionKind, pairs: Option<u32>) -> Ps {
        let a = match pairs {
            Some(n) => DISABLE_SECTION.times(n as f64),
            None => body_accesses(kind),
        };
        a.cost(self.access, self.dsb)
    }

    /// The tax on one pass of a task's loop: entry, body and exit (none for a
    /// pure user loop, which takes no exception).
    pub fn per_op(&self, kind: ExceptionKind, pairs: Option<u32>) -> Ps {
        if kind == ExceptionKind::None {
            return 0;
        }
        self.entry + self.body(kind, pairs) + self.exit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(kind: ExceptionKind) -> Accesses {
        SYNC_ENTRY.plus(body_accesses(kind)).plus(EXIT_TO_EL0)
    }

    #[test]
    fn access_counts_per_path_as_read_from_the_kernel() {
        // docs/m1-exception-paths.md: gettid R2 W7 S3, sched_yield R2 W11 S5, a
        // 4 KiB fault R3 W9 S4 (common case), each plus its batched work.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let g = total(ExceptionKind::Syscall);
        assert!(near(g.reads, 2.0 + 1.0 / 48.0) && near(g.writes, 7.0 + 1.0 / 48.0) && near(g.syncs, 3.0 + 1.0 / 48.0));
        let y = total(ExceptionKind::Yield);
        assert!(near(y.reads, 2.0 + 1.0 / 48.0) && near(y.writes, 11.0 + 1.0 / 48.0) && near(y.syncs, 5.0 + 1.0 / 48.0));
        let f = total(ExceptionKind::Pagefault);
        assert!((f.reads - 3.101).abs() < 1e-3 && (f.writes - 9.202).abs() < 1e-3 && (f.syncs - 4.101).abs() < 1e-3);
        // An IRQ from EL0: R1 W5 S1 and one RPR read.
        let irq = IRQ_ENTRY.plus(EXIT_TO_EL0);
        assert_eq!((irq.reads, irq.writes, irq.syncs), (2.0, 5.0, 1.0));
        // An IRQ from EL1 with IRQs on: R1 W3 S1 and the RPR read; waking the idle
        // loop adds its restore and local_irq_enable (W2 S1) and the stopped tick's
        // jiffies update in irq_enter_rcu (R1 W1 S1: it read W2 S1 until a review);
        // a softirq pass W2 S1, and in ksoftirqd W2 S1 more.
        let el1 = IRQ_ENTRY.plus(EXIT_TO_EL1);
        assert_eq!((el1.reads, el1.writes, el1.syncs), (2.0, 3.0, 1.0));
        assert_eq!((IDLE_WAKE.reads, IDLE_WAKE.writes, IDLE_WAKE.syncs), (1.0, 3.0, 2.0));
        assert_eq!((SOFTIRQ_PASS.reads, SOFTIRQ_PASS.writes, SOFTIRQ_PASS.syncs), (0.0, 2.0, 1.0));
        let k = SOFTIRQ_PASS.plus(KSOFTIRQD_RUN);
        assert_eq!((k.reads, k.writes, k.syncs), (0.0, 4.0, 2.0));
        // A context switch: the FPSIMD switch's check (R1) and do_notify_resume's pass (W2 S1).
        assert_eq!((SWITCH.reads, SWITCH.writes, SWITCH.syncs), (1.0, 2.0, 1.0));
        // A nested section in a handler (`__napi_schedule`, `eventfd_signal_mask`).
        assert_eq!((NESTED_SECTION.reads, NESTED_SECTION.writes, NESTED_SECTION.syncs), (1.0, 1.0, 1.0));
        // sched_yield pays exactly two local_irq_disable/enable sections more than gettid.
        assert!(near(y.writes - g.writes, 4.0) && near(y.syncs - g.syncs, 2.0) && near(y.reads, g.reads));
    }

    #[test]
    fn the_tax_is_accesses_times_their_cost() {
        let t = PmrTax::new(1000, 50_000, false);
        // gettid: 9 + 2/48 accesses of 1 ns.
        assert_eq!(t.per_op(ExceptionKind::Syscall, None), 9042);
        assert_eq!(t.per_op(ExceptionKind::Yield, None), 13042);
        assert_eq!(t.per_op(ExceptionKind::None, None), 0);
        // irq_pairs replaces the kernel's sections with disable/enable pairs.
        assert_eq!(t.body(ExceptionKind::Syscall, Some(3)), 6000);
        assert_eq!(t.irq_entry, 4000);
        // Each path's field is its own count (above) at 1 ns (an exit to EL0 is
        // the IRQ-from-EL0 path's R2 W5 less the IRQ entry's 4), syncs free without
        // PMHE: a swapped constant in `new` shows here (a mutation pass noted
        // that only `irq_entry` and the per-op totals were pinned).
        let fields = [t.entry, t.exit, t.exit_to_el1, t.idle_wake, t.idle_tick, t.softirq, t.ksoftirqd, t.switch, t.nested];
        assert_eq!(fields, [3000, 3000, 1000, 4000, 2000, 2000, 2000, 3000, 2000]);
    }

    #[test]
    fn dsb_only_with_pmhe() {
        let relaxed = PmrTax::new(10, 1000, false);
        let synced = PmrTax::new(10, 1000, true);
        // gettid: a sync on entry, in the RNG section (+1/48) and in kernel_exit.
        let extra = synced.per_op(ExceptionKind::Syscall, None) - relaxed.per_op(ExceptionKind::Syscall, None);
        assert_eq!(extra, 3021);
        assert_eq!(synced.irq_entry, relaxed.irq_entry);
    }
}
