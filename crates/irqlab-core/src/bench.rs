//! Scenarios for measuring the engine, shared by `irqlab bench`, the criterion
//! benches and the profiling examples so that all of them time the same model.

/// The reference model (`scenarios/bench/reference.toml`: 32 Poisson MSI
/// sources at 31,250/s each, a 300 ns handler) with its load spread over `cpus`
/// CPUs: 32 sources per CPU, round-robin, and the duration divided by `cpus` so
/// that every size handles the same number of interrupts (about 500,000). How
/// the cost per event changes with `cpus` is then the engine's and the
/// machine's scaling, not a change in work.
pub fn scale_scenario(cpus: u32) -> String {
    let cpus = cpus.max(1);
    let list: Vec<String> = (0..cpus).map(|c| c.to_string()).collect();
    // 0.5 s / cpus, in ns so that it stays exact.
    let duration_ns = 500_000_000u64 / cpus as u64;
    format!(
        "name = \"scale-{cpus}\"\n\
         description = \"the reference model's per-source load on {cpus} CPUs, 32 sources each\"\n\
         duration = \"{duration_ns}ns\"\nwarmup = \"0s\"\nseed = 1\n\
         [platform]\ncpus = {cpus}\n\
         [[source]]\nname = \"msi\"\ncount = {count}\nrate = \"31250/s\"\nhandler = \"300ns\"\ncpus = [{list}]\n",
        count = 32 * cpus as u64,
        list = list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_size_loads_and_handles_about_the_same_interrupts() {
        let mut seen = Vec::new();
        for cpus in [1, 64] {
            let sc = crate::load(&super::scale_scenario(cpus), "scale.toml", &[]).unwrap();
            let out = crate::run(&sc, Default::default());
            seen.push(out.report.metrics["interrupts"]);
        }
        // Poisson counts of ~500,000: a few thousand apart, never a factor.
        assert!((seen[0] - seen[1]).abs() / seen[0] < 0.02, "{seen:?}");
    }
}
