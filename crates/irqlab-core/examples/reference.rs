//! Runs the reference scenario N times (for profiling the engine with perf).
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/irqlab/scenarios/bench/reference.toml");
    let sc = irqlab_core::load(&std::fs::read_to_string(path).unwrap(), "reference.toml", &[]).unwrap();
    for _ in 0..n {
        let t = std::time::Instant::now();
        let out = irqlab_core::run(&sc, Default::default());
        let w = t.elapsed().as_secs_f64();
        println!("{:.2} M irq/wall-s", out.report.metrics["interrupts"] / w / 1e6);
    }
}
