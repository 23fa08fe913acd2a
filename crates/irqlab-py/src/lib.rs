//! `irqlab._core`: converts and forwards. No model logic lives here.
//! Bad input becomes `ScenarioError` (a `ValueError`); a panic in the core is
//! caught and becomes a `RuntimeError`, never an abort across the boundary.

// pyo3 0.22's #[pyfunction] expands `PyResult` returns into a `.into()` that
// clippy reads as a conversion to the same type.
#![allow(clippy::useless_conversion)]

use pyo3::create_exception;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

create_exception!(irqlab._core, ScenarioError, PyValueError, "A scenario, override or option is invalid; the message is one line.");

fn load(text: &str, origin: &str, overrides: Vec<String>) -> PyResult<irqlab_core::Scenario> {
    // A scenario built as data arrives as JSON (origin "*.json"); files are TOML.
    let sc = if origin.ends_with(".json") {
        irqlab_core::scenario::load_json(text, origin, &overrides)
    } else {
        irqlab_core::load(text, origin, &overrides)
    };
    sc.map_err(|e| ScenarioError::new_err(e.0))
}

fn guarded<T>(f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        PyRuntimeError::new_err(format!("internal error in irqlab-core: {msg}"))
    })
}

/// Validates a scenario and returns it, normalized, as JSON.
#[pyfunction]
#[pyo3(signature = (text, origin, overrides=vec![]))]
fn load_scenario(text: &str, origin: &str, overrides: Vec<String>) -> PyResult<String> {
    let sc = load(text, origin, overrides)?;
    serde_json::to_string(&sc).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// A flag that stops the runs given it (Ctrl-C): `set()` from any thread;
/// `sim_ps()` is the simulated time the run has reached (a progress bar).
#[pyclass(frozen)]
#[derive(Default)]
struct StopFlag(irqlab_core::engine::sim::RunControl);

#[pymethods]
impl StopFlag {
    #[new]
    fn new() -> Self {
        Self::default()
    }
    fn set(&self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }
    fn is_set(&self) -> bool {
        self.0.stop.load(Ordering::Relaxed)
    }
    fn sim_ps(&self) -> u64 {
        self.0.now.load(Ordering::Relaxed)
    }
}

/// Refuses a run whose estimated events or memory pass the limits (issue 11):
/// a ceiling on events, and half of this machine's RAM.
fn within_budget(sc: &irqlab_core::Scenario, origin: &str, trace: bool) -> PyResult<()> {
    let ram = irqlab_host::physical_memory() as f64;
    let max_memory = if ram > 0.0 { ram / 2.0 } else { 8e9 };
    // IRQLAB_MAX_EVENTS moves the events ceiling (documented in docs/bad-input.md).
    // A value that is not a positive number is refused, not ignored: the user meant a ceiling.
    let max_events = match std::env::var("IRQLAB_MAX_EVENTS") {
        Err(_) => irqlab_core::scenario::budget::MAX_EVENTS,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(n) if n > 0.0 && n.is_finite() => n,
            _ => return Err(ScenarioError::new_err(format!("IRQLAB_MAX_EVENTS={v}: expected a positive number of events, like 5e9"))),
        },
    };
    irqlab_core::scenario::budget::check(sc, trace, max_events, max_memory)
        .map_err(|(key, msg)| ScenarioError::new_err(format!("{origin}: {key}: {msg}")))
}

/// Asks the allocator for the state the scenario sizes (`budget::reserve`):
/// a size it refuses is a one-line ScenarioError, `--force` or not.
fn reserved(sc: &irqlab_core::Scenario, origin: &str) -> PyResult<()> {
    irqlab_core::scenario::budget::reserve(sc).map_err(|(key, msg)| ScenarioError::new_err(format!("{origin}: {key}: {msg}")))
}

/// Checks a scenario (with overrides) against the run budget without running it.
#[pyfunction]
#[pyo3(signature = (text, origin, overrides=vec![], trace=false))]
fn check_budget(text: &str, origin: &str, overrides: Vec<String>, trace: bool) -> PyResult<()> {
    let sc = load(text, origin, overrides)?;
    within_budget(&sc, origin, trace)
}

fn options(seed: Option<u64>, trace: bool, stop: Option<&Bound<'_, StopFlag>>) -> irqlab_core::RunOptions {
    irqlab_core::RunOptions { seed, trace, trace_to: None, audit: false, stop: stop.map(|f| f.get().0.clone()) }
}

/// A stopped run's partial results are not results: it ends as KeyboardInterrupt.
fn finished<T>(out: (T, bool)) -> PyResult<T> {
    match out {
        (_, true) => Err(PyKeyboardInterrupt::new_err("the run was stopped before its end")),
        (v, false) => Ok(v),
    }
}

/// Runs a scenario with the GIL released; returns (result JSON, trace bytes or
/// None). With `trace_to` the trace is streamed into that file (memory stays
/// bounded) and None is returned; a write failure raises OSError.
#[pyfunction]
#[pyo3(signature = (text, origin, overrides=vec![], seed=None, trace=false, stop=None, force=false, trace_to=None))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    text: &str,
    origin: &str,
    overrides: Vec<String>,
    seed: Option<u64>,
    trace: bool,
    stop: Option<&Bound<'_, StopFlag>>,
    force: bool,
    trace_to: Option<std::path::PathBuf>,
) -> PyResult<(String, PyObject)> {
    let sc = load(text, origin, overrides)?;
    // A replay source draws nothing of its own: without its recorded arrivals
    // the run would report zeros that look like a result.
    if let Some(i) = sc.sources.iter().position(|s| s.replay.is_some()) {
        return Err(ScenarioError::new_err(format!(
            "{origin}: source[{i}].replay: replays a recorded trace: expected `irqlab replay TRACE --scenario {origin}`"
        )));
    }
    let trace = trace || trace_to.is_some();
    if !force {
        // A streamed trace costs no memory per event.
        within_budget(&sc, origin, trace && trace_to.is_none())?;
    }
    reserved(&sc, origin)?;
    let mut opt = options(seed, trace, stop);
    opt.trace_to = trace_to;
    let (json, bytes, error) = finished(py.allow_threads(|| {
        guarded(|| {
            let out = irqlab_core::run(&sc, opt);
            ((irqlab_core::to_json(&sc, &out), out.trace, out.trace_error), out.stopped)
        })
    })?)?;
    if let Some(e) = error {
        return Err(pyo3::exceptions::PyOSError::new_err(e));
    }
    let bytes = match bytes {
        Some(b) => PyBytes::new_bound(py, &b).into_any().unbind(),
        None => py.None(),
    };
    Ok((json, bytes))
}

/// The zero costs a scenario's results depend on: [(key path, [metric globs])].
#[pyfunction]
#[pyo3(signature = (text, origin, overrides=vec![]))]
fn zero_costs(text: &str, origin: &str, overrides: Vec<String>) -> PyResult<Vec<(String, Vec<&'static str>)>> {
    let sc = load(text, origin, overrides)?;
    guarded(|| irqlab_core::scenario::provenance::zero_costs(&sc))
}

/// KVM's request list: (the names in upstream's old order, {preset: names},
/// [(request, what servicing it raises with LVTPC in NMI mode)]).
#[pyfunction]
fn kvm_requests() -> irqlab_core::components::kvm_x86::requests::Table {
    irqlab_core::components::kvm_x86::requests::table()
}

/// `irqlab measure` loops (GIL released): ns per gettid call.
#[pyfunction]
fn host_gettid_ns(py: Python<'_>, calls: u64) -> f64 {
    py.allow_threads(|| irqlab_host::gettid_ns(calls))
}

fn counted(c: irqlab_host::Counted) -> (u64, u64, u64) {
    (c.count, c.elapsed_ns, c.minor_faults)
}

/// sched_yield for about `seconds`: (calls, elapsed ns, minor faults).
#[pyfunction]
fn host_sched_yield_ops(py: Python<'_>, seconds: f64) -> (u64, u64, u64) {
    counted(py.allow_threads(|| irqlab_host::sched_yield_ops(std::time::Duration::from_secs_f64(seconds.max(0.0)))))
}

/// page_fault1 over `bytes` for about `seconds`: (pages written, elapsed ns, minor faults).
#[pyfunction]
fn host_page_faults(py: Python<'_>, seconds: f64, bytes: usize) -> PyResult<(u64, u64, u64)> {
    py.allow_threads(|| irqlab_host::page_faults(std::time::Duration::from_secs_f64(seconds.max(0.0)), bytes))
        .map(counted)
        .map_err(PyRuntimeError::new_err)
}

/// Runs a scenario whose `replay` sources take recorded arrivals:
/// `arrivals` maps a replay key to sorted times in ps. Returns the result JSON.
#[pyfunction]
#[pyo3(signature = (text, origin, overrides, seed, arrivals, stop=None, force=false))]
#[allow(clippy::too_many_arguments)]
fn run_replay(
    py: Python<'_>,
    text: &str,
    origin: &str,
    overrides: Vec<String>,
    seed: Option<u64>,
    arrivals: std::collections::BTreeMap<String, Vec<u64>>,
    stop: Option<&Bound<'_, StopFlag>>,
    force: bool,
) -> PyResult<String> {
    let sc = load(text, origin, overrides)?;
    if !force {
        within_budget(&sc, origin, false)?;
    }
    reserved(&sc, origin)?;
    let opt = options(seed, false, stop);
    finished(py.allow_threads(|| {
        guarded(|| {
            let out = irqlab_core::run_replay(&sc, opt, &arrivals);
            (irqlab_core::to_json(&sc, &out), out.stopped)
        })
    })?)
}

/// A time as scenarios write it ("300ns", "1.5us"), in picoseconds.
#[pyfunction]
fn parse_time_ps(text: &str) -> PyResult<u64> {
    irqlab_core::scenario::parse_time(text).map_err(|e| ScenarioError::new_err(e.0))
}

/// A rate as scenarios write it ("1M/s", "200k"), per second.
#[pyfunction]
fn parse_rate(text: &str) -> PyResult<f64> {
    irqlab_core::scenario::parse_rate(text).map_err(|e| ScenarioError::new_err(e.0))
}

/// The JSON Schema of the scenario format.
#[pyfunction]
fn schema() -> String {
    irqlab_core::scenario::json_schema()
}

/// The reference model's load spread over `cpus` CPUs (`irqlab bench --scale`).
#[pyfunction]
fn scale_scenario(cpus: u32) -> String {
    irqlab_core::bench::scale_scenario(cpus)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ScenarioError", m.py().get_type_bound::<ScenarioError>())?;
    m.add_function(wrap_pyfunction!(load_scenario, m)?)?;
    m.add("load", m.getattr("load_scenario")?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(schema, m)?)?;
    m.add_function(wrap_pyfunction!(kvm_requests, m)?)?;
    m.add_function(wrap_pyfunction!(zero_costs, m)?)?;
    m.add_class::<StopFlag>()?;
    m.add_function(wrap_pyfunction!(check_budget, m)?)?;
    m.add_function(wrap_pyfunction!(host_gettid_ns, m)?)?;
    m.add_function(wrap_pyfunction!(run_replay, m)?)?;
    m.add_function(wrap_pyfunction!(host_sched_yield_ops, m)?)?;
    m.add_function(wrap_pyfunction!(host_page_faults, m)?)?;
    m.add_function(wrap_pyfunction!(parse_time_ps, m)?)?;
    m.add_function(wrap_pyfunction!(parse_rate, m)?)?;
    m.add_function(wrap_pyfunction!(scale_scenario, m)?)?;
    Ok(())
}
