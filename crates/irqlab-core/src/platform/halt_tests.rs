//! An idle vCPU's halt: it polls while its window lasts, then blocks; an
//! interrupt ends a poll with the entry alone and wakes a blocked vCPU with
//! the wake-up and the entry; the window grows after short halts and stays
//! shut after long ones, as `kvm_vcpu_halt` has it; no interrupt is lost.

use crate::run::{run_audited, RunOutput};
use crate::scenario::load;

/// One vCPU on pCPU 1; a device on the host's CPU 0 interrupts the guest (the
/// exit path: a host handler, then the injection). `arrival` and `rate` set
/// how far apart its interrupts are.
fn vm(arrival: &str, rate: &str, sets: &[&str]) -> RunOutput {
    let text = format!(
        r#"
name = "halt"
duration = "60ms"
warmup = "10ms"
[platform]
cpus = 2
[hypervisor]
exit = "1us"
handler = "500ns"
inject = "200ns"
entry = "1us"
guest_idle = "hlt"
wake = "4us"
[[vm]]
name = "g"
vcpus = 1
pcpus = [1]
[[source]]
name = "dev"
vm = "g"
cpus = [0]
arrival = "{arrival}"
rate = "{rate}"
handler = "1us"
"#
    );
    checked(&text, sets)
}

/// Runs a halting scenario audited: no interrupt lost or handled twice, each
/// guest handler counted once, and every halt ended one of its three ways.
fn checked(text: &str, sets: &[&str]) -> RunOutput {
    let out = run_audited(text, sets);
    let a = &out.audit;
    assert_eq!(a.writes, a.events_delivered + out.pending_events, "every write delivered or on its way");
    let m = &out.report.metrics;
    // Each guest handler run is counted and timed once (a mutation pass found
    // `guest_irqs` unchecked).
    assert_eq!(m["guest_interrupts"], out.report.histograms["virq_latency"].count as f64);
    if !m.contains_key("halt_exits_per_s") {
        return out; // a spinning guest
    }
    // Every halt ends one way or the other (the last may still be under way).
    let ended = m["halt_poll_hits_per_s"] + m["halt_wakeups_per_s"] + m["halt_skipped_per_s"];
    assert!((m["halt_exits_per_s"] - ended).abs() <= 1.0 / m["sim_s"], "{} halts, {ended} ended", m["halt_exits_per_s"]);
    out
}

/// Interrupts 1 ms apart, beyond `halt_poll_ns` (200 µs): polling never
/// catches one, so the window never opens, every halt blocks and every
/// interrupt wakes the vCPU. It reaches the guest after the host's handler
/// and injection, the wake-up and the entry: 0.5 + 0.2 + 4 + 1 µs, where a
/// vCPU waiting in guest mode takes it after the exit instead of the wake-up
/// (2.7 µs). The pCPU idles while the vCPU is blocked.
#[test]
fn far_apart_interrupts_wake_a_blocked_vcpu_and_cost_the_wake_up() {
    let out = vm("periodic", "1k/s", &[]);
    let m = &out.report.metrics;
    assert_eq!(m["halt_poll_hits_per_s"], 0.0);
    assert!((m["halt_wakeups_per_s"] - 1000.0).abs() < 30.0, "{}", m["halt_wakeups_per_s"]);
    let v = &out.report.histograms["virq_latency"];
    assert!((v.p50 - 5_700.0).abs() < 10.0, "p50 {}", v.p50);
    assert!(m["cpu1.idle_share"] > 0.98, "{}", m["cpu1.idle_share"]);
    assert!(m["cpu1.guest_share"] < 0.01, "{}", m["cpu1.guest_share"]);
    let spin = vm("periodic", "1k/s", &["hypervisor.guest_idle=\"spin\""]);
    let s = &spin.report.histograms["virq_latency"];
    assert!((s.p50 - 2_700.0).abs() < 10.0, "spin p50 {}", s.p50);
    assert!(spin.report.metrics["cpu1.guest_share"] > 0.99);
    assert!(!spin.report.metrics.contains_key("halt_exits_per_s"));
}

/// Interrupts 100 µs apart: the window grows from 0 through 10, 20, 40, 80
/// to 160 µs after five blocked halts, and from then on each halt is caught
/// by the poll: the interrupt reaches the guest after the handler, the
/// injection and the entry alone (1.7 µs), and the pCPU spins (hypervisor
/// time) where it would idle.
#[test]
fn close_interrupts_open_the_polling_window_and_are_caught_by_the_poll() {
    let out = vm("periodic", "10k/s", &["warmup=0s"]);
    let m = &out.report.metrics;
    let secs = m["sim_s"];
    assert_eq!(m["halt_wakeups_per_s"] * secs, 5.0, "blocked while the window grew");
    assert!(m["halt_poll_hits_per_s"] > 9_900.0, "{}", m["halt_poll_hits_per_s"]);
    let v = &out.report.histograms["virq_latency"];
    assert!((v.p50 - 1_700.0).abs() < 10.0, "p50 {}", v.p50);
    assert!(m["cpu1.hyp_share"] > 0.9 && m["cpu1.idle_share"] < 0.01, "{} {}", m["cpu1.hyp_share"], m["cpu1.idle_share"]);
    // With halt polling off (`halt_poll_ns = 0`) every halt blocks.
    let off = vm("periodic", "10k/s", &["hypervisor.halt_poll=\"0s\""]).report.metrics;
    assert_eq!(off["halt_poll_hits_per_s"], 0.0);
    assert!(off["halt_wakeups_per_s"] > 9_900.0);
}

/// Poisson interrupts, 300 µs apart on average: a gap past 200 µs halves the
/// window (under `halt_poll_grow_start` it shuts), a short one polling missed
/// doubles it; some halts are caught, some block, and the two add up to the
/// halts; the same seed gives the same run.
#[test]
fn random_gaps_mix_polls_and_wake_ups_deterministically() {
    let a = vm("poisson", "3333/s", &[]);
    let m = &a.report.metrics;
    assert!(m["halt_poll_hits_per_s"] > 300.0 && m["halt_wakeups_per_s"] > 300.0, "{m:?}");
    let b = vm("poisson", "3333/s", &[]);
    assert_eq!(a.report.metrics, b.report.metrics);
    assert_eq!(format!("{:?}", a.report.histograms), format!("{:?}", b.report.histograms));
}

/// A VF's interrupts posted to an idle vCPU (no moderation: ~190 K/s against
/// a 1 µs HLT exit): some are posted during the exit, and then KVM does not
/// halt at all (`__kvm_emulate_halt` sees the event; `kvm_vcpu_halt` never
/// runs): neither a poll hit nor a wake-up, and the polling window is left
/// as it was. (They were counted as poll hits.) `checked` sees every halt
/// end one of the three ways. A `[[source]]`'s interrupt
/// cannot do this: it is a host interrupt first, masked during the exit, and
/// the injection that follows finds the vCPU polling.
#[test]
fn an_interrupt_posted_during_the_hlt_exit_skips_the_halt() {
    let m = checked(POSTED_VF, &[]).report.metrics;
    assert!(m["halt_skipped_per_s"] > 10_000.0 && m["halt_poll_hits_per_s"] > 10_000.0, "{m:?}");
}

const POSTED_VF: &str = r#"
name = "hskip"
duration = "20ms"
warmup = "5ms"
[platform]
cpus = 2
[hypervisor]
exit = "1us"
handler = "400ns"
inject = "150ns"
entry = "1us"
guest_idle = "hlt"
[fabric]
msi_write = "300ns"
dma_per_kib = "40ns"
[[vm]]
name = "g"
vcpus = 1
pcpus = [1]
[[nic]]
name = "vf"
vm = "g"
vf_irqs = "posted"
gbps = 5
queues = 1
cpus = [0]
handler = "500ns"
per_packet = "300ns"
per_poll = "200ns"
moderation = { kind = "none" }
"#;

#[test]
fn hlt_without_a_vm_is_one_error_naming_the_key() {
    let text = "name = \"x\"\nduration = \"1ms\"\n[hypervisor]\nguest_idle = \"hlt\"\n";
    let e = load(text, "x.toml", &[]).unwrap_err().to_string();
    assert!(e.contains("hypervisor.guest_idle") && e.contains("[[vm]]"), "{e}");
    let bad = load(text, "x.toml", &["hypervisor.guest_idle=\"nap\"".into()]).unwrap_err().to_string();
    assert!(bad.contains("guest_idle"), "{bad}");
}
