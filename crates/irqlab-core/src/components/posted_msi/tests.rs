//! Posted MSI: bursts to one CPU share a notification, nothing is lost or run
//! twice, the remapping unit still sees every message, and the loop bound
//! (`MAX_POSTED_MSI_COALESCING_LOOP`) shapes how much is coalesced.

use crate::run::{run_audited, RunOutput};

fn go(toml: &str, sets: &[&str]) -> RunOutput {
    let out = run_audited(toml, sets);
    let a = &out.audit;
    assert_eq!(a.ios_found, a.ios_owned, "{sets:?}: every I/O is somewhere");
    assert_eq!(a.writes, a.events_delivered + out.pending_events, "{sets:?}: every write handled once");
    out
}

/// Four disks whose 16 vectors all interrupt CPU 0 (busy, but below
/// saturation): at a high interrupt rate a CPU's vectors fire close together.
fn disks(posted: bool) -> String {
    let mut t = r#"
name = "posted"
duration = "30ms"
warmup = "5ms"
[platform]
cpus = 2
[cpu]
irq_entry = "600ns"
irq_exit = "400ns"
[fabric]
dma_write = "20ns"
msi_write = "100ns"
[[nvme]]
name = "ssd"
count = 4
queues = 4
cpus = [0]
iops = "200k"
latency = "80us"
service_cv = 1
handler = "300ns"
per_cqe = "200ns"
submit = "0ns"
[nvme.fio]
jobs = 4
iodepth = 32
"#
    .to_string();
    if posted {
        t += "[posted_msi]\n";
    }
    t
}

#[test]
fn a_burst_shares_one_notification_and_every_msi_is_handled() {
    let plain = go(&disks(false), &[]);
    let posted = go(&disks(true), &[]);
    let (p, q) = (&plain.report.metrics, &posted.report.metrics);
    let (msis, notes) = (q["posted_msi.msis_per_s"], q["posted_msi.notifications_per_s"]);
    assert!(notes < 0.8 * msis, "{notes} notifications/s for {msis} MSIs/s");
    assert!(q["posted_msi.handlers_per_notification"] > 1.2, "{}", q["posted_msi.handlers_per_notification"]);
    assert_eq!(q["posted_msi.sources"], 16.0);
    // Every posted message still crossed the DMA path: the remapping unit posts each one.
    let writes = q["msi_writes"] / q["sim_s"];
    assert!((writes - msis).abs() <= 0.01 * msis, "{writes} writes/s, {msis} posted/s");
    assert!(p["nvme.ssd.iops"] > 0.0 && q["nvme.ssd.iops"] > 0.0);
    // Fewer entries and exits: less hardirq time per I/O on the CPU that takes them.
    let per_io = |m: &std::collections::BTreeMap<String, f64>| m["cpu0.hardirq_share"] / m["nvme.ssd.iops"];
    assert!(per_io(q) < per_io(p), "hardirq per I/O: posted {} against {}", per_io(q), per_io(p));
}

#[test]
fn more_loop_passes_coalesce_more() {
    let one = go(&disks(true), &["posted_msi.loops=1"]);
    let three = go(&disks(true), &[]);
    let n = |o: &RunOutput| o.report.metrics["posted_msi.notifications_per_s"] / o.report.metrics["posted_msi.msis_per_s"];
    assert!(n(&three) < n(&one), "notifications per MSI: 3 loops {}, 1 loop {}", n(&three), n(&one));
    // A single-pass handler clears ON first, so it runs one pass per notification
    // (a notification sent before the warm-up ended may be handled after it: 1 % slack).
    let passes = one.report.metrics["posted_msi.passes_per_notification"];
    assert!(passes <= 1.01, "{passes}");
    assert!(three.report.metrics["posted_msi.passes_per_notification"] > 1.5);
}

#[test]
fn posted_msi_with_gsim_loses_nothing() {
    let mut t = disks(true);
    t += "[gsim]\ndelay_us = 50\ntarget_intr_rate = \"10k/s\"\n";
    let out = go(&t, &[]);
    let m = &out.report.metrics;
    assert!(m["gsim.timers_per_s"] > 0.0, "GSIM moderates the posted vectors too");
    assert!(m["nvme.ssd.iops"] > 0.0);
    // A vector a pass finds disabled is masked, not handled: the passes' handlers
    // and the timer's make every handler the disks' vectors had.
    let handlers = m["posted_msi.handlers_per_notification"] * m["posted_msi.notifications_per_s"];
    let in_timer = m["gsim.handled_in_timer"] / m["sim_s"];
    let all = m["source.ssd.interrupts_per_s"];
    assert!(m["gsim.masked_while_disabled"] > 0.0);
    assert!((handlers + in_timer - all).abs() < 0.01 * all, "passes {handlers}/s + timer {in_timer}/s against {all}/s");
    // Every mask of a disabled posted vector is a pass's, and the report says how many.
    let masked = m["posted_msi.masked_per_notification"] * m["posted_msi.notifications_per_s"] * m["sim_s"];
    let all_masked = m["gsim.masked_while_disabled"];
    assert!((masked - all_masked).abs() <= 0.01 * all_masked + 1.0, "masked by passes {masked}, by anyone {all_masked}");
}

/// A held posted vector that fires again is masked by the pass that finds it
/// (handle_edge_irq from the notification), at the mask's cost, as a
/// remapped one is by its CPU: posted MSI gets no free masking under GSIM.
#[test]
fn a_held_posted_vector_costs_its_pass_the_mask() {
    let mut t = disks(true);
    t += "[gsim]\ndelay_us = 50\ntarget_intr_rate = \"10k/s\"\n";
    let cheap = go(&t, &[]);
    let dear = go(&t, &["cpu.msix_mask=2us"]);
    let (c, d) = (&cheap.report.metrics, &dear.report.metrics);
    let masked_per_s = d["gsim.masked_while_disabled"] / 25e-3;
    assert!(masked_per_s > 1_000.0, "{masked_per_s}");
    // CPU 0 takes them all, 2 us each inside a pass. Less shows than that (about
    // 40 %): a longer pass lets more vectors land in it, whose own entries and
    // exits are saved. Without the charge the two runs would be identical.
    let extra = (d["hardirq_share"] - c["hardirq_share"]) * 2.0;
    let expected = 2e-6 * masked_per_s;
    assert!(extra > 0.25 * expected && extra < 1.3 * expected, "extra hardirq {extra} CPUs, expected up to {expected}");
}

#[test]
fn a_guests_vectors_are_not_posted_for_the_host_and_say_so() {
    let t = r#"
name = "vf"
duration = "5ms"
warmup = "1ms"
[platform]
cpus = 2
[[vm]]
name = "g"
vcpus = 1
pcpus = [1]
[[nic]]
name = "eth"
queues = 1
gbps = 10
vm = "g"
cpus = [0]
vf_irqs = "posted"
[posted_msi]
"#;
    let out = go(t, &[]);
    assert_eq!(out.report.metrics["posted_msi.sources"], 0.0);
    assert!(out.report.warnings.iter().any(|w| w.starts_with("posted_msi:")), "{:?}", out.report.warnings);
}

#[test]
fn bad_parameters_are_refused_with_their_key() {
    for (set, key) in [("posted_msi.loops=0", "posted_msi.loops"), ("posted_msi.pir_scan=0ns", "posted_msi.pir_scan")] {
        let e = crate::scenario::load(&disks(true), "x", &[set.into()]).unwrap_err();
        assert!(e.to_string().contains(key), "{set}: {e}");
    }
}

/// Two vectors on one CPU that masks most of the time, so that a pass often
/// finds both set: `handle_pending_pir` runs their handlers one after the other,
/// lowest vector first, so the second starts a handler later than the first
/// (their loads are the same). And the notification is not a device
/// interrupt: `irq_latency` counts the device vectors' handlers, not it.
fn two_vectors(posted: bool) -> RunOutput {
    let mut t = r#"
name = "two"
duration = "400ms"
warmup = "10ms"
[platform]
cpus = 1
[cpu]
irq_entry = "600ns"
irq_exit = "400ns"
[[task]]
name = "masker"
cpus = [0]
work = "1us"
exception = "syscall"
body = "100us"
irqs_off = "100us"
[[source]]
name = "a"
rate = "10k/s"
handler = "10us"
cpus = [0]
[[source]]
name = "b"
rate = "10k/s"
handler = "10us"
cpus = [0]
"#
    .to_string();
    if posted {
        t += "[posted_msi]\n";
    }
    go(&t, &[])
}

#[test]
fn a_pass_runs_its_handlers_one_after_another_and_the_notification_is_no_device_latency() {
    let out = two_vectors(true);
    let (m, h) = (&out.report.metrics, &out.report.histograms);
    assert!(m["posted_msi.handlers_per_notification"] > 1.3, "{}", m["posted_msi.handlers_per_notification"]);
    let (a, b) = (&h["source.a.latency"], &h["source.b.latency"]);
    // b waits for a's 10 us handler in every pass that took both (all at once: 0).
    assert!(b.mean - a.mean > 2_000.0, "a {} ns, b {} ns", a.mean, b.mean);
    assert_eq!(h["irq_latency"].count, a.count + b.count, "a notification is not a device interrupt's latency");
    // Remapped, each vector takes its own entry: the same two vectors, no order between them.
    let plain = two_vectors(false);
    let (pa, pb) = (&plain.report.histograms["source.a.latency"], &plain.report.histograms["source.b.latency"]);
    assert!((pb.mean - pa.mean).abs() < 0.2 * (b.mean - a.mean), "remapped: a {} b {}", pa.mean, pb.mean);
}

/// The remapping unit writes the PIR bit as it finishes a message, and only
/// the notification crosses to the local APIC (`fabric.latency`): whatever is
/// posted while the notification is on its way joins its first pass, so a
/// slower crossing coalesces more. (Until 2026-11-28 the PIR bit was set only
/// when the message would have reached the APIC, which shifted every arrival
/// alike and left the coalescing the same at any latency.)
#[test]
fn the_pir_bit_is_set_at_the_remapping_unit_and_the_notification_takes_the_latency() {
    let t = r#"
name = "pir"
duration = "50ms"
warmup = "5ms"
[platform]
cpus = 1
[cpu]
irq_entry = "500ns"
irq_exit = "500ns"
[fabric]
msi_write = "50ns"
[[source]]
name = "dev"
count = 4
rate = "50k/s"
handler = "200ns"
cpus = [0]
[posted_msi]
"#;
    let near = go(t, &["fabric.latency=0ns"]);
    let far = go(t, &["fabric.latency=5us"]);
    let per = |o: &RunOutput| o.report.metrics["posted_msi.handlers_per_notification"];
    // 200k posts/s: about one more lands in the 5 us a notification travels.
    assert!(per(&far) > per(&near) + 0.5, "handlers per notification: {} at 5 us, {} at 0", per(&far), per(&near));
    // Each vector's latency still runs from its write to its handler, the crossing in it.
    let lat = |o: &RunOutput| o.report.histograms["irq_latency"].p50;
    assert!(lat(&far) > lat(&near) + 3_000.0, "{} against {}", lat(&far), lat(&near));
}

/// One CPU and one device vector, posted (the next two tests).
const ONE_CPU: &str = r#"
name = "lone"
duration = "1s"
warmup = "0s"
[platform]
cpus = 1
[cpu]
irq_entry = "600ns"
irq_exit = "400ns"
[[source]]
name = "dev"
rate = "2k/s"
arrival = "periodic"
handler = "300ns"
cpus = [0]
[posted_msi]
pir_scan = "100ns"
pir_hit = "7ns"
per_vector = "50ns"
"#;

/// One vector at a low rate: each notification takes it alone, and its
/// hardirq time is exactly the entry and exit it shares, the three passes
/// (one that finds the vector, `pir_scan`; one that finds nothing, `pir_hit`;
/// the last after `pi_clear_on`, `pir_hit`), the vector's flow handler
/// (`handle_edge_irq`, `per_vector`) and its driver handler. (An audit: the
/// flow handler was not charged, and posting saved all of it; a mix-up of
/// `pir_scan` and `pir_hit`, or a pass more or fewer, passed every test.)
#[test]
fn a_lone_vector_costs_the_entry_three_passes_its_flow_handler_and_its_handler() {
    let out = go(ONE_CPU, &[]);
    let m = &out.report.metrics;
    assert_eq!(m["posted_msi.handlers_per_notification"], 1.0);
    assert_eq!(m["posted_msi.passes_per_notification"], 3.0);
    let notes = m["posted_msi.notifications_per_s"] * m["sim_s"];
    let per_note = m["hardirq_share"] * m["sim_s"] / notes * 1e9;
    let want = 600.0 + 400.0 + 100.0 + 2.0 * 7.0 + 50.0 + 300.0;
    assert!((per_note - want).abs() < 1.0, "{per_note} ns of hardirq a notification, expected {want}");
}

/// Under a flood (16 Poisson vectors of 50 k/s) every pass finds vectors, so
/// the handler runs exactly `MAX_POSTED_MSI_COALESCING_LOOP` passes: two with
/// ON set, and the last after clearing it. (A loop bound off by one passed
/// the test above, which asks only for more than 1.5.)
#[test]
fn a_flooded_notification_runs_exactly_the_loop_bound() {
    let flood = [
        "duration=\"20ms\"",
        "warmup=\"2ms\"",
        "source.0.count=16",
        "source.0.rate=\"50k/s\"",
        "source.0.arrival=poisson",
        "source.0.handler=\"200ns\"",
    ];
    for loops in [2u32, 3] {
        let bound = format!("posted_msi.loops={loops}");
        let out = go(ONE_CPU, &[&flood[..], &[bound.as_str()]].concat());
        let passes = out.report.metrics["posted_msi.passes_per_notification"];
        assert!((passes - loops as f64).abs() < 0.01, "loops={loops}: {passes} passes a notification");
    }
}

/// VT-d's posted MSI is an x86 host's: beside an arm64 machine's GIC or
/// pseudo-NMI masking the scenario is refused, naming the section.
#[test]
fn posted_msi_on_an_arm64_machine_is_refused() {
    for extra in ["masking = \"pmr\"\n", "[gic]\n"] {
        let base = disks(true);
        let t = if extra.starts_with("masking") { base.replace("[cpu]\n", &format!("[cpu]\n{extra}")) } else { base + extra };
        let e = crate::scenario::load(&t, "x", &[]).unwrap_err().to_string();
        assert!(e.contains("posted_msi") && e.contains("arm64"), "{e}");
    }
}
