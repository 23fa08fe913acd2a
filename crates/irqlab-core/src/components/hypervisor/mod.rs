//! The hypervisor's side of its pCPUs (M3): vCPUs scheduled on pCPUs
//! (`credit2.rs`: Xen's credit2 and null), guest exits and entries, blocking on
//! a trapped WFI and waking up, and the guest's own work on each vCPU.
//!
//! A pCPU is in one of four modes: running a guest, idling in a guest's WFI
//! (not trapped), running the hypervisor, or idle in the hypervisor's idle
//! loop. Hypervisor work is a FIFO of items per pCPU (an exit, a handler, a
//! context switch...); the guest runs only when that FIFO is empty, and an
//! item may carry a continuation event for the component that queued it.
//!
//! This component knows no interrupt controller. Components that depend on it
//! (the GIC, a guest workload) reach it through `parts::dep` and call the API
//! below: `hyp_work`, `wake`, `kick`, `post_virq`, `guest_work`; it tells them
//! of context switches through the events they register (`on_switch_in`,
//! `on_switch_out`).

mod credit2;
pub mod params;
mod state;
#[cfg(test)]
pub(crate) mod tests;

use crate::engine::stats::{Report, Table};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};
use crate::platform::parts::{dispatch, Component, Has};
use crate::scenario::Scenario;
use params::Vwfi;
pub use state::*;

impl Component for Hypervisor {
    type Ev = HypEv;

    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let Some(v) = &sc.vcpu_sched else { return Hypervisor::default() };
        let c = Costs {
            exit: sc.hypervisor.exit.ps(),
            entry: sc.hypervisor.entry.ps(),
            context_switch: v.costs.context_switch.ps(),
            block: v.costs.block.ps(),
            wake: v.costs.wake.ps(),
            idle_exit: v.costs.idle_exit.ps(),
            ipi_latency: sc.cpu.sgi_latency.ps(),
            ratelimit: v.ratelimit.ps(),
            migrate_resist: v.migrate_resist.ps(),
            credit_init: v.credit_init.ps(),
            min_timer: v.min_timer.ps(),
            halt_poll_max: if v.vwfi == Vwfi::Kvm { v.halt_poll.ps() } else { 0 },
        };
        let pcpus = (0..v.pcpus).map(|p| Pcpu::idle(m.cpus[p as usize].track)).collect();
        let vcpus = (0..v.vcpus)
            .map(|i| {
                let pinned = v.pinned(i);
                Vcpu::runnable(pinned.unwrap_or(i % v.pcpus), pinned, c.credit_init as i64)
            })
            .collect();
        Hypervisor {
            on: true,
            kind: Some(v.scheduler),
            vwfi: Some(v.vwfi),
            pcpus,
            vcpus,
            runq: (0..v.vcpus).collect(),
            c,
            masked: v.masked.as_ref().filter(|x| x.rate.0 > 0.0).map(|x| (x.cpu, 1e12 / x.rate.0, x.length.ps())),
            masked_rng: v.masked.as_ref().map(|_| crate::engine::rng::stream(seed, "hypervisor/masked")),
            ..Default::default()
        }
    }

    /// Every vCPU starts runnable and every pCPU schedules at time 0.
    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        let n = m.parts.get().pcpus.len() as u32;
        for p in 0..n {
            m.parts.get().pcpus[p as usize].resched = true;
            s.after(0, P::ev(HypEv::IpiResched, p));
        }
        next_masked(m, s);
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, e: HypEv, p: u32) {
        match e {
            HypEv::HypDone => hyp_done(m, s, p),
            HypEv::GuestDone => guest_done(m, s, p),
            HypEv::Slice => {
                let h = hv(m);
                h.pcpus[p as usize].slice = None;
                h.pcpus[p as usize].resched = true;
                hyp_work(m, s, p, 0, None, Some(Exit::Timer));
            }
            HypEv::IpiResched => {
                hv(m).pcpus[p as usize].resched = true;
                hyp_work(m, s, p, 0, None, Some(Exit::Ipi));
            }
            // The vIRQ is already pending on the vCPU: the exit and the entry deliver it.
            HypEv::IpiKick => hyp_work(m, s, p, 0, None, Some(Exit::Ipi)),
            HypEv::SendResched | HypEv::SendKick => {
                let lat = hv(m).c.ipi_latency;
                let ipi = if e == HypEv::SendResched { HypEv::IpiResched } else { HypEv::IpiKick };
                s.after(lat, ev::<P>(ipi, p));
            }
            HypEv::WfiWake => guest_out_of_wfi(m, s, p),
            // The window ran out with nothing to wake the vCPU.
            HypEv::PollEnd => poll_gives_way(m, s, p),
            // The hypervisor's FIFO on the pCPU: what comes meanwhile waits behind it.
            HypEv::Masked => {
                let len = hv(m).masked.map_or(0, |x| x.2);
                hyp_work(m, s, p, len, None, Some(Exit::Masked));
                next_masked(m, s);
            }
        }
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, now: Ps) {
        let h = m.parts.get();
        h.stats = Stats::default();
        for c in &mut h.pcpus {
            c.time = [0; 4];
            c.irqs = 0;
            c.virq_time = 0;
            c.since = now;
        }
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, now: Ps, secs: f64) {
        let h = m.parts.get();
        if !h.on {
            return;
        }
        let st = &h.stats;
        for (k, (_, name)) in EXITS.iter().enumerate() {
            r.metric(format!("hyp.exits.{name}_per_s"), st.exits[k] as f64 / secs);
        }
        r.metric("hyp.exits_per_s", st.exits.iter().sum::<u64>() as f64 / secs);
        r.metric("hyp.switches_per_s", st.switches as f64 / secs);
        r.metric("hyp.migrations_per_s", st.migrations as f64 / secs);
        r.metric("hyp.preempts_per_s", st.preempts as f64 / secs);
        r.metric("hyp.preempted_unoffered", st.preempted_unoffered as f64);
        r.metric("hyp.wakes_per_s", st.wakes as f64 / secs);
        r.metric("hyp.blocks_per_s", st.blocks as f64 / secs);
        if h.c.halt_poll_max > 0 {
            // KVM's own counters: halts that polled, and those woken while polling.
            r.metric("hyp.halt_attempted_poll_per_s", st.halt_polls as f64 / secs);
            r.metric("hyp.halt_successful_poll_per_s", st.halt_polls_ok as f64 / secs);
        }
        r.metric("hyp.ipis_per_s", st.ipis as f64 / secs);
        r.histogram("hyp.wake_latency", &st.wake_latency);
        r.metric("hyp.wfi_trapped_alone", st.wfi[1][0] as f64);
        r.metric("hyp.wfi_trapped_others", st.wfi[1][1] as f64);
        r.metric("hyp.wfi_native_alone", st.wfi[0][0] as f64);
        r.metric("hyp.wfi_native_others", st.wfi[0][1] as f64);
        let mut t = Table::new(&["pcpu", "hyp", "guest", "guest_wfi", "idle"]);
        let mut hyp_total = 0;
        for (i, c) in h.pcpus.iter_mut().enumerate() {
            account(c, now);
            hyp_total += c.time[Mode::Hyp as usize];
            let f = |x: Ps| x as f64 / (secs * 1e12);
            t.row(vec![
                (i as f64).into(),
                f(c.time[Mode::Hyp as usize]).into(),
                f(c.time[Mode::Guest as usize]).into(),
                f(c.time[Mode::GuestIdle as usize]).into(),
                f(c.time[Mode::Idle as usize]).into(),
            ]);
        }
        r.metric("hyp.pcpu_hyp_fraction", hyp_total as f64 / (secs * 1e12 * h.pcpus.len() as f64));
        r.table("hyp_pcpus", t);
        machine_view(h, r, secs);
    }
}

/// The machine's own metrics for the pCPUs this component runs, which the
/// core's CPUs do not (their accounting says idle, no interrupt): each pCPU's
/// time by class (idle: the idle loop and a guest's WFI that did not trap; hyp;
/// the guest's vIRQ handlers as `hardirq`, the rest of its running time as
/// `kernel`, its work being the guest kernel's I/O paths), its guest share and
/// physical interrupts, and the totals over every CPU of the machine. (Until 2026-11-26 a Xen scenario reported
/// `interrupts_per_s` 0 and `idle_share` 1, a review found.)
fn machine_view(h: &Hypervisor, r: &mut Report, secs: f64) {
    let span = secs * 1e12;
    let mut irqs = 0;
    for (i, c) in h.pcpus.iter().enumerate() {
        let share = |mode: Mode| c.time[mode as usize] as f64 / span;
        let hardirq = c.virq_time.min(c.time[Mode::Guest as usize]) as f64 / span;
        let values = [
            ("idle_share", share(Mode::Idle) + share(Mode::GuestIdle)),
            ("user_share", 0.0),
            ("kernel_share", share(Mode::Guest) - hardirq),
            ("hardirq_share", hardirq),
            ("softirq_share", 0.0),
            ("hyp_share", share(Mode::Hyp)),
            ("guest_share", share(Mode::Guest) + share(Mode::GuestIdle)),
            ("interrupts_per_s", c.irqs as f64 / secs),
        ];
        irqs += c.irqs;
        for (name, v) in values {
            r.metric(format!("cpu{i}.{name}"), v);
        }
        // The machine's `cpus` table says the same (`--per-cpu` prints it).
        if let Some(t) = r.tables.get_mut("cpus") {
            for (name, v) in values {
                if let (Some(k), Some(row)) = (t.columns.iter().position(|c| c == name), t.rows.get_mut(i)) {
                    row[k] = v.into();
                }
            }
        }
    }
    // The averages over every CPU of the machine, as the machine's report computes them.
    let ncpu = (0..).take_while(|i| r.metrics.contains_key(&format!("cpu{i}.idle_share"))).count().max(1);
    for name in crate::platform::cpu::CLASSES {
        let sum: f64 = (0..ncpu).map(|i| r.metrics[&format!("cpu{i}.{name}_share")]).sum();
        r.metric(format!("{name}_share"), sum / ncpu as f64);
    }
    r.metric("busy_share", 1.0 - r.metrics["idle_share"]);
    // Added to what the machine's own CPUs counted (nothing, when every CPU is a pCPU).
    let mut add = |name: &str, n: u64| {
        let v = r.metrics.get(name).copied().unwrap_or(0.0) + n as f64;
        r.metric(name, v);
        r.metric(format!("{name}_per_s"), v / secs);
    };
    add("interrupts", irqs + h.stats.virqs);
    add("vm_exits", h.stats.exits.iter().sum());
    let switches = r.metrics.get("context_switches_per_s").copied().unwrap_or(0.0);
    r.metric("context_switches_per_s", switches + h.stats.switches as f64 / secs);
    let guest = r.metrics.get("guest_interrupts").copied().unwrap_or(0.0) + h.stats.virqs as f64;
    r.metric("guest_interrupts", guest);
}

/// Hypervisor work on pCPU `p`: a physical interrupt or request taken there
/// (`why` counts the guest exit it causes, if a guest runs), or more work queued
/// by a continuation running there (`why = None`). `then` runs when it is done.
pub fn hyp_work<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32, cost: Ps, then: Option<Ev>, why: Option<Exit>) {
    if why.is_some_and(Exit::is_interrupt) {
        hv(m).pcpus[p as usize].irqs += 1;
    }
    enter_hyp(m, s, p, why);
    hv(m).pcpus[p as usize].q.push_back(Work { cost, kind: WorkKind::Plain, then });
    run_hyp(m, s, p);
}

/// Schedules the next masked stretch (`vcpu_sched.masked`), a Poisson gap away.
fn next_masked<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
    let h = hv(m);
    let (Some((p, gap, _)), Some(rng)) = (h.masked, h.masked_rng.as_mut()) else { return };
    let d = crate::engine::time::s_to_ps(crate::engine::rng::exp_sample(rng, gap / 1e12));
    s.after(d, ev::<P>(HypEv::Masked, p));
}

/// Leaves the guest or the idle loop for the hypervisor.
fn enter_hyp<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32, why: Option<Exit>) {
    let now = s.now();
    let (h, tr) = split(m);
    let c = h.c;
    let pc = &mut h.pcpus[p as usize];
    // What brought the pCPU in, for its slice's name and a mark on the track
    // (an LPI taken in the idle loop was not marked: 2,461 of 77,036, a review found).
    let reason = why.map(|w| EXITS.iter().position(|(e, _)| *e == w).expect("listed"));
    pc.hyp_why = reason.map_or("", |k| EXITS[k].1);
    let first = match pc.mode {
        Mode::Hyp => return,
        Mode::Idle => {
            if let (Some(k), true) = (reason, tr.on()) {
                tr.instant(now, pc.track, "hypervisor", EXITS[k].1, None);
            }
            c.idle_exit
        }
        Mode::Guest | Mode::GuestIdle => {
            // A core in the guest's WFI leaves it first, as from the idle loop;
            // one already leaving it for a vIRQ pays what is left of that.
            let waking = match (pc.mode, pc.guest_timer) {
                (Mode::GuestIdle, None) => c.idle_exit,
                (Mode::GuestIdle, Some(t)) => {
                    s.cancel(t);
                    pc.guest_timer = None;
                    pc.guest_end.saturating_sub(now)
                }
                _ => 0,
            };
            if pc.mode == Mode::Guest {
                // Pause the guest's item; it resumes after the next entry.
                if let Some(t) = pc.guest_timer.take() {
                    s.cancel(t);
                }
                let left = pc.guest_end.saturating_sub(now);
                let v = pc.cur.expect("a guest runs a vCPU") as usize;
                h.vcpus[v].paused_left = left;
            }
            if let Some(k) = reason {
                h.stats.exits[k] += 1;
                if tr.on() {
                    tr.instant(now, h.pcpus[p as usize].track, "hypervisor", EXITS[k].1, None);
                }
            }
            waking + c.exit
        }
    };
    let pc = &mut h.pcpus[p as usize];
    set_mode(pc, Mode::Hyp, now, tr);
    pc.q.push_front(Work { cost: first, kind: WorkKind::Plain, then: None });
}

fn run_hyp<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let pc = &mut hv(m).pcpus[p as usize];
    if pc.busy.is_some() {
        return;
    }
    if let Some(w) = pc.q.pop_front() {
        pc.busy = Some(w);
        s.after(w.cost, ev::<P>(HypEv::HypDone, p));
        return;
    }
    if pc.resched {
        // `kvm_vcpu_can_poll`: a task that needs the CPU ends the poll, and the vCPU sleeps.
        if let Some((_, t)) = pc.polling.take() {
            s.cancel(t);
        }
        credit2::schedule(m, s, p);
        return run_hyp(m, s, p);
    }
    resume(m, s, p);
}

fn hyp_done<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let w = hv(m).pcpus[p as usize].busy.take().expect("a HypDone per item");
    if let Some(e) = w.then {
        dispatch(m, s, e);
    }
    match w.kind {
        WorkKind::Plain => {}
        WorkKind::Block => block(m, s, p),
        WorkKind::Entry => {
            let now = s.now();
            let (h, tr) = split(m);
            let pc = &mut h.pcpus[p as usize];
            if pc.q.is_empty() && !pc.resched {
                let v = pc.cur.expect("an entry is to a vCPU");
                set_mode(pc, Mode::Guest, now, tr);
                h.stats.entries += 1;
                if let Some(t) = h.vcpus[v as usize].woke_at.take() {
                    h.stats.wake_latency.record(now - t);
                }
                return guest_next(m, s, p);
            }
        }
    }
    run_hyp(m, s, p);
}

/// Nothing left to do in the hypervisor: return to the vCPU, or idle.
fn resume<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let h = hv(m);
    let entry = h.c.entry;
    let pc = &mut h.pcpus[p as usize];
    if let Some((v, t)) = pc.polling {
        if h.vcpus[v as usize].state != VcpuState::Running {
            return; // still halted: the thread polls on
        }
        // Woken while polling: no sleep, no switch.
        s.cancel(t);
        pc.polling = None;
    }
    // KVM: a halt put the vPE, and `kvm_vcpu_wfi` loads it again (`kvm_vgic_load`)
    // whether the vCPU was switched or not; the load returns for a resident vPE. Its
    // cost is queued, and the entry follows it.
    if let Some(v) = pc.cur.filter(|_| h.c.halt_poll_max > 0) {
        let inn = h.on_switch_in;
        notify_switch(m, s, inn, v);
        if hv(m).pcpus[p as usize].busy.is_some() {
            return;
        }
    }
    let (h, tr) = split(m);
    let pc = &mut h.pcpus[p as usize];
    match pc.cur {
        Some(_) => {
            pc.busy = Some(Work { cost: entry, kind: WorkKind::Entry, then: None });
            s.after(entry, ev::<P>(HypEv::HypDone, p));
        }
        None => set_mode(pc, Mode::Idle, now, tr),
    }
}

/// The guest's next item on pCPU `p`: a paused one, a pending vIRQ's handler, its own work, or WFI.
fn guest_next<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let (h, tr) = split(m);
    let v = h.pcpus[p as usize].cur.expect("the guest runs a vCPU") as usize;
    let vc = &mut h.vcpus[v];
    // A vIRQ pending at entry is taken before the guest's paused work goes on.
    if let Some((w, false)) = vc.cur {
        if !vc.virqs.is_empty() {
            vc.cur = None;
            let left = std::mem::take(&mut vc.paused_left);
            vc.guest_q.push_front(GuestWork { cost: left, then: w.then });
        }
    }
    let len = match vc.cur {
        Some((_, irq)) => {
            // A handler an exit paused goes on: its slice opens again.
            if irq && tr.on() {
                tr.begin(now, h.pcpus[p as usize].track, "hardirq", "vIRQ handler", None);
                h.pcpus[p as usize].virq_slice = true;
            }
            std::mem::take(&mut vc.paused_left)
        }
        None => {
            let next = match vc.virqs.pop_front() {
                Some(w) => Some((w, true)),
                None => vc.guest_q.pop_front().map(|w| (w, false)),
            };
            match next {
                Some((w, irq)) => {
                    vc.cur = Some((w, irq));
                    // The guest's handler: a hardirq slice inside the vCPU's (it
                    // was an instant, so the trace showed none of the guest's
                    // hardirq time; an audit).
                    if irq && tr.on() {
                        tr.begin(now, h.pcpus[p as usize].track, "hardirq", "vIRQ handler", None);
                        h.pcpus[p as usize].virq_slice = true;
                    }
                    w.cost
                }
                None => return guest_wfi(m, s, p),
            }
        }
    };
    let pc = &mut h.pcpus[p as usize];
    pc.guest_end = now + len;
    pc.guest_timer = Some(s.timer_after(len, ev::<P>(HypEv::GuestDone, p)));
}

fn guest_done<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let (h, tr) = split(m);
    h.pcpus[p as usize].guest_timer = None;
    if std::mem::take(&mut h.pcpus[p as usize].virq_slice) {
        tr.end(s.now(), h.pcpus[p as usize].track);
    }
    let v = h.pcpus[p as usize].cur.expect("the guest runs a vCPU") as usize;
    let (w, irq) = h.vcpus[v].cur.take().expect("a GuestDone per item");
    h.virqs_taken += irq as u64;
    h.stats.virqs += irq as u64;
    if irq {
        h.pcpus[p as usize].virq_time += w.cost;
    }
    if let Some(e) = w.then {
        dispatch(m, s, e);
    }
    if hv(m).pcpus[p as usize].mode == Mode::Guest {
        guest_next(m, s, p);
    }
}

/// The guest has nothing to run and executes WFI: trap and block, or idle in place.
fn guest_wfi<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let (h, tr) = split(m);
    let trap = match h.vwfi.expect("configured") {
        Vwfi::Trap => true,
        Vwfi::Native => false,
        Vwfi::Adaptive => credit2::runnable_here(h, p),
        Vwfi::Kvm => credit2::others_runnable(h, p) || !h.direct_vlpi,
    };
    // Counted against what the scheduler would do here now, not the policy's predicate.
    let others = credit2::would_take_one(h, p);
    h.stats.wfi[trap as usize][others as usize] += 1;
    if !trap {
        set_mode(&mut h.pcpus[p as usize], Mode::GuestIdle, now, tr);
        return;
    }
    let block_cost = h.c.block;
    enter_hyp(m, s, p, Some(Exit::Wfi));
    hv(m).pcpus[p as usize].q.push_back(Work { cost: block_cost, kind: WorkKind::Block, then: None });
    run_hyp(m, s, p);
}

/// `vcpu_block_unless_event_pending`: block, unless a vIRQ arrived meanwhile.
fn block<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let h = hv(m);
    let v = h.pcpus[p as usize].cur.expect("a trapped WFI is a vCPU's") as usize;
    if h.vcpus[v].virqs.is_empty() && h.vcpus[v].guest_q.is_empty() {
        h.vcpus[v].state = VcpuState::Blocked;
        h.stats.blocks += 1;
        if h.c.halt_poll_max > 0 {
            return halt(m, s, p, v as u32);
        }
        h.pcpus[p as usize].resched = true;
    }
}

/// KVM's trapped WFI (`kvm_vcpu_wfi`): `kvm_vgic_put` with the doorbell asked
/// for (the vPE leaves the redistributor, `IN_WFI`), then `kvm_vcpu_halt`: the
/// vCPU's thread polls for a wake-up for its window before it sleeps. The
/// polling pCPU stays in the hypervisor (host kernel time).
fn halt<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32, v: u32) {
    let now = s.now();
    let h = hv(m);
    let vc = &mut h.vcpus[v as usize];
    vc.halted_at = Some(now);
    let window = vc.halt_poll.min(h.c.halt_poll_max);
    vc.halt_poll = window;
    let out = h.on_switch_out;
    // Polls only while no other task could run here (`single_task_running`).
    if window == 0 || credit2::others_runnable(h, p) {
        h.pcpus[p as usize].resched = true;
    } else {
        h.stats.halt_polls += 1;
        let t = s.timer_after(window, ev::<P>(HypEv::PollEnd, p));
        h.pcpus[p as usize].polling = Some((v, t));
    }
    notify_switch(m, s, out, v);
}

/// The end of vCPU `v`'s halt (it woke): `kvm_vcpu_halt` grows or shrinks the
/// vCPU's window from how long it was halted (`grow_halt_poll_ns`: ×2, from
/// 10 µs; `shrink_halt_poll_ns`: ÷2, 0 under 10 µs; `virt/kvm/kvm_main.c`).
fn halt_ended(h: &mut Hypervisor, v: u32, now: Ps, polled: bool) {
    const GROW_START: Ps = 10_000_000;
    let max = h.c.halt_poll_max;
    let vc = &mut h.vcpus[v as usize];
    let Some(start) = vc.halted_at.take() else { return };
    h.stats.halt_polls_ok += polled as u64;
    let (halted, w) = (now - start, vc.halt_poll);
    if halted > w {
        if w > 0 && halted > max {
            vc.halt_poll = if w / 2 < GROW_START { 0 } else { w / 2 };
        } else if w < max && halted < max {
            vc.halt_poll = (w * 2).max(GROW_START);
        }
    }
}

/// `vcpu_unblock`, run by the hypervisor on pCPU `from`: a blocked vCPU
/// becomes runnable and the scheduler picks a pCPU for it (`runq_tickle`).
pub fn wake<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, from: u32) {
    let now = s.now();
    let h = hv(m);
    if h.vcpus[v as usize].state != VcpuState::Blocked {
        return;
    }
    h.vcpus[v as usize].woke_at = Some(now);
    h.stats.wakes += 1;
    let cost = h.c.wake;
    h.pcpus[from as usize].q.push_back(Work { cost, kind: WorkKind::Plain, then: None });
    let home = h.vcpus[v as usize].processor;
    let polled = h.pcpus[home as usize].polling.is_some_and(|(u, _)| u == v);
    halt_ended(h, v, now, polled);
    // Still current on its pCPU (blocked, not yet switched out): the schedule
    // due there keeps it (credit2's `unit_wake_running`), no tickle. A thread
    // halt-polling there sees it at once (`kvm_vcpu_check_block`), with no IPI.
    if h.pcpus[home as usize].cur == Some(v) {
        h.vcpus[v as usize].state = VcpuState::Running;
        if polled && home != from && h.pcpus[home as usize].busy.is_none() {
            run_hyp(m, s, home);
        }
        return;
    }
    h.vcpus[v as usize].state = VcpuState::Runnable;
    credit2::runq_insert(h, v);
    credit2::tickle(m, s, v, from);
    // `kvm_vcpu_can_poll` polls only while `single_task_running()`: a vCPU now
    // runnable where another's thread polls ends that poll, and it sleeps.
    let h = hv(m);
    let vc = &h.vcpus[v as usize];
    let q = vc.tickled_cpu.unwrap_or(vc.processor);
    if let Some((_, t)) = h.pcpus[q as usize].polling.filter(|_| credit2::others_runnable(h, q)) {
        s.cancel(t);
        poll_gives_way(m, s, q);
    }
}

/// A halt-polling thread on pCPU `p` stops (its window ran out, or another task
/// needs the CPU): the vCPU sleeps, and `p` schedules.
fn poll_gives_way<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let pc = &mut hv(m).pcpus[p as usize];
    pc.polling = None;
    pc.resched = true;
    if pc.busy.is_none() {
        run_hyp(m, s, p);
    }
}

/// `vcpu_kick` from pCPU `from`: wake a blocked vCPU; make a vCPU running on
/// another pCPU exit (an event-check IPI) so that its entry delivers what is pending.
pub fn kick<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, from: u32) {
    let h = hv(m);
    let vc = &h.vcpus[v as usize];
    match vc.state {
        VcpuState::Blocked => wake(m, s, v, from),
        VcpuState::Running if vc.processor != from => {
            let to = vc.processor;
            send_ipi(m, from, HypEv::SendKick, to);
        }
        _ => {}
    }
}

/// A virtual interrupt for vCPU `v`, with its guest handler. `direct`: the GIC
/// delivers it to a resident vPE itself (GICv4), so a running guest takes it
/// at once and a guest idle in WFI wakes, with no exit. Otherwise it waits
/// in `virqs` until the vCPU next enters the guest.
pub fn post_virq<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, w: GuestWork, direct: bool) {
    let now = s.now();
    let h = hv(m);
    let vc = &mut h.vcpus[v as usize];
    vc.virqs.push_back(w);
    if !direct || vc.state != VcpuState::Running {
        return;
    }
    let p = vc.processor;
    let pc = &mut h.pcpus[p as usize];
    match pc.mode {
        Mode::GuestIdle => leave_guest_wfi(m, s, p),
        // Preempt the guest's own work (a handler in progress runs with interrupts masked).
        Mode::Guest if matches!(vc.cur, Some((_, false))) => {
            if let Some(t) = pc.guest_timer.take() {
                s.cancel(t);
            }
            let left = pc.guest_end.saturating_sub(now);
            let (w, _) = vc.cur.take().expect("matched");
            vc.guest_q.push_front(GuestWork { cost: left, then: w.then });
            guest_next(m, s, p);
        }
        _ => {}
    }
}

/// Work the guest OS itself has on vCPU `v` (a submission, a reaped
/// completion): queued behind what it is doing. A vCPU idle in WFI in place wakes for it.
pub fn guest_work<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, w: GuestWork) {
    let h = hv(m);
    let vc = &mut h.vcpus[v as usize];
    vc.guest_q.push_back(w);
    if vc.state == VcpuState::Running {
        let p = vc.processor;
        if h.pcpus[p as usize].mode == Mode::GuestIdle {
            leave_guest_wfi(m, s, p);
        }
    }
}

/// A guest idling in WFI in place got something to run: the core leaves WFI
/// (`idle_exit`, the same wake-up as from Xen's idle loop) and then runs it.
/// Until then the pCPU stays idle in the guest, and more work just queues.
fn leave_guest_wfi<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let h = hv(m);
    let wake = h.c.idle_exit;
    let pc = &mut h.pcpus[p as usize];
    if pc.guest_timer.is_some() {
        return;
    }
    if wake == 0 {
        return guest_out_of_wfi(m, s, p);
    }
    pc.guest_end = now + wake;
    pc.guest_timer = Some(s.timer_after(wake, ev::<P>(HypEv::WfiWake, p)));
}

/// The core is out of the guest's WFI: the guest runs what woke it.
fn guest_out_of_wfi<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let (h, tr) = split(m);
    let pc = &mut h.pcpus[p as usize];
    pc.guest_timer = None;
    set_mode(pc, Mode::Guest, now, tr);
    guest_next(m, s, p);
}
