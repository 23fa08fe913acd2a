//! The run protocol every model follows, whatever it models: build (with a
//! tracer), start, run to the end of warm-up, reset the statistics, run to the
//! end, report, audit, and close the trace. One loop for all, so warm-up,
//! tracing and the time audit behave the same in every model.

use super::sim::{Model, RunControl, Scheduler};
use super::stats::{Half, Report};
use super::time::Ps;
use super::trace::{TraceBounds, Tracer};

pub trait Protocol: Model + Sized {
    /// What the model is built from (a scenario).
    type Config;
    /// The model's own end-of-run checks, for the invariant tests.
    type Audit;

    fn build(cfg: &Self::Config, seed: u64, tracer: Tracer) -> Self;
    /// Schedules the first events.
    fn start(&mut self, s: &mut Scheduler<Self::Event>);
    /// The end of warm-up: zero every statistic.
    fn reset(&mut self, now: Ps);
    fn report(&mut self, now: Ps, events: u64) -> Report;
    /// End-of-run checks; hands back the tracer so the protocol can close it.
    fn finish(&mut self, now: Ps) -> (Self::Audit, Tracer);
}

/// When a run starts measuring and ends, and what it traces.
#[derive(Clone, Debug)]
pub struct Span {
    pub warmup: Ps,
    pub end: Ps,
    /// `Some` to write a Perfetto trace within these bounds.
    pub trace: Option<TraceBounds>,
    /// Stream the trace into this file instead of holding it in memory.
    pub trace_to: Option<std::path::PathBuf>,
}

pub struct Outcome<A> {
    pub report: Report,
    /// A streamed trace that could not be written (the file is incomplete).
    pub trace_error: Option<String>,
    pub trace: Option<Vec<u8>>,
    pub audit: A,
    /// Events the scheduler handed out of time order (the queue's audit: always 0).
    pub time_reversals: u64,
    /// The stop flag ended the run before `end`: the report covers less than asked.
    pub stopped: bool,
}

/// Runs a model through the protocol. `prepare` runs once it is built, before
/// it starts (e.g. to give it recorded arrivals).
pub fn run<M: Protocol>(cfg: &M::Config, seed: u64, span: Span, prepare: impl FnOnce(&mut M)) -> Outcome<M::Audit> {
    run_stoppable(cfg, seed, span, None, prepare)
}

/// [`run`], ending early once `stop` is set (Ctrl-C).
pub fn run_stoppable<M: Protocol>(
    cfg: &M::Config,
    seed: u64,
    span: Span,
    control: Option<RunControl>,
    prepare: impl FnOnce(&mut M),
) -> Outcome<M::Audit> {
    let tracer = match (span.trace, &span.trace_to) {
        (Some(b), Some(path)) => Tracer::to_file(b, path),
        (Some(b), None) => Tracer::new(b),
        (None, _) => Tracer::disabled(),
    };
    let mut m = M::build(cfg, seed, tracer);
    prepare(&mut m);
    let mut s = Scheduler::new();
    if let Some(c) = control {
        s.set_control(c);
    }
    m.start(&mut s);
    s.run_until(&mut m, span.warmup);
    if span.warmup > 0 {
        m.reset(span.warmup);
    }
    // Reporting changes no state a later event reads (it brings time
    // accounting up to `mid`, as the next event would): the run stays the same.
    let mid = span.warmup + span.end.saturating_sub(span.warmup) / 2;
    s.run_until(&mut m, mid);
    let first_half = (!s.stopped()).then(|| Box::new(Half::of(m.report(mid, s.events()))));
    s.run_until(&mut m, span.end);
    let now = s.now();
    let mut report = m.report(now, s.events());
    report.first_half = first_half;
    let (audit, tracer) = m.finish(now);
    if let Some(t) = tracer.capped_at() {
        report.warn(format!(
            "the trace stops at {:.6} s of simulated time: it reached trace.max_events; raise it \
             (--set trace.max_events=N) or narrow trace.start/trace.end",
            t as f64 * 1e-12
        ));
    }
    let (trace, trace_error) = match tracer.finish(now) {
        Ok(t) => (t, None),
        Err(e) => (None, Some(e)),
    };
    Outcome { report, trace, trace_error, audit, time_reversals: s.time_reversals(), stopped: s.stopped() }
}
