//! The plain interrupt path's costs under pseudo-NMI.

use crate::run::run_audited;

/// Under pseudo-NMI an interrupt that wakes the idle loop pays its PMR
/// restore and `local_irq_enable()` before the entry (`pmr::IDLE_WAKE`); one
/// that interrupts a user loop does not. With periodic interrupts on an idle
/// CPU 0 and on one running a task (moved to CPU 1 for the idle run), the latencies differ by that wake-up.
#[test]
fn an_interrupt_that_wakes_the_idle_loop_pays_the_pmr_wake_up_first() {
    let sc = r#"
name = "wake"
duration = "10ms"
warmup = "1ms"
[platform]
cpus = 2
[cpu]
masking = "pmr"
pmr = { access = "10ns" }
[[task]]
name = "t"
cpus = [0]
work = "1ms"
[[source]]
name = "dev"
cpus = [0]
arrival = "periodic"
rate = "10k/s"
handler = "1us"
"#;
    let busy = run_audited(sc, &[]);
    let idle = run_audited(sc, &["task.0.cpus=[1]"]);
    let (b, i) = (&busy.report.histograms["irq_latency"], &idle.report.histograms["irq_latency"]);
    assert!(busy.report.metrics["cpu0.user_share"] > 0.9, "{:?}", busy.report.metrics);
    assert!(idle.report.metrics["cpu0.idle_share"] > 0.9, "{:?}", idle.report.metrics);
    assert!(i.p50 > b.p50 && i.p99 > b.p99, "idle p50 {} p99 {}, busy p50 {} p99 {}", i.p50, i.p99, b.p50, b.p99);
}
