//! Building the device models (NVMe, NIC) and GSIM from the scenario, starting
//! them, and zeroing their statistics after warm-up. Kept apart from
//! `machine.rs` so that wiring a device touches only its own files and this one.

use crate::engine::rng::stream;
use crate::engine::stats::Latency;
use crate::engine::time::{Ps, PS_PER_NS};
use crate::engine::Scheduler;
use crate::hw::cpu::{Level, Prio};
use crate::hw::msi::{Dev, Source};
use crate::hw::nic::{NicGroup, RxQueue, WIRE_OVERHEAD};
use crate::hw::nvme::{Cq, Disk, NvmeGroup};
use crate::machine::{Ev, Machine};
use crate::moderation::gsim::{Gsim, Params};
use crate::moderation::QueueMod;
use crate::scenario::{ModerationKind, Scenario};
use std::collections::VecDeque;

impl Machine {
    /// A device vector: a source with no arrivals of its own, driven by its device.
    #[allow(clippy::too_many_arguments)]
    fn add_vector(&mut self, name: String, group: u32, cpu: u32, vm: Option<u32>, dev: Dev, gsim: bool, socket: u32) -> u32 {
        let i = self.srcs.len() as u32;
        let mut src = Source::new(name, group, cpu, 0, Prio::Normal, self.irq_entry, self.irq_exit, 0);
        src.socket = socket;
        src.dev = dev;
        src.vm = vm;
        src.gsim = gsim && self.gsim.is_some();
        src.track = self.msi_tracks[group as usize];
        self.srcs.push(src);
        i
    }

    fn add_group(&mut self, name: &str) -> u32 {
        self.msi_tracks.push(self.tracer.track(&format!("{name} msi"), None));
        self.src_groups.push(name.to_string());
        (self.src_groups.len() - 1) as u32
    }

    pub(crate) fn add_gsim(&mut self, sc: &Scenario) {
        let Some(g) = &sc.gsim else { return };
        let p = Params {
            delay_ns: g.delay_us as u64 * 1000,
            target_intr_rate: g.target_intr_rate.0 as u64,
            hardirq_percent: g.hardirq_percent as u64,
            update_ns: g.update_ms as u64 * 1_000_000,
            scale: g.scale as u64,
        };
        let changes = g
            .change
            .iter()
            .map(|c| {
                let q = Params {
                    delay_ns: c.delay_us.map(|d| d as u64 * 1000).unwrap_or(p.delay_ns),
                    target_intr_rate: c.target_intr_rate.map(|r| r.0 as u64).unwrap_or(p.target_intr_rate),
                    hardirq_percent: c.hardirq_percent.map(|h| h as u64).unwrap_or(p.hardirq_percent),
                    ..p
                };
                (c.at.ps(), q)
            })
            .collect();
        self.gsim = Some(Gsim::new(p, g.min_sleep.ps() / PS_PER_NS, g.clock_every as u64, self.cpus.len(), changes));
        // Plain sources are moderated too (the patch moderates every eligible edge MSI).
        for s in &mut self.srcs {
            s.gsim = s.xcall == crate::nmi::crosscall::NO_CALL;
        }
    }

    pub(crate) fn add_nvme(&mut self, sc: &Scenario, seed: u64) {
        for (g, n) in sc.nvme.iter().enumerate() {
            let group = self.add_group(&n.name);
            self.nvme.push(NvmeGroup {
                name: n.name.clone(),
                handler: n.handler.ps(),
                per_cqe: n.per_cqe.ps(),
                resubmit: n.fio.resubmit.ps(),
                completed: 0,
                latency: Latency::default(),
            });
            for k in 0..n.count {
                let d = self.disks.len() as u32;
                let first_cq = self.cqs.len() as u32;
                for q in 0..n.queues {
                    let v = k * n.queues + q;
                    let cpu = n.cpus[(v as usize) % n.cpus.len()];
                    let cqi = self.cqs.len() as u32;
                    let src = self.add_vector(format!("{}.{k}.q{q}", n.name), group, cpu, None, Dev::Cq(cqi), n.moderation.gsim, n.socket);
                    self.cqs.push(Cq {
                        disk: d,
                        socket: n.socket,
                        src,
                        landing: VecDeque::new(),
                        posted: VecDeque::new(),
                        outstanding: 0,
                        depth: n.depth,
                        backlog: VecDeque::new(),
                        modq: QueueMod::new(&n.moderation),
                        is: false,
                    });
                }
                // The jobs' I/Os, spread over the disk's queues; each queue admits up to its depth.
                let ios = n.fio.jobs as u64 * n.fio.iodepth as u64;
                self.audit.ios_owned += ios;
                for j in 0..ios {
                    self.cqs[(first_cq as u64 + j % n.queues as u64) as usize].backlog.push_back(0);
                }
                let service = (n.channels as f64 / n.iops.0 * 1e12).round() as Ps;
                let mut disk = Disk {
                    group: g as u32,
                    service,
                    exponential: n.exponential,
                    rng: stream(seed, &format!("nvme/{}.{k}", n.name)),
                    channels: n.channels,
                    busy: 0,
                    sq: VecDeque::new(),
                    in_service: VecDeque::new(),
                };
                for q in first_cq..self.cqs.len() as u32 {
                    let cq = &mut self.cqs[q as usize];
                    while cq.outstanding < cq.depth {
                        let Some(t) = cq.backlog.pop_front() else { break };
                        cq.outstanding += 1;
                        disk.sq.push_back((t, q));
                    }
                }
                self.disks.push(disk);
            }
        }
    }

    pub(crate) fn add_nics(&mut self, sc: &Scenario, seed: u64) {
        for (g, n) in sc.nic.iter().enumerate() {
            let group = self.add_group(&n.name);
            let sizes: Vec<(u32, f64)> = if n.packets.is_empty() { vec![(1514, 1.0)] } else { n.packets.clone() };
            let total: f64 = sizes.iter().map(|s| s.1).sum();
            let mean_wire: f64 = sizes.iter().map(|(b, w)| (*b + WIRE_OVERHEAD) as f64 * w / total).sum();
            let mut acc = 0.0;
            let cdf = sizes.iter().map(|(b, w)| {
                acc += w / total;
                (*b, acc)
            });
            let link = n.link_gbps.unwrap_or(n.gbps);
            let pkts_per_s = n.gbps * 1e9 / 8.0 / mean_wire;
            self.nics.push(NicGroup {
                name: n.name.clone(),
                sizes: cdf.collect(),
                // Assumption: 256 KiB of on-chip RX buffer, drained at line rate.
                buffer: ((256.0 * 1024.0 * 8.0) / (link * 1e9) * 1e12) as Ps,
                handler: n.handler.ps(),
                per_packet: n.per_packet.ps(),
                per_poll: n.per_poll.ps(),
                budget: n.budget,
                dma_per_kib: sc.fabric.dma_per_kib.ps(),
                rx_pkts: 0,
                rx_bytes: 0,
                payload_bytes: 0,
                offered_pkts: 0,
                drops_ring: 0,
                drops_buffer: 0,
                latency: Latency::default(),
                polls: 0,
                life_offered: 0,
                life_rx: 0,
                life_drops: 0,
            });
            let vm = n.vm.as_ref().map(|name| sc.vms.iter().position(|v| &v.name == name).expect("validated") as u32);
            for q in 0..n.queues {
                let c = n.cpus[(q as usize) % n.cpus.len()];
                let (cpu, level) = match vm {
                    Some(v) => (sc.vms[v as usize].pcpus[c as usize], Level::Guest),
                    None => (c, Level::Host),
                };
                let qi = self.rxqs.len() as u32;
                let src = self.add_vector(format!("{}.rx{q}", n.name), group, cpu, vm, Dev::Rx(qi), n.moderation.gsim, n.socket);
                self.rxqs.push(RxQueue {
                    group: g as u32,
                    socket: n.socket,
                    src,
                    cpu,
                    level,
                    rng: stream(seed, &format!("nic/{}.rx{q}", n.name)),
                    mean_gap_s: n.queues as f64 / pkts_per_s,
                    ring: n.ring,
                    landing: VecDeque::new(),
                    ring_pkts: VecDeque::new(),
                    armed: true,
                    polling: n.moderation.kind == ModerationKind::Polling,
                    napi_scheduled: false,
                    modq: QueueMod::new(&n.moderation),
                    poll_n: 0,
                });
            }
        }
    }

    pub(crate) fn start_devices(&mut self, s: &mut Scheduler<Ev>) {
        for d in 0..self.disks.len() {
            self.disk_kick(s, d as u32);
        }
        for q in 0..self.rxqs.len() {
            let rx = &mut self.rxqs[q];
            let gap = crate::engine::rng::exp_sample(&mut rx.rng, rx.mean_gap_s);
            s.at(crate::engine::time::s_to_ps(gap), Ev::PktArrive(q as u32));
        }
        if let Some(g) = &self.gsim {
            for (k, (at, _)) in g.changes.iter().enumerate() {
                s.at(*at, Ev::GsimChange(k as u32));
            }
        }
    }

    pub(crate) fn reset_devices(&mut self, now: Ps) {
        for g in &mut self.nvme {
            g.completed = 0;
            g.latency.reset();
        }
        for g in &mut self.nics {
            (g.rx_pkts, g.rx_bytes, g.payload_bytes, g.offered_pkts) = (0, 0, 0, 0);
            (g.drops_ring, g.drops_buffer, g.polls) = (0, 0, 0);
            g.latency.reset();
        }
        if let Some(g) = &mut self.gsim {
            g.reset_stats(now);
        }
    }
}

impl Machine {
    /// M5's metrics: device throughput and latency, drops, moderation.
    pub(crate) fn device_report(&mut self, r: &mut crate::engine::stats::Report, now: Ps, secs: f64) {
        for g in &self.nvme {
            let p = format!("nvme.{}", g.name);
            r.metric(format!("{p}.iops"), g.completed as f64 / secs);
            r.metric(format!("{p}.completed"), g.completed as f64);
            r.histogram(format!("{p}.latency"), &g.latency);
        }
        for g in &self.nics {
            let p = format!("nic.{}", g.name);
            let wire = (g.rx_bytes + g.rx_pkts * WIRE_OVERHEAD as u64) as f64 * 8.0;
            r.metric(format!("{p}.rx_pkts_per_s"), g.rx_pkts as f64 / secs);
            r.metric(format!("{p}.rx_gbps"), wire / secs / 1e9);
            r.metric(format!("{p}.goodput_gbps"), g.payload_bytes as f64 * 8.0 / secs / 1e9);
            r.metric(format!("{p}.offered_pkts_per_s"), g.offered_pkts as f64 / secs);
            r.metric(format!("{p}.drops_ring"), g.drops_ring as f64);
            r.metric(format!("{p}.drops_buffer"), g.drops_buffer as f64);
            let drops = (g.drops_ring + g.drops_buffer) as f64;
            r.metric(format!("{p}.drop_share"), if g.offered_pkts > 0 { drops / g.offered_pkts as f64 } else { 0.0 });
            r.metric(format!("{p}.polls_per_s"), g.polls as f64 / secs);
            r.histogram(format!("{p}.latency"), &g.latency);
        }
        r.metric("msi_merged_at_device", self.n.msi_merged_at_device as f64);
        r.metric("msi_merged_in_pba", self.n.pba_merged as f64);
        if let Some(g) = &mut self.gsim {
            let means = g.mean_mod_ns(now, self.warmup);
            for (c, m) in means.iter().enumerate() {
                r.metric(format!("cpu{c}.gsim_mod_ns"), *m);
            }
            r.metric("gsim.mod_ns", means.iter().sum::<f64>() / means.len().max(1) as f64);
            r.metric("gsim.timers_per_s", g.timers_started as f64 / secs);
            r.metric("gsim.disables_per_s", g.disables as f64 / secs);
            r.metric("gsim.masked_while_disabled", self.n.masked_while_disabled as f64);
            r.metric("gsim.resends", self.n.resends as f64);
        }
    }

    /// Device totals for the time series (cumulative; the sampler takes differences).
    pub(crate) fn device_totals(&self) -> (u64, u64) {
        (self.nvme.iter().map(|g| g.completed).sum(), self.nics.iter().map(|g| g.payload_bytes).sum())
    }
}

impl Machine {
    /// End-of-run bookkeeping for the invariant tests: nothing lost, nothing left disabled for good.
    pub(crate) fn audit_devices(&mut self) {
        let a = &mut self.audit;
        a.ios_found = self.disks.iter().map(|d| (d.sq.len() + d.in_service.len()) as u64).sum::<u64>()
            + self.cqs.iter().map(|q| (q.landing.len() + q.posted.len() + q.backlog.len()) as u64).sum::<u64>();
        a.pkts_found = self.rxqs.iter().map(|q| (q.landing.len() + q.ring_pkts.len()) as u64).sum::<u64>()
            + self.nics.iter().map(|g| g.life_rx + g.life_drops).sum::<u64>();
        a.pkts_offered = self.nics.iter().map(|g| g.life_offered).sum();
        let listed: std::collections::HashSet<u32> = self
            .gsim
            .iter()
            .flat_map(|g| g.cpus.iter().filter(|c| c.timer.is_some()).flat_map(|c| c.list.iter().copied()))
            .collect();
        a.disabled_at_end = self.srcs.iter().filter(|s| s.disabled).count() as u64;
        a.disabled_orphans =
            self.srcs.iter().enumerate().filter(|(i, s)| s.disabled && !listed.contains(&(*i as u32))).count() as u64;
    }
}
