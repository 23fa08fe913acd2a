//! The plain interrupt path: its costs under pseudo-NMI, and what `irq_exit()`
//! does on the way back (softirqs, preemption).

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

/// One CPU, two user loops that never enter the kernel on their own, and a
/// 1 kHz tick: the three tests below.
const TWO_LOOPS_TICKED: &str = r#"
name = "tick"
duration = "200ms"
warmup = "20ms"
[platform]
cpus = 1
[cpu]
context_switch = "1us"
timeslice = "3ms"
[[task]]
name = "t"
count = 2
work = "100ms"
[[source]]
name = "tick"
arrival = "periodic"
rate = "1k/s"
handler = "1us"
"#;

/// One CPU, two user loops that never enter the kernel on their own (100 ms
/// ops), a 1 kHz tick: only the tick's return to user can preempt them
/// (`irq_exit_tail` → `need_resched`), once the 3 ms slice is over, so they
/// switch every 3–4 ms, not once an op.
#[test]
fn a_task_is_preempted_on_an_interrupts_return_once_its_slice_is_over() {
    let m = run_audited(TWO_LOOPS_TICKED, &[]).report.metrics;
    let switches = m["context_switches_per_s"];
    assert!(switches > 240.0 && switches <= 334.0, "{switches} switches/s");
}

/// The same, with a tick whose handler raises softirq work: the return to
/// user comes once the softirqs are through (`exit_to_user_mode` after
/// `irq_exit()`), and preempts there. Until 2026-11-29 the softirq's end made
/// no check, so the loops switched only at their op ends (an audit: 50
/// switches/s against 1,000 with a 1 ms slice).
#[test]
fn a_task_is_preempted_once_the_softirqs_of_an_interrupt_are_through() {
    let m = run_audited(TWO_LOOPS_TICKED, &["source.0.softirq=\"2us\""]).report.metrics;
    let switches = m["context_switches_per_s"];
    assert!(switches > 240.0 && switches <= 334.0, "{switches} switches/s");
    assert!(m["softirq_share"] > 0.0015, "{m:?}");
}

/// An NMI's handler runs between `nmi_enter` and `nmi_exit`, where
/// `raise_softirq` is not allowed: the scenario says so rather than running
/// that work over what the NMI interrupted, interrupts off or not.
#[test]
fn an_nmi_raises_no_softirq_work() {
    let sc = "name = \"n\"\nduration = \"1ms\"\n[cpu]\nmasking = \"pmr\"\n[[source]]\nname = \"pmi\"\nrate = \"1k/s\"\nhandler = \"1us\"\nnmi = true\n";
    assert!(crate::scenario::load(sc, "n.toml", &[]).is_ok());
    let e = crate::scenario::load(sc, "n.toml", &["source.0.softirq=\"1us\"".into()]).unwrap_err().to_string();
    assert!(e.contains("source[0].softirq") && e.contains("NMI"), "{e}");
}

/// A pseudo-NMI taken over user code comes through the IRQ path
/// (`el0_interrupt`: `irq_exit_rcu()`, then `exit_to_user_mode()`), so its
/// return preempts a task whose slice is over as a normal interrupt's does:
/// the two user loops of the test above, ticked by an NMI instead, switch as
/// often. (Only over code with interrupts masked does it return without
/// `irq_exit()`, `__el1_pnmi`.) From 2026-11-29 to an audit the same day every
/// NMI's return skipped it, and the loops switched only at their op ends.
#[test]
fn an_nmi_over_user_code_preempts_on_its_return_as_an_irq_does() {
    let pmr = ["cpu.masking=\"pmr\""];
    let m = run_audited(TWO_LOOPS_TICKED, &[pmr[0], "source.0.nmi=true"]).report.metrics;
    let switches = m["context_switches_per_s"];
    assert!(switches > 240.0 && switches <= 334.0, "{switches} switches/s");
    let normal = run_audited(TWO_LOOPS_TICKED, &pmr).report.metrics["context_switches_per_s"];
    assert!(normal > 240.0, "{normal} switches/s with a normal tick");
}

/// Softirq work a handler raises runs on its `irq_exit()` when it interrupted
/// a user loop (`invoke_softirq`): the loop never idles, so nothing else would
/// run it. 10 K interrupts/s of 5 µs each: 5 % of the CPU.
#[test]
fn softirq_work_runs_on_irq_exit_over_a_busy_task() {
    let sc = r#"
name = "soft"
duration = "50ms"
warmup = "5ms"
[platform]
cpus = 1
[[task]]
name = "t"
work = "1ms"
[[source]]
name = "dev"
rate = "10k/s"
handler = "1us"
softirq = "5us"
"#;
    let m = run_audited(sc, &[]).report.metrics;
    let (rate, soft) = (m["interrupts_per_s"], m["softirq_share"]);
    assert!((soft - rate * 5e-6).abs() < 1e-3, "softirq share {soft} for {rate}/s");
    assert!(m["user_share"] > 0.9, "{m:?}");
}
