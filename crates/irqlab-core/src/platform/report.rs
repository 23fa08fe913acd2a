//! Turning the machine's counters into the run's metrics, histograms and series.

use crate::engine::stats::{Cell, Report, Table};
use crate::engine::time::{ps_to_s, Ps};
use crate::platform::cpu::{Class, Level, CLASSES};
use crate::platform::machine::{Machine, Parts, Snapshot};

/// Each time class's share, as the report names it (`CLASSES` in order).
const CLASS_SHARES: [&str; 6] = ["idle_share", "user_share", "kernel_share", "hardirq_share", "softirq_share", "hyp_share"];
const _: () = assert!(CLASS_SHARES.len() == CLASSES.len());

/// A series' unit in the trace's counter track, from its name.
fn series_unit(name: &str) -> &'static str {
    match name {
        n if n.ends_with("_per_s") || n == "iops" => "/s",
        n if n.ends_with("_share") => "share",
        n if n.ends_with("_gbps") => "Gbit/s",
        n if n.ends_with("_ns") => "ns",
        _ => "",
    }
}

impl<P: Parts> Machine<P> {
    fn snapshot(&mut self, now: Ps) -> Snapshot {
        for c in &mut self.cpus {
            c.account(now);
        }
        Snapshot {
            irqs: self.n.host_irqs + self.n.guest_irqs,
            ops: self.tasks.iter().map(|t| t.ops).sum(),
            hardirq: self.cpus.iter().map(|c| c.class_time(Class::Hardirq)).sum(),
            idle: self.cpus.iter().map(|c| c.class_time(Class::Idle)).sum(),
        }
    }

    /// Pushes a point of a time series (a component's too), and writes it to
    /// the trace as a counter of the same name: the trace's rates
    /// (interrupts/s, IOPS, goodput) and GSIM's delay.
    pub fn push_series(&mut self, name: &str, now: Ps, v: f64) {
        self.series.entry(name.to_string()).or_default().push(now, v);
        if self.tracer.on() {
            let track = match self.series_tracks.get(name) {
                Some(&t) => t,
                None => {
                    let t = self.tracer.counter_track(name, series_unit(name));
                    self.series_tracks.insert(name.to_string(), t);
                    t
                }
            };
            self.tracer.counter(now, track, v);
        }
    }

    pub fn sample(&mut self, now: Ps) {
        let cur = self.snapshot(now);
        let prev = std::mem::replace(&mut self.last_sample, cur.clone());
        let dt = ps_to_s(self.interval);
        let cpu_ps = self.interval as f64 * self.cpus.len() as f64;
        self.push_series("interrupts_per_s", now, (cur.irqs - prev.irqs) as f64 / dt);
        self.push_series("hardirq_share", now, (cur.hardirq - prev.hardirq) as f64 / cpu_ps);
        self.push_series("busy_share", now, 1.0 - (cur.idle - prev.idle) as f64 / cpu_ps);
        if !self.tasks.is_empty() {
            self.push_series("ops_per_s", now, (cur.ops - prev.ops) as f64 / dt);
        }
        P::sample(self, now);
    }

    pub fn report(&mut self, now: Ps, events: u64) -> Report {
        for c in &mut self.cpus {
            c.account(now);
        }
        let span = now - self.warmup;
        let secs = ps_to_s(span).max(f64::MIN_POSITIVE);
        let mut r = Report::default();
        let n = &self.n;
        let irqs = n.host_irqs + n.guest_irqs;
        r.metric("sim_s", ps_to_s(span));
        r.metric("events", events as f64);
        r.metric("msi_writes", n.writes as f64);
        r.metric("irq_merged", (n.merged + n.vmerged) as f64);
        r.metric("interrupts", irqs as f64);
        r.metric("interrupts_per_s", irqs as f64 / secs);
        r.metric("guest_interrupts", n.guest_irqs as f64);
        r.metric("vm_exits", n.vm_exits as f64);
        r.metric("vm_exits_per_s", n.vm_exits as f64 / secs);
        if self.c.guest_hlt {
            // Idle vCPUs' halts (`hypervisor.guest_idle = "hlt"`) and how they ended.
            r.metric("halt_exits_per_s", n.halt_exits as f64 / secs);
            r.metric("halt_poll_hits_per_s", n.halt_polled as f64 / secs);
            r.metric("halt_wakeups_per_s", n.halt_wakeups as f64 / secs);
            r.metric("halt_skipped_per_s", n.halt_skipped as f64 / secs);
        }
        r.metric("context_switches_per_s", n.switches as f64 / secs);
        if self.c.cstates {
            // Wake-ups from each idle state, and the exit latency they paid on average.
            let cs = &self.cstates;
            for (k, name) in cs.names().iter().enumerate() {
                r.metric(format!("cpuidle.{name}.wakes_per_s"), cs.wakes[k] as f64 / secs);
            }
            let wakes: u64 = cs.wakes.iter().sum();
            r.metric("cpuidle.exit_mean_ns", if wakes > 0 { cs.exit_time as f64 / wakes as f64 / 1e3 } else { 0.0 });
        }
        r.histogram("irq_latency", &n.irq_latency);
        if n.virq_latency.count() > 0 {
            r.histogram("virq_latency", &n.virq_latency);
        }

        let ncpu = self.cpus.len() as f64;
        let mut class_sum = [0f64; 6];
        let mut columns = vec!["cpu"];
        columns.extend(CLASS_SHARES);
        columns.extend(["guest_share", "interrupts_per_s"]);
        let mut table = Table::new(&columns);
        // About 8 metrics a CPU: at 2,048 CPUs, inserting each into the map
        // one by one, with a `format!` for each key, took half of a short
        // run's wall time (callgrind: 69 M of 135 M instructions for a 1 ns
        // run). They are gathered, sorted once and merged into the map in bulk.
        let mut per_cpu: Vec<(String, f64)> = Vec::with_capacity(self.cpus.len() * (CLASSES.len() + 3));
        let key = |prefix: &str, name: &str| [prefix, name].concat();
        for (i, c) in self.cpus.iter().enumerate() {
            let prefix = format!("cpu{i}.");
            let mut row: Vec<Cell> = vec![Cell::Num(i as f64)];
            let mut shares: Vec<f64> = (0..CLASSES.len()).map(|k| (c.time[0][k] + c.time[1][k]) as f64 / span.max(1) as f64).collect();
            if c.spins {
                // A polling thread spins where the model idles: kernel time.
                let idle = std::mem::take(&mut shares[Class::Idle as usize]);
                shares[Class::Kernel as usize] += idle;
                per_cpu.push((key(&prefix, "poll_share"), idle));
            }
            for (k, name) in CLASS_SHARES.iter().enumerate() {
                let share = shares[k];
                class_sum[k] += share;
                per_cpu.push((key(&prefix, name), share));
                row.push(share.into());
            }
            let guest = c.level_time(Level::Guest) as f64 / span.max(1) as f64;
            if c.vcpu.is_some() {
                per_cpu.push((key(&prefix, "guest_share"), guest));
            }
            per_cpu.push((key(&prefix, "interrupts_per_s"), c.irqs as f64 / secs));
            row.extend([guest.into(), (c.irqs as f64 / secs).into()]);
            table.row(row);
        }
        // (`collect` sorts and builds the map in bulk; `append` merges two maps in one pass.)
        let mut per_cpu: std::collections::BTreeMap<String, f64> = per_cpu.into_iter().collect();
        r.metrics.append(&mut per_cpu);
        r.table("cpus", table);
        for (k, name) in CLASS_SHARES.iter().enumerate() {
            r.metric(*name, class_sum[k] / ncpu);
        }
        r.metric("busy_share", 1.0 - class_sum[Class::Idle as usize] / ncpu);
        // What /proc/stat's irq column would show (IRQ_TIME_ACCOUNTING): the
        // host's hardirq time without the arch entry and exit, which
        // `hardirq_share` includes; it is what GSIM's hardirq criterion reads.
        let irqtime: Ps = self.cpus.iter().map(|c| c.irqtime()).sum();
        r.metric("irqtime_share", irqtime as f64 / span.max(1) as f64 / ncpu);

        let per_group = &self.src_handled;
        let mut table = Table::new(&["source", "interrupts", "interrupts_per_s"]);
        for (g, name) in self.src_groups.iter().enumerate() {
            r.metric(format!("source.{name}.interrupts_per_s"), per_group[g] as f64 / secs);
            if let Some(l) = self.src_latency[g].as_ref().filter(|l| l.count() > 0) {
                r.histogram(format!("source.{name}.latency"), l);
            }
            table.row(vec![name.as_str().into(), (per_group[g] as f64).into(), (per_group[g] as f64 / secs).into()]);
        }
        r.table("sources", table);

        if !self.tasks.is_empty() {
            let mut ops = vec![(0u64, 0u64); self.task_groups.len()];
            let mut tax = vec![0; self.task_groups.len()];
            for t in &self.tasks {
                ops[t.group as usize].0 += t.ops;
                ops[t.group as usize].1 += 1;
                tax[t.group as usize] = t.pmr_tax;
            }
            let mut total = 0;
            for (g, name) in self.task_groups.iter().enumerate() {
                let (o, count) = ops[g];
                total += o;
                r.metric(format!("task.{name}.ops_per_s"), o as f64 / secs);
                r.metric(format!("task.{name}.ops_per_s_per_task"), o as f64 / secs / count as f64);
                if o > 0 {
                    r.metric(format!("task.{name}.ns_per_op"), secs * 1e9 * count as f64 / o as f64);
                }
                r.metric(format!("task.{name}.pmr_tax_ns_per_op"), tax[g] as f64 / 1e3);
            }
            r.metric("ops_per_s", total as f64 / secs);
            r.histogram("op_latency", &n.op_latency);
        }

        r.metric("msi_merged_at_device", self.n.msi_merged_at_device as f64);
        r.metric("msi_merged_in_pba", self.n.pba_merged as f64);
        if !self.napis.is_empty() {
            // /proc/net/softnet_stat's time_squeeze, and ksoftirqd taking over.
            r.metric("softnet.time_squeeze_per_s", self.n.time_squeeze as f64 / secs);
            r.metric("softnet.ksoftirqd_wakeups_per_s", self.n.ksoftirqd_wakeups as f64 / secs);
        }
        P::report(self, &mut r, now, secs);
        // Writes sent and not yet at the interrupt controller when the run ended: what
        // an overloaded fabric holds back (offered = delivered + these + merged).
        let in_fabric: usize = self.srcs.iter().map(|s| s.in_fabric.len()).sum();
        if !self.paths.is_empty() {
            // Over the paths that carried writes: a socket or a remapping unit
            // no device uses would halve it (a review); and every path's waits.
            let used = self.paths.iter().filter(|p| p.wait.count() > 0).count().max(1);
            let busy: Ps = self.paths.iter().map(|p| p.busy_until(now)).sum();
            r.metric("fabric.utilisation", busy as f64 / (span.max(1) as f64 * used as f64));
            r.metric("fabric.msis_in_flight", in_fabric as f64);
            let mut wait = self.paths[0].wait.clone();
            for p in &self.paths[1..] {
                wait.merge(&p.wait);
            }
            r.histogram("fabric_wait", &wait);
            if self.n.msix_flush_wait.count() > 0 {
                r.histogram("msix_flush_wait", &self.n.msix_flush_wait);
            }
            if self.paths.len() > 1 {
                let per = self.iommus_per_socket as usize;
                for (k, p) in self.paths.iter().enumerate() {
                    let name = if per == 1 { format!("fabric.socket{k}") } else { format!("fabric.socket{}.iommu{}", k / per, k % per) };
                    r.metric(format!("{name}.utilisation"), p.busy_until(now) as f64 / span.max(1) as f64);
                    r.histogram(format!("{name}.wait"), &p.wait);
                }
            }
        } else if self.fabric.has_cost() {
            let slots = self.fabric.slots() as f64;
            r.metric("fabric.utilisation", self.fabric.busy_until(now) as f64 / (span.max(1) as f64 * slots));
            r.metric("fabric.msis_in_flight", in_fabric as f64);
            r.histogram("fabric_wait", &self.fabric.wait);
        }
        r.series = self.series.clone(); // a copy: the first half's report (`protocol`) is not the last
        r
    }
}

#[cfg(test)]
mod tests {
    use crate::run::run_audited;

    /// With several `[[source]]`s each has its own latency histogram beside the
    /// pooled `irq_latency` (a masking study needs the NMI's apart): under
    /// pseudo-NMI a task's IRQs-off sections hold the normal source back and
    /// not the NMI. One source alone adds no histogram.
    #[test]
    fn each_source_has_its_latency_when_there_are_several() {
        let sc = r#"
name = "two"
duration = "20ms"
warmup = "2ms"
[platform]
cpus = 1
[cpu]
masking = "pmr"
[[task]]
name = "t"
work = "200ns"
exception = "syscall"
body = "6us"
irqs_off = "5us"
[[source]]
name = "dev"
rate = "50k/s"
handler = "500ns"
[[source]]
name = "pmi"
rate = "20k/s"
handler = "300ns"
nmi = true
"#;
        let out = run_audited(sc, &[]);
        let h = &out.report.histograms;
        let (dev, pmi, all) = (&h["source.dev.latency"], &h["source.pmi.latency"], &h["irq_latency"]);
        assert_eq!(dev.count + pmi.count, all.count);
        assert!(dev.p99 > 4.0 * pmi.p99, "dev p99 {} ns, pmi p99 {} ns", dev.p99, pmi.p99);
        let one = run_audited(sc, &["source.1.rate=\"0/s\""]);
        assert!(one.report.histograms.contains_key("source.dev.latency") && !one.report.histograms.contains_key("source.pmi.latency"));
    }
}
