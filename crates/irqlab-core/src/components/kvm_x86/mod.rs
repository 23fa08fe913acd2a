//! M4: KVM x86's VM-enter loop, `vcpu_enter_guest()`, and the cancelled
//! VM-enters that a request order causes.
//!
//! Each vCPU runs the guest until an exit; then the host services pending
//! request bits in the configured order (`kvm_check_request`), injects events
//! (KVM_REQ_EVENT), disables interrupts, sets IN_GUEST_MODE and makes a final
//! check (`kvm_vcpu_exit_request`): any request still pending cancels the
//! VM-enter (`vmx_cancel_injection`, interrupts back on) and the loop starts
//! over. A request raised by servicing another one that comes *earlier* in the
//! order is only seen by the final check: with upstream's old order, a guest
//! PMU overflow (perf callback → PMI → LVTPC in NMI mode → NMI) cancels every time.
//! With APICv, interrupts that KVM posts (IPIs, device interrupts, timers where
//! it can) raise no request and never cancel.
//!
//! The vCPUs are pinned and the host side of their pCPUs is not modelled, so
//! this is a model of its own on the engine, not part of the machine model.

pub mod params;

pub mod nmi;
mod pass;
mod report;
pub mod requests;
mod sources;

use crate::engine::rng::{exp_sample, stream, Rng};
use crate::engine::stats::{Latency, Report};
use crate::engine::time::{s_to_ps, Ps, NEVER};
use crate::engine::trace::{Tracer, TrackId};
use crate::engine::{Model, Protocol, Scheduler, TimerHandle};
use crate::scenario::{Lvtpc, Scenario};
use nmi::NmiState;
use requests::{resolve, Req, NREQ, ORDERED};
use sources::{highest, vector};
use std::collections::{BTreeMap, VecDeque};

/// What raises a request or an exit from outside the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Src {
    /// A guest PMU counter overflowed (host PMI → `kvm_perf_overflow` → KVM_REQ_PMI, KVM_REQ_PMU).
    PmuOverflow = 0,
    /// Another vCPU's IPI (posted, or KVM_REQ_EVENT + kick); on the sender, an APIC-write exit.
    Ipi,
    /// The LAPIC timer expired (posted where KVM can, else KVM_REQ_EVENT + kick).
    Timer,
    /// An NMI from elsewhere (`kvm_inject_nmi`).
    Nmi,
    Smi,
    /// Any other exit (MMIO, CPUID, MSR, EPT): handled, no request.
    Other,
    /// A device interrupt for this vCPU (posted, or KVM_REQ_EVENT + kick).
    Device,
    /// TIF_NEED_RESCHED or a signal for the vCPU thread, set by another CPU.
    HostResched,
    /// An emulated instruction's counter increment overflowed (KVM_REQ_PMU on its exit).
    PmuEmulated,
    /// The guest IRETed from its NMI handler with an NMI pending (NMI-window exit).
    NmiWindow,
    /// Without APICv: the guest's EOI write for an injected vector, trapped
    /// (`apic_set_eoi` raises KVM_REQ_EVENT), or the immediate exit KVM asks
    /// for when an NMI took the entry with an interrupt still pending.
    Eoi,
}
const NSRC: usize = 9;
const SRC_NAMES: [&str; NSRC + 2] =
    ["pmu_overflow", "ipi", "timer", "nmi", "smi", "other_exit", "device", "host_resched", "pmu_emulated_overflow", "nmi_window", "eoi"];
/// Sources that run on wall-clock time; the others run on guest time and stop on an exit.
const WALL_CLOCK: [Src; 5] = [Src::Timer, Src::Nmi, Src::Smi, Src::Device, Src::HostResched];
const GUEST_TIME: [Src; 4] = [Src::PmuOverflow, Src::Ipi, Src::Other, Src::PmuEmulated];

#[derive(Clone, Copy, Debug)]
pub enum KvmEv {
    /// The vCPU's current host-side phase ended.
    Step(u32),
    /// A source fires for a vCPU.
    Src(u32, Src),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Guest,
    Exit,
    /// The host's `schedule()` for a pending reschedule, before the request list.
    Schedule,
    Service,
    IrqsOff,
    Cancel,
    Entry,
}

/// Who raised a pending request: a source, or the servicing of another request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cause {
    Src(Src),
    Req(Req),
}

struct Vcpu {
    vm: u32,
    phase: Phase,
    pending: u16,
    cause: [Cause; NREQ],
    /// Next position in the order to check, and the request being serviced.
    pos: usize,
    serving: Option<Req>,
    /// Requests raised during this attempt's IRQs-off window (the audit).
    raised_in_window: bool,
    /// The exit under way is handled in the fastpath, with interrupts off
    /// (`handle_fastpath_preemption_timer`, the x2APIC ICR write): at its end
    /// `vcpu_enter_guest`'s loop re-enters unless a request is pending.
    fastpath: bool,
    fastpath_reentries: u64,
    /// When this attempt's interrupts go off: the IrqsOff phase begins with
    /// event injection, which the kernel does with interrupts still on
    /// (`kvm_check_and_inject_events` before `local_irq_disable`).
    irqs_off_from: Ps,
    nmi: NmiState,
    /// Queued/pending NMIs: when each was raised and whether a PMI raised it.
    nmi_origin: VecDeque<(Ps, bool)>,
    /// NMIs injected on this attempt (delivered if the entry goes through).
    injecting: Vec<(Ps, bool)>,
    /// Guest PMU overflows not yet turned into a PMI: when they happened.
    pmu_marks: VecDeque<Ps>,
    /// PMIs delivered as a fixed-vector interrupt, waiting for injection.
    pmi_fixed: VecDeque<Ps>,
    pmi_injecting: Vec<Ps>,
    /// Guest NMIs are blocked until the handler IRETs: `NEVER` while the vCPU is
    /// out of the guest in the middle of it (the handler runs in guest time), and
    /// `nmi_left` holds what the handler still has to run.
    nmi_masked_until: Ps,
    nmi_left: Ps,
    /// The LVTPC's mask bit: `kvm_apic_local_deliver` sets it on each PMI it
    /// delivers (Intel guests), and the guest's perf NMI handler clears it at
    /// its end (`intel_pmu_handle_irq`, late ack). `lvtpc_wait`: masked, and no
    /// NMI handler has started since, so none is on its way to unmasking it.
    lvtpc_masked: bool,
    lvtpc_wait: bool,
    pmis_masked: u64,
    /// The NMI-window exit armed at entry for an NMI pending behind the handler;
    /// cancelled on an exit, armed again at the next entry.
    window_armed: bool,
    window_timer: Option<TimerHandle>,
    /// The emulated local APIC's IRR (`vector` bits: timer, IPI, device,
    /// fixed-mode PMI), the vectors being injected on this attempt (kept for
    /// re-injection when it is cancelled), and the interrupts delivered. Only
    /// without APICv: with it every interrupt is posted (`vmx_deliver_interrupt`
    /// → `vmx_deliver_posted_interrupt`), into `pir`.
    irr: u8,
    injecting_irr: u8,
    virqs: u64,
    /// Interrupts that merged into their vector's pending IRR or PIR bit (and
    /// hrtimer expiries dropped while a tick was pending).
    coalesced: u64,
    /// An hrtimer tick waits for `vcpu_run` to inject it (`lapic_timer.pending`).
    timer_pending: bool,
    /// The hrtimer fired on the vCPU's own pCPU with interrupts off: the
    /// pCPU holds its interrupt, the VM-enter goes ahead and exits at once on
    /// it, and the callback runs after that exit.
    tick_held: bool,
    /// Posted interrupts not yet in the guest (PIR bits, synced at VM entry), and
    /// the posted fixed-mode PMI among them (when its overflow happened).
    pir: u8,
    pmi_posted: Vec<Ps>,
    posted: u64,
    /// Emulated counter overflows waiting for KVM_REQ_PMU's servicing.
    pmu_emulated: u32,
    /// Lost-time bookkeeping: when this attempt's IRQs-off phase began.
    window_start: Ps,
    after_cancel: bool,
    /// A request came from outside while the vCPU was entering: `kvm_vcpu_kick`
    /// found it `IN_GUEST_MODE` and its IPI makes it exit right after the entry.
    kicked: bool,
    /// Guest timer deadlines that passed while the vCPU was out of guest mode, on
    /// the VMX preemption timer without APICv: the timer, armed at entry with a
    /// deadline behind it, exits at once (a zero preemption-timer value).
    hv_timer_due: u32,
    /// Requests serviced in this pass (and `Event` if it injected), and those
    /// the cancelled pass before it had serviced: servicing one of them again
    /// is what a cancel wastes, a request's first servicing is not (the other
    /// order pays it too).
    pass_served: u16,
    repeat: u16,
    reschedules: u64,
    /// Guest-time sources (`GUEST_TIME`): cancelled on exit.
    guest_timers: [Option<TimerHandle>; 4],
    rng: Rng,
    track: TrackId,
    /// A phase's slice is open on the track (from the first phase on).
    traced: bool,
    enters: u64,
    cancels: u64,
    exits: u64,
    lost: Ps,
    guest_time: Ps,
    guest_since: Ps,
}

impl Vcpu {
    /// Past `local_irq_disable` in `vcpu_enter_guest`, before the final check,
    /// or in a fastpath exit (handled with interrupts off).
    fn irqs_off(&self, now: Ps) -> bool {
        (self.phase == Phase::IrqsOff && now >= self.irqs_off_from) || (self.phase == Phase::Exit && self.fastpath)
    }

    /// `vcpu->mode == IN_GUEST_MODE`: set with interrupts off before the final
    /// check, through the entry and the guest, and kept through a fastpath exit.
    fn in_guest_mode(&self, now: Ps) -> bool {
        matches!(self.phase, Phase::Guest | Phase::Entry) || self.irqs_off(now)
    }
}

struct Costs {
    exit: Ps,
    service: Ps,
    inject: Ps,
    irqs_off: Ps,
    entry: Ps,
    cancel: Ps,
    other: Ps,
    nmi_handler: Ps,
    host_resched: Ps,
}

pub struct KvmModel {
    order: Vec<Req>,
    /// Position of each request in the order (EVENT: after the list).
    pos_of: [usize; NREQ],
    lvtpc: Lvtpc,
    apicv: bool,
    post_timer: bool,
    hv_timer: bool,
    /// Mean gap per source (seconds; infinite if off).
    gap: [f64; NSRC],
    c: Costs,
    vcpus: Vec<Vcpu>,
    vcpus_per_vm: u32,
    tracer: Tracer,
    /// cancels by (first pending request, what raised it).
    attributed: BTreeMap<(Req, Cause), u64>,
    pmi_latency: Latency,
    /// An NMI from outside the PMU (`rates.nmi`): raised to the guest entered with it.
    nmi_latency: Latency,
    pub audit: KvmAudit,
    warmup: Ps,
}

/// Lifetime checks for the tests; never reset.
#[derive(Clone, Debug, Default)]
pub struct KvmAudit {
    pub cancels: u64,
    pub attributed: u64,
    /// Attempts whose IRQs-off window saw a request raised, and how many of them were not cancelled.
    pub window_raises: u64,
    pub window_raises_entered: u64,
    /// hrtimer ticks that fired on the vCPU's pCPU with interrupts off, held to the entry.
    pub ticks_held: u64,
    /// The most NMIs ever pending at once, and NMIs delivered beyond what was queued minus dropped.
    pub max_nmi_pending: u32,
    pub nmis_queued: u64,
    pub nmis_dropped: u64,
    pub nmis_delivered: u64,
    /// PMIs that found the LVTPC still masked from the last one (no NMI raised).
    pub pmis_masked: u64,
    /// Posted interrupts raised, delivered, and raised during an IRQs-off window.
    pub posted: u64,
    pub posted_delivered: u64,
    pub posted_in_window: u64,
    /// Posted interrupts still in a PIR when the run ended, and those that
    /// found their vector's PIR bit already set (`pi_test_and_set_pir`).
    pub posted_pending: u64,
    pub posted_coalesced: u64,
    /// Interrupts through the emulated APIC's IRR (not posted): raised, that
    /// found their vector's bit already set (`kvm_lapic_set_irr` merges them),
    /// delivered by an entry, and still in an IRR or being injected at the end.
    pub irr_raised: u64,
    pub irr_coalesced: u64,
    pub irr_delivered: u64,
    pub irr_pending: u64,
    /// The most IRR vectors one VM entry delivered (one without APICv:
    /// `kvm_check_and_inject_events` injects one), and entries without APICv
    /// that delivered an NMI and a vector together (none: one event an entry).
    pub max_irr_per_entry: u32,
    pub nmi_and_irq_entries: u64,
    /// Events handed out of time order (the scheduler's audit, copied here).
    pub time_reversals: u64,
    /// NMI-window exits taken while the vCPU was not in the guest (its NMI
    /// handler cannot IRET there): none, since the handler runs in guest time.
    pub nmi_windows_outside_guest: u64,
}

impl KvmModel {
    pub fn new(sc: &Scenario, seed: u64, mut tracer: Tracer) -> KvmModel {
        let k = sc.kvm.as_ref().expect("a [kvm] scenario");
        let order = resolve(&k.order).expect("validated");
        let mut pos_of = [ORDERED.len(); NREQ];
        for (i, r) in order.iter().enumerate() {
            pos_of[*r as usize] = i;
        }
        // The final check sees EVENT, then a pending reschedule, then a timer's
        // UNBLOCK, after the list (a cancel is attributed to the first pending).
        pos_of[Req::Resched as usize] = ORDERED.len() + 1;
        pos_of[Req::Unblock as usize] = ORDERED.len() + 2;
        let gap = |r: crate::scenario::Rate| if r.0 > 0.0 { 1.0 / r.0 } else { f64::INFINITY };
        let r = &k.rates;
        let n = k.vms * k.vcpus;
        let vcpus = (0..n)
            .map(|v| Vcpu {
                vm: v / k.vcpus,
                phase: Phase::Entry,
                pending: 0,
                cause: [Cause::Src(Src::Other); NREQ],
                pos: 0,
                serving: None,
                raised_in_window: false,
                irqs_off_from: 0,
                fastpath: false,
                fastpath_reentries: 0,
                nmi: NmiState::default(),
                nmi_origin: VecDeque::new(),
                injecting: Vec::new(),
                pmu_marks: VecDeque::new(),
                pmi_fixed: VecDeque::new(),
                pmi_injecting: Vec::new(),
                nmi_masked_until: 0,
                nmi_left: 0,
                lvtpc_masked: false,
                lvtpc_wait: false,
                pmis_masked: 0,
                window_armed: false,
                window_timer: None,
                irr: 0,
                injecting_irr: 0,
                coalesced: 0,
                timer_pending: false,
                tick_held: false,
                virqs: 0,
                pir: 0,
                pmi_posted: Vec::new(),
                posted: 0,
                pmu_emulated: 0,
                window_start: 0,
                after_cancel: false,
                kicked: false,
                hv_timer_due: 0,
                pass_served: 0,
                repeat: 0,
                reschedules: 0,
                guest_timers: [None; 4],
                rng: stream(seed, &format!("kvm/vm{}/vcpu{}", v / k.vcpus, v % k.vcpus)),
                track: tracer.track(&format!("vm{}.vcpu{}", v / k.vcpus, v % k.vcpus), None),
                traced: false,
                enters: 0,
                cancels: 0,
                exits: 0,
                lost: 0,
                guest_time: 0,
                guest_since: 0,
            })
            .collect();
        let c = &k.costs;
        KvmModel {
            order,
            pos_of,
            lvtpc: k.lvtpc,
            apicv: k.apicv,
            post_timer: k.post_timer,
            hv_timer: k.hv_timer,
            gap: [
                gap(r.pmu_overflow),
                gap(r.ipi),
                gap(r.timer),
                gap(r.nmi),
                gap(r.smi),
                gap(r.other_exits),
                gap(r.device),
                gap(r.host_resched),
                gap(r.pmu_emulated_overflow),
            ],
            c: Costs {
                exit: c.exit.ps(),
                service: c.service.ps(),
                inject: c.inject.ps(),
                irqs_off: c.irqs_off.ps(),
                entry: c.entry.ps(),
                cancel: c.cancel.ps(),
                other: c.other_exit.ps(),
                nmi_handler: c.guest_nmi_handler.ps(),
                host_resched: c.host_resched.ps(),
            },
            vcpus,
            vcpus_per_vm: k.vcpus,
            tracer,
            attributed: BTreeMap::new(),
            pmi_latency: Latency::default(),
            nmi_latency: Latency::default(),
            audit: KvmAudit::default(),
            warmup: sc.warmup.ps(),
        }
    }

    fn draw(&mut self, v: usize, src: Src) -> Ps {
        let g = self.gap[src as usize];
        if g.is_finite() {
            s_to_ps(exp_sample(&mut self.vcpus[v].rng, g))
        } else {
            NEVER
        }
    }

    /// Wall-clock sources run from the start.
    pub fn start(&mut self, s: &mut Scheduler<KvmEv>) {
        for v in 0..self.vcpus.len() {
            for src in WALL_CLOCK {
                let d = self.draw(v, src);
                if d != NEVER {
                    s.at(d, KvmEv::Src(v as u32, src));
                }
            }
            self.begin(s, v, Phase::Entry, Some(self.c.entry));
        }
    }

    /// Enters `phase`; a host-side phase with a length ends with a `Step` after it.
    fn begin(&mut self, s: &mut Scheduler<KvmEv>, v: usize, phase: Phase, len: Option<Ps>) {
        let now = s.now();
        let vc = &mut self.vcpus[v];
        // Each phase ends the last one's slice: a guest slice was left open at its
        // exit, so they nested thousands deep and lasted to the end of the run.
        if self.tracer.on() && vc.traced {
            self.tracer.end(now, vc.track);
        }
        vc.phase = phase;
        // A phase that takes no time opens no slice (hairlines in the UI): one
        // of length 0, and a pass over the requests that finds none pending.
        vc.traced = false;
        let empty = || len == Some(0) || (phase == Phase::Service && !self.order.iter().any(|r| vc.pending & r.bit() != 0));
        if self.tracer.on() && !empty() {
            vc.traced = true;
            let name = match phase {
                Phase::Guest => "guest",
                Phase::Exit => "vm exit",
                Phase::Schedule => "host schedule()",
                Phase::Service => "requests",
                Phase::IrqsOff => "irqs off",
                Phase::Cancel => "cancelled VM-enter",
                Phase::Entry => "vm entry",
            };
            self.tracer.begin(now, vc.track, "hypervisor", name, None);
        }
        if let Some(len) = len {
            s.after(len, KvmEv::Step(v as u32));
        }
    }

    /// `kvm_make_request` (+ `kvm_vcpu_kick` from outside): a guest exits at once.
    fn request(&mut self, s: &mut Scheduler<KvmEv>, v: usize, r: Req, cause: Cause) {
        let vc = &mut self.vcpus[v];
        if r == Req::Resched && vc.phase == Phase::Schedule {
            return; // the schedule() under way takes it
        }
        if vc.pending & r.bit() == 0 {
            vc.cause[r as usize] = cause;
        }
        vc.pending |= r.bit();
        if vc.irqs_off(s.now()) {
            vc.raised_in_window = true;
        }
        if matches!(cause, Cause::Src(_)) {
            match vc.phase {
                Phase::Guest => self.exit(s, v, 0),
                // Past the final check the mode is IN_GUEST_MODE: the kick's IPI lands
                // as the guest starts (kvm_vcpu_kick, kvm_vcpu_exit_request's window closed).
                Phase::Entry => vc.kicked = true,
                _ => {}
            }
        }
    }

    fn exit(&mut self, s: &mut Scheduler<KvmEv>, v: usize, extra: Ps) {
        let now = s.now();
        let vc = &mut self.vcpus[v];
        vc.exits += 1;
        vc.guest_time += now - vc.guest_since;
        for h in vc.guest_timers.iter_mut().filter_map(|t| t.take()) {
            s.cancel(h);
        }
        // The guest's NMI handler pauses with the guest: it IRETs only after
        // the rest of it has run in guest mode, and the window exit with it.
        if vc.nmi_masked_until > now && vc.nmi_masked_until != NEVER {
            vc.nmi_left = vc.nmi_masked_until - now;
            vc.nmi_masked_until = NEVER;
        }
        if let Some(h) = vc.window_timer.take() {
            s.cancel(h);
            vc.window_armed = false;
        }
        self.begin(s, v, Phase::Exit, Some(self.c.exit + extra));
    }

    /// An exit `vmx_exit_handlers_fastpath` handles (`EXIT_FASTPATH_REENTER_GUEST`).
    pub(super) fn fastpath_exit(&mut self, s: &mut Scheduler<KvmEv>, v: usize) {
        self.exit(s, v, 0);
        self.vcpus[v].fastpath = true;
    }

    /// The current host-side phase ended.
    fn step(&mut self, s: &mut Scheduler<KvmEv>, v: usize) {
        let now = s.now();
        match self.vcpus[v].phase {
            Phase::Guest => unreachable!("guest segments end by exits, not steps"),
            // `vcpu_enter_guest`'s loop after a fastpath exit: `sync_pir_to_irr`,
            // then `kvm_vcpu_exit_request`; with nothing pending it re-enters at
            // once, interrupts still off (no request pass, no injection). A
            // request pending makes it a plain exit (`EXIT_FASTPATH_EXIT_HANDLED`).
            Phase::Exit if self.vcpus[v].fastpath && self.vcpus[v].pending == 0 => {
                let vc = &mut self.vcpus[v];
                vc.fastpath = false;
                vc.fastpath_reentries += 1;
                self.begin(s, v, Phase::Entry, Some(self.c.entry));
            }
            Phase::Exit | Phase::Cancel => {
                let vc = &mut self.vcpus[v];
                vc.fastpath = false;
                if vc.phase == Phase::Cancel {
                    vc.lost += self.c.cancel;
                    vc.after_cancel = true;
                }
                // vcpu_run(), as `vcpu_enter_guest` returns: UNBLOCK cleared and a
                // pending timer tick injected (through the APIC: posted with APICv,
                // else the IRR and EVENT); then pending host work
                // (`__xfer_to_guest_mode_work_pending`) before the next attempt.
                vc.pending &= !Req::Unblock.bit();
                // A tick held with interrupts off (a cancelled attempt, a fastpath
                // exit that a request turned into a plain one) fires as they come on.
                if std::mem::take(&mut vc.tick_held) {
                    vc.timer_pending = true;
                }
                if std::mem::take(&mut vc.timer_pending) {
                    let posted = self.apicv;
                    self.interrupt(s, v, Src::Timer, posted);
                }
                let vc = &mut self.vcpus[v];
                if vc.pending & Req::Resched.bit() != 0 {
                    vc.pending &= !Req::Resched.bit();
                    vc.reschedules += 1;
                    let len = self.c.host_resched;
                    self.begin(s, v, Phase::Schedule, Some(len));
                } else {
                    self.start_service(s, v);
                }
            }
            Phase::Schedule => self.start_service(s, v),
            Phase::Service => {
                // The request just serviced raises what it raises now.
                if let Some(r) = self.vcpus[v].serving.take() {
                    self.serviced(s, v, r);
                }
                self.service_next(s, v);
            }
            Phase::IrqsOff => self.final_check(s, v),
            Phase::Entry => {
                let vc = &mut self.vcpus[v];
                vc.enters += 1;
                if vc.nmi_masked_until == NEVER {
                    vc.nmi_masked_until = now + std::mem::take(&mut vc.nmi_left);
                }
                let nmi_in = !vc.injecting.is_empty();
                if nmi_in {
                    vc.lvtpc_wait = false; // the handler that will unmask the LVTPC starts
                }
                for (t, from_pmi) in vc.injecting.drain(..) {
                    vc.nmi.delivered += 1;
                    self.audit.nmis_delivered += 1;
                    vc.nmi_masked_until = now + self.c.nmi_handler;
                    if from_pmi {
                        self.pmi_latency.record(now - t);
                    } else {
                        self.nmi_latency.record(now - t);
                    }
                }
                vc.nmi.injected = false;
                for t in vc.pmi_injecting.drain(..) {
                    self.pmi_latency.record(now - t);
                }
                let injected = std::mem::take(&mut vc.injecting_irr);
                // sync_pir_to_irr before entry; the guest takes what was posted.
                // (One of the two is empty: the IRR is used only without APICv.)
                let pir = std::mem::take(&mut vc.pir);
                vc.virqs += (injected.count_ones() + pir.count_ones()) as u64;
                self.audit.irr_delivered += injected.count_ones() as u64;
                if nmi_in && injected != 0 && !self.apicv {
                    self.audit.nmi_and_irq_entries += 1;
                }
                self.audit.max_irr_per_entry = self.audit.max_irr_per_entry.max(injected.count_ones());
                self.audit.posted_delivered += pir.count_ones() as u64;
                for t in vc.pmi_posted.drain(..) {
                    self.pmi_latency.record(now - t);
                }
                // Without APICv, a vector left in the IRR with none injected here
                // (the guest's NMI handler holds IF clear): `enable_irq_window`,
                // whose exit comes when that handler IRETs, as the NMI window's.
                let leftover = !self.apicv && injected == 0 && vc.irr != 0;
                if (vc.nmi.pending > 0 || leftover) && !vc.window_armed {
                    // An NMI still pending behind the guest's NMI handler: exit when it IRETs.
                    vc.window_armed = true;
                    let at = vc.nmi_masked_until.max(now);
                    vc.window_timer = Some(s.timer_after(at - now, KvmEv::Src(v as u32, Src::NmiWindow)));
                }
                vc.guest_since = now;
                self.begin(s, v, Phase::Guest, None);
                for (i, src) in GUEST_TIME.into_iter().enumerate() {
                    let d = self.draw(v, src);
                    if d != NEVER {
                        self.vcpus[v].guest_timers[i] = Some(s.timer_after(d, KvmEv::Src(v as u32, src)));
                    }
                }
                let due = std::mem::take(&mut self.vcpus[v].hv_timer_due);
                // Without APICv the guest's EOI write for the vector injected
                // here traps, and `apic_set_eoi` raises KVM_REQ_EVENT (lapic.c),
                // which injects what the IRR still holds; the model has no guest
                // handler for a fixed vector, so that exit comes at once. An NMI
                // injected with a vector still pending asks for an immediate
                // exit (`req_immediate_exit`, x86.c), which the same exit is.
                let eoi = !self.apicv && (injected != 0 || (nmi_in && self.vcpus[v].irr != 0));
                if due > 0 {
                    // The preemption timer, armed with a deadline already past, exits at once.
                    self.vcpus[v].kicked = false;
                    self.fastpath_exit(s, v);
                    for _ in 0..due {
                        self.interrupt(s, v, Src::Timer, false);
                    }
                } else if std::mem::take(&mut self.vcpus[v].tick_held) {
                    // The held hrtimer interrupt exits the guest as it starts; its
                    // callback then runs in the host (`apic_timer_expired`).
                    self.vcpus[v].kicked = false;
                    self.exit(s, v, 0);
                    self.vcpus[v].timer_pending = true;
                    self.request(s, v, Req::Unblock, Cause::Src(Src::Timer));
                } else if std::mem::take(&mut self.vcpus[v].kicked) || eoi {
                    self.exit(s, v, 0);
                }
                if eoi {
                    self.request(s, v, Req::Event, Cause::Src(Src::Eoi));
                }
            }
        }
    }
}

impl Model for KvmModel {
    type Event = KvmEv;

    fn handle(&mut self, s: &mut Scheduler<KvmEv>, ev: KvmEv) {
        match ev {
            KvmEv::Step(v) => self.step(s, v as usize),
            KvmEv::Src(v, src) => self.source(s, v as usize, src),
        }
    }
}

impl Protocol for KvmModel {
    type Config = Scenario;
    type Audit = KvmAudit;

    fn build(sc: &Scenario, seed: u64, tracer: Tracer) -> Self {
        KvmModel::new(sc, seed, tracer)
    }

    fn start(&mut self, s: &mut Scheduler<KvmEv>) {
        KvmModel::start(self, s)
    }

    fn reset(&mut self, now: Ps) {
        self.reset_stats(now)
    }

    fn report(&mut self, now: Ps, events: u64) -> Report {
        let warmup = self.warmup;
        KvmModel::report(self, now, warmup, events)
    }

    fn finish(&mut self, _now: Ps) -> (KvmAudit, Tracer) {
        self.audit.posted_pending = self.vcpus.iter().map(|v| v.pir.count_ones() as u64).sum();
        self.audit.irr_pending = self.vcpus.iter().map(|v| (v.irr.count_ones() + v.injecting_irr.count_ones()) as u64).sum();
        (self.audit.clone(), std::mem::replace(&mut self.tracer, Tracer::disabled()))
    }
}

#[cfg(test)]
mod tests;
