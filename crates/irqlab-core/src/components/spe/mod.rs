//! SPE profiling-buffer pinning for a guest (M2): a command profiled by
//! `perf record -e arm_spe//`, on the host or in a guest on the hypervisor
//! component's vCPU, and what KVM does with the buffer's stage-2 mappings.
//!
//! The command runs once: perf starts and allocates its AUX buffer, then the
//! command runs in `switches + 1` stretches separated by context switches. In
//! per-task mode perf's SPE driver disables the buffer at every switch-out
//! (`arm_spe_pmu_stop` → `arm_spe_pmu_disable_and_drain_local`, PMBLIMITR_EL1 = 0)
//! and enables it at every switch-in (`arm_spe_pmu_start` →
//! `arm_spe_perf_aux_output_begin`); in a guest each of those writes traps to
//! KVM, which applies the pinning policy there, with the vCPU stopped. In
//! per-CPU mode the buffer stays enabled. At the end the VM is torn down and
//! whatever is pinned is released.
//!
//! While the buffer is enabled the profiling unit writes `record_rate` bytes
//! per second through it. A write into a page that is not mapped at stage 2
//! faults: profiling stops, PMBIRQ reaches KVM after `pmbirq_latency`, KVM
//! maps the page (an exit and `map_fault`), profiling resumes; the records of
//! that blackout are lost. Host reclaim unmaps buffer pages that are not pinned.
//!
//! Depends one way on the hypervisor component (guest work on a vCPU, trapped
//! writes as hypervisor work on its pCPU).

pub mod params;
#[cfg(test)]
mod tests;
mod unit;

use crate::components::hypervisor::{self, hv, Exit, GuestWork};
use crate::engine::rng::{exp_sample, stream, Rng};
use crate::engine::stats::{Gauge, Report};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Component, Has};
use crate::scenario::Scenario;
use params::{KernelProfile, Perf, Policy, SpeMode, Where};
use rand::Rng as _;

crate::part_events! {
    pub enum SpeEv {
        /// The command's timeline moves to its next step.
        Step,
        /// The profiling unit's write pointer enters the next page.
        PageCross,
        /// PMBIRQ reaches KVM after a stage-2 fault on the buffer.
        Pmbirq,
        /// KVM mapped the faulting page: profiling resumes.
        Mapped,
        /// Host reclaim unmaps a buffer page (if it can).
        Reclaim,
        /// Policy 3's timer.
        UnpinTimer,
        /// PMBIRQ after the profiling unit reached PMBLIMITR: perf moves the window.
        WindowIrq,
        /// The enabling PMBLIMITR_EL1 write took effect (in a guest: once KVM has
        /// emulated it): the unit starts writing, and the command goes on.
        Enabled,
        /// The unit writes a record into a page that is not mapped at stage 2
        /// (the page under the write pointer, found unmapped when the unit
        /// resumed or taken by reclaim while it was written).
        RecordFault,
    }
}

/// `Mapped`'s argument after a stage-2 fault: KVM mapped the page under the
/// write pointer (after a window move it maps nothing).
const MAP_THE_PAGE: u32 = 1;

/// One step of the command's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Startup,
    Enable,
    Run,
    Disable,
    Switch,
    Off,
    /// perf has exited; the VM runs on for `after`.
    Linger,
    Teardown,
    Done,
}

#[derive(Default, Clone, Copy)]
struct Costs {
    pin: Ps,
    unpin: Ps,
    walk: Ps,
    alloc: Ps,
    startup: Ps,
    switch: Ps,
    pmbirq: Ps,
    map_fault: Ps,
}

#[derive(Default)]
pub struct Stats {
    pub started: Ps,
    /// When the command exec'd: perf's first enable (`enable_on_exec`), after
    /// perf's start and its buffers' allocation.
    pub exec_at: Option<Ps>,
    /// When perf exited (its last disable done), and when the VM was torn down.
    pub perf_exited: Option<Ps>,
    pub ended: Option<Ps>,
    pub pin_ops: u64,
    pub unpin_ops: u64,
    /// Time in pins and unpins alone, and in whole cycles (a pin with the walk
    /// before it, and its unpin; a walk that led to no pin is not part of one).
    pub op_time: Ps,
    pub cycle_time: Ps,
    /// KVM's work at the enables and disables of context switches (not the first or the last).
    pub switch_work: Ps,
    /// The longest pin, unpin or walk done in one go (no quiescent state).
    pub longest: Ps,
    pub blackouts: u64,
    /// Time the command ran with the unit stopped (its records lost).
    pub lost: Ps,
    /// Time KVM spent on stage-2 faults' PMBIRQs (the exit and `map_fault`: the
    /// unit resumes as KVM's work ends, before the entry), with the vCPU
    /// stopped: the brief's blackout is this and `lost`.
    pub fault_handling: Ps,
    /// Faults and reclaims per buffer page (a page faults at most once per unmapping).
    pub faults_per_page: Vec<u32>,
    pub reclaims_per_page: Vec<u32>,
    /// Writes into a page that was unmapped when written.
    pub unmapped_writes: u64,
    pub reclaimed: u64,
    pub timer_unpins: u64,
    /// The profiling unit reached PMBLIMITR and perf moved the window to the other half.
    pub window_moves: u64,
    pub pinned: Gauge,
    pub pinned_at_teardown: u64,
}

#[derive(Default)]
pub struct Spe {
    pub on: bool,
    /// `perf record` with SPE (false: `perf stat`, no buffer).
    profiling: bool,
    guest: bool,
    vcpu: u32,
    per_task: bool,
    policy: Option<Policy>,
    snapshot: bool,
    /// The page size, and one record's size, in bytes.
    page: u64,
    record: u64,
    /// AUX buffers perf maps: one per CPU it opens the event on.
    buffers: u64,
    /// Buffer pages (after a cap), those perf maps, and the bytes `-m` asked for.
    pub pages: u64,
    requested: u64,
    asked: u64,
    run: Ps,
    seg: Ps,
    off: Ps,
    after: Ps,
    switches: u32,
    remap_every: u32,
    unpin_timer: Ps,
    unpin_age: Ps,
    record_rate: f64,
    reclaim_rate: f64,
    ghz: f64,
    c: Costs,
    // The command's position: its step index and the step.
    k: u64,
    op: Option<Op>,
    pub enabled: bool,
    enables: u32,
    /// The buffer's current placement (changes every `remap_every` enables) and the one pinned.
    gen: u32,
    pinned_gen: u32,
    /// The half of the buffer that PMBPTR..PMBLIMITR spans (0 or 1), and the one pinned.
    pinned_half: usize,
    /// The first page of the pinned range (the write pointer when it was pinned).
    pinned_from: usize,
    pub pinned_pages: u64,
    last_disable: Ps,
    /// Stage-2 mapping per buffer page.
    pub mapped: Vec<bool>,
    wp: u64,
    /// The unit stopped (at PMBLIMITR or on a fault) until its PMBIRQ is handled;
    /// since when the command runs with it stopped (records lost), until the
    /// PMBIRQ stops the vCPU; and the enable it stopped in.
    halted: bool,
    blackout_since: Option<Ps>,
    /// Since when KVM handles the fault's PMBIRQ (its exit and `map_fault`), for
    /// `Stats::fault_handling`.
    handling_since: Option<Ps>,
    halted_in: u32,
    /// Enables so far, on the host too (`enables` counts KVM's).
    enable_seq: u32,
    writing: Option<crate::engine::sim::TimerHandle>,
    /// When the unit last started writing at `wp` (it advances `record_rate`
    /// bytes per second from there).
    write_start: Ps,
    /// A stage-2 fault whose PMBIRQ KVM has not yet handled, and its page: the
    /// unit stays stopped through a disable and an enable (PMBSR_EL1.S holds it
    /// until KVM clears the syndrome), and KVM maps that page, wherever the
    /// write pointer is by then.
    s2_fault: Option<usize>,
    rng: Option<Rng>,
    pub stats: Stats,
}

impl Component for Spe {
    type Ev = SpeEv;

    fn build<P: Has<Self>>(_m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let Some(x) = &sc.spe else { return Spe::default() };
        let f = if x.kernel == KernelProfile::Debug { x.debug_factor } else { 1.0 };
        let k = &x.costs;
        let scale = |t: crate::scenario::Time| (t.ps() as f64 * f).round() as Ps;
        let page = x.page();
        let requested = x.aux_bytes() / page;
        let pages = match (x.policy, x.cap_bytes()) {
            (Policy::Cap, Some(c)) => requested.min(c / page),
            _ => requested,
        };
        // `perf record -- cmd` opens the event on every online CPU, each with its
        // own AUX buffer (builtin-record.c: `default_per_cpu`; target.h,
        // `target__uses_dummy_map` false without --per-thread): the guest's vCPUs,
        // or the host's CPUs.
        let buffers = match x.place {
            Where::Guest => sc.vcpu_sched.as_ref().map_or(1, |v| v.vcpus) as u64,
            Where::Host => sc.platform.cpus as u64,
        };
        Spe {
            on: true,
            profiling: x.perf == Perf::Record,
            guest: x.place == Where::Guest,
            vcpu: x.vcpu,
            per_task: x.mode == SpeMode::PerTask,
            policy: Some(x.policy),
            snapshot: x.snapshot,
            page,
            record: x.record_size.0,
            buffers,
            pages,
            requested,
            asked: x.buffer.0,
            run: x.task.run.ps(),
            seg: x.task.run.ps() / (x.task.switches as u64 + 1),
            off: x.task.off.ps(),
            after: x.task.after.ps(),
            switches: x.task.switches,
            remap_every: x.remap_every,
            unpin_timer: x.unpin_timer.map(|t| t.ps()).unwrap_or(0),
            unpin_age: x.unpin_age.ps(),
            record_rate: x.record_rate.0,
            // Per-page aging is one process over all pages at pages / age (a page is picked at random).
            reclaim_rate: match x.page_age {
                Some(age) => pages as f64 / (age.ps() as f64 * 1e-12),
                None => x.reclaim_rate.0,
            },
            ghz: x.clock_ghz,
            c: Costs {
                pin: scale(k.pin_page),
                unpin: scale(k.unpin_page.unwrap_or(k.pin_page)),
                walk: scale(k.walk_page),
                alloc: scale(k.alloc_page),
                startup: k.perf_startup.ps(),
                switch: k.switch.ps(),
                pmbirq: k.pmbirq_latency.ps(),
                map_fault: k.map_fault.ps(),
            },
            // perf's buffer is allocated and touched in the guest: mapped at stage 2 from the start.
            mapped: vec![true; pages as usize],
            rng: Some(stream(seed, "spe")),
            stats: Stats { faults_per_page: vec![0; pages as usize], reclaims_per_page: vec![0; pages as usize], ..Stats::default() },
            ..Spe::default()
        }
    }

    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        let me = m.parts.get();
        if !me.on {
            return;
        }
        me.stats.started = s.now();
        if me.guest && me.reclaim_rate > 0.0 {
            let d = me.reclaim_gap();
            s.after(d, P::ev(SpeEv::Reclaim, 0));
        }
        if me.policy == Some(Policy::KeepPinnedTimer) {
            s.after(me.unpin_timer, P::ev(SpeEv::UnpinTimer, 0));
        }
        step(m, s);
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, e: SpeEv, arg: u32) {
        if m.parts.get().op == Some(Op::Done) && e != SpeEv::Step {
            return;
        }
        match e {
            SpeEv::Step => step(m, s),
            SpeEv::Enabled => {
                let now = s.now();
                let me = m.parts.get();
                if me.enabled && me.s2_fault.is_some() {
                    // Still stopped by its fault: the records of this enable are lost until KVM resumes it.
                    me.halted_in = me.enable_seq;
                    me.blackout_since = Some(now);
                } else if me.enabled {
                    me.schedule_write::<P>(s);
                }
                step(m, s)
            }
            SpeEv::PageCross => page_cross(m, s),
            SpeEv::Pmbirq => {
                // KVM's handler maps the page: an exit on the vCPU's pCPU and the fault's handling.
                // The vCPU is stopped from here: no guest operation goes unsampled.
                let now = s.now();
                let me = m.parts.get();
                me.close_blackout(now);
                me.handling_since = Some(now);
                let cost = me.c.map_fault;
                kvm_work(m, s, cost, Some(P::ev(SpeEv::Mapped, MAP_THE_PAGE)), Some(Exit::Pmbirq));
            }
            SpeEv::RecordFault => {
                let now = s.now();
                let me = m.parts.get();
                me.writing = None;
                // The record that faulted: the one in progress at `wp`, from its record boundary.
                me.wp = me.wp / me.record * me.record;
                me.fault::<P>(now, s);
            }
            SpeEv::WindowIrq => {
                // perf's handler ends the AUX transaction and begins the next on the
                // other half (`arm_spe_pmu_irq_handler`: PMBPTR and PMBLIMITR written,
                // PMBSR cleared); in a guest KVM applies its policy to the old window
                // and the new one there. Booked as one `pmbirq` exit carrying that
                // work: the handler's register traps are not exits of their own. On
                // the host nothing traps: the unit resumes once PMBIRQ is handled.
                let now = s.now();
                let me = m.parts.get();
                if !me.enabled || me.enable_seq != me.halted_in {
                    // perf disabled the buffer first: its stop path took the event
                    // (`arm_spe_pmu_stop` → `arm_spe_pmu_buf_get_fault_act`) and
                    // began no new window; a later enable began its own.
                    return;
                }
                if !me.guest {
                    return Self::handle(m, s, SpeEv::Mapped, 0);
                }
                me.close_blackout(now);
                let cost = me.on_disable(now) + me.on_enable(now);
                kvm_work(m, s, cost, Some(P::ev(SpeEv::Mapped, 0)), Some(Exit::Pmbirq));
            }
            SpeEv::Mapped => {
                let now = s.now();
                let me = m.parts.get();
                // After a fault KVM mapped the page; after a window move the
                // unit resumes on whatever the new window has (a policy that
                // pins mapped it; without pinning the head page may be gone).
                if arg == MAP_THE_PAGE {
                    if let Some(t0) = me.handling_since.take() {
                        me.stats.fault_handling += now - t0;
                    }
                    let page = me.s2_fault.take().expect("a fault is pending");
                    me.mapped[page] = true;
                    if !me.enabled {
                        me.halted = false; // disabled meanwhile: its next enable starts afresh
                    }
                }
                me.close_blackout(now);
                if me.enabled && me.halted && me.enable_seq == me.halted_in {
                    me.halted = false;
                    me.schedule_write::<P>(s);
                }
            }
            SpeEv::Reclaim => {
                let me = m.parts.get();
                if me.op != Some(Op::Done) {
                    let k = me.rng.as_mut().expect("built").gen_range(0..me.pages) as usize;
                    if !me.is_pinned(k) && me.mapped[k] {
                        me.mapped[k] = false;
                        me.stats.reclaimed += 1;
                        me.stats.reclaims_per_page[k] += 1;
                        // The page under the write pointer (mapped until now, so the unit
                        // was writing towards its end): its next record there faults.
                        if me.writing.is_some() && me.page_of(me.wp) == k {
                            let pos = me.position(s.now());
                            me.stop_writes(s);
                            me.wp = pos;
                            me.schedule_write::<P>(s);
                        }
                    }
                    let d = me.reclaim_gap();
                    s.after(d, P::ev(SpeEv::Reclaim, 0));
                }
            }
            SpeEv::UnpinTimer => {
                let now = s.now();
                let me = m.parts.get();
                if me.op == Some(Op::Done) {
                    return;
                }
                let every = me.unpin_timer;
                if me.pinned_pages > 0 && !me.enabled && now.saturating_sub(me.last_disable) >= me.unpin_age {
                    // A host worker unpins, in one long stretch without a quiescent
                    // state, on the host CPU under the vCPU (the studies have one):
                    // it preempts the guest there. (It cost no CPU until 2026-11-26.)
                    let t = me.pinned_pages * me.c.unpin;
                    me.stats.timer_unpins += 1;
                    me.unpin_all(now, t);
                    if me.guest {
                        kvm_work(m, s, t, None, None);
                    }
                }
                s.after(every, P::ev(SpeEv::UnpinTimer, 0));
            }
        }
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, now: Ps, _secs: f64) {
        let me = m.parts.get();
        if !me.on {
            return;
        }
        let st = &me.stats;
        let end = st.ended.unwrap_or(now);
        let elapsed = (st.perf_exited.unwrap_or(now) - st.started) as f64 / 1e12;
        // The command's own wall time: from its exec (perf's first enable) to
        // its exit (perf's last disable), not perf's start or its buffers'
        // allocation, which come before the exec and grow with the vCPUs.
        let lifetime = st.perf_exited.zip(st.exec_at).map(|(x, e)| (x - e) as f64 / 1e12);
        let page = me.page;
        let mb = |pages: f64| pages * page as f64 / (1 << 20) as f64;
        let ops = st.pin_ops + st.unpin_ops;
        r.metric("spe.finished", st.ended.is_some() as u8 as f64);
        if st.perf_exited.is_none() {
            r.warn(format!(
                "spe: the profiled command had not finished when the run ended at {:.3} s: spe.elapsed_s is a lower \
                 bound, and spe.effective_mhz and the teardown's figures are unknown (null); raise `duration`",
                now as f64 / 1e12
            ));
        }
        r.metric("spe.elapsed_s", elapsed);
        // The command's whole CPU time over its wall time: an unfinished one
        // has run only part of that CPU time, so the ratio would overstate it.
        let mhz = lifetime.map_or(f64::NAN, |l| me.run as f64 / 1e12 * me.ghz * 1e3 / l.max(1e-12));
        r.metric("spe.effective_mhz", mhz);
        r.metric("spe.switches", me.switches as f64);
        // What a context switch adds: KVM's work at its disable and enable, not
        // the first pin, the last unpin or window moves (elapsed less the
        // baseline gave 38 ms "per switch" with no switch at all, a review found).
        let per_switch = if me.switches > 0 { st.switch_work as f64 / 1e6 / me.switches as f64 } else { 0.0 };
        r.metric("spe.added_per_switch_us", per_switch);
        if me.asked != me.requested * page {
            let show = |v: f64| format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_string();
            r.warn(format!(
                "spe: perf rounds the AUX buffer up to a power of two pages: {} MB asked, {} MB mapped \
                 (perf's 'rounding mmap pages size')",
                show(me.asked as f64 / (1 << 20) as f64),
                show(mb(me.requested as f64))
            ));
        }
        r.metric("spe.buffer_mb", mb(me.pages as f64));
        r.metric("spe.requested_mb", mb(me.requested as f64));
        r.metric("spe.pin_ops", st.pin_ops as f64);
        r.metric("spe.unpin_ops", st.unpin_ops as f64);
        r.metric("spe.pin_op_mean_s", if ops > 0 { st.op_time as f64 / ops as f64 / 1e12 } else { 0.0 });
        // One pin with its walk and its unpin: what one enable-disable cycle costs KVM.
        // (Walks that led to no pin, policy 2's at every enable, are not in it.)
        r.metric("spe.pin_unpin_cycle_s", if st.pin_ops > 0 { st.cycle_time as f64 / st.pin_ops as f64 / 1e12 } else { 0.0 });
        r.metric("spe.longest_stretch_s", st.longest as f64 / 1e12);
        // RCU's stall warning fires after 21 s without a quiescent state (CONFIG_RCU_CPU_STALL_TIMEOUT).
        r.metric("spe.rcu_stall_fraction", st.longest as f64 / 21e12);
        r.metric("spe.blackouts", st.blackouts as f64);
        r.metric("spe.lost_sampling_s", st.lost as f64 / 1e12);
        r.metric("spe.blackout_s", (st.lost + st.fault_handling) as f64 / 1e12);
        r.metric("spe.records_lost_mb", st.lost as f64 / 1e12 * me.record_rate / (1 << 20) as f64);
        r.metric("spe.unmapped_writes", st.unmapped_writes as f64);
        let over = st.faults_per_page.iter().zip(&st.reclaims_per_page).filter(|(f, r)| f > r).count();
        r.metric("spe.pages_faulting_more_than_unmapped", over as f64);
        r.metric("spe.reclaimed_pages", st.reclaimed as f64);
        r.metric("spe.timer_unpins", st.timer_unpins as f64);
        r.metric("spe.window_moves", st.window_moves as f64);
        r.metric("spe.pinned_peak_mb", mb(st.pinned.max()));
        r.metric("spe.pinned_mean_mb", mb(st.pinned.mean(end)));
        r.metric("spe.pinned_after_teardown_mb", mb(if st.ended.is_some() { me.pinned_pages as f64 } else { f64::NAN }));
        r.metric("spe.pinned_at_teardown_mb", mb(if st.ended.is_some() { st.pinned_at_teardown as f64 } else { f64::NAN }));
        if me.snapshot && me.record_rate > 0.0 {
            // Snapshot windows are halves too (`arm_spe_pmu_next_snapshot_off`: "so
            // that the worst case is half a buffer of records"): what is sure to be kept.
            r.metric("spe.snapshot_history_s", (me.window() * page) as f64 / me.record_rate);
        }
    }
}

/// The command's `k`-th step: startup, enable, then `switches + 1` stretches
/// of its own run separated by context switches (per task: disable, switch,
/// the other task, switch, enable; per CPU the buffer stays enabled), then
/// disable and tear the VM down.
fn op_at(me: &Spe, k: u64) -> Op {
    use Op::*;
    match k {
        0 => return Startup,
        1 => return Enable,
        _ => {}
    }
    let per: u64 = if me.per_task { 6 } else { 4 };
    let j = k - 2;
    let body = me.switches as u64 * per + 1;
    if j < body {
        return match (me.per_task, j % per) {
            (_, 0) => Run,
            (true, 1) => Disable,
            (true, 2) | (true, 4) | (false, 1) | (false, 3) => Switch,
            (true, 3) | (false, 2) => Off,
            _ => Enable,
        };
    }
    match j - body {
        0 => Disable,
        1 => Linger,
        2 => Teardown,
        _ => Done,
    }
}

/// CPU time of the command's CPU (a vCPU's guest work, or the host's), then the next step.
fn cpu<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, cost: Ps) {
    let me = m.parts.get();
    if me.guest {
        let v = me.vcpu;
        hypervisor::guest_work(m, s, v, GuestWork { cost, then: Some(P::ev(SpeEv::Step, 0)) });
    } else {
        s.after(cost, P::ev(SpeEv::Step, 0));
    }
}

/// KVM's (or a host worker's) work on the pCPU under the profiled vCPU, which waits for it.
fn kvm_work<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, cost: Ps, then: Option<Ev>, why: Option<Exit>) {
    let v = m.parts.get_ref().vcpu;
    let p = hv(m).vcpus[v as usize].processor;
    hypervisor::hyp_work(m, s, p, cost, then, why);
}

/// A write to PMBLIMITR_EL1: in a guest it traps, and KVM works `cost` with the vCPU stopped.
fn trap<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, cost: Ps) {
    trap_then(m, s, cost, SpeEv::Step)
}

/// `trap`, then `then` (once KVM's work is done, or at once on the host).
/// Without pinning (policy 4) KVM has no reason to know of an enable, so the
/// write does not trap (6.12 has no guest SPE at all: the PMB* registers
/// `undef_access`, arch/arm64/kvm/sys_regs.c).
fn trap_then<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, cost: Ps, then: SpeEv) {
    let me = m.parts.get();
    if me.guest && me.policy != Some(Policy::NoPin) {
        kvm_work(m, s, cost, Some(P::ev(then, 0)), Some(Exit::Sysreg));
    } else {
        s.after(0, P::ev(then, 0));
    }
}

fn step<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
    let now = s.now();
    let me = m.parts.get();
    let op = op_at(me, me.k);
    me.k += 1;
    me.op = Some(op);
    match op {
        Op::Startup => {
            let t = me.startup_cost();
            cpu(m, s, t)
        }
        // perf stat: no buffer to enable or disable.
        Op::Enable | Op::Disable if !me.profiling => s.after(0, P::ev(SpeEv::Step, 0)),
        Op::Enable => {
            // The unit writes once the write has taken effect: in a guest, after KVM
            // has emulated it (walked and pinned), not while it does (a review: at
            // 256 MB records flowed through 2 s of pinning and filled the window).
            me.enabled = true;
            me.enable_seq += 1;
            if me.enable_seq == 1 {
                me.stats.exec_at = Some(now);
            }
            let t = if me.guest { me.on_enable(now) } else { 0 };
            if me.enable_seq > 1 {
                me.stats.switch_work += t;
            }
            trap_then(m, s, t, SpeEv::Enabled)
        }
        Op::Disable => {
            me.enabled = false;
            // The unit keeps what it wrote of its page (a disable had sent it back
            // to where it last started writing: a review).
            me.wp = me.position(now);
            me.stop_writes(s);
            // A stopped unit's event ends here and the next enable begins afresh,
            // unless a stage-2 fault still waits for KVM.
            me.close_blackout(now);
            me.halted = me.s2_fault.is_some();
            let t = if me.guest { me.on_disable(now) } else { 0 };
            if op_at(me, me.k) != Op::Linger {
                me.stats.switch_work += t;
            }
            trap(m, s, t)
        }
        Op::Run => {
            let t = me.seg;
            cpu(m, s, t)
        }
        Op::Switch => {
            let t = me.c.switch;
            cpu(m, s, t)
        }
        Op::Off => {
            let t = me.off;
            cpu(m, s, t)
        }
        Op::Linger => {
            me.stats.perf_exited = Some(now);
            let t = me.after;
            s.after(t, P::ev(SpeEv::Step, 0));
        }
        Op::Teardown => {
            // The VM goes away: KVM releases whatever it still pins.
            me.stats.pinned_at_teardown = me.pinned_pages;
            me.set_pinned(now, 0);
            me.stats.ended = Some(now);
            me.op = Some(Op::Done);
        }
        Op::Done => {}
    }
}

/// The write pointer enters the next page: a stage-2 fault if it is unmapped.
fn page_cross<P: Has<Spe>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
    let now = s.now();
    let me = m.parts.get();
    me.writing = None;
    let before = me.half_of(me.page_of(me.wp));
    me.wp += me.page - me.wp % me.page;
    let page = me.page_of(me.wp);
    if me.half_of(page) != before {
        // The unit stopped at PMBLIMITR (a buffer management event): no records
        // until perf has set up the new window. perf programs that limit whatever
        // KVM does with it, and on the host too (until 2026-11-26 only a guest
        // with a pinning policy stopped there, which favoured no-pin and the host).
        me.stats.window_moves += 1;
        me.halt(now);
        let d = me.c.pmbirq;
        s.after(d, P::ev(SpeEv::WindowIrq, 0));
    } else if me.guest && !me.mapped[page] {
        me.fault::<P>(now, s);
    } else {
        me.schedule_write::<P>(s);
    }
}
