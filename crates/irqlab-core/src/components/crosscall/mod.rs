//! Cross-CPU requests: one CPU asks others to run a handler — an all-CPU
//! backtrace (`arch_trigger_cpumask_backtrace`, sysrq-l, the hard-lockup
//! detector) or a crash-dump stop (`smp_send_stop`, `crash_smp_send_stop`).
//!
//! Each (request, mechanism, target) is an interrupt source of its own, so
//! delivery follows the same masking rules as every other interrupt: a normal
//! IPI waits for any mask, a pseudo-NMI SGI gets through PMR masking, SDEI and
//! FEAT_NMI get through DAIF.I. Signals are edge-triggered: a signal that finds
//! the target's pending bit set merges into it (several SDEI signals before the
//! handler runs give one handler run). A target that has not answered after
//! `timeout` is signalled with the next mechanism.

pub mod params;

use crate::engine::stats::{Cell, Latency, Report, Table};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::cpu::Prio;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Component, Has};
use crate::scenario::{Mechanism, Scenario};

crate::part_events! {
    pub enum CallEv {
        /// The requester sends its next signal (the argument is the call's index).
        Signal,
        /// One `SDEI_EVENT_SIGNAL` SMC returns: the event is pending for its
        /// target PE (the argument is the target's source).
        SdeiSignalled,
    }
}

/// Every `[[crosscall]]` of the scenario.
#[derive(Default)]
pub struct CrossCalls {
    pub calls: Vec<CallState>,
    /// Per owned source (`Source::owner_arg`): its call, and its `stage * targets + target` index there.
    pub sources: Vec<(u32, u32)>,
    /// The print lock (`printk_cpu_sync`, one for the machine).
    pub print_lock: PrintLock,
    /// The call whose requester spins now, per kind (a backtrace, `serial`, and
    /// a stop): the kernel's `backtrace_flag` and `stop_in_progress`, which make
    /// a second request of the kind return at once, sending nothing.
    pub in_progress: [Option<u32>; 2],
}

/// `printk_cpu_sync`: `nmi_cpu_backtrace` prints under it, one CPU at a time.
#[derive(Default)]
pub struct PrintLock {
    /// When the last print that asked so far is over.
    free: Ps,
}

impl PrintLock {
    /// A print that asks at `now` and lasts `print` waits for the prints that
    /// asked before it (first come, first served; the kernel's is a cmpxchg
    /// race) and holds the lock after them. Returns its wait.
    fn take(&mut self, now: Ps, print: Ps) -> Ps {
        let wait = self.free.saturating_sub(now);
        self.free = now + wait + print;
        wait
    }
}

pub struct CallState {
    pub name: String,
    pub at: Ps,
    pub targets: Vec<u32>,
    pub mechanisms: Vec<Mechanism>,
    /// The source for (stage, target j) is `srcs[stage * targets.len() + j]`.
    pub srcs: Vec<u32>,
    /// When each stage's first signal goes, from `at` (`k × timeout`, or the
    /// sum of the waits before it), and when the requester gives up (with `waits`).
    pub starts: Vec<Ps>,
    pub deadline: Option<Ps>,
    pub signals: u32,
    pub interval: Ps,
    /// The next signal to send: its stage (index into `mechanisms`) and repeat.
    pub stage: u32,
    pub rep: u32,
    /// Per target: latency from `at` to the first handler start, and the stage that got there.
    pub reached: Vec<Option<(Ps, u32)>>,
    /// Targets whose first handler started after the deadline.
    pub late: Vec<bool>,
    /// Per target reached: whether its handler interrupted code that had IRQs
    /// masked, so that a backtrace shows that code. A handler that got in only
    /// once the CPU unmasked (a normal IPI, or an NMI held back by DAIF.I)
    /// shows the code after the unmask, not the spin (`nmi_cpu_backtrace`
    /// prints `get_irq_regs()`, the registers the interrupt took).
    pub in_masked: Vec<bool>,
    pub handler_runs: u64,
    pub signals_sent: u64,
    /// `cpu.sdei.signal`: one SMC on the requester per target PE, one after another.
    pub smc: Ps,
    /// The requester's time in those SMCs.
    pub smc_busy: Ps,
    /// `serial`: the targets' first handler runs print one at a time.
    pub serial: bool,
    /// `idle_handler`: the first handler run on a target found idle.
    pub idle_handler: Option<Ps>,
    /// Per target reached: from `at` to its answer, when the requester sees it
    /// (its print's end with `serial`, else its handler's start).
    pub answered: Vec<Option<Ps>>,
    /// The requester's spin (`requester_spins`): its source on `from`, how
    /// often it looks, and when the spin began and ended.
    pub spin_src: Option<u32>,
    pub poll: Ps,
    pub spin: Option<(Ps, Option<Ps>)>,
    /// When the requester's CPU was asked (the scenario's `at`). With a spin,
    /// `at` becomes the moment it sends, once its CPU has taken the request:
    /// latencies, escalation and the waits count from there, as the kernel's
    /// loop does from `raise()`.
    pub asked: Ps,
    /// The requester found a call of its kind in progress and sent nothing.
    pub skipped: bool,
    /// `requester_dumps`: the requester's own print (`handler`), before it
    /// signals; `dumping` while it prints, and what the dump took (its wait
    /// for the print lock and the print).
    pub dump: Option<Ps>,
    pub dumping: bool,
    pub dump_took: Option<Ps>,
}

impl CallState {
    /// Whether the run ended while the call still had something to do: the
    /// requester still printing its own stack, a signal (a repeat or a later
    /// mechanism) not yet sent, or its deadline not yet come. A target not
    /// reached then says nothing about the mechanisms; one not reached after
    /// all of that is the result.
    fn cut_off(&self, now: Ps) -> bool {
        let planned = self.signals as u64 * self.mechanisms.len() as u64;
        !self.skipped && (self.dumping || self.signals_sent < planned || self.deadline.is_some_and(|d| self.at.saturating_add(d) > now))
    }
}

/// `owner_arg`'s target index for a call's spinning requester.
const REQUESTER: u32 = u32::MAX;

impl CallState {
    fn unreached(&self) -> usize {
        self.reached.iter().filter(|r| r.is_none()).count()
    }

    /// The spinning requester looks at the answers at `now`: 0 when it stops
    /// (every target has answered, or its last wait is over), else how long
    /// it delays before it looks again (one poll, or what is left of the wait).
    fn spin_more(&mut self, now: Ps) -> Ps {
        if self.skipped {
            return 0;
        }
        let since = now - self.at;
        let all = self.answered.iter().all(|a| a.is_some_and(|a| a <= since));
        let left = self.deadline.unwrap_or(params::REQUESTER_GIVE_UP).saturating_sub(since);
        if all || left == 0 {
            if let Some((_, end)) = &mut self.spin {
                *end = Some(now);
            }
            return 0;
        }
        self.poll.min(left)
    }
}

impl Component for CrossCalls {
    type Ev = CallEv;

    /// One source per (call, mechanism, target), in a group per (call, mechanism).
    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, _seed: u64) -> Self {
        let mut me = CrossCalls::default();
        let (irq_entry, irq_exit) = (m.irq_entry, m.irq_exit);
        for (k, x) in sc.crosscalls.iter().enumerate() {
            let targets: Vec<u32> = match &x.targets {
                Some(t) => t.clone(),
                None => (0..sc.platform.cpus).filter(|&c| c != x.from).collect(),
            };
            let n = targets.len() as u32;
            let mut ids = Vec::new();
            for (stage, &mech) in x.mechanisms.iter().enumerate() {
                let group_name = format!("crosscall.{}.{}", x.name, mech.name());
                let group = m.add_group(&group_name, &group_name);
                let (prio, entry, exit, latency) = match mech {
                    Mechanism::Ipi => (Prio::Normal, irq_entry, irq_exit, sc.cpu.sgi_latency.ps()),
                    Mechanism::PseudoNmi => (Prio::Nmi, irq_entry, irq_exit, sc.cpu.sgi_latency.ps()),
                    Mechanism::Nmi => (Prio::Super, irq_entry, irq_exit, sc.cpu.sgi_latency.ps()),
                    // The SMCs' time is paid when the requester signals (`signal`), not as a latency.
                    Mechanism::Sdei => (Prio::Super, sc.cpu.sdei.dispatch.ps(), sc.cpu.sdei.complete.ps(), 0),
                };
                for (j, &cpu) in targets.iter().enumerate() {
                    let arg = me.sources.len() as u32;
                    me.sources.push((k as u32, stage as u32 * n + j as u32));
                    let name = format!("{group_name}.cpu{cpu}");
                    let i = m.add_source(name, group, cpu, x.handler.ps(), prio, entry, exit, latency, P::ID, arg);
                    m.srcs[i as usize].sdei = mech == Mechanism::Sdei;
                    ids.push(i);
                }
            }
            let (starts, deadline) = match &x.waits {
                Some(w) => {
                    let ends: Vec<Ps> = w
                        .iter()
                        .scan(0 as Ps, |t, d| {
                            *t += d.ps();
                            Some(*t)
                        })
                        .collect();
                    let mut starts = vec![0];
                    starts.extend_from_slice(&ends[..ends.len() - 1]);
                    (starts, ends.last().copied())
                }
                None => {
                    let t = x.timeout.map(|t| t.ps()).unwrap_or(0);
                    ((0..x.mechanisms.len() as Ps).map(|k| k.saturating_mul(t)).collect(), None)
                }
            };
            // The requester's spin: a handler on its own CPU (not written by a
            // device, so not in irq_latency) that loops while it waits.
            let spin_src = x.requester_spins.then(|| {
                let group_name = format!("crosscall.{}.requester", x.name);
                let group = m.add_group(&group_name, &group_name);
                m.src_local[group as usize] = true;
                let arg = me.sources.len() as u32;
                me.sources.push((k as u32, REQUESTER));
                let i = m.add_source(group_name, group, x.from, 0, Prio::Normal, irq_entry, irq_exit, 0, P::ID, arg);
                let src = &mut m.srcs[i as usize];
                // nmi_trigger_cpumask_backtrace's or smp_send_stop's wait loop.
                src.handler_name = Some(match x.requester_dumps {
                    true => "cross-call requester (dumps its own stack, then waits for the answers)".into(),
                    false => "cross-call requester (waits for the answers)".into(),
                });
                src.continues = true;
                i
            });
            me.calls.push(CallState {
                name: x.name.clone(),
                at: x.at.ps(),
                reached: vec![None; targets.len()],
                late: vec![false; targets.len()],
                in_masked: vec![false; targets.len()],
                answered: vec![None; targets.len()],
                targets,
                mechanisms: x.mechanisms.clone(),
                srcs: ids,
                starts,
                deadline,
                signals: x.signals,
                interval: x.signal_interval.ps(),
                stage: 0,
                rep: 0,
                handler_runs: 0,
                signals_sent: 0,
                smc: sc.cpu.sdei.signal.ps(),
                smc_busy: 0,
                serial: x.serial,
                idle_handler: x.idle_handler.map(|t| t.ps()),
                spin_src,
                poll: x.requester_poll.ps(),
                spin: None,
                asked: x.at.ps(),
                skipped: false,
                dump: x.requester_dumps.then(|| x.handler.ps()),
                dumping: false,
                dump_took: None,
            });
        }
        me
    }

    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        for (k, call) in m.parts.get_ref().calls.iter().enumerate() {
            s.at(call.at, P::ev(CallEv::Signal, k as u32));
        }
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, ev: CallEv, k: u32) {
        match ev {
            CallEv::Signal => signal(m, s, k),
            CallEv::SdeiSignalled => m.raise_direct(s, k),
        }
    }

    /// A cross-call handler starts on its target.
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, i: u32) -> Ps {
        let now = s.now();
        let (in_masked, in_idle) = interrupted(m, c, i);
        let src = &m.srcs[i as usize];
        let me: &mut CrossCalls = m.parts.get();
        let (k, xtarget) = me.sources[src.owner_arg as usize];
        let call = &mut me.calls[k as usize];
        if xtarget == REQUESTER {
            let kind = call.serial as usize;
            // A backtrace's flag goes when its wait ends (`clear_bit_unlock(0,
            // &backtrace_flag)`); a stop's `stop_in_progress` is never cleared
            // (a panic does not return), so every later stop sends nothing.
            let busy = match call.serial {
                true => me.in_progress[kind].is_some_and(|o| me.calls[o as usize].spin.is_some_and(|(_, end)| end.is_none())),
                false => me.in_progress[kind].is_some(),
            };
            let call = &mut me.calls[k as usize];
            call.at = now;
            // `test_and_set_bit(0, &backtrace_flag)` (or `stop_in_progress`) found it set.
            call.skipped = busy;
            call.spin = Some((now, busy.then_some(now)));
            if busy {
                return 0;
            }
            me.in_progress[kind] = Some(k);
            if let Some(h) = me.calls[k as usize].dump {
                // `nmi_cpu_backtrace(NULL)` before `raise()`: it signals once
                // its own print is out (`handler_continue`).
                let wait = me.print_lock.take(now, h);
                let call = &mut me.calls[k as usize];
                call.dumping = true;
                call.dump_took = Some(wait + h);
                return wait + h;
            }
            signal(m, s, k);
            return m.parts.get().calls[k as usize].spin_more(now);
        }
        let n = call.targets.len() as u32;
        let (stage, j) = (xtarget / n, (xtarget % n) as usize);
        call.handler_runs += 1;
        let first = call.reached[j].is_none() && !call.late[j];
        // A later run finds its CPU already cleared from the mask
        // (`nmi_cpu_backtrace` tests its bit first) and prints nothing: it
        // costs its entry and exit only.
        let handler = match call.idle_handler {
            _ if !first => 0,
            Some(h) if in_idle => h,
            _ => src.handler,
        };
        let (wait, answer) = if first && call.serial {
            let wait = me.print_lock.take(now, handler);
            (wait, now + wait + handler)
        } else {
            (0, now)
        };
        if first {
            if call.deadline.is_some_and(|d| now - call.at > d) {
                call.late[j] = true; // the requester had given up
            } else {
                call.reached[j] = Some((now - call.at, stage));
                call.in_masked[j] = in_masked;
                call.answered[j] = Some(answer - call.at);
            }
        }
        wait + handler
    }

    /// The spinning requester delayed one poll: it looks again. (Or its own
    /// dump is out: it signals, and the call's clock starts.)
    fn handler_continue<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, _c: usize, i: u32) -> Ps {
        let now = s.now();
        let arg = m.srcs[i as usize].owner_arg;
        let me: &mut CrossCalls = m.parts.get();
        let (k, _) = me.sources[arg as usize];
        let call = &mut me.calls[k as usize];
        if call.dumping {
            call.dumping = false;
            call.at = now;
            signal(m, s, k);
        }
        m.parts.get().calls[k as usize].spin_more(now)
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, now: Ps, _secs: f64) {
        m.parts.get_ref().report(r, now);
    }
}

/// Whether the code source `i`'s handler interrupted on CPU `c` had IRQs
/// masked, and whether it was the idle loop (`cpu_in_idle`): the frame under
/// the handler's (with no entry phase the handler starts before its frame is
/// pushed, and the interrupted frame is the top).
fn interrupted<P: Has<CrossCalls>>(m: &Machine<P>, c: usize, i: u32) -> (bool, bool) {
    use crate::platform::cpu::Work;
    let st = &m.cpus[c].stack;
    let pushed = matches!(st.last().map(|f| f.work), Some(Work::Irq { src, .. }) if src == i);
    let under = if pushed { st.len().checked_sub(2) } else { st.len().checked_sub(1) };
    match under {
        Some(k) => (!st[k].mask.admits(Prio::Normal), matches!(st[k].work, Work::Idle)),
        None => (false, true),
    }
}

/// The requester signals every target that has not answered, then schedules
/// its next signal (a repeat, or the next mechanism).
fn signal<P: Has<CrossCalls>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, k: u32) {
    let now = s.now();
    let call = &mut m.parts.get().calls[k as usize];
    if call.unreached() == 0 {
        return;
    }
    if let (Some(i), None) = (call.spin_src, call.spin) {
        // The requester's CPU takes the request first (an hrtimer callback, a
        // sysrq, panic): it signals from there and spins (`handler_start`).
        m.raise_direct(s, i);
        return;
    }
    let n = call.targets.len();
    let stage = call.stage as usize;
    let base = stage * n;
    let to_signal: Vec<u32> = (0..n).filter(|&j| call.reached[j].is_none()).map(|j| call.srcs[base + j]).collect();
    call.signals_sent += 1;
    call.rep += 1;
    let next = if call.rep < call.signals {
        Some(now.saturating_add(call.interval))
    } else if (call.stage as usize + 1) < call.mechanisms.len() {
        call.stage += 1;
        call.rep = 0;
        Some(call.at.saturating_add(call.starts[call.stage as usize]))
    } else {
        None
    };
    if let Some(t) = next {
        s.at(t.max(now), P::ev(CallEv::Signal, k));
    }
    if call.mechanisms[stage] == Mechanism::Sdei {
        // SDEI_EVENT_SIGNAL names one PE: the requester makes one SMC per target,
        // in turn, so the last target's event is marked n SMCs later.
        let smc = call.smc;
        call.smc_busy += smc * to_signal.len() as Ps;
        for (rank, i) in to_signal.into_iter().enumerate() {
            s.at(now.saturating_add((rank as Ps + 1).saturating_mul(smc)), P::ev(CallEv::SdeiSignalled, i));
        }
        return;
    }
    for i in to_signal {
        m.raise_direct(s, i);
    }
}

impl CrossCalls {
    /// `crosscall.NAME.*`: who was reached, by what, how fast.
    fn report(&self, r: &mut Report, now: Ps) {
        let mut targets = Table::new(&["call", "cpu", "reached", "mechanism", "latency_ns", "answered_ns", "in_masked"]);
        for call in &self.calls {
            for (j, &cpu) in call.targets.iter().enumerate() {
                let ns = |t: Option<Ps>| t.map_or(Cell::None, |t| Cell::Num(t as f64 / 1e3));
                let (reached, mech, masked) = match call.reached[j] {
                    Some((_, stage)) => {
                        (1.0, Cell::from(call.mechanisms[stage as usize].name()), Cell::Num(call.in_masked[j] as u8 as f64))
                    }
                    None => (0.0, Cell::None, Cell::None),
                };
                let lat = ns(call.reached[j].map(|r| r.0));
                targets.row(vec![call.name.as_str().into(), (cpu as f64).into(), reached.into(), mech, lat, ns(call.answered[j]), masked]);
            }
        }
        if !self.calls.is_empty() {
            r.table("crosscall_targets", targets);
        }
        for call in &self.calls {
            let p = format!("crosscall.{}", call.name);
            let reached: Vec<(Ps, u32)> = call.reached.iter().flatten().copied().collect();
            r.metric(format!("{p}.targets"), call.targets.len() as f64);
            r.metric(format!("{p}.reached"), reached.len() as f64);
            r.metric(format!("{p}.all_reached"), (reached.len() == call.targets.len()) as u8 as f64);
            if reached.len() < call.targets.len() && call.cut_off(now) {
                r.warn(format!(
                    "crosscall {}: the run ended at {:.3} ms before the call had run its course ({} of {} targets not \
                     reached, with its own dump, a signal or its deadline still to come): what it reports covers only \
                     what the run saw; raise `duration`",
                    call.name,
                    now as f64 / 1e9,
                    call.targets.len() - reached.len(),
                    call.targets.len()
                ));
            }
            r.metric(format!("{p}.reached_masked"), call.in_masked.iter().filter(|&&b| b).count() as f64);
            if call.deadline.is_some() {
                r.metric(format!("{p}.reached_late"), call.late.iter().filter(|&&l| l).count() as f64);
            }
            r.metric(format!("{p}.handler_runs"), call.handler_runs as f64);
            r.metric(format!("{p}.signals"), call.signals_sent as f64);
            r.metric(format!("{p}.requester_smc_ns"), call.smc_busy as f64 / 1e3);
            for (stage, m) in call.mechanisms.iter().enumerate() {
                let by = reached.iter().filter(|(_, st)| *st as usize == stage).count();
                r.metric(format!("{p}.reached_by.{}", m.name()), by as f64);
            }
            let last_answer = call.answered.iter().flatten().max().copied();
            if reached.len() == call.targets.len() {
                let all = reached.iter().map(|(l, _)| *l).max().unwrap_or(0);
                r.metric(format!("{p}.time_to_all_ns"), all as f64 / 1e3);
                if call.serial {
                    r.metric(format!("{p}.time_to_all_answered_ns"), last_answer.unwrap_or(0) as f64 / 1e3);
                }
            }
            // How long the kernel's requester needs to wait for the answers: until
            // the last target answers, or to its deadline if one never does
            // (with `waits`). The spin itself (`requester_spins`) looks every
            // poll, so it ends at the first look after this.
            let wait = match (reached.len() == call.targets.len(), call.deadline) {
                // A requester that never ran (its CPU masked throughout) or found a call of its kind in progress waited for nothing.
                // (Nor one still printing its own stack, which has sent nothing yet.)
                _ if call.spin_src.is_some() && (call.spin.is_none() || call.skipped || call.dumping) => None,
                (true, d) => last_answer.map(|a| d.map_or(a, |d| a.min(d))),
                (false, d) => d,
            };
            if let Some(w) = wait {
                r.metric(format!("{p}.requester_wait_ns"), w as f64 / 1e3);
            }
            // What the spin took of the requester's CPU (to the run's end if it
            // still spins): from when its CPU took it to the look that found
            // every answer in, so up to a poll more than the wait (and, with
            // `requester_dumps`, its own dump before it).
            if let Some((start, end)) = call.spin {
                r.metric(format!("{p}.requester_spin_ns"), (end.unwrap_or(now) - start) as f64 / 1e3);
                // How long its CPU took to start: an IRQ entry, an idle exit, or a mask's length.
                r.metric(format!("{p}.requester_start_ns"), (start - call.asked) as f64 / 1e3);
                r.metric(format!("{p}.requester_skipped"), call.skipped as u8 as f64);
            }
            // Its own dump, part of the spin: the wait for the print lock and
            // the print (what of it the run saw, if it ended mid-dump).
            if let (Some(d), Some((start, end))) = (call.dump_took, call.spin) {
                r.metric(format!("{p}.requester_dump_ns"), d.min(end.unwrap_or(now) - start) as f64 / 1e3);
            }
            if !reached.is_empty() {
                let mut h = Latency::default();
                for (l, _) in &reached {
                    h.record(*l);
                }
                r.histogram(format!("{p}.latency"), &h);
            }
        }
    }
}

#[cfg(test)]
mod tests;
