//! Idle states: an interrupt that finds its CPU asleep waits for the exit of
//! the state its idle period reached, the exit is idle time, what comes
//! meanwhile waits and is not lost, a thread queued for a sleeping CPU waits
//! too, a CPU that polls pays nothing, and no state changes nothing.

use crate::run::{run_audited, RunOutput};

/// Skylake-SP's states (`skx_cstates` in drivers/idle/intel_idle.c: exit
/// latency and target residency in µs).
const SKX: &str = r#"
[[cpu.idle_state]]
name = "C1"
exit = "2us"
residency = "2us"
[[cpu.idle_state]]
name = "C1E"
exit = "10us"
residency = "20us"
[[cpu.idle_state]]
name = "C6"
exit = "133us"
residency = "600us"
"#;

/// One CPU and a device whose interrupts come `arrival` at `rate`.
fn one_cpu(arrival: &str, rate: &str, count: u32, states: &str) -> RunOutput {
    let toml = format!(
        "name = \"cs\"\nduration = \"100ms\"\nwarmup = \"10ms\"\nseed = 5\n[platform]\ncpus = 1\n\
         [cpu]\nirq_entry = \"300ns\"\nirq_exit = \"200ns\"\n{states}\n\
         [[source]]\nname = \"dev\"\ncount = {count}\narrival = \"{arrival}\"\nrate = \"{rate}\"\nhandler = \"1us\"\ncpus = [0]\n"
    );
    let out = run_audited(&toml, &[]);
    let a = &out.audit;
    assert_eq!(a.writes, a.events_delivered + out.pending_events, "every write delivered or on its way");
    out
}

#[test]
fn an_interrupt_waits_for_the_exit_of_the_state_its_idle_period_reached() {
    let p50 = |out: &RunOutput| out.report.histograms["irq_latency"].p50 / 1e3;
    // 1 ms apart: each idle period passes C6's 600 µs; 50 µs apart, only C1E's 20.
    let (deep, shallow) = (one_cpu("periodic", "1000/s", 1, SKX), one_cpu("periodic", "20000/s", 1, SKX));
    let awake = one_cpu("periodic", "1000/s", 1, "");
    assert!((p50(&deep) - 133.3).abs() < 0.1, "C6: exit and entry, {} us", p50(&deep));
    assert!((p50(&shallow) - 10.3).abs() < 0.1, "C1E: {} us", p50(&shallow));
    assert!((p50(&awake) - 0.3).abs() < 0.1, "no states: the entry alone, {} us", p50(&awake));
    let m = &deep.report.metrics;
    assert!((m["cpuidle.C6.wakes_per_s"] - 1000.0).abs() < 20.0 && m["cpuidle.C1.wakes_per_s"] == 0.0, "{m:?}");
    assert!((m["cpuidle.exit_mean_ns"] - 133_000.0).abs() < 1.0);
    assert!(!awake.report.metrics.contains_key("cpuidle.exit_mean_ns"), "no states, no cpuidle metrics");
    // The exit is idle time: the CPU's busy time is the interrupts' alone, as without states.
    let busy = |out: &RunOutput| out.report.metrics["busy_share"];
    assert!((busy(&deep) - busy(&awake)).abs() < 1e-4, "{} against {}", busy(&deep), busy(&awake));
}

/// Four vectors at 20 K/s in all, and every wake-up pays 133 µs: much comes
/// while the CPU exits, and waits (`one_cpu` checks that none is lost).
/// A PM QoS latency limit (`/dev/cpu_dma_latency`) keeps the CPU out of the
/// states slower to leave than it: 1 ms apart, with 5 us allowed, each
/// interrupt pays C1's 2 us, not C6's 133.
#[test]
fn a_pm_qos_limit_keeps_the_cpu_out_of_slower_states() {
    let limited =
        one_cpu("periodic", "1000/s", 1, &SKX.replacen("[[cpu.idle_state]]", "idle_latency_limit = \"5us\"\n[[cpu.idle_state]]", 1));
    let p50 = limited.report.histograms["irq_latency"].p50 / 1e3;
    assert!((p50 - 2.3).abs() < 0.1, "C1 under the limit: {p50} us");
    assert_eq!(limited.report.metrics["cpuidle.C6.wakes_per_s"], 0.0);
}

#[test]
fn what_comes_during_an_exit_waits_for_it_and_is_not_lost() {
    let deep_at_once = "[[cpu.idle_state]]\nname = \"C6\"\nexit = \"133us\"\nresidency = \"1ns\"\n";
    let out = one_cpu("poisson", "5000/s", 4, deep_at_once);
    let lat = &out.report.histograms["irq_latency"];
    // The first of a wake-up waits the whole exit, the ones behind it less.
    assert!(lat.max >= 133_000.0 && lat.min < 50_000.0, "{lat:?}");
    let m = &out.report.metrics;
    let wakes = m["cpuidle.C6.wakes_per_s"];
    assert!(wakes > 1000.0 && wakes < m["interrupts_per_s"], "one wake-up for several interrupts: {wakes} for {}", m["interrupts_per_s"]);
}

/// fio at queue depth 1: the reaping CPU idles through each ~80 µs read, so
/// each completion's interrupt pays C1E's exit (the period passes its 20 µs,
/// not C6's 600); a job that polls never lets its CPU sleep.
#[test]
fn queue_depth_one_pays_the_exit_on_every_interrupt_and_polling_none() {
    let disk = |extra: &str, states: &str| {
        let toml = format!(
            "name = \"d\"\nduration = \"60ms\"\nwarmup = \"5ms\"\n[platform]\ncpus = 2\n[cpu]\nirq_entry = \"300ns\"\nirq_exit = \"200ns\"\n{states}\n\
             [[nvme]]\nname = \"ssd\"\nqueues = 2\ncpus = [0, 1]\niops = \"1M\"\nlatency = \"80us\"\nservice_cv = 0\nhandler = \"500ns\"\n\
             per_cqe = \"300ns\"\nsubmit = \"1us\"\n{extra}\n[nvme.fio]\njobs = 1\niodepth = 1\n"
        );
        let out = run_audited(&toml, &[]);
        assert_eq!(out.audit.ios_found, out.audit.ios_owned, "every I/O is somewhere");
        out.report.histograms["nvme.ssd.latency"].mean / 1e3
    };
    let (awake, asleep) = (disk("", ""), disk("", SKX));
    assert!((asleep - awake - 10.0).abs() < 0.5, "C1E's 10 us on each I/O: {awake} then {asleep} us");
    let polled = "moderation = { kind = \"polling\" }";
    let (p_awake, p_asleep) = (disk(polled, ""), disk(polled, SKX));
    assert!((p_asleep - p_awake).abs() < 1e-9, "a polling CPU never sleeps: {p_awake} then {p_asleep} us");
}

#[test]
fn states_out_of_order_or_unnamed_are_refused_at_their_key() {
    let load = |states: &str| {
        let toml = format!("name = \"b\"\nduration = \"1ms\"\n[platform]\ncpus = 1\n{states}");
        crate::scenario::load(&toml, "b.toml", &[]).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let swapped = SKX.replace("residency = \"20us\"", "residency = \"1us\"");
    let e = load(&swapped);
    assert!(e.contains("cpu.idle_state[1].residency") && e.contains("shallowest first"), "{e}");
    let e = load(&SKX.replace("name = \"C6\"", "name = \" \""));
    assert!(e.contains("cpu.idle_state[2].name"), "{e}");
    let e = load(&SKX.replace("name = \"C6\"", "name = \"C1\""));
    assert!(e.contains("cpu.idle_state[2].name") && e.contains("used twice"), "{e}");
    assert_eq!(load(SKX), "", "the SKX table loads");
    let e = load("[cpu]\nidle_latency_limit = \"5us\"\n");
    assert!(e.contains("cpu.idle_latency_limit") && e.contains("lists none"), "{e}");
    // KVM x86's entry loop is a model of its own, with no idle loop: not silently ignored.
    let kvm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/figures/m4-kvm-cancels.toml")).unwrap();
    let e = crate::scenario::load(&format!("{kvm}\n[cpu]\n{SKX}"), "k.toml", &[]).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("cpu.idle_state") && e.contains("[kvm]"), "{e}");
}
