//! A CPU as a stack of frames: the running code is the top frame; an interrupt
//! pushes a frame over it and the interrupted segment resumes, with the work it
//! had left, when that frame pops. Each frame says what it masks, which is all
//! the interrupt controller needs to decide whether it can be interrupted.

use crate::engine::time::Ps;
use crate::engine::trace::TrackId;
use crate::engine::TimerHandle;
use crate::platform::irqchip::Pending;
pub use crate::platform::mask::{Mask, Prio};
use std::collections::VecDeque;

/// Exception level of the code in a frame: the host kernel (and hypervisor), or
/// the guest running on this pCPU's pinned vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Host = 0,
    Guest = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskPhase {
    /// User-mode work.
    User,
    /// Synchronous exception entry (`el0t_64_sync` → `el0t_64_sync_handler` up to the handler), DAIF-masked.
    Entry,
    /// The body's critical section under `local_irq_disable()`.
    IrqsOff,
    /// The rest of the exception body, interrupts enabled.
    Body,
    /// Return to user (`ret_to_user`), DAIF-masked.
    Exit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqPhase {
    /// IRQ exception entry, up to reading `ICC_IAR1_EL1`.
    Entry,
    /// The driver's hardirq handler.
    Handler,
    /// `irq_exit` and exception return.
    Exit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HypPhase {
    /// Guest exit to the hypervisor.
    Exit,
    /// Acknowledge/EOI the physical interrupt, look up its virtual target.
    Handler,
    /// Make the virtual interrupt pending for the vCPU (list register).
    Inject,
    /// Back into the guest.
    Entry,
}

/// The phases of `Work::Halt`: an idle vCPU's HLT (or trapped WFI) in the
/// host, KVM's `kvm_vcpu_halt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HaltPhase {
    /// The HLT exit to the host.
    Exit,
    /// Halt-polling (`kvm_vcpu_check_block` in a loop): the pCPU spins.
    Poll,
    /// Blocked (`kvm_vcpu_block`): the pCPU idles until a wake-up.
    Blocked,
    /// The wake-up of a blocked vCPU: the host's wake-up interrupt, `schedule()`.
    Wake,
    /// VM entry, back to the guest's idle loop, which takes the interrupt.
    Entry,
}

/// The phases of `Work::MaskAck`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskPhase {
    /// Entry and the mask write and flushing read's round trip (`msix_mask`),
    /// while the read's completion still waits behind the device's posted
    /// writes (`Cpu::mask_flush`).
    Mask,
    /// `readl` still spinning: the completion waits behind the device's
    /// earlier writes on the DMA path.
    Flush,
    /// What is left: the whole of entry, mask and exit when the completion had
    /// nothing ahead of it, else the exit.
    Exit,
    /// The exit after `Flush` (its own slice in a trace, "irq exit", where an
    /// `Exit` after `Mask` runs on in the mask's).
    Tail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// The idle loop (or the guest's, in place: WFI is not trapped here).
    Idle,
    Task {
        task: u32,
        phase: TaskPhase,
    },
    /// `context_switch()` to `next`.
    Switch {
        next: u32,
    },
    Irq {
        src: u32,
        phase: IrqPhase,
    },
    /// `handle_edge_irq()` on a lazily disabled interrupt: entry,
    /// `mask_ack_irq()` (the MSI-X mask write and the read that flushes it),
    /// `IRQS_PENDING`, exit; no handler. Under DAIF throughout: with pseudo-NMI
    /// the real mask part runs under the PMR, so an NMI that comes during it
    /// waits here up to `msix_mask` longer than it would (a simplification).
    MaskAck {
        src: u32,
        phase: MaskPhase,
    },
    /// `__do_softirq()`: deferred work raised by handlers.
    Softirq,
    /// One NAPI poll round of a NIC RX queue (`net_rx_action` → `napi_poll`).
    Napi {
        q: u32,
    },
    Hyp {
        src: u32,
        phase: HypPhase,
    },
    /// An idle vCPU halted in the host (`hypervisor.guest_idle = "hlt"`),
    /// over the guest's idle frame.
    Halt {
        phase: HaltPhase,
    },
    /// A component's thread in the kernel, in process context (fio's job in
    /// `io_submit`/`io_uring_enter`: `blk_mq_submit_bio` down to the SQ
    /// doorbell). It runs when the CPU would idle, and interrupts nest over it.
    Thread {
        owner: u8,
        arg: u32,
    },
}

/// The idle loop's PMR accesses an interrupt pays before its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IdleWake {
    /// Not taken in the idle loop (or in a polling one, whose tick runs).
    No = 0,
    /// Pending as the one before returned, taken on its `eret`: the stopped
    /// tick's section only (`pmr::IDLE_TICK`).
    Tick = 1,
    /// Woken from `wfi`: the loop's restore too (`pmr::IDLE_WAKE`).
    Wfi = 2,
}

#[derive(Clone, Copy, Debug)]
pub struct Frame {
    pub work: Work,
    pub level: Level,
    pub mask: Mask,
    /// Whether the current phase opened a trace slice.
    pub traced: bool,
    /// What an interrupt frame taken in the idle loop paid on its entry under
    /// pseudo-NMI (`Machine::pmr_idle_wake`).
    pub woke_idle: IdleWake,
    /// Work left in the current phase.
    pub left: Ps,
    /// For interrupt frames: when the device raised it, and its trace flow id.
    pub origin: Ps,
    pub flow: u64,
}

impl Frame {
    pub fn new(work: Work, level: Level, mask: Mask, left: Ps) -> Frame {
        Frame { work, level, mask, traced: false, woke_idle: IdleWake::No, left, origin: 0, flow: 0 }
    }
}

/// Where CPU time goes, for the shares in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Idle = 0,
    User,
    Kernel,
    Hardirq,
    Softirq,
    Hyp,
}
pub const CLASSES: [&str; 6] = ["idle", "user", "kernel", "hardirq", "softirq", "hyp"];

impl Frame {
    pub fn class(&self) -> Class {
        match self.work {
            Work::Idle => Class::Idle,
            Work::Task { phase: TaskPhase::User, .. } => Class::User,
            Work::Task { .. } | Work::Switch { .. } | Work::Thread { .. } => Class::Kernel,
            Work::Irq { .. } | Work::MaskAck { .. } => Class::Hardirq,
            Work::Softirq | Work::Napi { .. } => Class::Softirq,
            Work::Hyp { .. } => Class::Hyp,
            Work::Halt { phase: HaltPhase::Blocked } => Class::Idle,
            Work::Halt { .. } => Class::Hyp,
        }
    }
}

/// Where a CPU's softirq processing stands against its limits: the packets
/// left to this `net_rx_action` and when it started, and the restarts left to
/// this `__do_softirq` and when it started (kernel/softirq.c, net/core/dev.c).
#[derive(Clone, Debug, Default)]
pub struct Softnet {
    pub left: i64,
    pub rx_since: Ps,
    pub restarts: u32,
    pub do_since: Ps,
    /// Contexts of the poll list the running `net_rx_action` took at its
    /// start (its `list`) that it has not polled yet; those scheduled since
    /// wait behind them in the poll list.
    pub pass_left: usize,
    /// Contexts that used their budget in this `net_rx_action` (its `repoll`):
    /// polled again in the next one, not in this.
    pub repoll: VecDeque<u32>,
}

/// Cache lines at the start of a `Cpu` that the common path touches.
pub const HOT_LINES: usize = 5;

/// The fields are in the order the common path touches them, and the layout
/// is fixed (`repr(C)`, 64-byte aligned) so that they stay there: an
/// interrupt taken and ended on an idle CPU (`pend`, `pause_top`,
/// `push_frame`, `phase_done`, `pop_frame`, `irq_exit_tail`, `idle_work`)
/// reads and writes the first `HOT_LINES` cache lines and the top frame, and
/// one over a user task the next line too (`need_resched`); a test checks the
/// offsets. The paths that use them read on: softirq and NAPI (`softnet`),
/// halts, a `MaskAck`'s flushing read. With 2,048 CPUs the hot lines are
/// 640 KB of a 2 MB L2 that the sources also stream through; Rust's own
/// layout spread them over the whole struct (issue 18, docs/ARCHITECTURE.md).
/// Add a field at the end unless the common path reads it.
#[repr(C, align(64))]
pub struct Cpu {
    // Line 0: the frame stack and the clocks of the running phase.
    pub stack: Vec<Frame>,
    /// When the top frame last started running (valid while `timer` is set).
    pub started: Ps,
    pub class_since: Ps,
    /// When a frame last popped here: an IRQ pushed over the idle frame at
    /// that instant was pending as the previous one returned, and is taken
    /// before the idle loop reaches `wfi`; with the idle frame on top, when
    /// the idle period began (`cstate`).
    pub popped_at: Ps,
    pub timer: Option<TimerHandle>,
    /// Leaving an idle state (`cstate`): what comes waits for `Ev::Wake`.
    pub waking: bool,
    /// A thread busy-polls a queue here (io_uring IOPOLL, NAPI busy polling): the
    /// time the model leaves idle is spent spinning, and the report counts it as
    /// kernel time (`cpuN.poll_share`), not idle.
    pub spins: bool,
    /// A thread's work ran last (ksoftirqd's turn next, if it has work).
    pub thread_ran: bool,
    // Lines 1 and 2: what the end of a phase charges and counts.
    /// Time per level and class since the last stats reset.
    pub time: [[Ps; 6]; 2],
    /// Softirq work raised and not yet run, per level.
    pub softirq_work: [Ps; 2],
    pub irqs: u64,
    /// The arch entry and exit of the host's interrupts (their `Entry` and
    /// `Exit` phases, a `MaskAck`'s entry and exit) since the start of the run,
    /// counted as each ends: hardirq time the kernel's irq time does not see.
    pub irq_arch: Ps,
    // Line 3: the pending bits, and the work an idle CPU looks for.
    /// Physical interrupts pending at this CPU's redistributor / local APIC.
    pub pending: Pending,
    /// Virtual interrupts injected for the vCPU pinned here, waiting for the guest to unmask.
    pub vpending: Pending,
    /// Components' thread work waiting for the CPU (`Machine::thread_work`): owner, arg, length.
    pub threads: VecDeque<(u8, u32, Ps)>,
    // Line 4.
    /// NAPI contexts scheduled and not yet polled, per level.
    pub napi_list: [VecDeque<u32>; 2],
    // Line 5: what a return to user reads (`need_resched`). Not prefetched:
    // with 2,048 idle CPUs asking for it cost 3 % of the events a second.
    pub rq: VecDeque<u32>,
    pub slice_start: Ps,
    // The rest: read only by the paths that use them.
    pub current: Option<u32>,
    /// `(vm, vcpu)` pinned to this pCPU.
    pub vcpu: Option<(u32, u32)>,
    /// The running `__do_softirq` and its `net_rx_action`, per level.
    pub softnet: [Softnet; 2],
    /// The host's hardirq time before the last stats reset, so that a reader
    /// of the CPU's lifetime irq time (GSIM's control law) does not see the reset.
    pub host_hardirq_before_reset: Ps,
    irq_arch_at_reset: Ps,
    /// A `MaskAck` here waits for its flushing read's completion, which the
    /// device's earlier posted writes hold on the DMA path; when the read's
    /// round trip alone would have ended (what `msix_flush_wait` counts from).
    pub mask_flush: Option<Ps>,
    pub track: TrackId,
    pub vtrack: TrackId,
    /// The pinned vCPU's halt-polling window (`vcpu->halt_poll_ns`) and when
    /// its current halt began (`hypervisor.guest_idle = "hlt"`).
    pub halt_poll: Ps,
    pub halt_since: Ps,
    /// Kept only when tracing: `(src, vector, flow)` when the handler of
    /// interrupt `src`'s top frame runs another vector's handler in its current
    /// step (a posted-MSI notification's `call_irq_handler`), so that the trace
    /// names the step by that vector and ends its MSI's flow there.
    pub demux: Option<(u32, u32, u64)>,
}

impl Cpu {
    /// A `net_rx_action` is over: the contexts that used their budget
    /// (`repoll`) go to the back of the poll list, for the next one.
    pub(crate) fn end_rx_pass(&mut self, lv: usize) {
        self.napi_list[lv].extend(self.softnet[lv].repoll.drain(..));
    }

    pub fn new(track: TrackId, vtrack: TrackId) -> Self {
        Cpu {
            stack: Vec::with_capacity(16),
            started: 0,
            timer: None,
            pending: Pending::default(),
            vpending: Pending::default(),
            vcpu: None,
            softirq_work: [0; 2],
            napi_list: Default::default(),
            threads: VecDeque::new(),
            thread_ran: false,
            softnet: Default::default(),
            rq: VecDeque::new(),
            current: None,
            slice_start: 0,
            time: [[0; 6]; 2],
            class_since: 0,
            host_hardirq_before_reset: 0,
            irq_arch: 0,
            irq_arch_at_reset: 0,
            irqs: 0,
            spins: false,
            mask_flush: None,
            track,
            vtrack,
            halt_poll: 0,
            halt_since: 0,
            demux: None,
            popped_at: 0,
            waking: false,
        }
    }

    #[inline]
    pub fn top(&self) -> &Frame {
        self.stack.last().expect("a CPU always has a base frame (a task or idle)")
    }

    #[inline]
    pub fn top_mut(&mut self) -> &mut Frame {
        self.stack.last_mut().expect("a CPU always has a base frame (a task or idle)")
    }

    /// Charges the time since the last change to the frame on top.
    #[inline(always)]
    pub fn account(&mut self, now: Ps) {
        // Pushes, pops and phase ends come in runs at one instant (a pause
        // then a push; a phase end then a pop): only the first has time to charge.
        if now == self.class_since {
            return;
        }
        if let Some(f) = self.stack.last() {
            let (lvl, cls) = (f.level as usize, f.class() as usize);
            self.time[lvl][cls] += now - self.class_since;
        }
        self.class_since = now;
    }

    pub fn reset_time(&mut self, now: Ps) {
        self.account(now);
        self.host_hardirq_before_reset += self.time[Level::Host as usize][Class::Hardirq as usize];
        self.irq_arch_at_reset = self.irq_arch;
        self.time = [[0; 6]; 2];
        self.irqs = 0;
    }

    pub fn class_time(&self, c: Class) -> Ps {
        self.time[0][c as usize] + self.time[1][c as usize]
    }

    /// Hardirq time as the kernel accounts it, since the start of the run
    /// whatever the stats resets: `CPUTIME_IRQ`, charged from `irq_enter_rcu`
    /// to `__irq_exit_rcu` (`account_hardirq_enter`/`_exit`, kernel/softirq.c;
    /// `irqtime_account_irq`, kernel/sched/cputime.c). So the host's hardirq
    /// frames without the arch entry and exit around them, and none of a
    /// guest's (the host accounts a guest's time as `CPUTIME_GUEST`).
    pub fn irqtime_lifetime(&self) -> Ps {
        (self.host_hardirq_before_reset + self.time[Level::Host as usize][Class::Hardirq as usize]).saturating_sub(self.irq_arch)
    }

    /// [`Self::irqtime_lifetime`] since the last stats reset.
    pub fn irqtime(&self) -> Ps {
        self.time[Level::Host as usize][Class::Hardirq as usize].saturating_sub(self.irq_arch - self.irq_arch_at_reset)
    }

    pub fn level_time(&self, l: Level) -> Ps {
        self.time[l as usize].iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the common path reads and writes (see `Cpu`) lies in the first
    /// `HOT_LINES` cache lines, which `Machine::prefetch_far` asks for, and
    /// `need_resched`'s fields in the next; a field added there by mistake, or
    /// a `Pending` grown back to its FIFOs, fails here.
    #[test]
    fn the_common_path_reads_the_hot_lines() {
        let hot = field_ends!(Cpu;
            stack,
            started,
            class_since,
            popped_at,
            timer,
            waking,
            spins,
            thread_ran,
            time,
            softirq_work,
            irqs,
            irq_arch,
            pending,
            vpending,
            threads,
            napi_list
        );
        for (name, end) in hot {
            assert!(end <= 64 * HOT_LINES, "{name} ends at byte {end}, past the {HOT_LINES} hot lines");
        }
        // Over a user task, the return reads these too (`need_resched`): the line after.
        for (name, end) in field_ends!(Cpu; rq, slice_start) {
            assert!(end <= 64 * (HOT_LINES + 1), "{name} ends at byte {end}, past the line after the hot ones");
        }
        assert_eq!(std::mem::align_of::<Cpu>(), 64);
    }

    /// The end of warm-up zeroes the shares' times, not the lifetime hardirq
    /// time that GSIM's law differences (it read 0 for the epoch across the reset).
    #[test]
    fn lifetime_hardirq_time_survives_a_stats_reset() {
        let mut cpu = Cpu::new(TrackId::default(), TrackId::default());
        cpu.stack.push(Frame::new(Work::Irq { src: 0, phase: IrqPhase::Handler }, Level::Host, Mask::Daif, 10));
        cpu.account(0);
        cpu.account(700);
        cpu.reset_time(1_000);
        assert_eq!(cpu.class_time(Class::Hardirq), 0);
        cpu.account(1_500);
        assert_eq!(cpu.class_time(Class::Hardirq), 500);
        assert_eq!(cpu.irqtime_lifetime(), 1_500);
        // An entry that ended after the reset comes off both; a guest's hardirq counts in neither.
        cpu.irq_arch += 300;
        assert_eq!((cpu.irqtime_lifetime(), cpu.irqtime()), (1_200, 200));
        cpu.stack.push(Frame::new(Work::Irq { src: 0, phase: IrqPhase::Handler }, Level::Guest, Mask::Daif, 10));
        cpu.account(2_000);
        assert_eq!((cpu.irqtime_lifetime(), cpu.irqtime()), (1_200, 200));
        assert_eq!(cpu.class_time(Class::Hardirq), 1_000);
    }
}
