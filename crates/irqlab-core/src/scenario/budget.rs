//! What a run will cost, estimated from the scenario before it starts, so that
//! a rate of 1e12/s or 2^31 sources is refused with one line instead of
//! hanging for hours or aborting on an allocation. The estimates are rough
//! upper-end figures (events per item, bytes per item, below); they need only
//! tell a run of minutes from one of days, and 10 GB from 10 MB.

pub use super::check::Estimate;
use super::check::{BYTES_PER_SOURCE, BYTES_PER_TASK};
use super::{Arrival, ExceptionKind, Scenario};

/// Events one interrupt costs the engine (arrival, fabric, delivery, entry,
/// handler end, exit), one loop pass (its phases): counted from the models'
/// event kinds, rounded up. A component's section adds its own (its params'
/// `estimate`, listed in `Scenario::estimate_components`).
const EVENTS_PER_IRQ: f64 = 6.0;
const EVENTS_PER_PASS: f64 = 4.0;
/// Bytes of state per item, generous (the components' own are in check.rs).
const BYTES_PER_CPU: f64 = 2048.0;
const BYTES_PER_SLOT: f64 = 8.0;
/// A Perfetto trace held in memory, per event (measured: 5.4 GB for 1e8 events).
const BYTES_PER_TRACE_EVENT: f64 = 64.0;

/// The default ceiling on a run's events: about ten minutes at this engine's
/// speed on the CI machine (DESIGN.md's budget); `--force` lifts it.
pub const MAX_EVENTS: f64 = 1e10;

/// Estimates the events and memory of running `sc` (with a trace if `trace`).
pub fn estimate(sc: &Scenario, trace: bool) -> Estimate {
    let secs = sc.duration.ps() as f64 / 1e12;
    let mut e = Estimate::default();
    e.add("platform.cpus", 0.0, "platform.cpus", sc.platform.cpus as f64 * BYTES_PER_CPU);
    e.add("fabric.slots", 0.0, "fabric.slots", sc.fabric.slots as f64 * BYTES_PER_SLOT);
    for (i, s) in sc.sources.iter().enumerate() {
        let per_s = if s.arrival == Arrival::Periodic || s.rate.0 > 0.0 { s.rate.0 } else { 0.0 };
        let n = s.count as f64;
        e.add(&format!("source.{i}.rate"), n * per_s * secs * EVENTS_PER_IRQ, &format!("source.{i}.count"), n * BYTES_PER_SOURCE);
    }
    for (i, t) in sc.tasks.iter().enumerate() {
        let mut pass = t.work.ps() + t.body_time(&sc.cpu, &sc.pagefault).ps();
        if t.exception != ExceptionKind::None {
            pass += sc.cpu.exception_entry.ps() + sc.cpu.exception_exit.ps();
        }
        let passes = if pass == 0 { f64::INFINITY } else { sc.duration.ps() as f64 / pass as f64 };
        let n = t.count as f64;
        e.add(&format!("task.{i}.work"), n * passes * EVENTS_PER_PASS, &format!("task.{i}.count"), n * BYTES_PER_TASK);
    }
    sc.estimate_components(secs, &mut e);
    if trace {
        let events = (sc.trace.max_events as f64).min(e.events);
        e.add("trace.max_events", 0.0, "trace.max_events", events * BYTES_PER_TRACE_EVENT);
    }
    e
}

fn bytes(x: f64) -> String {
    let (v, p) =
        [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")].into_iter().find(|(d, _)| x >= *d).unwrap_or((1.0, "B"));
    format!("{:.1} {p}", x / v)
}

fn events(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1e} events")
    } else {
        "unbounded events".into()
    }
}

/// Asks the allocator for the per-item state each scenario key sizes
/// (`try_reserve_exact`, released at once), so that a size it refuses is a
/// one-line error naming the key rather than an abort in the middle of the
/// build. It holds under `--force`, which lifts only `check`'s limits. (The
/// build allocates the same amounts right after; a trace, which grows as the
/// run goes, is not counted.)
pub fn reserve(sc: &Scenario) -> Result<(), (String, String)> {
    for (key, memory) in estimate(sc, false).memory_parts {
        let n = if memory.is_finite() && memory < usize::MAX as f64 { memory as usize } else { usize::MAX };
        if Vec::<u8>::new().try_reserve_exact(n).is_err() {
            return Err((key, format!("its state needs about {}, which this machine cannot allocate; make it smaller", bytes(memory))));
        }
    }
    Ok(())
}

/// What the named key contributes to a total, as the refusal says it: "about
/// all of it" rather than the total again ("3.8e14 events (3.8e14 events from
/// here)" read as a stutter; a review).
fn share(part: String, total: String, why: &str) -> String {
    if part == total {
        format!("nearly all of it from this key{why}")
    } else {
        format!("{part} of it from this key{why}")
    }
}

/// Refuses a run whose estimate passes the limits: (key, message), one line.
pub fn check(sc: &Scenario, trace: bool, max_events: f64, max_memory: f64) -> Result<(), (String, String)> {
    let e = estimate(sc, trace);
    if e.memory > max_memory {
        let (key, part) = &e.top_memory;
        return Err((
            key.clone(),
            format!(
                "the run would need about {} of memory ({}), over the limit of {} (half this machine's RAM); make it smaller, or pass --force",
                bytes(e.memory),
                share(bytes(*part), bytes(e.memory), ""),
                bytes(max_memory)
            ),
        ));
    }
    if e.events > max_events {
        let (key, part) = &e.top_events;
        let zero_time_loop = part.is_infinite() && key.starts_with("task.");
        let why = if zero_time_loop { ": one pass of the loop takes no time (work, body, entry and exit are all 0)" } else { "" };
        return Err((
            key.clone(),
            format!(
                "the run would take about {} ({}), over the limit of {}; lower the rate, count or duration, or pass --force",
                events(e.events),
                share(events(*part), events(e.events), why),
                events(max_events)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(text: &str) -> Scenario {
        crate::load(text, "b.toml", &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn floods_and_zero_time_loops_are_refused_and_name_their_key() {
        let flood = sc("name = \"f\"\nduration = \"1s\"\n[[source]]\nname = \"x\"\nrate = \"1e12/s\"\nhandler = \"1us\"\n");
        let (key, msg) = check(&flood, false, MAX_EVENTS, 1e12).unwrap_err();
        assert_eq!(key, "source.0.rate");
        assert!(msg.contains("--force"), "{msg}");
        // One source makes the whole: said once, not the total twice.
        assert!(msg.contains("(nearly all of it from this key)"), "{msg}");
        // (Validation refuses every other loop that takes no time.)
        let zero = sc("name = \"z\"\nduration = \"1ms\"\n[cpu]\ncontext_switch = \"1us\"\n[[task]]\nname = \"t\"\nwork = \"0ns\"\nexception = \"yield\"\n");
        let (key, msg) = check(&zero, false, MAX_EVENTS, 1e12).unwrap_err();
        assert_eq!(key, "task.0.work");
        assert!(msg.contains("takes no time"), "{msg}");
        let slots = sc("name = \"s\"\nduration = \"1ms\"\n[fabric]\nslots = 4294967295\n");
        assert_eq!(check(&slots, false, MAX_EVENTS, 8e9).unwrap_err().0, "fabric.slots");
        let fio = sc(r#"
name = "fio"
duration = "1ms"
[[nvme]]
name = "ssd"
cpus = [0]
iops = "1M"
fio = { jobs = 4096, iodepth = 65535 }
"#);
        assert_eq!(check(&fio, false, MAX_EVENTS, 8e9).unwrap_err().0, "nvme.0.fio");
        // Polling jobs taking 10 us turns on 64 CPUs for an hour: 7e10 turns' events, few I/Os.
        let turns = sc(r#"
name = "turns"
duration = "3600s"
[platform]
cpus = 64
[[nvme]]
name = "ssd"
cpus = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63]
queues = 64
iops = "1k"
latency = "1ms"
moderation = { kind = "polling" }
poll_slice = "10us"
fio = { jobs = 128, iodepth = 1 }
"#);
        assert_eq!(check(&turns, false, MAX_EVENTS, 8e9).unwrap_err().0, "nvme.0.poll_slice");
        // A requester that looks every ps for 10 s: 10^13 looks.
        let spin = sc("name = \"c\"\nduration = \"20s\"\n[platform]\ncpus = 2\n[[crosscall]]\nname = \"bt\"\nat = \"1ms\"\n\
                       mechanisms = [\"ipi\"]\nwaits = [\"10s\"]\nhandler = \"1us\"\nrequester_poll = \"1ps\"\n");
        assert_eq!(check(&spin, false, MAX_EVENTS, 8e9).unwrap_err().0, "crosscall[0].requester_poll");
    }

    #[test]
    fn the_scales_other_work_needs_stay_accepted() {
        let big = sc(r#"
name = "big"
duration = "10ms"
[platform]
cpus = 4096
[[source]]
name = "many"
count = 1000000
rate = "10/s"
handler = "1us"
[[nvme]]
name = "ssd"
count = 8
queues = 64
cpus = [0]
iops = "1.7M"
fio = { jobs = 256, iodepth = 256 }
"#);
        check(&big, false, MAX_EVENTS, 4e9).expect("accepted");
        assert!(estimate(&big, true).memory > estimate(&big, false).memory);
    }

    #[test]
    fn a_size_the_allocator_refuses_is_one_line_naming_its_key() {
        // 64 disks x 4,096 jobs x iodepth 65,535: 1.1 PB of I/O state, past any
        // x86-64 or arm64 address space (the run used to abort; --force skipped `check`).
        let text = "name = \"x\"\nduration = \"1ms\"\n[[nvme]]\nname = \"d\"\ncount = 64\ncpus = [0]\niops = \"1M\"\n\
                    [nvme.fio]\njobs = 4096\niodepth = 65535\n";
        let (key, msg) = reserve(&sc(text)).unwrap_err();
        assert_eq!(key, "nvme.0.fio");
        assert!(msg.contains("1.1 PB") || msg.contains("TB"), "{msg}");
        assert!(msg.contains("cannot allocate") && !msg.contains('\n'), "{msg}");
        let fine = sc("name = \"x\"\nduration = \"1ms\"\n[fabric]\nslots = 4096\nmsi_write = \"100ns\"\n");
        assert_eq!(reserve(&fine), Ok(()));
    }
}
