//! M4's acceptance: the changed order removes the PMI chain's cancels, a
//! request raised with interrupts off always cancels, the NMI limit holds, and
//! every cancel is attributed.

use crate::engine::stats::Cell;
use crate::run::{run, RunOptions, RunOutput};
use crate::scenario::load;
use proptest::prelude::*;

fn scenario(order: &str, rates: &str, extra: &str) -> String {
    format!(
        r#"
name = "kvm"
duration = "2s"
warmup = "100ms"
[kvm]
vcpus = 4
order = {order}
{extra}
[kvm.rates]
{rates}
[kvm.costs]
exit = "1200ns"
service = "150ns"
inject = "200ns"
irqs_off = "300ns"
entry = "1000ns"
cancel = "400ns"
other_exit = "1000ns"
guest_nmi_handler = "3us"
"#
    )
}

fn go(text: &str) -> RunOutput {
    let sc = load(text, "kvm.toml", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let out = run(&sc, RunOptions::default());
    let a = out.kvm.as_ref().expect("kvm audit");
    assert_eq!(a.time_reversals, 0);
    // Every cancel is attributed, and the attributions add up to the count.
    assert_eq!(a.attributed, a.cancels);
    let m = &out.report.metrics;
    let by: f64 = m.iter().filter(|(k, _)| k.starts_with("cancels.")).map(|(_, v)| v).sum();
    assert_eq!(by, m["cancels"]);
    // A request raised in the IRQs-off window always cancels.
    assert_eq!(a.window_raises_entered, 0);
    // No more than two NMIs pending, none delivered that was not queued and kept.
    assert!(a.max_nmi_pending <= 2);
    assert!(a.nmis_delivered <= a.nmis_queued - a.nmis_dropped);
    out
}

#[test]
fn with_the_old_order_each_overflow_costs_one_cancel() {
    let out = go(&scenario("\"upstream-before\"", "pmu_overflow = 500", ""));
    let m = &out.report.metrics;
    assert!(m["cancels"] > 500.0);
    assert_eq!(m["cancels"], m["cancels.NMI.raised_by.PMI"]);
    assert_eq!(m["cancels"], m["nmis_delivered"]);
}

#[test]
fn with_the_changed_order_the_pmi_chain_never_cancels() {
    let out = go(&scenario("\"upstream-after\"", "pmu_overflow = 2000\nipi = 500\ntimer = 250", ""));
    let m = &out.report.metrics;
    assert!(m["nmis_delivered"] > 1000.0);
    assert!(!m.contains_key("cancels.NMI.raised_by.PMI"));
    assert!(!m.contains_key("cancels.PMI.raised_by.PMU"));
    // What cancels is only what arrives from outside in the window.
    assert!(m.keys().filter(|k| k.starts_with("cancels.")).all(|k| k.contains(".source.")));
    let before = go(&scenario("\"upstream-before\"", "pmu_overflow = 2000\nipi = 500\ntimer = 250", ""));
    let (a, b) = (&out.report.histograms["pmi_latency"], &before.report.histograms["pmi_latency"]);
    assert!(a.mean < b.mean, "no cancel on the way: the PMI arrives sooner ({} vs {})", a.mean, b.mean);
}

#[test]
fn fixed_lvtpc_raises_event_not_nmi() {
    let out = go(&scenario("\"upstream-before\"", "pmu_overflow = 1000", "lvtpc = \"fixed\""));
    let m = &out.report.metrics;
    assert_eq!(m["nmis_delivered"], 0.0);
    assert_eq!(m["cancels"], 0.0, "EVENT is checked after the list");
    assert!(out.report.histograms["pmi_latency"].count > 1000);
}

#[test]
fn requests_raised_with_interrupts_off_cancel() {
    // Frequent timer and IPI requests against a long IRQs-off window.
    let text = scenario("\"upstream-after\"", "timer = 20000\nipi = 20000\nother_exits = 20000", "")
        .replace("irqs_off = \"300ns\"", "irqs_off = \"5us\"");
    let out = go(&text);
    let a = out.kvm.as_ref().unwrap();
    assert!(a.window_raises > 100, "{}", a.window_raises);
    assert!(a.cancels >= a.window_raises);
}

#[test]
fn excess_nmis_are_dropped() {
    let out = go(&scenario("\"upstream-before\"", "nmi = 200000", ""));
    let a = out.kvm.as_ref().unwrap();
    assert!(a.nmis_dropped > 0);
    assert_eq!(a.max_nmi_pending, 2);
    assert!(out.report.metrics["nmis_dropped"] > 0.0);
}

#[test]
fn custom_orders_and_determinism() {
    let list = "[\"STEAL_UPDATE\", \"PMU\", \"SMI\", \"PMI\", \"NMI\", \"IOAPIC_EOI_EXIT\", \"SCAN_IOAPIC\", \"LOAD_EOI_EXITMAP\", \"APIC_PAGE_RELOAD\"]";
    let t = scenario(list, "pmu_overflow = 1000\nsmi = 50", "");
    let (a, b) = (go(&t), go(&t));
    assert_eq!(crate::to_json(&load(&t, "k", &[]).unwrap(), &a), crate::to_json(&load(&t, "k", &[]).unwrap(), &b));
    assert!(!a.report.metrics.contains_key("cancels.NMI.raised_by.PMI"));
}

proptest! {
    // `make test-long` sets IRQLAB_PROPTEST_CASES for a longer search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("IRQLAB_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn invariants_hold_for_any_order_and_rates(
        perm in Just((0..9usize).collect::<Vec<_>>()).prop_shuffle(),
        rates in proptest::collection::vec(0u32..3000, 6),
        fixed in any::<bool>(),
    ) {
        let names: Vec<String> = perm.iter().map(|&i| format!("\"{}\"", super::requests::ORDERED[i].name())).collect();
        let r = format!(
            "pmu_overflow = {}\nipi = {}\ntimer = {}\nnmi = {}\nsmi = {}\nother_exits = {}",
            rates[0], rates[1], rates[2], rates[3] * 10, rates[4] / 10, rates[5]
        );
        let extra = if fixed { "lvtpc = \"fixed\"" } else { "" };
        go(&scenario(&format!("[{}]", names.join(", ")), &r, extra).replace("duration = \"2s\"", "duration = \"300ms\""));
    }
}

#[test]
fn cancel_causes_come_as_a_table_that_adds_up() {
    let t = scenario("\"upstream-before\"", "pmu_overflow = 1000\nipi = 500\ntimer = 300", "");
    let out = go(&t);
    let table = &out.report.tables["cancel_causes"];
    assert_eq!(table.columns, ["request", "kind", "cause", "cancels", "cancels_per_s"]);
    let col = |name: &str| table.columns.iter().position(|c| c == name).unwrap();
    let mut total = 0.0;
    for row in &table.rows {
        let (Cell::Text(req), Cell::Text(kind), Cell::Text(cause), Cell::Num(n)) =
            (&row[col("request")], &row[col("kind")], &row[col("cause")], &row[col("cancels")])
        else {
            panic!("row {row:?}")
        };
        // The same count as the metric of the same cause.
        assert_eq!(out.report.metrics[&format!("cancels.{req}.{kind}.{cause}")], *n);
        total += n;
    }
    assert!(total > 0.0);
    // Every cancel after warm-up has one cause.
    assert_eq!(total, out.report.metrics["cancels"]);
}
