//! The volume's service time: log-normal device latency plus a fixed transfer time.

use crate::components::hypervisor::tests::m3;

#[test]
fn transfer_time_adds_to_the_latency_without_widening_its_spread() {
    // 16 KiB moves 12 KiB more than 4 KiB: 120 us at 10 us/KiB, the same for every read.
    let run = |bs: &str| {
        let (_, h) = m3(&[&format!("vblk.bs={bs}"), "vblk.per_kib=\"10us\"", "duration=\"2s\"", "warmup=\"50ms\""]);
        h["vblk.clat"].clone()
    };
    let (a, b) = (run("4096"), run("16384"));
    let transfer = 120_000.0;
    let moved = b.mean - a.mean;
    assert!((moved - transfer).abs() < 0.03 * transfer, "mean moved by {moved} ns, transfer {transfer} ns");
    // Scaled by the log-normal factor, the tail would stretch with the median (+48 % here).
    let (sa, sb) = (a.p99_9 - a.p50, b.p99_9 - b.p50);
    assert!((sb - sa).abs() < 0.03 * sa, "p99.9 - p50: {sa} ns at 4k, {sb} ns at 16k");
}

/// fio's clat ends when its thread reaps the read, which on a busy vCPU waits
/// behind the vIRQ handlers queued before it: one job 32 deep keeps its vCPU
/// busy, and direct injection, which takes the LPI exits off it, shortens the
/// latency along with raising the IOPS. (Ended at the handler, the clat left
/// that wait out and read longer with direct injection: 317 against 333 us.)
#[test]
fn a_busy_vcpus_reads_wait_for_fio_and_direct_injection_shortens_that() {
    let deep = ["vblk.numjobs=1", "vblk.iodepth=32", "vblk.cpus=[0]", "duration=\"300ms\"", "warmup=\"50ms\""];
    let (off_m, off_h) = m3(&[&deep[..], &["gic.direct_lpi=false"]].concat());
    let (on_m, on_h) = m3(&[&deep[..], &["gic.direct_lpi=true", "gic.version=\"4.1\""]].concat());
    assert!(on_m["vblk.iops"] > 1.03 * off_m["vblk.iops"], "{} {}", on_m["vblk.iops"], off_m["vblk.iops"]);
    let (a, b) = (off_h["vblk.clat"].mean, on_h["vblk.clat"].mean);
    assert!(b < a, "clat with direct injection {b} ns, without {a} ns");
}
