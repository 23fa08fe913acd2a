//! M1's acceptance: who reaches a masked CPU, and masking delays but never drops.

use crate::engine::stats::{Cell, Report};
use crate::run::{run, RunOptions};
use std::collections::BTreeMap;

/// CPU 1 spins in a `wedge`-long IRQs-off section masked `with` (daif or pmr);
/// CPU 0 (unless `extra` says `from`) calls it at 10 ms with `mechanisms`.
fn wedged(masking: &str, with: &str, mechanisms: &str, extra: &str, duration: &str) -> BTreeMap<String, f64> {
    wedged_with(masking, with, mechanisms, extra, duration, "2us")
}

/// [`wedged`] with the call's `handler`.
fn wedged_with(masking: &str, with: &str, mechanisms: &str, extra: &str, duration: &str, handler: &str) -> BTreeMap<String, f64> {
    wedged_report(masking, with, mechanisms, extra, duration, handler).metrics
}

/// [`wedged_with`]'s whole report (its warnings too).
fn wedged_report(masking: &str, with: &str, mechanisms: &str, extra: &str, duration: &str, handler: &str) -> Report {
    let toml = format!(
        r#"
name = "wedged"
duration = "{duration}"
[platform]
cpus = 2
[cpu]
masking = "{masking}"
irq_entry = "100ns"
irq_exit = "100ns"
[cpu.pmr]
access = "15ns"
[cpu.sdei]
signal = "2us"
dispatch = "5us"
complete = "1us"
[[task]]
name = "wedge"
cpus = [1]
work = "1us"
exception = "syscall"
body = "100ms"
irqs_off = "100ms"
irqs_off_with = "{with}"
[[crosscall]]
name = "bt"
at = "10ms"
mechanisms = [{mechanisms}]
handler = "{handler}"
{extra}
"#
    );
    let sc = crate::load(&toml, "wedged.toml", &[]).expect("valid scenario");
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.double_deliveries, 0);
    assert_eq!(out.audit.time_reversals, 0);
    out.report
}

#[test]
fn a_call_the_run_cuts_off_says_so_and_one_that_ran_its_course_does_not() {
    let cut = |w: &Report| w.warnings.iter().any(|w| w.contains("before the call had run its course"));
    // The IPI cannot get past DAIF; SDEI would go at 15 ms, after a 12 ms run.
    let short = wedged_report("daif", "daif", r#""ipi", "sdei""#, "timeout = \"5ms\"", "12ms", "2us");
    assert_eq!(short.metrics["crosscall.bt.reached"], 0.0);
    assert!(cut(&short), "{:?}", short.warnings);
    let long = wedged_report("daif", "daif", r#""ipi", "sdei""#, "timeout = \"5ms\"", "50ms", "2us");
    assert_eq!(long.metrics["crosscall.bt.reached"], 1.0);
    assert!(!cut(&long), "{:?}", long.warnings);
    // Every signal sent and no deadline: a target not reached is the result, not a cut.
    let done = wedged_report("daif", "daif", r#""ipi""#, "", "50ms", "2us");
    assert_eq!(done.metrics["crosscall.bt.reached"], 0.0);
    assert!(!cut(&done), "{:?}", done.warnings);
}

#[test]
fn daif_masked_cpu_is_not_reached_by_ipi_or_pseudo_nmi() {
    for (masking, mech) in [("daif", r#""ipi""#), ("pmr", r#""ipi""#), ("pmr", r#""pseudo-nmi""#)] {
        let m = wedged(masking, "daif", mech, "", "50ms");
        assert_eq!(m["crosscall.bt.reached"], 0.0, "{masking} {mech}");
        assert_eq!(m["crosscall.bt.handler_runs"], 0.0);
    }
}

#[test]
fn daif_masked_cpu_is_reached_by_sdei_and_feat_nmi() {
    let sdei = wedged("daif", "daif", r#""sdei""#, "", "50ms");
    assert_eq!(sdei["crosscall.bt.reached"], 1.0);
    // signal 2 us, then the target runs firmware dispatch (5 us) before the handler.
    let lat = wedged_latency_ns(&sdei);
    assert!((lat - 7_000.0).abs() < 1.0, "sdei latency {lat}");
    let nmi = wedged("daif", "daif", r#""nmi""#, "", "50ms");
    assert_eq!(nmi["crosscall.bt.reached"], 1.0);
    assert!((wedged_latency_ns(&nmi) - 100.0).abs() < 1.0, "FEAT_NMI takes the IRQ vector's entry");
}

fn wedged_latency_ns(m: &BTreeMap<String, f64>) -> f64 {
    m["crosscall.bt.time_to_all_ns"]
}

#[test]
fn pmr_masked_cpu_is_reached_by_pseudo_nmi_not_ipi() {
    let ipi = wedged("pmr", "pmr", r#""ipi""#, "", "50ms");
    assert_eq!(ipi["crosscall.bt.reached"], 0.0);
    let nmi = wedged("pmr", "pmr", r#""pseudo-nmi""#, "", "50ms");
    assert_eq!(nmi["crosscall.bt.reached"], 1.0);
    assert_eq!(nmi["crosscall.bt.handler_runs"], 1.0);
}

#[test]
fn sdei_signals_before_the_handler_runs_give_one_run() {
    // Three signals 1 us apart all reach the target during the 5 us dispatch of the first.
    let m = wedged("daif", "daif", r#""sdei""#, "signals = 3\nsignal_interval = \"1us\"", "50ms");
    assert_eq!(m["crosscall.bt.signals"], 3.0);
    assert_eq!(m["crosscall.bt.handler_runs"], 1.0);
    // Spaced beyond dispatch + handler + complete, the requester sees the answer and stops.
    let m = wedged("daif", "daif", r#""sdei""#, "signals = 3\nsignal_interval = \"20us\"", "50ms");
    assert_eq!(m["crosscall.bt.signals"], 1.0);
    assert_eq!(m["crosscall.bt.handler_runs"], 1.0);
}

#[test]
fn escalation_reaches_what_the_first_mechanism_cannot() {
    let m = wedged("daif", "daif", r#""ipi", "sdei""#, "timeout = \"1ms\"", "50ms");
    assert_eq!(m["crosscall.bt.reached_by.ipi"], 0.0);
    assert_eq!(m["crosscall.bt.reached_by.sdei"], 1.0);
    let lat = wedged_latency_ns(&m);
    assert!((lat - 1_007_000.0).abs() < 1.0, "timeout + signal + dispatch, got {lat}");
    // A healthy target answers the IPI and is never escalated (asked by a
    // requester outside the machine: the wedged CPU 1 could not send it).
    let m = wedged("daif", "daif", r#""ipi", "sdei""#, "timeout = \"1ms\"\ntargets = [0]\nfrom = 1\nrequester_spins = false", "50ms");
    assert_eq!(m["crosscall.bt.reached_by.ipi"], 1.0);
    assert_eq!(m["crosscall.bt.signals"], 1.0);
    // A wedged requester sends nothing: its CPU never takes the request.
    let m = wedged("daif", "daif", r#""ipi", "sdei""#, "timeout = \"1ms\"\ntargets = [0]\nfrom = 1", "50ms");
    assert_eq!(m["crosscall.bt.signals"], 0.0);
    assert_eq!(m["crosscall.bt.reached"], 0.0);
}

#[test]
fn unmasking_delivers_the_held_back_ipi_exactly_once() {
    // The wedge ends at about 100 ms: the IPI held back since 10 ms gets through, once.
    let m = wedged("daif", "daif", r#""ipi""#, "signals = 4\nsignal_interval = \"1ms\"\ntimeout = \"10ms\"", "150ms");
    assert_eq!(m["crosscall.bt.reached"], 1.0);
    assert_eq!(m["crosscall.bt.handler_runs"], 1.0, "4 signals merge in the pending bit");
    let lat = wedged_latency_ns(&m);
    assert!(lat > 89e6 && lat < 91e6, "held back until the wedge ends, got {lat}");
}

/// An SDEI cross-call from CPU 0 to every other CPU of an idle `cpus`-CPU machine.
fn sdei_to_all(cpus: u32) -> BTreeMap<String, f64> {
    let toml = format!(
        r#"
name = "sdei-fanout"
duration = "1ms"
[platform]
cpus = {cpus}
[cpu.sdei]
signal = "2us"
dispatch = "5us"
complete = "1us"
[[crosscall]]
name = "stop"
at = "100us"
mechanisms = ["sdei"]
handler = "2us"
"#
    );
    let sc = crate::load(&toml, "sdei.toml", &[]).expect("valid scenario");
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.double_deliveries, 0);
    out.report.metrics
}

#[test]
fn sdei_signals_one_target_per_smc_so_time_to_all_grows_with_targets() {
    let mut last = 0.0;
    for cpus in [2, 3, 5, 9, 17] {
        let m = sdei_to_all(cpus);
        let n = (cpus - 1) as f64;
        assert_eq!(m["crosscall.stop.all_reached"], 1.0);
        // The last target's event is marked after n SMCs of 2 µs, then dispatched (5 µs).
        assert_eq!(m["crosscall.stop.time_to_all_ns"], n * 2000.0 + 5000.0, "{cpus} CPUs");
        assert_eq!(m["crosscall.stop.requester_smc_ns"], n * 2000.0);
        assert!(m["crosscall.stop.time_to_all_ns"] > last);
        last = m["crosscall.stop.time_to_all_ns"];
    }
}

#[test]
fn a_repeat_whose_length_overflows_is_refused_not_wrapped() {
    let toml = r#"
name = "wrap"
duration = "1ms"
[platform]
cpus = 2
[[crosscall]]
name = "bt"
at = "10us"
mechanisms = ["ipi", "sdei"]
signals = 2147483649
signal_interval = "8589934592ps"
timeout = "1ms"
handler = "1us"
"#;
    let Err(e) = crate::load(toml, "wrap.toml", &[]) else { panic!("a wrapped repeat was accepted") };
    assert!(e.0.contains("crosscall[0].timeout"), "{}", e.0);
}

/// `waits`, one per mechanism: arm64's `smp_send_stop` shape (a long wait for
/// the IPI, a short one for the NMI) sends each stage after the sum of the waits
/// before it, not at `k × timeout`; and a target reached after the last wait
/// does not count: the requester had given up (`reached_late`). (One timeout
/// for every stage sent SDEI a whole stage late, and a stop counted a CPU it
/// had given up on; a review.)
#[test]
fn per_stage_waits_escalate_on_their_own_clock_and_the_last_one_is_a_deadline() {
    // A 100 ms DAIF wedge from t = 0; the call at 10 ms.
    let ladder = wedged("pmr", "daif", r#""ipi", "pseudo-nmi", "sdei""#, r#"waits = ["20ms", "1ms", "1ms"]"#, "150ms");
    assert_eq!(
        ladder["crosscall.bt.reached_by.sdei"],
        1.0,
        "{:?}",
        ladder.iter().filter(|(k, _)| k.starts_with("crosscall")).collect::<Vec<_>>()
    );
    // SDEI goes at 21 ms: 2 us of SMC and 5 us of dispatch later, the handler.
    let lat = wedged_latency_ns(&ladder);
    assert!((lat - 21_007_000.0).abs() < 1.0, "{lat}");
    let old = wedged("pmr", "daif", r#""ipi", "pseudo-nmi", "sdei""#, r#"timeout = "20ms""#, "150ms");
    assert!((wedged_latency_ns(&old) - 40_007_000.0).abs() < 1.0, "{}", wedged_latency_ns(&old));
    assert!(!old.contains_key("crosscall.bt.reached_late"));
    // A stop by IPI alone with a 1 s wait... here 50 ms: the wedge ends at ~100 ms, after it.
    let stop = wedged("daif", "daif", r#""ipi""#, r#"waits = ["50ms"]"#, "150ms");
    assert_eq!(stop["crosscall.bt.reached"], 0.0);
    assert_eq!(stop["crosscall.bt.reached_late"], 1.0, "{:?}", stop.iter().filter(|(k, _)| k.starts_with("crosscall")).collect::<Vec<_>>());
    assert_eq!(stop["crosscall.bt.all_reached"], 0.0);
    assert!(stop["crosscall.bt.handler_runs"] >= 1.0, "the handler still ran, late");
}

/// The IPI and the pseudo-NMI a DAIF wedge held back run their handlers once
/// it ends, after SDEI's run has printed: `nmi_cpu_backtrace` finds the CPU
/// already cleared from the mask and returns, so of three runs only the first
/// costs `handler` (until 2026-11-28 each did: 3 ms of hardirq for a 1 ms print).
#[test]
fn only_the_first_handler_run_of_a_target_prints() {
    let run = |handler| {
        let m = wedged_with("pmr", "daif", r#""ipi", "pseudo-nmi", "sdei""#, r#"waits = ["20ms", "1ms", "1ms"]"#, "150ms", handler);
        assert_eq!(m["crosscall.bt.handler_runs"], 3.0);
        assert_eq!(m["crosscall.bt.reached_by.sdei"], 1.0);
        m["cpu1.hardirq_share"] * 150e6
    };
    let extra = run("1ms") - run("2us");
    assert!((extra - 998_000.0).abs() < 1.0, "a 998 us longer print adds {extra} ns of hardirq");
}

/// A backtrace shows the code the handler interrupted: SDEI in a DAIF wedge
/// and a pseudo-NMI in a PMR wedge interrupt the masked spin; a pseudo-NMI
/// that DAIF.I held back, and a plain IPI, get in only once the wedge has
/// ended (at 100 ms), and interrupt the unmasked code after it.
#[test]
fn a_handler_says_whether_it_interrupted_the_masked_code() {
    for (masking, with, mech, inside) in [
        ("daif", "daif", r#""sdei""#, true),
        ("pmr", "pmr", r#""pseudo-nmi""#, true),
        ("pmr", "daif", r#""pseudo-nmi""#, false),
        ("daif", "daif", r#""ipi""#, false),
    ] {
        let m = wedged(masking, with, mech, "", "150ms");
        assert_eq!(m["crosscall.bt.reached"], 1.0, "{masking} {with} {mech}");
        assert_eq!(m["crosscall.bt.reached_masked"], inside as u8 as f64, "{masking} {with} {mech}");
        let lat = wedged_latency_ns(&m);
        assert_eq!(lat < 1e6, inside, "{masking} {with} {mech}: reached after {lat} ns");
    }
}

/// Five idle CPUs take a backtrace IPI at once: with `serial` they print one at
/// a time (`printk_cpu_sync`), so the k-th answers k handlers after the signal
/// and the requester's wait is the last print's end; without, each answers as
/// its handler starts.
fn five_idle(serial: bool) -> BTreeMap<String, f64> {
    let toml = format!(
        "name = \"five\"\nduration = \"20ms\"\n[platform]\ncpus = 6\n[cpu]\nirq_entry = \"100ns\"\n\
         [[crosscall]]\nname = \"bt\"\nat = \"10ms\"\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = {serial}\n"
    );
    let sc = crate::load(&toml, "five.toml", &[]).expect("valid scenario");
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.double_deliveries, 0);
    let mut m = out.report.metrics;
    let t = &out.report.tables["crosscall_targets"];
    let col = t.columns.iter().position(|c| c == "answered_ns").expect("answered_ns column");
    let mut answers: Vec<f64> =
        t.rows.iter().map(|r| if let Cell::Num(v) = r[col] { v } else { panic!("a target did not answer") }).collect();
    answers.sort_by(f64::total_cmp);
    for (k, a) in answers.iter().enumerate() {
        m.insert(format!("answer{k}"), *a);
    }
    m
}

#[test]
fn serial_backtraces_answer_one_print_after_another() {
    let s = five_idle(true);
    assert_eq!(s["crosscall.bt.reached"], 5.0);
    // Every handler starts 100 ns after the signal; the prints follow each other.
    assert!((s["crosscall.bt.time_to_all_ns"] - 100.0).abs() < 1.0, "{}", s["crosscall.bt.time_to_all_ns"]);
    for k in 0..5 {
        let want = 100.0 + 20_000.0 * (k as f64 + 1.0);
        assert!((s[&format!("answer{k}")] - want).abs() < 1.0, "answer {k}: {} against {want}", s[&format!("answer{k}")]);
    }
    assert!((s["crosscall.bt.time_to_all_answered_ns"] - 100_100.0).abs() < 1.0);
    assert!((s["crosscall.bt.requester_wait_ns"] - 100_100.0).abs() < 1.0);
    // The spin on the lock is the handlers' time: 20 + 40 + ... + 100 us of hardirq.
    let p = five_idle(false);
    assert!(!p.contains_key("crosscall.bt.time_to_all_answered_ns"));
    for k in 0..5 {
        assert!((p[&format!("answer{k}")] - 100.0).abs() < 1.0);
    }
    assert!((p["crosscall.bt.requester_wait_ns"] - 100.0).abs() < 1.0);
    let busy = |m: &BTreeMap<String, f64>| (1..6).map(|c| m[&format!("cpu{c}.hardirq_share")]).sum::<f64>() * 20e6;
    assert!((busy(&s) - 300_000.0 - 500.0).abs() < 50.0, "{}", busy(&s));
    assert!((busy(&p) - 100_000.0 - 500.0).abs() < 50.0, "{}", busy(&p));
}

#[test]
fn the_next_mechanism_signals_each_target_not_yet_reached() {
    // Two CPUs wedged under DAIF: the IPIs wait, and after 1 ms SDEI must go to
    // both of them, each through its own source (stage 1 of two targets).
    let toml = r#"
name = "two"
duration = "20ms"
[platform]
cpus = 3
[cpu]
irq_entry = "100ns"
[cpu.sdei]
dispatch = "5us"
[[task]]
name = "wedge"
count = 2
cpus = [1, 2]
work = "1us"
exception = "syscall"
body = "50ms"
irqs_off = "50ms"
irqs_off_with = "daif"
[[crosscall]]
name = "bt"
at = "5ms"
mechanisms = ["ipi", "sdei"]
timeout = "1ms"
handler = "2us"
"#;
    let sc = crate::load(toml, "two.toml", &[]).expect("valid scenario");
    let m = run(&sc, RunOptions::default()).report.metrics;
    assert_eq!(m["crosscall.bt.reached_by.sdei"], 2.0, "{m:?}");
    assert_eq!(m["crosscall.bt.reached_by.ipi"], 0.0);
    assert!((m["crosscall.bt.time_to_all_ns"] - 1_005_000.0).abs() < 1.0, "{}", m["crosscall.bt.time_to_all_ns"]);
}

#[test]
fn an_answer_at_the_deadline_is_in_time_and_one_after_it_is_late() {
    // An idle target: FEAT_NMI's handler starts 100 ns after the request.
    let late = |wait: &str| {
        let toml = format!(
            "name = \"d\"\nduration = \"2ms\"\n[platform]\ncpus = 2\n[cpu]\nirq_entry = \"100ns\"\n\
             [[crosscall]]\nname = \"bt\"\nat = \"1ms\"\nmechanisms = [\"nmi\"]\nwaits = [\"{wait}\"]\nhandler = \"1us\"\n"
        );
        let sc = crate::load(&toml, "d.toml", &[]).expect("valid scenario");
        let m = run(&sc, RunOptions::default()).report.metrics;
        (m["crosscall.bt.reached"], m["crosscall.bt.reached_late"])
    };
    assert_eq!(late("100ns"), (1.0, 0.0));
    assert_eq!(late("99ns"), (0.0, 1.0));
}

/// Each bad `[[crosscall]]` is refused at its key, and the nearest good one
/// is taken: the call within the measured span (at warm-up is in, at the
/// duration out), CPUs that exist and run the host, each target and
/// mechanism once, pseudo-NMI only with PMR masking, and escalation waits
/// longer than the repeats. (Mutation testing found `check`'s refusals and
/// their boundaries unchecked.)
#[test]
fn bad_crosscalls_are_refused_at_their_key() {
    let load = |top: &str, calls: &[&str]| {
        let mut toml = format!("name = \"c\"\nduration = \"10ms\"\nwarmup = \"1ms\"\n[platform]\ncpus = 4\n{top}\n");
        for (k, body) in calls.iter().enumerate() {
            toml += "[[crosscall]]\nhandler = \"1us\"\n";
            // Defaults for the keys the case does not give.
            for (key, value) in [("name", format!("\"c{k}\"")), ("at", "\"1ms\"".into()), ("mechanisms", "[\"ipi\"]".into())] {
                if !body.contains(&format!("{key} =")) {
                    toml += &format!("{key} = {value}\n");
                }
            }
            toml += &format!("{body}\n");
        }
        crate::load(&toml, "c.toml", &[]).map(|_| ()).map_err(|e| e.0)
    };
    let vm = "[[vm]]\nname = \"g\"\nvcpus = 1\npcpus = [3]\n";
    let pmr = "[cpu]\nmasking = \"pmr\"\n";
    let two = "mechanisms = [\"ipi\", \"sdei\"]";
    let bad = [
        ("", vec!["", "name = \"c0\""], "crosscall[1].name"),
        ("", vec!["", "at = \"999us\""], "crosscall[1].at"),
        ("", vec!["at = \"10ms\""], "crosscall[0].at"),
        ("", vec!["from = 4"], "crosscall[0].from"),
        ("", vec!["targets = []"], "crosscall[0].targets"),
        ("", vec!["targets = [1, 4]"], "crosscall[0].targets[1]"),
        ("", vec!["targets = [1, 2, 1]"], "crosscall[0].targets[2]"),
        ("", vec!["targets = [1, 0]"], "crosscall[0].targets[1]"),
        ("", vec!["requester_poll = \"0ns\""], "crosscall[0].requester_poll"),
        (vm, vec!["from = 3\ntargets = [1]"], "crosscall[0].from"),
        ("", vec!["idle_handler = \"1us\""], "crosscall[0].idle_handler"),
        ("", vec!["requester_dumps = true"], "crosscall[0].requester_dumps"),
        ("", vec!["requester_dumps = true\nserial = true\nrequester_spins = false"], "crosscall[0].requester_dumps"),
        (vm, vec!["targets = [1, 3]"], "crosscall[0].targets[1]"),
        (vm, vec![""], "crosscall[0].targets[2]"),
        ("", vec!["mechanisms = []"], "crosscall[0].mechanisms"),
        ("", vec!["mechanisms = [\"ipi\", \"ipi\"]\ntimeout = \"1ms\""], "crosscall[0].mechanisms[1]"),
        ("", vec!["mechanisms = [\"ipi\", \"pseudo-nmi\"]\ntimeout = \"1ms\""], "crosscall[0].mechanisms[1]"),
        ("", vec!["signals = 0"], "crosscall[0].signals"),
        ("", vec!["signals = 2"], "crosscall[0].signal_interval"),
        ("", vec!["waits = [\"1ms\"]\ntimeout = \"1ms\""], "crosscall[0].waits"),
        ("", vec!["mechanisms = [\"ipi\", \"sdei\"]\nwaits = [\"1ms\"]"], "crosscall[0].waits"),
        ("", vec!["mechanisms = [\"ipi\", \"sdei\"]\nwaits = [\"1ms\", \"0ns\"]"], "crosscall[0].waits[1]"),
        ("", vec!["signals = 3\nsignal_interval = \"1ms\"\nwaits = [\"2ms\"]"], "crosscall[0].waits[0]"),
        ("", vec![two], "crosscall[0].timeout"),
        ("", vec!["mechanisms = [\"ipi\", \"sdei\"]\ntimeout = \"0ns\""], "crosscall[0].timeout"),
        ("", vec!["signals = 3\nsignal_interval = \"1ms\"\ntimeout = \"2ms\""], "crosscall[0].timeout"),
    ];
    for (top, calls, key) in bad {
        let e = load(top, &calls).expect_err(key);
        assert!(e.contains(&format!("{key}:")) || e.contains(&format!("{key} ")), "{key}: {e}");
    }
    // An empty list on a four-CPU platform is the list's fault, not the platform's
    // (a review read "a one-CPU platform has no other CPU" on eight CPUs).
    let e = load("", &["targets = []"]).expect_err("empty targets");
    assert!(e.contains("empty list") && !e.contains("one-CPU"), "{e}");
    let good = [
        ("", vec!["", "at = \"9999us\"\nfrom = 3\ntargets = [0, 2]"]),
        (vm, vec!["targets = [1, 2]"]),
        (pmr, vec!["mechanisms = [\"pseudo-nmi\"]"]),
        (vm, vec!["from = 3\ntargets = [1]\nrequester_spins = false"]),
        ("", vec!["idle_handler = \"1us\"\nserial = true"]),
        ("", vec!["requester_dumps = true\nserial = true"]),
        ("", vec!["signals = 2\nsignal_interval = \"1us\""]),
        ("", vec!["mechanisms = [\"ipi\", \"sdei\"]\nsignals = 3\nsignal_interval = \"1ms\"\nwaits = [\"2001us\", \"3ms\"]"]),
        ("", vec!["mechanisms = [\"ipi\", \"sdei\"]\nsignals = 3\nsignal_interval = \"1ms\"\ntimeout = \"2001us\""]),
    ];
    for (top, calls) in good {
        load(top, &calls).unwrap_or_else(|e| panic!("{calls:?}: {e}"));
    }
}

/// `crosscall.NAME.latency` is the histogram of the reached targets'
/// latencies. (Mutation testing: the histogram kept only for calls that
/// reached nobody went unnoticed.)
#[test]
fn the_latency_histogram_has_one_entry_per_target_reached() {
    let toml = "name = \"h\"\nduration = \"1ms\"\n[platform]\ncpus = 4\n[[crosscall]]\nname = \"bt\"\nat = \"100us\"\nmechanisms = [\"ipi\"]\nhandler = \"2us\"\n";
    let sc = crate::load(toml, "h.toml", &[]).expect("valid scenario");
    let out = run(&sc, RunOptions::default());
    assert_eq!(out.report.metrics["crosscall.bt.reached"], 3.0);
    assert_eq!(out.report.histograms["crosscall.bt.latency"].count, 3);
}

/// The requester spins for the answers in hardirq (`nmi_trigger_cpumask_backtrace`'s
/// mdelay loop), looking once per `requester_poll`: it pays to its first look
/// after the last answer, or to its last wait when no answer comes, and CPU 0's
/// hardirq time is that spin plus its entry and exit.
#[test]
fn the_requester_spins_on_its_own_cpu_until_a_look_finds_every_answer() {
    // DAIF wedge, IPI only: no answer. The requester sends once its idle CPU
    // has taken the request (a 100 ns entry) and spins the whole 5 ms wait.
    let m = wedged("daif", "daif", r#""ipi""#, "waits = [\"5ms\"]", "50ms");
    assert_eq!(m["crosscall.bt.reached"], 0.0);
    assert_eq!(m["crosscall.bt.requester_start_ns"], 100.0);
    assert!((m["crosscall.bt.requester_spin_ns"] - 5e6).abs() < 1.0, "{}", m["crosscall.bt.requester_spin_ns"]);
    let hardirq_ns = m["cpu0.hardirq_share"] * 50e6;
    assert!((hardirq_ns - 5_000_200.0).abs() < 1.0, "entry + spin + exit: {hardirq_ns}");

    // A pseudo-NMI answers within µs: the first look, at the spin's start, is
    // too early, and the next, one poll later, finds it.
    let ms = wedged("pmr", "pmr", r#""pseudo-nmi""#, "", "50ms");
    assert_eq!(ms["crosscall.bt.reached"], 1.0);
    assert!((ms["crosscall.bt.requester_spin_ns"] - 1e6).abs() < 1.0);
    // Looking every µs, it stops at the first whole µs past the answer.
    let us = wedged("pmr", "pmr", r#""pseudo-nmi""#, "requester_poll = \"1us\"", "50ms");
    let answer_after_start = us["crosscall.bt.requester_wait_ns"];
    assert!(answer_after_start > 0.0);
    assert!((us["crosscall.bt.requester_spin_ns"] - (answer_after_start / 1000.0).ceil() * 1000.0).abs() < 1.0);

    // Not spinning, the requester's CPU gives the call nothing.
    let free = wedged("daif", "daif", r#""ipi""#, "waits = [\"5ms\"]\nrequester_spins = false", "50ms");
    assert!(!free.contains_key("crosscall.bt.requester_spin_ns"));
    assert_eq!(free["cpu0.hardirq_share"], 0.0);
    assert!((free["crosscall.bt.requester_wait_ns"] - 5e6).abs() < 1.0, "the wait is still reported");
}

/// `requester_dumps` (`trigger_all_cpu_backtrace`, sysrq-l): the requester
/// prints its own stack under the print lock before it signals, so the
/// answers, counted from the send, come as without it, and its spin and
/// hardirq time grow by one print; a dump that finds another call's targets
/// printing waits for the lock first.
#[test]
fn a_requester_in_its_own_mask_dumps_its_stack_before_it_signals() {
    let go = |calls: &str| {
        let toml = format!("name = \"d\"\nduration = \"20ms\"\n[platform]\ncpus = 6\n[cpu]\nirq_entry = \"100ns\"\n{calls}");
        let sc = crate::load(&toml, "d.toml", &[]).expect("valid scenario");
        let out = run(&sc, RunOptions { audit: true, ..Default::default() });
        assert_eq!(out.audit.double_deliveries, 0);
        out.report.metrics
    };
    let call = |dumps: bool| {
        format!("[[crosscall]]\nname = \"bt\"\nat = \"10ms\"\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_dumps = {dumps}\n")
    };
    let (plain, dumps) = (go(&call(false)), go(&call(true)));
    assert!(!plain.contains_key("crosscall.bt.requester_dump_ns"));
    assert_eq!(dumps["crosscall.bt.requester_dump_ns"], 20_000.0);
    for key in ["time_to_all_ns", "time_to_all_answered_ns", "requester_wait_ns", "reached", "requester_start_ns"] {
        let key = format!("crosscall.bt.{key}");
        assert_eq!(plain[&key], dumps[&key], "{key}");
    }
    // Five prints end 100.1 us after the send; the look 1 ms after it sees them.
    assert!((plain["crosscall.bt.requester_spin_ns"] - 1e6).abs() < 1.0, "{}", plain["crosscall.bt.requester_spin_ns"]);
    assert!((dumps["crosscall.bt.requester_spin_ns"] - 1_020_000.0).abs() < 1.0, "{}", dumps["crosscall.bt.requester_spin_ns"]);
    let cpu0 = |m: &BTreeMap<String, f64>| m["cpu0.hardirq_share"] * 20e6;
    assert!((cpu0(&dumps) - cpu0(&plain) - 20_000.0).abs() < 1.0, "{} {}", cpu0(&dumps), cpu0(&plain));

    // CPU 1 asks at 10.01 ms while call a's four targets print (10.0001 to
    // 10.0801 ms): its dump waits 70 us for the lock, then prints 20 us.
    let busy = go(
        "[[crosscall]]\nname = \"a\"\nat = \"10ms\"\nfrom = 0\ntargets = [2, 3, 4, 5]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_spins = false\n\
         [[crosscall]]\nname = \"b\"\nat = \"10010us\"\nfrom = 1\ntargets = [0]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_dumps = true\n",
    );
    assert!((busy["crosscall.b.requester_dump_ns"] - 90_000.0).abs() < 1.0, "{}", busy["crosscall.b.requester_dump_ns"]);
    assert_eq!(busy["crosscall.b.reached"], 1.0);

    // The dump holds the lock: call a's targets, asked at 10.005 ms while CPU 0
    // prints (10.0001 to 10.0201 ms), print after it, answering 35.1 and 55.1 us
    // after a's request (20.1 and 40.1 us if the dump took no lock).
    let held = go(
        "[[crosscall]]\nname = \"b\"\nat = \"10ms\"\nfrom = 0\ntargets = [4]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_dumps = true\n\
         [[crosscall]]\nname = \"a\"\nat = \"10005us\"\nfrom = 1\ntargets = [2, 3]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_spins = false\n",
    );
    assert!((held["crosscall.a.time_to_all_answered_ns"] - 55_100.0).abs() < 1.0, "{}", held["crosscall.a.time_to_all_answered_ns"]);
    // A dump that waited holds the lock after its wait: a's two prints run to
    // 10.0401 ms, b's dump (asked at 10.01) waits 30 us and prints to 10.0601,
    // and c's target (asked at 10.02) prints after it, answering 60.1 us in.
    let queued = go(
        "[[crosscall]]\nname = \"a\"\nat = \"10ms\"\nfrom = 0\ntargets = [2, 3]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_spins = false\n\
         [[crosscall]]\nname = \"b\"\nat = \"10010us\"\nfrom = 1\ntargets = [0]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_dumps = true\n\
         [[crosscall]]\nname = \"c\"\nat = \"10020us\"\nfrom = 4\ntargets = [5]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_spins = false\n",
    );
    assert!((queued["crosscall.b.requester_dump_ns"] - 50_000.0).abs() < 1.0, "{}", queued["crosscall.b.requester_dump_ns"]);
    assert!((queued["crosscall.c.time_to_all_answered_ns"] - 60_100.0).abs() < 1.0, "{}", queued["crosscall.c.time_to_all_answered_ns"]);

    // backtrace_flag is set before the dump: a second backtrace asked during it sends nothing.
    let flagged = go(
        "[[crosscall]]\nname = \"a\"\nat = \"10ms\"\nfrom = 0\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\nrequester_dumps = true\n\
         [[crosscall]]\nname = \"b\"\nat = \"10005us\"\nfrom = 1\ntargets = [2]\nmechanisms = [\"ipi\"]\nhandler = \"20us\"\nserial = true\n",
    );
    assert_eq!(flagged["crosscall.b.requester_skipped"], 1.0);
    assert_eq!(flagged["crosscall.b.reached"], 0.0);

    // A run that ends mid-dump: the dump so far, within the spin, and no wait
    // (nothing was sent; not the 5 ms deadline either).
    let cut = go(&call(true).replace("at = \"10ms\"", "at = \"19995us\"\nwaits = [\"5ms\"]"));
    assert!((cut["crosscall.bt.requester_dump_ns"] - cut["crosscall.bt.requester_spin_ns"]).abs() < 1e-9);
    assert!(cut["crosscall.bt.requester_dump_ns"] < 5_000.0, "{}", cut["crosscall.bt.requester_dump_ns"]);
    assert!(!cut.contains_key("crosscall.bt.requester_wait_ns"));
    assert_eq!(cut["crosscall.bt.reached"], 0.0);
}

/// The next mechanism and the waits count from the send, after the dump: SDEI
/// reaches the DAIF wedge 3 ms + one SMC + dispatch after it, and the spin
/// (dump included) ends at the first look after that answer.
#[test]
fn with_a_dump_escalation_counts_from_the_send() {
    let m = wedged("daif", "daif", r#""ipi", "sdei""#, "waits = [\"3ms\", \"2ms\"]\nserial = true\nrequester_dumps = true", "50ms");
    assert_eq!(m["crosscall.bt.reached_by.sdei"], 1.0);
    assert!((m["crosscall.bt.time_to_all_ns"] - 3_007_000.0).abs() < 1.0, "{}", m["crosscall.bt.time_to_all_ns"]);
    assert!((m["crosscall.bt.requester_spin_ns"] - 4_002_000.0).abs() < 1.0, "{}", m["crosscall.bt.requester_spin_ns"]);
}

/// The spin has IRQs masked: the requester's own device interrupts wait for
/// its end (and none is lost: the audit counts every write).
#[test]
fn the_requesters_interrupts_wait_for_its_spin() {
    let run_with = |spins: bool| {
        let toml = format!(
            "name = \"s\"\nduration = \"30ms\"\n[platform]\ncpus = 2\n[cpu]\nirq_entry = \"100ns\"\nirq_exit = \"100ns\"\n\
             [[task]]\nname = \"wedge\"\ncpus = [1]\nwork = \"1us\"\nexception = \"syscall\"\nbody = \"100ms\"\nirqs_off = \"100ms\"\n\
             [[source]]\nname = \"nic\"\nrate = \"10k/s\"\ncpus = [0]\nhandler = \"1us\"\n\
             [[crosscall]]\nname = \"bt\"\nat = \"10ms\"\nmechanisms = [\"ipi\"]\nwaits = [\"5ms\"]\nhandler = \"2us\"\nrequester_spins = {spins}\n"
        );
        let sc = crate::load(&toml, "s.toml", &[]).expect("valid scenario");
        let out = run(&sc, RunOptions { audit: true, ..Default::default() });
        assert_eq!(out.audit.double_deliveries, 0);
        out.report.histograms["irq_latency"].max
    };
    // About 50 NIC interrupts come during the 5 ms spin; the first waits nearly all of it.
    assert!(run_with(true) > 4e6, "{}", run_with(true));
    assert!(run_with(false) < 10e3, "{}", run_with(false));
}

/// `nmi_cpu_backtrace` prints one line for a CPU it finds idling
/// (`cpu_in_idle`) unless `backtrace_idle` is set: with `idle_handler`, idle
/// targets print that, and a busy one (here a task's user loop) the whole
/// backtrace, one at a time under the print lock.
#[test]
fn idle_targets_print_one_line() {
    let go = |extra: &str| {
        let toml = format!(
            "name = \"i\"\nduration = \"2ms\"\n[platform]\ncpus = 4\n\
             [[task]]\nname = \"busy\"\ncpus = [3]\nwork = \"1ms\"\n\
             [[crosscall]]\nname = \"bt\"\nat = \"100us\"\nmechanisms = [\"ipi\"]\nhandler = \"100us\"\nserial = true\n{extra}"
        );
        let sc = crate::load(&toml, "i.toml", &[]).expect("valid scenario");
        let out = run(&sc, RunOptions::default());
        let t = &out.report.tables["crosscall_targets"];
        let answered: Vec<f64> = t.rows.iter().map(|r| if let Cell::Num(v) = r[5] { v } else { f64::NAN }).collect();
        (out.report.metrics["crosscall.bt.time_to_all_answered_ns"], answered)
    };
    let (all, _) = go("");
    // Three whole backtraces in turn: the last answers 300 us (and the IPI's latency) in.
    assert!((300e3..301e3).contains(&all), "{all}");
    let (all, answered) = go("idle_handler = \"5us\"");
    // Two idle lines (5 us each) and the busy CPU's backtrace; whichever order
    // they take the lock in, the three together hold it 110 us.
    assert!((110e3..111e3).contains(&all), "{all}");
    let idle_max = answered[..2].iter().cloned().fold(0.0, f64::max);
    assert!(idle_max < answered[2], "the busy CPU's backtrace ends last here: {answered:?}");
}

/// Without `waits` the spinning requester still gives up as the kernel's
/// backtrace loop does, after 10 s (10,000 × mdelay(1)); a requester whose CPU
/// never took the request waited for nothing; and a second request of the
/// same kind while one is in progress sends nothing (`backtrace_flag`).
#[test]
fn the_requester_gives_up_after_10s_and_one_request_of_a_kind_runs_at_a_time() {
    // A 20 s DAIF wedge, IPI, no waits: the spin stops 10 s after it sent.
    let toml = "name = \"w\"\nduration = \"10020ms\"\n[platform]\ncpus = 2\n\
                [[task]]\nname = \"wedge\"\ncpus = [1]\nwork = \"1us\"\nexception = \"syscall\"\nbody = \"20s\"\nirqs_off = \"20s\"\nirqs_off_with = \"daif\"\n\
                [[crosscall]]\nname = \"bt\"\nat = \"10ms\"\nmechanisms = [\"ipi\"]\nhandler = \"2us\"\n";
    let sc = crate::load(toml, "w.toml", &[]).expect("valid scenario");
    let m = run(&sc, RunOptions::default()).report.metrics;
    assert_eq!(m["crosscall.bt.reached"], 0.0);
    assert!((m["crosscall.bt.requester_spin_ns"] - 10e9).abs() < 1.0, "{}", m["crosscall.bt.requester_spin_ns"]);
    // The wedged CPU as the requester: never started, nothing sent, no wait.
    let m = wedged("daif", "daif", r#""ipi""#, "targets = [0]\nfrom = 1\nwaits = [\"5ms\"]", "50ms");
    assert_eq!(m["crosscall.bt.signals"], 0.0);
    assert!(!m.contains_key("crosscall.bt.requester_wait_ns"), "{m:?}");

    let two_of = |second_from: u32, serial: bool| {
        let toml = format!(
            "name = \"two\"\nduration = \"30ms\"\n[platform]\ncpus = 3\n\
             [[task]]\nname = \"wedge\"\ncpus = [2]\nwork = \"1us\"\nexception = \"syscall\"\nbody = \"100ms\"\nirqs_off = \"100ms\"\nirqs_off_with = \"daif\"\n\
             [[crosscall]]\nname = \"a\"\nat = \"10ms\"\nfrom = 0\ntargets = [2]\nmechanisms = [\"ipi\"]\nwaits = [\"5ms\"]\nhandler = \"2us\"\nserial = {serial}\n\
             [[crosscall]]\nname = \"b\"\nat = \"12ms\"\nfrom = {second_from}\ntargets = [2]\nmechanisms = [\"ipi\"]\nwaits = [\"5ms\"]\nhandler = \"2us\"\nserial = {serial}\n"
        );
        let sc = crate::load(&toml, "two.toml", &[]).expect("valid scenario");
        run(&sc, RunOptions::default()).report.metrics
    };
    let two = |second_from: u32| two_of(second_from, true);
    // b comes at 12 ms from CPU 1 while a spins on CPU 0 (10-15 ms): it returns at once.
    let m = two(1);
    assert_eq!((m["crosscall.a.requester_skipped"], m["crosscall.b.requester_skipped"]), (0.0, 1.0));
    assert_eq!((m["crosscall.a.signals"], m["crosscall.b.signals"]), (1.0, 0.0));
    assert_eq!(m["crosscall.b.requester_spin_ns"], 0.0);
    // From CPU 0 itself, b waits for a's spin to end (15 ms) and then runs its own.
    let m = two(0);
    assert_eq!(m["crosscall.b.requester_skipped"], 0.0);
    assert!((m["crosscall.b.requester_start_ns"] - 3e6).abs() < 1e3, "{}", m["crosscall.b.requester_start_ns"]);
    assert!((m["crosscall.b.requester_spin_ns"] - 5e6).abs() < 1.0);
    // Two stops: `stop_in_progress` is never cleared (a panic does not return),
    // so b, taken once a's spin is over, still sends nothing.
    let m = two_of(0, false);
    assert!((m["crosscall.b.requester_start_ns"] - 3e6).abs() < 1e3, "{}", m["crosscall.b.requester_start_ns"]);
    assert_eq!((m["crosscall.a.signals"], m["crosscall.b.signals"]), (1.0, 0.0));
    assert_eq!(m["crosscall.b.requester_skipped"], 1.0);
}
