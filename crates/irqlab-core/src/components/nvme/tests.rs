//! The NVMe service model and the CPU work per I/O: queue-depth-1 latency and
//! the IOPS ceiling as separate parameters, submissions on the CPU (which can
//! saturate), and polled queues that raise no interrupt and lose no I/O.

use crate::run::{run, RunOptions, RunOutput};
use crate::scenario::load;

fn go(toml: &str, sets: &[&str]) -> RunOutput {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = load(toml, "nvme.toml", &sets).unwrap_or_else(|e| panic!("{e}"));
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.ios_found, out.audit.ios_owned, "{sets:?}: every I/O is somewhere");
    assert_eq!(out.audit.time_reversals, 0);
    out
}

const DISK: &str = r#"
name = "disk"
duration = "40ms"
warmup = "5ms"
[platform]
cpus = 2
[cpu]
irq_entry = "300ns"
irq_exit = "200ns"
[[nvme]]
name = "ssd"
queues = 2
cpus = [0, 1]
iops = "1M"
latency = "80us"
service_cv = 0.5
handler = "500ns"
per_cqe = "300ns"
submit = "1us"
[nvme.fio]
jobs = 1
iodepth = 1
"#;

#[test]
fn queue_depth_one_latency_is_the_device_latency_plus_the_host_path() {
    let out = go(DISK, &["nvme.0.service_cv=0"]);
    let lat = &out.report.histograms["nvme.ssd.latency"];
    // 80 us in the device; the host adds the interrupt and the submission (a few us).
    assert!(lat.mean > 80_000.0 && lat.mean < 86_000.0, "mean {} ns", lat.mean);
    let iops = out.report.metrics["nvme.ssd.iops"];
    assert!(iops > 11_000.0 && iops < 12_600.0, "one I/O at a time: about 1 / 82 us, got {iops}");
}

#[test]
fn latency_rises_with_load_up_to_the_iops_ceiling() {
    // No submission cost here: the device, not the CPUs, is the limit.
    let light = go(DISK, &["nvme.0.fio.iodepth=8", "nvme.0.submit=0ns"]);
    let heavy = go(DISK, &["nvme.0.fio.jobs=8", "nvme.0.fio.iodepth=64", "nvme.0.submit=0ns"]);
    let (l, h) = (&light.report, &heavy.report);
    let (lp, hp) = (l.histograms["nvme.ssd.latency"].p99, h.histograms["nvme.ssd.latency"].p99);
    assert!(hp > 2.0 * lp, "p99 {lp} ns at 8 in flight, {hp} ns at 512");
    let iops = h.metrics["nvme.ssd.iops"];
    // 512 in flight against 80 channels: the disk runs at its ceiling, not above it.
    assert!(iops > 0.9e6 && iops <= 1.01e6, "{iops}");
}

#[test]
fn submissions_take_cpu_time_and_a_cpu_can_saturate() {
    // 512 I/Os in flight, 10 us of submission each on 2 CPUs: at most 200 k IOPS.
    let out = go(DISK, &["nvme.0.fio.jobs=8", "nvme.0.fio.iodepth=64", "nvme.0.submit=10us"]);
    let m = &out.report.metrics;
    assert!(m["nvme.ssd.iops"] < 200_000.0 && m["nvme.ssd.iops"] > 150_000.0, "{}", m["nvme.ssd.iops"]);
    assert!(m["kernel_share"] > 0.85, "the CPUs are busy submitting: {}", m["kernel_share"]);
    // Without a submission cost the same load runs at the device's ceiling.
    let free = go(DISK, &["nvme.0.fio.jobs=8", "nvme.0.fio.iodepth=64", "nvme.0.submit=0ns"]);
    assert!(free.report.metrics["nvme.ssd.iops"] > 0.9e6);
}

#[test]
fn polled_queues_raise_no_interrupt_and_lose_no_io() {
    let polled = go(DISK, &["nvme.0.moderation.kind=polling", "nvme.0.fio.iodepth=4", "nvme.0.service_cv=0"]);
    let irq = go(DISK, &["nvme.0.fio.iodepth=4", "nvme.0.service_cv=0"]);
    let (p, i) = (&polled.report, &irq.report);
    assert_eq!(p.metrics["source.ssd.interrupts_per_s"], 0.0);
    assert!(i.metrics["source.ssd.interrupts_per_s"] > 10_000.0);
    assert!(p.metrics["nvme.ssd.iops"] > 0.0);
    assert_eq!(p.metrics["hardirq_share"], 0.0, "a polled queue's completions cost thread time, not hardirq");
    assert!(p.histograms["nvme.ssd.latency"].mean < i.histograms["nvme.ssd.latency"].mean, "no interrupt entry on the path");
}

#[test]
fn bad_service_parameters_are_refused_with_their_key() {
    for (sets, key) in [
        (vec!["nvme.0.channels=8"], "nvme[0].latency"),
        (vec!["nvme.0.service_cv=2"], "nvme[0].service_cv"),
        (vec!["nvme.0.latency=1ns"], "nvme[0].latency"),
        (vec!["nvme.0.fio.jobs=5000"], "nvme[0].fio.jobs"),
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let e = load(DISK, "nvme.toml", &sets).unwrap_err();
        assert!(e.0.contains(key), "{sets:?}: {}", e.0);
    }
}
