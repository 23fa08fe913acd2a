//! The hypervisor's state: pCPUs, vCPUs, the runqueue, costs and counters,
//! and the small operations both the run loop (`mod.rs`) and the scheduler
//! (`credit2.rs`) use on it.

use super::params::{SchedKind, Vwfi};
use crate::engine::sim::TimerHandle;
use crate::engine::stats::Latency;
use crate::engine::time::Ps;
use crate::engine::trace::{Tracer, TrackId};
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};
use crate::platform::parts::{dep, dispatch, ev_of};
use std::collections::VecDeque;

crate::part_events! {
    pub enum HypEv {
        /// The hypervisor work item in progress on a pCPU finished (arg: pCPU).
        HypDone,
        /// The guest work item in progress on a pCPU finished (arg: pCPU).
        GuestDone,
        /// A pCPU's scheduler slice expired (arg: pCPU).
        Slice,
        /// A reschedule IPI (`cpu_raise_softirq(SCHEDULE_SOFTIRQ)`) reached a pCPU (arg: pCPU).
        IpiResched,
        /// An event-check IPI (`vcpu_kick` → `smp_send_event_check_mask`) reached a pCPU (arg: pCPU).
        IpiKick,
        /// The hypervisor work queued before it is done: send a reschedule IPI (arg: target pCPU).
        SendResched,
        /// The same for an event-check IPI (arg: target pCPU).
        SendKick,
        /// The core left a guest's WFI (`idle_exit` after the vIRQ or work that
        /// woke it) and the guest runs (arg: pCPU).
        WfiWake,
        /// A halted vCPU's polling window on this pCPU ran out (arg: pCPU).
        PollEnd,
        /// A masked stretch begins on a pCPU (`vcpu_sched.masked`; arg: pCPU).
        Masked,
    }
}

/// Why a guest exited to the hypervisor (counted per reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A physical LPI for the guest (GICv3 trap-and-emulate).
    Lpi,
    /// An IPI from another pCPU: a kick or a reschedule request.
    Ipi,
    /// A vPE's doorbell LPI (GICv4, vPE not resident).
    Doorbell,
    /// A trapped WFI.
    Wfi,
    /// The scheduler's slice timer.
    Timer,
    /// A list-register maintenance interrupt (more pending vIRQs than LRs).
    Maintenance,
    /// A trapped system-register write (SPE's `PMBLIMITR_EL1`, M2).
    Sysreg,
    /// The profiling buffer's interrupt (SPE's PMBIRQ, M2): a stage-2 fault on
    /// the buffer or the unit reaching PMBLIMITR.
    Pmbirq,
    /// A stretch of hypervisor work with interrupts masked (`vcpu_sched.masked`).
    Masked,
}

impl Exit {
    /// A physical interrupt (not a trapped instruction).
    pub fn is_interrupt(self) -> bool {
        matches!(self, Exit::Lpi | Exit::Ipi | Exit::Doorbell | Exit::Timer | Exit::Maintenance | Exit::Pmbirq)
    }
}

pub const EXITS: [(Exit, &str); 9] = [
    (Exit::Lpi, "lpi"),
    (Exit::Ipi, "ipi"),
    (Exit::Doorbell, "doorbell"),
    (Exit::Wfi, "wfi"),
    (Exit::Timer, "timer"),
    (Exit::Maintenance, "maintenance"),
    (Exit::Sysreg, "sysreg"),
    (Exit::Pmbirq, "pmbirq"),
    (Exit::Masked, "masked"),
];

/// Work the guest runs on a vCPU: its CPU time, and what to run once it is done.
#[derive(Clone, Copy, Debug)]
pub struct GuestWork {
    pub cost: Ps,
    pub then: Option<Ev>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In the hypervisor's idle loop (the idle vCPU).
    Idle,
    /// Running the hypervisor: exits, handlers, scheduling.
    Hyp,
    /// Running guest code.
    Guest,
    /// The guest executed WFI and it did not trap: the pCPU waits in the guest.
    GuestIdle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuState {
    Running,
    Runnable,
    Blocked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkKind {
    Plain,
    /// The return to the guest (`eret`): the guest runs once it completes with nothing queued behind it.
    Entry,
    /// A trapped WFI: the vCPU blocks unless a vIRQ is pending.
    Block,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Work {
    pub(crate) cost: Ps,
    pub(crate) kind: WorkKind,
    pub(crate) then: Option<Ev>,
}

pub struct Pcpu {
    pub mode: Mode,
    /// The machine's track for this CPU (slices: hypervisor, guest, guest WFI).
    pub(crate) track: TrackId,
    /// The vCPU this pCPU runs (`curr_on_cpu`); `None` is the idle vCPU.
    pub cur: Option<u32>,
    pub(crate) q: VecDeque<Work>,
    /// The item in progress (a `HypDone` is due).
    pub(crate) busy: Option<Work>,
    /// SCHEDULE_SOFTIRQ raised: schedule once the hypervisor work drains.
    pub resched: bool,
    /// Chosen by `runq_tickle` and not yet through `schedule()`.
    pub tickled: bool,
    pub(crate) guest_timer: Option<TimerHandle>,
    /// The guest item in progress ends at this time.
    pub(crate) guest_end: Ps,
    /// A "vIRQ handler" slice is open inside the vCPU's (tracing only): an exit
    /// ends both, and the handler's slice opens again when the guest resumes it.
    pub(crate) virq_slice: bool,
    pub(crate) slice: Option<TimerHandle>,
    /// When the current vCPU started running here (credit2's `state_entry_time`).
    pub ran_since: Ps,
    pub(crate) last_burn: Ps,
    pub(crate) since: Ps,
    /// Time per mode since the end of warm-up (indexed by `Mode as usize`).
    pub(crate) time: [Ps; 4],
    /// Physical interrupts taken here since the end of warm-up (LPIs, doorbells,
    /// IPIs, the slice timer, maintenance), in the guest or in the idle loop.
    pub(crate) irqs: u64,
    /// Guest time spent in vIRQ handlers (each counted whole when it ends).
    pub(crate) virq_time: Ps,
    /// KVM halt polling: the halted vCPU whose thread polls here, and the end of its window.
    pub(crate) polling: Option<(u32, TimerHandle)>,
    /// Why the pCPU last entered the hypervisor (an `EXITS` name, "" for its own work): its slice's name.
    pub(crate) hyp_why: &'static str,
}

pub struct Vcpu {
    pub state: VcpuState,
    /// The pCPU it last ran on, or runs on (`v->processor`).
    pub processor: u32,
    pub pinned: Option<u32>,
    /// credit2 credit, in ps of run time.
    pub credit: i64,
    /// The pCPU `runq_tickle` chose for it (`tickled_cpu`).
    pub tickled_cpu: Option<u32>,
    /// The guest's work, in order.
    pub(crate) guest_q: VecDeque<GuestWork>,
    /// Pending virtual interrupts (list registers, or the vPE's pending table), taken first.
    pub virqs: VecDeque<GuestWork>,
    /// The item in progress (or paused by an exit), and whether it is a vIRQ handler.
    pub(crate) cur: Option<(GuestWork, bool)>,
    /// Left of the paused item.
    pub(crate) paused_left: Ps,
    pub(crate) woke_at: Option<Ps>,
    /// KVM: this vCPU's halt-polling window (`vcpu->halt_poll_ns`), and when its halt began.
    pub(crate) halt_poll: Ps,
    pub(crate) halted_at: Option<Ps>,
}

impl Pcpu {
    /// A pCPU at the start: idle, nothing queued, on the machine's `track`.
    pub(crate) fn idle(track: TrackId) -> Self {
        Pcpu {
            mode: Mode::Idle,
            track,
            cur: None,
            q: VecDeque::new(),
            busy: None,
            resched: false,
            tickled: false,
            guest_timer: None,
            guest_end: 0,
            virq_slice: false,
            slice: None,
            ran_since: 0,
            last_burn: 0,
            since: 0,
            time: [0; 4],
            irqs: 0,
            virq_time: 0,
            polling: None,
            hyp_why: "",
        }
    }
}

impl Vcpu {
    /// A runnable vCPU with no work yet, last on `processor`, with `credit`.
    pub(crate) fn runnable(processor: u32, pinned: Option<u32>, credit: i64) -> Self {
        Vcpu {
            state: VcpuState::Runnable,
            processor,
            pinned,
            credit,
            tickled_cpu: None,
            guest_q: VecDeque::new(),
            virqs: VecDeque::new(),
            cur: None,
            paused_left: 0,
            woke_at: None,
            halt_poll: 0,
            halted_at: None,
        }
    }
}

#[derive(Default)]
pub struct Stats {
    pub exits: [u64; EXITS.len()],
    pub entries: u64,
    pub switches: u64,
    pub migrations: u64,
    pub wakes: u64,
    pub blocks: u64,
    /// KVM halts that polled: all (`halt_attempted_poll`), and those woken while polling (`halt_successful_poll`).
    pub halt_polls: u64,
    pub halt_polls_ok: u64,
    pub ipis: u64,
    /// WFI outcomes: [stayed in the guest, trapped] × [alone on the pCPU, another vCPU runnable there].
    pub wfi: [[u64; 2]; 2],
    pub wake_latency: Latency,
    /// Virtual interrupts the guests' handlers took.
    pub virqs: u64,
    /// vCPUs preempted while runnable, and those of them left waiting although
    /// `runq_tickle` had a pCPU for them (an audit: 0 once
    /// `csched2_context_saved` offers them).
    pub preempts: u64,
    pub preempted_unoffered: u64,
}

/// The scheduler and its pCPUs and vCPUs (absent without `[vcpu_sched]`).
#[derive(Default)]
pub struct Hypervisor {
    pub on: bool,
    pub kind: Option<SchedKind>,
    pub vwfi: Option<Vwfi>,
    pub pcpus: Vec<Pcpu>,
    pub vcpus: Vec<Vcpu>,
    /// The runnable vCPUs not running: credit2's runqueue, in credit order
    /// (`credit2::runq_insert`), or null's waitqueue, in arrival order.
    pub runq: Vec<u32>,
    pub c: Costs,
    /// Set by a GIC with direct vLPI injection (KVM's WFI policy reads it).
    pub direct_vlpi: bool,
    /// Events a dependent registered for context switches (the argument is replaced by the vCPU).
    pub on_switch_in: Option<Ev>,
    pub on_switch_out: Option<Ev>,
    pub stats: Stats,
    /// vIRQ handlers the guest finished, over the whole run (not reset at warm-up).
    pub virqs_taken: u64,
    /// `vcpu_sched.masked`: the pCPU, the mean gap (ps) and length of its
    /// masked stretches, and their random stream.
    pub masked: Option<(u32, f64, Ps)>,
    pub masked_rng: Option<crate::engine::rng::Rng>,
}

/// Costs in ps, converted once.
#[derive(Default, Clone, Copy)]
pub struct Costs {
    pub exit: Ps,
    pub entry: Ps,
    pub context_switch: Ps,
    pub block: Ps,
    pub wake: Ps,
    pub idle_exit: Ps,
    pub ipi_latency: Ps,
    pub ratelimit: Ps,
    pub migrate_resist: Ps,
    pub credit_init: Ps,
    pub min_timer: Ps,
    /// KVM's `halt_poll_ns` with `vwfi = "kvm"` (0 otherwise: no halt polling).
    pub halt_poll_max: Ps,
}

#[inline]
pub fn hv<P: Parts>(m: &mut Machine<P>) -> &mut Hypervisor {
    dep::<Hypervisor, P>(m)
}

#[inline]
pub(crate) fn ev<P: Parts>(e: HypEv, arg: u32) -> Ev {
    ev_of::<Hypervisor, P>(e, arg)
}

pub(crate) fn with_arg(e: Ev, arg: u32) -> Ev {
    match e {
        Ev::Part { part, code, .. } => Ev::Part { part, code, arg },
        other => other,
    }
}

pub(crate) fn account(c: &mut Pcpu, now: Ps) {
    c.time[c.mode as usize] += now.saturating_sub(c.since);
    c.since = now;
}

/// A mode change, and its slice on the CPU's track.
pub(crate) fn set_mode(c: &mut Pcpu, mode: Mode, now: Ps, tr: &mut Tracer) {
    account(c, now);
    if tr.on() && c.mode != mode {
        if std::mem::take(&mut c.virq_slice) {
            tr.end(now, c.track);
        }
        if c.mode != Mode::Idle {
            tr.end(now, c.track);
        }
        let v = c.cur.map(|v| v as i64).unwrap_or(-1);
        match mode {
            Mode::Idle => {}
            Mode::Hyp if c.hyp_why.is_empty() => tr.begin(now, c.track, "hypervisor", "hypervisor", None),
            Mode::Hyp => tr.begin(now, c.track, "hypervisor", &format!("hypervisor: {}", c.hyp_why), None),
            Mode::Guest => tr.begin(now, c.track, "guest", &format!("vcpu{v}"), None),
            Mode::GuestIdle => tr.begin(now, c.track, "guest", &format!("vcpu{v} wfi"), None),
        }
    }
    c.mode = mode;
}

/// The hypervisor and the machine's tracer (distinct fields, borrowed together).
#[inline]
pub(crate) fn split<P: Parts>(m: &mut Machine<P>) -> (&mut Hypervisor, &mut Tracer) {
    (m.parts.find::<Hypervisor>().expect("a registered component"), &mut m.tracer)
}

/// Sends SCHEDULE_SOFTIRQ to pCPU `to` from `from` (locally: raises it).
pub(crate) fn raise_resched<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, to: u32, from: Option<u32>) {
    let h = hv(m);
    h.pcpus[to as usize].tickled = true;
    match from {
        Some(f) if f == to => h.pcpus[to as usize].resched = true,
        Some(f) => send_ipi(m, f, HypEv::SendResched, to),
        None => {
            h.stats.ipis += 1;
            let lat = h.c.ipi_latency;
            s.after(lat, ev::<P>(HypEv::IpiResched, to));
        }
    }
}

/// An IPI from pCPU `from` (in the hypervisor) to `to`, sent once the work queued on
/// `from` is done: in Xen it leaves at the end of `vgic_inject_irq` → `vcpu_kick` →
/// `vcpu_wake` → `runq_tickle`, after the costs queued before it.
pub(crate) fn send_ipi<P: Parts>(m: &mut Machine<P>, from: u32, send: HypEv, to: u32) {
    let h = hv(m);
    h.stats.ipis += 1;
    h.pcpus[from as usize].q.push_back(Work { cost: 0, kind: WorkKind::Plain, then: Some(ev::<P>(send, to)) });
}

/// Context-switch notifications to the dependents that registered for them.
pub(crate) fn notify_switch<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, port: Option<Ev>, v: u32) {
    if let Some(e) = port {
        dispatch(m, s, with_arg(e, v));
    }
}

/// Queues `cost` of hypervisor work on `p` (in the hypervisor already), with no exit.
pub(crate) fn push_work<P: Parts>(m: &mut Machine<P>, p: u32, cost: Ps) {
    hv(m).pcpus[p as usize].q.push_back(Work { cost, kind: WorkKind::Plain, then: None });
}

impl Hypervisor {
    /// vIRQs posted and not yet handled: pending, or with a handler in progress.
    pub fn virqs_outstanding(&self) -> u64 {
        self.vcpus.iter().map(|v| v.virqs.len() as u64 + matches!(v.cur, Some((_, true))) as u64).sum()
    }

    /// Whether vCPU `v` is the one pCPU `p` runs.
    pub fn is_current(&self, v: u32) -> Option<u32> {
        let vc = &self.vcpus[v as usize];
        (vc.state == VcpuState::Running).then_some(vc.processor)
    }
}
