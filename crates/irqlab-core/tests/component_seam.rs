//! A component written only for this test, to show and check the seam: a
//! per-CPU watchdog (like the hard-lockup detector's hrtimer) that raises an
//! interrupt of its own every `PERIOD` on each CPU it watches and counts its
//! handler runs. It builds its sources, schedules its own events, owns its
//! handler start, reports and resets, all from this file: the machine's core is
//! not edited, and the component is registered by one line of a `parts!` list.

use irqlab_core::components::crosscall::CrossCalls;
use irqlab_core::components::moderation::GlobalModeration;
use irqlab_core::components::nic::Nic;
use irqlab_core::components::nvme::Nvme;
use irqlab_core::engine::stats::Report;
use irqlab_core::engine::{Ps, Scheduler};
use irqlab_core::platform::cpu::Prio;
use irqlab_core::platform::machine::{Ev, Machine};
use irqlab_core::platform::parts::{Component, Has};
use irqlab_core::run::{run_machine, RunOptions};
use irqlab_core::scenario::Scenario;
use irqlab_core::{load, part_events, parts, to_json};
use std::collections::BTreeMap;

/// 100 µs between ticks; CPUs listed in `WATCHED`.
const PERIOD: Ps = 100_000_000;
const HANDLER: Ps = 2_000_000;

part_events! {
    enum WatchdogEv {
        /// A CPU's watchdog timer expired (the argument is the watched CPU's index).
        Tick,
    }
}

#[derive(Default)]
struct Watchdog {
    /// (cpu, source) per watched CPU.
    watched: Vec<(u32, u32)>,
    runs: Vec<u64>,
}

thread_local! {
    static WATCHED: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Component for Watchdog {
    type Ev = WatchdogEv;

    fn build<P: Has<Self>>(m: &mut Machine<P>, _sc: &Scenario, _seed: u64) -> Self {
        let mut me = Watchdog::default();
        let cpus = WATCHED.with(|w| w.borrow().clone());
        if cpus.is_empty() {
            return me;
        }
        let group = m.add_group("watchdog", "watchdog ticks");
        // A local interrupt (a timer on its own CPU, not a device's write):
        // its handlers count as interrupts, not in `irq_latency`.
        m.src_local[group as usize] = true;
        for (k, cpu) in cpus.into_iter().enumerate() {
            let (entry, exit) = (m.irq_entry, m.irq_exit);
            let i = m.add_source(format!("watchdog.cpu{cpu}"), group, cpu, HANDLER, Prio::Nmi, entry, exit, 0, P::ID, k as u32);
            me.watched.push((cpu, i));
            me.runs.push(0);
        }
        me
    }

    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        for k in 0..m.parts.get_ref().watched.len() {
            s.at(PERIOD, P::ev(WatchdogEv::Tick, k as u32));
        }
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, ev: WatchdogEv, k: u32) {
        match ev {
            WatchdogEv::Tick => {
                let i = m.parts.get_ref().watched[k as usize].1;
                s.at(s.now() + PERIOD, P::ev(WatchdogEv::Tick, k));
                m.raise_direct(s, i);
            }
        }
    }

    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, _s: &mut Scheduler<Ev>, _c: usize, i: u32) -> Ps {
        let k = m.srcs[i as usize].owner_arg as usize;
        m.parts.get().runs[k] += 1;
        m.srcs[i as usize].handler
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        m.parts.get().runs.iter_mut().for_each(|r| *r = 0);
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, _now: Ps, _secs: f64) {
        for (&(cpu, _), &runs) in m.parts.get_ref().watched.iter().zip(&m.parts.get_ref().runs) {
            r.metric(format!("watchdog.cpu{cpu}.runs"), runs as f64);
        }
    }
}

parts! {
    struct WithWatchdog {
        crosscall: CrossCalls,
        nvme: Nvme,
        nic: Nic,
        gsim: GlobalModeration,
        watchdog: Watchdog,
    }
}

fn scenario(rel: &str) -> Scenario {
    let path = format!("{}/../../python/irqlab/scenarios/{rel}", env!("CARGO_MANIFEST_DIR"));
    load(&std::fs::read_to_string(&path).unwrap(), rel, &[]).unwrap()
}

fn run_with_watchdog(sc: &Scenario, cpus: &[u32]) -> irqlab_core::RunOutput {
    WATCHED.with(|w| *w.borrow_mut() = cpus.to_vec());
    run_machine::<WithWatchdog>(sc, RunOptions { audit: true, trace: true, ..Default::default() }, &BTreeMap::new())
}

#[test]
fn a_component_of_its_own_runs_through_the_hooks() {
    let sc = scenario("examples/syscall-mix.toml");
    let out = run_with_watchdog(&sc, &[0, 1]);
    let m = &out.report.metrics;
    // Ticks every PERIOD from PERIOD on; those in warm-up are reset away.
    let span = sc.duration.ps() - sc.warmup.ps();
    let expected = (span / PERIOD) as f64;
    for cpu in [0, 1] {
        let runs = m[&format!("watchdog.cpu{cpu}.runs")];
        // A tick just before the end may still wait for its handler.
        assert!(runs == expected || runs == expected - 1.0, "cpu{cpu}: {runs} runs, expected about {expected}");
    }
    // The core counts them like any interrupt, and loses none.
    assert!(m["source.watchdog.interrupts_per_s"] > 0.0);
    assert_eq!(out.audit.double_deliveries, 0);
    assert_eq!(out.audit.writes, out.audit.events_delivered + out.pending_events);
}

#[test]
fn an_idle_component_changes_nothing() {
    // With nothing to watch, the machine built with the extra component gives
    // the same results and trace as the real one, byte for byte.
    for rel in ["examples/syscall-mix.toml", "examples/m5-nic-vms.toml", "figures/m1-gettid.toml"] {
        let sc = scenario(rel);
        let plain = irqlab_core::run(&sc, RunOptions { trace: true, ..Default::default() });
        let extra = run_with_watchdog(&sc, &[]);
        assert_eq!(to_json(&sc, &plain), to_json(&sc, &extra), "{rel}");
        assert_eq!(plain.trace, extra.trace, "{rel}");
    }
}
