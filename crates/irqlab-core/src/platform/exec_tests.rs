//! Running a CPU's frames: an interrupt pauses the top frame's phase, which
//! resumes with the work it had left once the interrupt's frame pops.

use crate::run::run_audited;

/// A user loop of 10 µs ops on CPU 0 under an interrupt every 33.3 µs that
/// lands anywhere in an op: each pauses the op, which goes on after the
/// handler with what it had left. So every op costs its 10 µs of user time
/// however it is cut (an op finished early, or stretched, would show here);
/// the CPU's own count of interrupts is the machine's; and each interrupt
/// pays its entry, its handler and its exit.
#[test]
fn a_paused_phase_resumes_with_the_work_it_had_left() {
    let sc = r#"
name = "pause"
duration = "20ms"
warmup = "2ms"
[platform]
cpus = 1
[cpu]
irq_entry = "300ns"
irq_exit = "200ns"
[[task]]
name = "t"
work = "10us"
[[source]]
name = "dev"
arrival = "periodic"
rate = "30k/s"
handler = "1us"
"#;
    let out = run_audited(sc, &[]);
    let m = &out.report.metrics;
    assert!(m["interrupts_per_s"] > 29_000.0, "{}", m["interrupts_per_s"]);
    assert!(m["hardirq_share"] > 0.03, "{}", m["hardirq_share"]);
    // Each one is counted on the CPU that took it, too.
    let n = m["interrupts_per_s"];
    assert_eq!(m["cpu0.interrupts_per_s"], n);
    // Each pays its entry, handler and exit in hardirq time, of which the
    // handler alone is `irqtime` (the arch entry and exit left out).
    assert!((m["hardirq_share"] - n * 1.5e-6).abs() < 1e-4, "{} for {n}/s", m["hardirq_share"]);
    assert!((m["irqtime_share"] - n * 1e-6).abs() < 1e-4, "{} for {n}/s", m["irqtime_share"]);
    let per_op = m["user_share"] / m["task.t.ops_per_s"];
    assert!((per_op - 10e-6).abs() < 0.01 * 10e-6, "{} ns of user time an op", per_op * 1e9);
}
