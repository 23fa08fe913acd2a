//! Running a scenario end to end: build the machine, run through warm-up,
//! reset the statistics, run to the end, report.

use crate::engine::stats::Report;
use crate::engine::Scheduler;
use crate::machine::{Audit, Machine};
use crate::scenario::Scenario;
use serde::Serialize;

pub struct RunOutput {
    pub report: Report,
    pub trace: Option<Vec<u8>>,
    pub audit: Audit,
    /// Writes not yet handed to a handler when the run ended.
    pub pending_events: u64,
    pub seed: u64,
    /// The KVM model's own checks, for `[kvm]` scenarios.
    pub kvm: Option<crate::virt::kvm::KvmAudit>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    pub seed: Option<u64>,
    pub trace: bool,
    /// Keep what invariant checks need (delivered ids, fabric intervals).
    pub audit: bool,
}

/// Like [`run`], with recorded arrival times (ps) for the sources whose `replay`
/// key is in `arrivals` (`irqlab replay`).
pub fn run_replay(sc: &Scenario, opt: RunOptions, arrivals: &std::collections::BTreeMap<String, Vec<crate::engine::Ps>>) -> RunOutput {
    run_with(sc, opt, |m| {
        for (src, cfg) in m.srcs.iter_mut().zip(sc.sources.iter()) {
            if let Some(times) = cfg.replay.as_ref().and_then(|k| arrivals.get(k)) {
                src.replay = Some((times.clone(), 0));
            }
        }
    })
}

pub fn run(sc: &Scenario, opt: RunOptions) -> RunOutput {
    run_with(sc, opt, |_| {})
}

fn run_with(sc: &Scenario, opt: RunOptions, prepare: impl FnOnce(&mut Machine)) -> RunOutput {
    let seed = opt.seed.unwrap_or(sc.seed);
    if sc.kvm.is_some() {
        let (report, trace, kvm) = crate::virt::kvm::run(sc, seed, opt.trace);
        return RunOutput { report, trace, audit: Audit::default(), pending_events: 0, seed, kvm: Some(kvm) };
    }
    let mut m = Machine::new(sc, seed, opt.trace);
    prepare(&mut m);
    if opt.audit {
        m.audit.delivered = Some(Default::default());
        m.fabric.log = Some(Vec::new());
    }
    let mut s = Scheduler::new();
    m.start(&mut s);
    let (warmup, end) = (m.warmup, m.end);
    s.run_until(&mut m, warmup);
    if warmup > 0 {
        m.reset_stats(warmup);
    }
    s.run_until(&mut m, end);
    let now = s.now();
    let report = m.report(now, s.events());
    let pending_events = m.pending_events();
    m.audit_devices();
    let trace = std::mem::replace(&mut m.tracer, crate::engine::trace::Tracer::disabled()).finish(now);
    RunOutput { report, trace, audit: m.audit.clone(), pending_events, seed, kvm: None }
}

#[derive(Serialize)]
struct Json<'a> {
    scenario: &'a str,
    seed: u64,
    version: &'a str,
    metrics: &'a std::collections::BTreeMap<String, f64>,
    histograms: &'a std::collections::BTreeMap<String, crate::engine::stats::Summary>,
    series: &'a std::collections::BTreeMap<String, crate::engine::stats::Series>,
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
    })
    .expect("reports serialize (non-finite numbers are avoided upstream)")
}
