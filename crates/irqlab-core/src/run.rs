//! Running a scenario end to end through the engine's run protocol
//! (`engine::protocol`): the model the scenario names is built, run through
//! warm-up, reset, run to the end, reported and audited, the same way for
//! every model.

use crate::components::kvm_x86::{KvmAudit, KvmModel};
use crate::components::Components;
use crate::engine::protocol::{self, Span};
use crate::engine::sim::RunControl;
use crate::engine::stats::Report;
use crate::engine::trace::TraceBounds;
use crate::engine::Ps;
use crate::platform::machine::Audit;
use crate::platform::machine::{Machine, Parts};
use crate::scenario::Scenario;
use serde::Serialize;
use std::collections::BTreeMap;

pub struct RunOutput {
    pub report: Report,
    pub trace: Option<Vec<u8>>,
    /// A trace streamed to `RunOptions::trace_to` that could not be written.
    pub trace_error: Option<String>,
    /// The machine's lifetime audit (empty for the KVM entry-loop model).
    pub audit: Audit,
    /// Writes not yet handed to a handler when the run ended.
    pub pending_events: u64,
    pub seed: u64,
    /// The KVM model's own checks, for `[kvm]` scenarios.
    pub kvm: Option<KvmAudit>,
    /// The run was stopped before its end (its report covers less than asked).
    pub stopped: bool,
}

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub seed: Option<u64>,
    pub trace: bool,
    /// With `trace`: stream it into this file (memory stays bounded) instead of returning its bytes.
    pub trace_to: Option<std::path::PathBuf>,
    /// Keep what invariant checks need (delivered ids, fabric intervals).
    pub audit: bool,
    /// Shared with the caller: its stop flag (Ctrl-C) ends the run early (`RunOutput::stopped`
    /// then says so), and the run publishes its simulated time there.
    pub stop: Option<RunControl>,
}

/// The models a scenario can name. KVM x86's VM-enter loop is a model of its
/// own until it becomes a component of the machine (it models the vCPUs'
/// entry loop, not the host side of their pCPUs).
enum ModelKind {
    Machine,
    KvmX86,
}

fn model_of(sc: &Scenario) -> ModelKind {
    match sc.kvm {
        Some(_) => ModelKind::KvmX86,
        None => ModelKind::Machine,
    }
}

fn span(sc: &Scenario, opt: &RunOptions) -> Span {
    let (warmup, end) = (sc.warmup.ps(), sc.duration.ps());
    let trace = opt.trace.then(|| TraceBounds {
        start: sc.trace.start.map(|t| t.ps()).unwrap_or(warmup),
        end: sc.trace.end.map(|t| t.ps()).unwrap_or(end),
        max_events: sc.trace.max_events as usize,
    });
    Span { warmup, end, trace, trace_to: opt.trace_to.clone() }
}

pub fn run(sc: &Scenario, opt: RunOptions) -> RunOutput {
    run_with(sc, opt, &BTreeMap::new())
}

/// Like [`run`], with recorded arrival times (ps) for the sources whose `replay`
/// key is in `arrivals` (`irqlab replay`).
pub fn run_replay(sc: &Scenario, opt: RunOptions, arrivals: &BTreeMap<String, Vec<Ps>>) -> RunOutput {
    run_with(sc, opt, arrivals)
}

fn run_with(sc: &Scenario, opt: RunOptions, arrivals: &BTreeMap<String, Vec<Ps>>) -> RunOutput {
    let seed = opt.seed.unwrap_or(sc.seed);
    let span = span(sc, &opt);
    match model_of(sc) {
        ModelKind::KvmX86 => {
            let out = protocol::run_stoppable::<KvmModel>(sc, seed, span, opt.stop.clone(), |_| {});
            let mut kvm = out.audit;
            kvm.time_reversals = out.time_reversals;
            let stopped = out.stopped;
            RunOutput {
                report: out.report,
                trace: out.trace,
                trace_error: out.trace_error,
                audit: Audit::default(),
                pending_events: 0,
                seed,
                kvm: Some(kvm),
                stopped,
            }
        }
        ModelKind::Machine => run_machine::<Components>(sc, opt, arrivals),
    }
}

/// Runs the machine model built with the components `P` (the real list is
/// `components::Components`; a test may run its own list).
pub fn run_machine<P: Parts>(sc: &Scenario, opt: RunOptions, arrivals: &BTreeMap<String, Vec<Ps>>) -> RunOutput {
    let seed = opt.seed.unwrap_or(sc.seed);
    let out = protocol::run_stoppable::<Machine<P>>(sc, seed, span(sc, &opt), opt.stop.clone(), |m| {
        for (src, cfg) in m.srcs.iter_mut().zip(sc.sources.iter()) {
            if let Some(times) = cfg.replay.as_ref().and_then(|k| arrivals.get(k)) {
                src.set_replay(times.clone());
            }
        }
        if opt.audit {
            m.audit.delivered = Some(Default::default());
            m.fabric.log = Some(Vec::new());
            for p in &mut m.paths {
                p.log = Some(Vec::new());
            }
        }
    });
    let (mut audit, pending_events) = out.audit;
    audit.time_reversals = out.time_reversals;
    let mut report = out.report;
    for t in sc.tasks.iter().filter(|t| t.cpus_defaulted && t.count > 1 && t.vm.is_none() && sc.platform.cpus > 1) {
        // Scaling a task's `count` alone stacks it on CPU 0: the total stays
        // flat and each instance's `ns_per_op` grows, which reads like a result.
        report.warn(format!(
            "task {}: its {} instances all run on CPU 0 (no `cpus` given) and share it, while {} other CPUs run none of \
             them; give `cpus` to spread them (instance i runs on cpus[i % len])",
            t.name,
            t.count,
            sc.platform.cpus - 1
        ));
    }
    RunOutput { report, trace: out.trace, trace_error: out.trace_error, audit, pending_events, seed, kvm: None, stopped: out.stopped }
}

#[derive(Serialize)]
struct Json<'a> {
    scenario: &'a str,
    seed: u64,
    version: &'a str,
    metrics: &'a BTreeMap<String, f64>,
    histograms: &'a BTreeMap<String, crate::engine::stats::Summary>,
    series: &'a BTreeMap<String, crate::engine::stats::Series>,
    tables: &'a BTreeMap<String, crate::engine::stats::Table>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    first_half: Option<&'a crate::engine::stats::Half>,
}

/// The `--json` shape shared by every command.
pub fn to_json(sc: &Scenario, out: &RunOutput) -> String {
    serde_json::to_string(&Json {
        scenario: &sc.name,
        seed: out.seed,
        version: env!("CARGO_PKG_VERSION"),
        metrics: &out.report.metrics,
        histograms: &out.report.histograms,
        series: &out.report.series,
        tables: &out.report.tables,
        warnings: &out.report.warnings,
        first_half: out.report.first_half.as_deref(),
    })
    .expect("reports serialize (non-finite numbers are avoided upstream)")
}

/// For tests: runs a scenario text with `--set`-style overrides, audited, and
/// checks what every run must keep (time never goes back; no write handed to
/// a handler twice).
#[cfg(test)]
pub(crate) fn run_audited(toml: &str, sets: &[&str]) -> RunOutput {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = crate::scenario::load(toml, "test.toml", &sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.time_reversals, 0, "{sets:?}");
    assert_eq!(out.audit.double_deliveries, 0, "{sets:?}");
    out
}

#[cfg(test)]
mod tests {
    /// The run reports the first half of its measured window beside the whole
    /// (the front end's settle check): about half the work, no per-CPU rows.
    /// That taking it changes nothing the run does is what
    /// tests/test_reference.py checks on every bundled scenario, byte for byte.
    #[test]
    fn the_first_half_of_the_window_is_reported_beside_the_whole() {
        let toml = "name = \"h\"\nduration = \"20ms\"\nwarmup = \"2ms\"\nseed = 3\n[platform]\ncpus = 2\n\
                    [[source]]\nname = \"q\"\ncount = 4\nrate = \"50k/s\"\ncpus = [0, 1]\nhandler = \"1us\"\n";
        let out = super::run_audited(toml, &[]);
        let half = out.report.first_half.as_deref().expect("a first half");
        let (a, whole) = (half.metrics["interrupts"], out.report.metrics["interrupts"]);
        assert!((a / whole - 0.5).abs() < 0.03, "{a} of {whole}");
        assert!((half.metrics["sim_s"] - 0.009).abs() < 1e-9, "{}", half.metrics["sim_s"]);
        assert!(half.histograms["irq_latency"].count > 0);
        assert!(!half.metrics.keys().any(|k| k.starts_with("cpu0.")), "per-CPU metrics stay out");
        assert!(super::to_json(&crate::load(toml, "h.toml", &[]).unwrap(), &out).contains("\"first_half\":{"));
    }

    /// A task's `count` raised without `cpus` stacks every instance on CPU 0;
    /// the run says so (a review scaled M1's gettid to 256 tasks on 256 CPUs
    /// and read the one CPU's throughput). Given `cpus`, stacking is meant.
    #[test]
    fn instances_left_on_cpu0_by_default_are_named() {
        let toml = "name = \"t\"\nduration = \"1ms\"\nwarmup = \"0s\"\n[platform]\ncpus = 4\n\
                    [[task]]\nname = \"loop\"\nwork = \"1us\"\n";
        let stacked = |sets: &[&str]| {
            let out = super::run_audited(toml, sets);
            out.report.warnings.iter().any(|w| w.contains("task loop: its 3 instances all run on CPU 0"))
        };
        assert!(stacked(&["task.0.count=3"]));
        assert!(!stacked(&["task.0.count=3", "task.0.cpus=[0]"]), "stacking asked for");
        assert!(!stacked(&["task.0.count=3", "task.0.cpus=[0, 1, 2]"]));
        assert!(!stacked(&["task.0.count=1"]));
    }
}
