//! The reference and M/D/1 scenarios through the whole model.

use irqlab_core::{load, run, RunOptions};

fn scenario(rel: &str) -> irqlab_core::Scenario {
    let path = format!("{}/../../python/irqlab/scenarios/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    load(&text, rel, &[]).unwrap()
}

#[test]
fn md1_mean_wait_matches_pollaczek_khinchine() {
    let sc = scenario("examples/md1-queue.toml");
    let out = run(&sc, RunOptions::default());
    let h = &out.report.histograms["irq_latency"];
    let wq = 0.3 * 300.0 / (2.0 * 0.7);
    assert!((h.mean - wq).abs() / wq < 0.03, "mean wait {} vs {wq}", h.mean);
    let rho = out.report.metrics["hardirq_share"];
    assert!((rho - 0.3).abs() < 0.003, "utilisation {rho}");
}

#[test]
fn reference_handles_about_a_million_per_second() {
    let sc = scenario("bench/reference.toml");
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    let m = &out.report.metrics;
    assert!((m["msi_writes"] - 500_000.0).abs() < 5_000.0, "{}", m["msi_writes"]);
    assert_eq!(m["msi_writes"], m["interrupts"] + m["irq_merged"] + out.pending_events as f64);
    assert_eq!(out.audit.double_deliveries, 0);
}
