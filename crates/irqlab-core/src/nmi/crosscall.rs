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

use crate::engine::stats::{Latency, Report};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::machine::{Ev, Machine};
use crate::scenario::Mechanism;

/// Marks a source that is not part of a cross-call.
pub const NO_CALL: u32 = u32::MAX;

pub struct CallState {
    pub name: String,
    pub at: Ps,
    pub targets: Vec<u32>,
    pub mechanisms: Vec<Mechanism>,
    /// The source for (stage, target j) is `srcs[stage * targets.len() + j]`.
    pub srcs: Vec<u32>,
    pub timeout: Ps,
    pub signals: u32,
    pub interval: Ps,
    /// The next signal to send: its stage (index into `mechanisms`) and repeat.
    pub stage: u32,
    pub rep: u32,
    /// Per target: latency from `at` to the first handler start, and the stage that got there.
    pub reached: Vec<Option<(Ps, u32)>>,
    pub handler_runs: u64,
    pub signals_sent: u64,
}

impl CallState {
    fn unreached(&self) -> usize {
        self.reached.iter().filter(|r| r.is_none()).count()
    }
}

impl Machine {
    /// `Ev::Signal`: the requester signals every target that has not answered,
    /// then schedules its next signal (a repeat, or the next mechanism).
    pub(crate) fn crosscall_signal(&mut self, s: &mut Scheduler<Ev>, k: u32) {
        let now = s.now();
        let call = &mut self.calls[k as usize];
        if call.unreached() == 0 {
            return;
        }
        let n = call.targets.len();
        let base = call.stage as usize * n;
        let to_signal: Vec<u32> =
            (0..n).filter(|&j| call.reached[j].is_none()).map(|j| call.srcs[base + j]).collect();
        call.signals_sent += 1;
        call.rep += 1;
        let next = if call.rep < call.signals {
            Some(now + call.interval)
        } else if (call.stage as usize + 1) < call.mechanisms.len() {
            call.stage += 1;
            call.rep = 0;
            Some(call.at + call.stage as Ps * call.timeout)
        } else {
            None
        };
        if let Some(t) = next {
            s.at(t.max(now), Ev::Signal(k));
        }
        for i in to_signal {
            self.raise_direct(s, i);
        }
    }

    /// A signal that does not cross the PCIe fabric (an SGI, an SMC to
    /// firmware): it reaches the target after the source's fixed latency.
    fn raise_direct(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let now = s.now();
        self.audit.writes += 1;
        let flow = self.audit.writes;
        let latency = self.srcs[i as usize].latency;
        if latency == 0 {
            self.arrive(s, i, now, flow);
        } else {
            // A fixed latency keeps each source's signals in order.
            self.srcs[i as usize].in_fabric.push_back((now, flow));
            s.at(now + latency, Ev::Arrive(i));
        }
    }

    /// A cross-call handler starts on its target.
    #[cold]
    pub(crate) fn crosscall_handled(&mut self, now: Ps, i: u32) {
        let src = &self.srcs[i as usize];
        let call = &mut self.calls[src.xcall as usize];
        let n = call.targets.len() as u32;
        let (stage, j) = (src.xtarget / n, (src.xtarget % n) as usize);
        call.handler_runs += 1;
        if call.reached[j].is_none() {
            call.reached[j] = Some((now - call.at, stage));
        }
    }

    /// `crosscall.NAME.*`: who was reached, by what, how fast.
    pub(crate) fn crosscall_report(&self, r: &mut Report) {
        for call in &self.calls {
            let p = format!("crosscall.{}", call.name);
            let reached: Vec<(Ps, u32)> = call.reached.iter().flatten().copied().collect();
            r.metric(format!("{p}.targets"), call.targets.len() as f64);
            r.metric(format!("{p}.reached"), reached.len() as f64);
            r.metric(format!("{p}.all_reached"), (reached.len() == call.targets.len()) as u8 as f64);
            r.metric(format!("{p}.handler_runs"), call.handler_runs as f64);
            r.metric(format!("{p}.signals"), call.signals_sent as f64);
            for (stage, m) in call.mechanisms.iter().enumerate() {
                let by = reached.iter().filter(|(_, st)| *st as usize == stage).count();
                r.metric(format!("{p}.reached_by.{}", m.name()), by as f64);
            }
            if reached.len() == call.targets.len() {
                let all = reached.iter().map(|(l, _)| *l).max().unwrap_or(0);
                r.metric(format!("{p}.time_to_all_ns"), all as f64 / 1e3);
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
