//! The reference model's per-source load spread over N CPUs (32 Poisson sources
//! per CPU, the same interrupt count as the reference): for profiling the
//! engine at scale with perf. `cargo run --release --example scale -- 2048 [runs]`
fn main() {
    let mut args = std::env::args().skip(1);
    let cpus: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2048);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let text = irqlab_core::bench::scale_scenario(cpus);
    let sc = irqlab_core::load(&text, "scale.toml", &[]).unwrap();
    for _ in 0..runs {
        let t = std::time::Instant::now();
        let out = irqlab_core::run(&sc, Default::default());
        let w = t.elapsed().as_secs_f64();
        println!("{cpus} cpus: {:.2} M events/wall-s ({:.3} s)", out.report.metrics["events"] / w / 1e6, w);
    }
}
