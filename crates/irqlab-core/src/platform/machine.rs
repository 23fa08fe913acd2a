//! The machine: the core (CPUs, interrupt controller, fabric, sources, tasks,
//! tracer, counters) and the components it is built with (`P`, a `parts!`
//! list). This file assembles them in order and routes events; the core's
//! behaviour lives in `platform/` and `os/` as `impl Machine` blocks, the
//! components' in `components/`, reached through the hooks of `parts`.

use crate::engine::rng::stream_of;
use crate::engine::stats::Report;
use crate::engine::stats::{Latency, Series};
use crate::engine::time::{Ps, NEVER};
use crate::engine::trace::{Tracer, TrackId};
use crate::engine::{Model, Protocol, Scheduler};
use crate::platform::cpu::{Cpu, Frame, Level, Mask, Prio, Work};
use crate::platform::fabric::Fabric;
use crate::platform::pmr::PmrTax;
use crate::platform::source::{Source, NOT_POSTED, NO_OWNER};
use crate::scenario::{Arrival, Masking, Scenario};
use crate::workload::TaskState;
use std::collections::{BTreeMap, HashSet};

/// Events are small and `Copy`; what they refer to lives in the machine.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A source's next arrival: it starts an MSI write.
    Fire(u32),
    /// An MSI write left the fabric and reached the interrupt controller.
    /// (When it was raised and its flow id wait in the source's `in_fabric` queue.)
    Arrive(u32),
    /// The top frame of a CPU finished its current phase.
    Done(u32),
    /// Sample the time series.
    Sample,
    /// A DMA path (a socket's remapping unit) finished the write in service.
    PathDone(u32),
    /// A CPU's exit from an idle state is over (`wake`).
    Wake(u32),
    /// A component's own event (`parts::Has::ev`).
    Part { part: u8, code: u8, arg: u32 },
}

/// Cumulative totals at the previous sample, so each sample is a rate over its interval.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub(crate) irqs: u64,
    pub(crate) ops: u64,
    pub(crate) hardirq: Ps,
    pub(crate) idle: Ps,
}

/// The list of components a machine is built with (see `parts!`).
pub trait Parts: Default + Sized {
    fn build(m: &mut Machine<Self>, sc: &Scenario, seed: u64);
    fn start(m: &mut Machine<Self>, s: &mut Scheduler<Ev>);
    fn handle(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, part: u8, code: u8, arg: u32);
    fn handler_start(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, c: usize, i: u32, owner: u8) -> Ps;
    fn handler_end(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, c: usize, i: u32, level: Level);
    fn irq_exit(m: &mut Machine<Self>, c: usize, i: u32, level: Level, owner: u8);
    fn handler_continue(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, c: usize, i: u32, owner: u8) -> Ps;
    fn msi_posted(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, i: u32, poster: u8);
    fn dma_landed(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, owner: u8, arg: u32);
    fn napi_poll(m: &mut Machine<Self>, owner: u8, arg: u32) -> Ps;
    fn napi_continue(m: &mut Machine<Self>, owner: u8, arg: u32) -> Ps;
    fn napi_done(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, owner: u8, arg: u32) -> bool;
    fn thread_start(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, c: usize, owner: u8, arg: u32);
    fn thread_done(m: &mut Machine<Self>, s: &mut Scheduler<Ev>, c: usize, owner: u8, arg: u32);
    fn sample(m: &mut Machine<Self>, now: Ps);
    fn reset(m: &mut Machine<Self>, now: Ps);
    fn report(m: &mut Machine<Self>, r: &mut Report, now: Ps, secs: f64);
    fn audit(m: &mut Machine<Self>);
    /// The registered component of type `T`, for a component that declares a
    /// one-way dependency on it (`parts::dep`); `None` if it is not in the list.
    fn find<T: 'static>(&mut self) -> Option<&mut T>;
    /// The id of component `T`'s events (`Ev::Part::part`).
    fn id_of<T: 'static>() -> Option<u8>;
}

/// Costs from the scenario, in ps, converted once. Under pseudo-NMI the
/// exception entry/exit costs include the PMR tax (`nmi::pmr`).
pub struct Costs {
    pub exc_entry: Ps,
    pub exc_exit: Ps,
    pub switch: Ps,
    pub timeslice: Ps,
    /// What an IRQ handler runs under: DAIF.I, or under pseudo-NMI the PMR
    /// (the GIC driver unmasks DAIF so that NMIs can nest).
    pub irq_handler_mask: Mask,
    /// `mask_ack_irq()` on an MSI-X vector (`CpuCosts::msix_mask`).
    pub msix_mask: Ps,
    /// Pseudo-NMI's IRQ path beyond the per-source entry and exit (`pmr.rs`):
    /// what an IRQ's exit saves when it returns to EL1 rather than to user
    /// (`EXIT_TO_EL0` against `EXIT_TO_EL1`), what an idle CPU's wake-up adds
    /// before the entry, and what each `__do_softirq` pass adds. All 0 under DAIF.
    pub pmr_irq_path: bool,
    pub pmr_el1_return_saves: Ps,
    /// What an interrupt taken in the idle loop pays first, by `IdleWake`
    /// (none, the stopped tick's section, a wake from `wfi`).
    pub pmr_idle: [Ps; 3],
    pub pmr_softirq: Ps,
    /// What ksoftirqd's run adds to a softirq pass, and one nested IRQs-off
    /// section in a handler (`pmr::KSOFTIRQD_RUN`, `pmr::NESTED_SECTION`).
    pub pmr_ksoftirqd: Ps,
    pub pmr_nested: Ps,
    pub hyp_exit: Ps,
    pub hyp_handler: Ps,
    pub hyp_inject: Ps,
    pub hyp_entry: Ps,
    /// `hypervisor.guest_idle = "hlt"`: idle vCPUs halt in the host; the most
    /// a vCPU halt-polls, where its window grows from, and a blocked vCPU's wake-up.
    pub guest_hlt: bool,
    pub halt_poll_max: Ps,
    pub halt_poll_grow_start: Ps,
    pub hyp_wake: Ps,
    /// `netdev_budget` packets, `netdev_budget_usecs` of time per `net_rx_action`.
    pub netdev_budget: i64,
    pub netdev_budget_time: Ps,
    /// `cpu.idle_state` is given: idle CPUs sleep in C-states (`cstate`). (The
    /// hot path's one test; the states themselves are `Machine::cstates`.)
    pub cstates: bool,
}

/// Counters reset at the end of warm-up.
#[derive(Clone, Default)]
pub struct Counters {
    pub writes: u64,
    pub merged: u64,
    pub vmerged: u64,
    pub host_irqs: u64,
    pub guest_irqs: u64,
    pub vm_exits: u64,
    /// Idle vCPUs' HLT exits, and how each halt ended: an interrupt caught
    /// while polling, a blocked vCPU woken, or no halt at all (an interrupt
    /// for the vCPU came during the exit).
    pub halt_exits: u64,
    pub halt_polled: u64,
    pub halt_wakeups: u64,
    pub halt_skipped: u64,
    pub switches: u64,
    /// Device messages merged into one still waiting to enter the fabric.
    pub msi_merged_at_device: u64,
    /// Interrupts that came while GSIM had the source disabled (masked + pending).
    pub masked_while_disabled: u64,
    /// `net_rx_action` ran out of budget or time (`softnet_stat`'s time_squeeze).
    pub time_squeeze: u64,
    /// `__do_softirq` ran out of restarts or time and woke ksoftirqd.
    pub ksoftirqd_wakeups: u64,
    /// Pending interrupts whose handler a callback ran itself (`Machine::enable_and_run`).
    pub run_from_timer: u64,
    /// Device messages merged into one already held in the PBA while the vector was masked.
    pub pba_merged: u64,
    pub irq_latency: Latency,
    pub virq_latency: Latency,
    /// How long `mask_ack_irq`'s flushing read waited, past its own round
    /// trip, for the device's earlier posted writes on the DMA path: the CPU's
    /// spin in `readl` per mask (0 when they were through in time).
    pub msix_flush_wait: Latency,
    /// A task's operation (one pass of its loop), start to end.
    pub op_latency: Latency,
}

/// Lifetime bookkeeping for invariant checks; never reset.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    pub writes: u64,
    pub arrived: u64,
    /// Writes (completions) handed to a handler: host handler, or guest handler for VM sources.
    pub events_delivered: u64,
    pub double_deliveries: u64,
    /// Events handed out of time order (the scheduler's audit, copied here).
    pub time_reversals: u64,
    /// Flow ids of delivered interrupts, kept only when auditing.
    pub delivered: Option<HashSet<u64>>,
    /// Closed-loop I/Os: how many the jobs own, and how many were found somewhere at the end.
    pub ios_owned: u64,
    pub ios_found: u64,
    /// Packets offered to NICs, and those received, dropped or still in flight at the end.
    pub pkts_offered: u64,
    pub pkts_found: u64,
    /// Audited runs: the most writes the fabric had in service at once (at most
    /// its slots), and the most a socket's DMA path had (at most 1).
    pub fabric_peak: u64,
    pub path_peak: u64,
    /// Sources GSIM left disabled at the end without a queued timer to re-enable them.
    pub disabled_orphans: u64,
    /// Sources still disabled at the end (re-enabled later by a queued timer).
    pub disabled_at_end: u64,
    /// CPUs spinning in a mask's flushing read at the end whose writes ahead
    /// are already through: nothing will end the spin.
    pub stranded_flushes: u64,
    /// Writes a component took from their sources for a handler that has not
    /// started (a posted-MSI pass's vectors after the running one).
    pub events_taken: u64,
}

/// A NAPI context (`struct napi_struct`): a component's queue polled in softirq.
#[derive(Clone, Copy, Debug)]
pub struct Napi {
    /// The component that polls it, and its queue there.
    pub owner: u8,
    pub arg: u32,
    pub cpu: u32,
    pub level: Level,
    /// `NAPI_STATE_SCHED`: on its CPU's poll list, or being polled.
    pub scheduled: bool,
    /// Packets the poll round in progress takes (its owner sets it in `napi_poll`).
    pub work: u32,
}

pub struct Machine<P> {
    pub c: Costs,
    pub cpus: Vec<Cpu>,
    pub srcs: Vec<Source>,
    /// Each source's CPU as it was at `start`, for prefetch hints only (no
    /// result reads it): a hint for an arrival a few events ahead can find
    /// the CPU without touching the source, which is not in cache yet.
    hint_cpu: Vec<u32>,
    pub src_groups: Vec<String>,
    /// Interrupts handled per source group since the last stats reset.
    pub src_handled: Vec<u64>,
    /// Source groups raised on their own CPU, not by a device's write (GSIM's
    /// hrtimer): their handlers count as interrupts, not in `irq_latency`.
    pub src_local: Vec<bool>,
    /// Each scenario `[[source]]`'s own latency (write to handler start), when
    /// there are several: `irq_latency` pools them, and a masking study needs
    /// the NMI's apart from the others'.
    pub src_latency: Vec<Option<crate::engine::stats::Latency>>,
    pub tasks: Vec<TaskState>,
    pub task_groups: Vec<String>,
    pub fabric: Fabric,
    /// The shared DMA + MSI path of each socket's remapping unit (socket-major,
    /// `Platform::path`), when devices DMA through the fabric (empty otherwise).
    pub paths: Vec<crate::platform::fabric::DmaPath>,
    pub dma_write: Ps,
    /// The CPUs' idle states and their wake-ups (`cpu.idle_state`).
    pub cstates: crate::platform::cstate::CStates,
    /// Remapping units per socket (`platform.iommus_per_socket`): how `paths` are named in the report.
    pub iommus_per_socket: u32,
    /// PCIe links handed out (`add_link`).
    pub links: u32,
    pub n: Counters,
    pub audit: Audit,
    pub tracer: Tracer,
    pub napis: Vec<Napi>,
    /// Costs of a device vector's IRQ entry and exit (pseudo-NMI tax included).
    pub irq_entry: Ps,
    pub irq_exit: Ps,
    pub msi_tracks: Vec<TrackId>,
    pub backlog_track: Option<TrackId>,
    /// Per CPU, the counter of interrupts pending at its controller (tracing only).
    pub pending_tracks: Vec<TrackId>,
    /// When the backlog last written to `backlog_track` has drained: the
    /// counter is written at MSI writes only, so the next one first writes
    /// the 0 it fell to then (else the UI holds the value until that write).
    pub backlog_drained: Ps,
    pub warmup: Ps,
    pub end: Ps,
    pub interval: Ps,
    pub series: BTreeMap<String, Series>,
    /// Each series' counter track in the trace (made at its first point).
    pub series_tracks: BTreeMap<String, TrackId>,
    pub last_sample: Snapshot,
    /// The components (`components::Components` in a real run).
    pub parts: P,
}

impl<P: Parts> Machine<P> {
    /// Assembles the machine: the core from the scenario (CPUs, sources, tasks,
    /// fabric), then every component in registration order.
    pub fn new(sc: &Scenario, seed: u64, mut tracer: Tracer) -> Machine<P> {
        let warmup = sc.warmup.ps();
        let end = sc.duration.ps();
        let mut vcpu_of = vec![None; sc.platform.cpus as usize];
        for (v, vm) in sc.vms.iter().enumerate() {
            for (i, &p) in vm.pcpus.iter().enumerate() {
                vcpu_of[p as usize] = Some((v as u32, i as u32));
            }
        }
        // A CPU that a hypervisor runs guests on is a pCPU, and its track says so.
        let hyp_pcpus = sc.vcpu_sched.as_ref().map_or(0, |v| v.pcpus);
        let mut cpus: Vec<Cpu> = (0..sc.platform.cpus)
            .map(|i| {
                let pcpu = i < hyp_pcpus || vcpu_of[i as usize].is_some();
                let t = tracer.track(&format!("{}cpu{i}", if pcpu { "p" } else { "" }), None);
                let vt = match vcpu_of[i as usize] {
                    Some((v, j)) => tracer.track(&format!("{}.vcpu{j}", sc.vms[v as usize].name), Some(t)),
                    None => t,
                };
                let mut c = Cpu::new(t, vt);
                c.vcpu = vcpu_of[i as usize];
                c
            })
            .collect();
        // A placement in a VM names a vCPU; the machine needs the pCPU behind it.
        let pcpu = |vm: &Option<String>, c: u32| -> (u32, Option<u32>, Level) {
            match vm {
                Some(name) => {
                    let v = sc.vms.iter().position(|x| &x.name == name).expect("validated");
                    (sc.vms[v].pcpus[c as usize], Some(v as u32), Level::Guest)
                }
                None => (c, None, Level::Host),
            }
        };
        let ghz = sc.cpu.ghz;
        let cost = |c: crate::scenario::CpuTime| c.ps(ghz).expect("validated: cycles need cpu.ghz");
        let pmr = match sc.cpu.masking {
            Masking::Daif => PmrTax::default(),
            Masking::Pmr => PmrTax::new(cost(sc.cpu.pmr.access), cost(sc.cpu.pmr.dsb), sc.cpu.pmr.pmhe),
        };
        let irq_entry = sc.cpu.irq_entry.ps() + pmr.irq_entry;
        let irq_exit = sc.cpu.irq_exit.ps() + pmr.exit;
        // Sized up front for the scenario's sources: 65,536 of 5 cache lines
        // each, grown by doubling, spent a tenth of a 2,048-CPU run copying and
        // faulting in pages. (Components add theirs later: one more growth.)
        let mut srcs = Vec::with_capacity(sc.sources.iter().map(|s| s.count as usize).sum());
        let src_groups: Vec<String> = sc.sources.iter().map(|s| s.name.clone()).collect();
        let mut msi_tracks = Vec::new();
        for (g, s) in sc.sources.iter().enumerate() {
            let track = tracer.track(&format!("{} msi", s.name), None);
            msi_tracks.push(track);
            for i in 0..s.count {
                let (cpu, vm, _) = pcpu(&s.vm, s.cpus[i as usize % s.cpus.len()]);
                let prio = if s.nmi { Prio::Nmi } else { Prio::Normal };
                // Instances are named "NAME.i" when a trace asks (`source_name`); their
                // streams hash the same bytes, unbuilt.
                let name = if s.count > 1 { String::new() } else { s.name.clone() };
                let mut src = Source::new(name, g as u32, cpu, s.handler.ps(), prio, irq_entry, irq_exit, 0);
                src.rng = if s.count > 1 {
                    src.instance = i;
                    stream_of(seed, &["source/", &s.name, ".", itoa::Buffer::new().format(i)])
                } else {
                    stream_of(seed, &["source/", &s.name])
                };
                src.mean_gap_s = if s.rate.0 > 0.0 { 1.0 / s.rate.0 } else { f64::INFINITY };
                src.periodic = s.arrival == Arrival::Periodic;
                src.stop = s.stop.map(|t| t.ps()).unwrap_or(NEVER);
                src.vm = vm.unwrap_or(crate::platform::source::NO_VM);
                src.softirq = s.softirq.ps();
                src.special = false;
                src.msi = !s.nmi;
                // A link of its own: with DMA paths its MSIs wait behind no
                // device's data (link ids below the sources' count are theirs).
                src.link = g as u32;
                src.track = track;
                srcs.push(src);
            }
        }
        let mut tasks = Vec::new();
        for (g, t) in sc.tasks.iter().enumerate() {
            for i in 0..t.count {
                let (cpu, _, level) = pcpu(&t.vm, t.cpus[i as usize % t.cpus.len()]);
                let id = tasks.len() as u32;
                tasks.push(TaskState {
                    name: if t.count > 1 { format!("{}.{i}", t.name) } else { t.name.clone() },
                    group: g as u32,
                    level,
                    work: t.work.ps(),
                    kind: t.exception,
                    // The IRQs-off sections' PMR accesses lengthen the body (no-op under DAIF).
                    body: t.body_time(&sc.cpu, &sc.pagefault).ps() + pmr.body(t.exception, t.irq_pairs),
                    irqs_off: t.irqs_off.ps(),
                    irqs_off_mask: match t.irqs_off_with.unwrap_or(sc.cpu.masking) {
                        Masking::Daif => Mask::Daif,
                        Masking::Pmr => Mask::Pmr,
                    },
                    pmr_tax: pmr.per_op(t.exception, t.irq_pairs),
                    saved: None,
                    ops: 0,
                    op_start: 0,
                    zero_ops: 0,
                });
                cpus[cpu as usize].rq.push_back(id);
            }
        }
        let backlog_track = if sc.fabric.msi_write.ps() > 0 { Some(tracer.counter_track("fabric backlog", "ns")) } else { None };
        // Each CPU's interrupts waiting at its controller (physical and virtual), while tracing.
        let pending_tracks: Vec<TrackId> = if tracer.on() {
            (0..cpus.len()).map(|i| tracer.counter_track(&format!("cpu{i} pending irqs"), "irqs")).collect()
        } else {
            Vec::new()
        };
        let span = end - warmup;
        let mut m = Machine {
            c: Costs {
                exc_entry: sc.cpu.exception_entry.ps() + pmr.entry,
                exc_exit: sc.cpu.exception_exit.ps() + pmr.exit,
                // (Under pseudo-NMI with its PMR accesses, `pmr::SWITCH`.)
                switch: sc.cpu.context_switch.ps() + pmr.switch,
                timeslice: sc.cpu.timeslice.map_or_else(|| crate::scenario::base_slice(sc.platform.cpus), |t| t.ps()),
                irq_handler_mask: match sc.cpu.masking {
                    Masking::Daif => Mask::Daif,
                    Masking::Pmr => Mask::Pmr,
                },
                msix_mask: sc.cpu.msix_mask.ps(),
                pmr_irq_path: sc.cpu.masking == Masking::Pmr,
                pmr_el1_return_saves: pmr.exit - pmr.exit_to_el1,
                pmr_idle: [0, pmr.idle_tick, pmr.idle_wake],
                pmr_softirq: pmr.softirq,
                pmr_ksoftirqd: pmr.ksoftirqd,
                pmr_nested: pmr.nested,
                hyp_exit: sc.hypervisor.exit.ps(),
                hyp_handler: sc.hypervisor.handler.ps(),
                hyp_inject: sc.hypervisor.inject.ps(),
                hyp_entry: sc.hypervisor.entry.ps(),
                guest_hlt: sc.hypervisor.guest_idle == crate::scenario::GuestIdle::Hlt,
                halt_poll_max: sc.hypervisor.halt_poll.ps(),
                halt_poll_grow_start: sc.hypervisor.halt_poll_grow_start.ps(),
                hyp_wake: sc.hypervisor.wake.ps(),
                netdev_budget: sc.net.netdev_budget as i64,
                netdev_budget_time: sc.net.netdev_budget_usecs as u64 * crate::engine::time::PS_PER_US,
                cstates: !sc.cpu.idle_state.is_empty(),
            },
            cpus,
            srcs,
            src_handled: vec![0; src_groups.len()],
            src_local: vec![false; src_groups.len()],
            src_latency: (0..src_groups.len()).map(|_| (src_groups.len() > 1).then(Default::default)).collect(),
            hint_cpu: Vec::new(),
            src_groups,
            tasks,
            task_groups: sc.tasks.iter().map(|t| t.name.clone()).collect(),
            fabric: Fabric::new(sc.fabric.msi_write.ps(), sc.fabric.slots, sc.fabric.latency.ps()),
            paths: Vec::new(),
            // Links 0 … n-1 are the scenario's source groups' (see above).
            links: sc.sources.len() as u32,
            dma_write: 0,
            cstates: crate::platform::cstate::CStates::new(&sc.cpu.idle_state, sc.cpu.idle_latency_limit.map(|t| t.ps())),
            iommus_per_socket: sc.platform.iommus_per_socket,
            n: Counters::default(),
            audit: Audit::default(),
            tracer,
            napis: Vec::new(),
            irq_entry,
            irq_exit,
            msi_tracks,
            backlog_track,
            pending_tracks,
            backlog_drained: 0,
            warmup,
            end,
            interval: sc.stats.series_interval.map(|t| t.ps()).unwrap_or((span / 100).max(1)),
            series: BTreeMap::new(),
            series_tracks: BTreeMap::new(),
            last_sample: Default::default(),
            parts: P::default(),
        };
        if sc.fabric.dma_write.ps() > 0 || sc.fabric.dma_per_kib.ps() > 0 {
            m.paths = (0..sc.platform.sockets * sc.platform.iommus_per_socket)
                .map(|_| crate::platform::fabric::DmaPath::new(sc.fabric.msi_write.ps()))
                .collect();
        }
        m.dma_write = sc.fabric.dma_write.ps();
        P::build(&mut m, sc, seed);
        m
    }

    /// A source of a group (a track and a name in the report), owned by a
    /// component: no arrivals of its own; the owner raises it (`send_msi`,
    /// `raise_direct`) and gets its hooks. Returns its index.
    #[allow(clippy::too_many_arguments)]
    pub fn add_source(
        &mut self,
        name: String,
        group: u32,
        cpu: u32,
        handler: Ps,
        prio: Prio,
        entry: Ps,
        exit: Ps,
        latency: Ps,
        owner: u8,
        owner_arg: u32,
    ) -> u32 {
        let i = self.srcs.len() as u32;
        let mut src = Source::new(name, group, cpu, handler, prio, entry, exit, latency);
        src.owner = owner;
        src.owner_arg = owner_arg;
        src.track = self.msi_tracks[group as usize];
        self.srcs.push(src);
        i
    }

    /// A device queue's MSI-X vector owned by a component: an ordinary IRQ with
    /// the machine's IRQ entry/exit costs, on the DMA path (`Platform::path`) it crosses;
    /// the owner's handler hook says how long the handler runs.
    #[allow(clippy::too_many_arguments)]
    pub fn add_vector(&mut self, name: String, group: u32, cpu: u32, path: u32, gsim: bool, owner: u8, owner_arg: u32) -> u32 {
        let (entry, exit) = (self.irq_entry, self.irq_exit);
        let i = self.add_source(name, group, cpu, 0, Prio::Normal, entry, exit, 0, owner, owner_arg);
        let v = &mut self.srcs[i as usize];
        v.path = path;
        v.gsim = gsim;
        v.msi = true;
        i
    }

    /// Source `i`'s name: its own, or "GROUP.INSTANCE" for an instance of a
    /// `[[source]]` with `count` > 1 (built here, for the trace only).
    pub fn source_name(&self, i: u32) -> std::borrow::Cow<'_, str> {
        let s = &self.srcs[i as usize];
        if s.name.is_empty() {
            format!("{}.{}", self.src_groups[s.group as usize], s.instance).into()
        } else {
            s.name.as_str().into()
        }
    }

    /// A group of sources: one MSI track in the trace, one `source.NAME` line in the report.
    pub fn add_group(&mut self, name: &str, track: &str) -> u32 {
        self.msi_tracks.push(self.tracer.track(track, None));
        self.src_groups.push(name.to_string());
        self.src_handled.push(0);
        self.src_local.push(false);
        self.src_latency.push(None);
        (self.src_groups.len() - 1) as u32
    }

    /// Registers a NAPI context (`netif_napi_add`); returns its id.
    pub fn napi_register(&mut self, owner: u8, arg: u32, cpu: u32, level: Level) -> u32 {
        self.napis.push(Napi { owner, arg, cpu, level, scheduled: false, work: 0 });
        (self.napis.len() - 1) as u32
    }

    /// Puts every CPU's first frame in place and schedules the first arrivals.
    pub fn start(&mut self, s: &mut Scheduler<Ev>) {
        self.hint_cpu = self.srcs.iter().map(|src| src.cpu).collect();
        for c in 0..self.cpus.len() {
            let cpu = &mut self.cpus[c];
            let base = match cpu.rq.pop_front() {
                Some(t) => {
                    cpu.current = Some(t);
                    let task = &self.tasks[t as usize];
                    task.first_frame(t)
                }
                None => Frame::new(Work::Idle, if cpu.vcpu.is_some() { Level::Guest } else { Level::Host }, Mask::Open, NEVER),
            };
            self.push_frame(s, c, base);
            self.run_top(s, c);
        }
        for i in 0..self.srcs.len() {
            let first = self.srcs[i].first_at();
            if first < self.srcs[i].stop {
                s.at(first, Ev::Fire(i as u32));
            }
        }
        P::start(self, s);
        s.at(self.warmup + self.interval, Ev::Sample);
    }

    /// A source fires: the device writes its MSI, which crosses the fabric.
    fn fire(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let now = s.now();
        let src = &mut self.srcs[i as usize];
        let next = src.next_at(now);
        if next < src.stop {
            s.at(next, Ev::Fire(i));
        }
        self.send_msi(s, i);
    }

    /// The interrupt controller sets the pending bit, or merges into it. A
    /// disabled interrupt pends too, and the code that takes it masks it: the
    /// CPU (`take_physical`), or a posted-MSI pass for a posted vector.
    #[inline(always)]
    pub fn arrive(&mut self, s: &mut Scheduler<Ev>, i: u32, raised: Ps, flow: u64) {
        self.audit.arrived += 1;
        let src = &mut self.srcs[i as usize];
        if src.pending || src.sw_pending {
            src.events += 1;
            self.n.merged += 1;
            if self.tracer.on() {
                self.tracer.merge_flow(src.flow, flow);
            }
            return;
        }
        if src.posted_to != NOT_POSTED {
            let c = src.posted_to;
            return self.post_virtual(s, i, c as usize, raised, flow, 1);
        }
        src.raised = raised;
        src.flow = flow;
        src.events = 1;
        if src.poster != NO_OWNER {
            // The pending bit is the descriptor's PIR bit: later writes merge into it.
            src.pending = true;
            let poster = src.poster;
            return P::msi_posted(self, s, i, poster);
        }
        self.pend(s, i);
    }

    /// Sets the pending bit at the CPU's interrupt controller and takes the
    /// interrupt at once if the running code admits it.
    #[inline]
    pub fn pend(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let src = &mut self.srcs[i as usize];
        src.pending = true;
        let (c, prio) = (src.cpu as usize, src.prio);
        let top = *self.cpus[c].top();
        // A running guest does not mask physical interrupts: they exit to the hypervisor.
        if !(top.level == Level::Guest || top.mask.admits(prio)) || self.asleep(s, c) {
            self.cpus[c].pending.push(i, prio);
            if self.tracer.on() {
                self.trace_pending(s.now(), c);
            }
            return;
        }
        self.pause_top(s, c);
        if self.cpus[c].pending.is_empty() {
            // Alone and admitted: `run_top` would take it first (physical
            // before virtual), so it is taken here, without a trip through the queue.
            self.take_physical(s, c, i);
            if self.cpus[c].timer.is_some() {
                return;
            }
        } else {
            self.cpus[c].pending.push(i, prio);
            if self.tracer.on() {
                self.trace_pending(s.now(), c);
            }
        }
        self.run_top(s, c);
    }

    /// Writes CPU `c`'s count of pending interrupts to its counter track.
    #[cold]
    pub fn trace_pending(&mut self, now: Ps, c: usize) {
        let n = self.cpus[c].pending.len() + self.cpus[c].vpending.len();
        self.tracer.counter(now, self.pending_tracks[c], n as f64);
    }

    /// Lifetime count of writes not yet handed to a handler.
    pub fn pending_events(&self) -> u64 {
        let in_fabric = self.audit.writes - self.audit.arrived;
        // (Writes on the DMA path are in `in_fabric` too: they count as arrived only at the irqchip.)
        let held: u64 = self
            .srcs
            .iter()
            .map(|s| {
                (if s.pending || s.sw_pending { s.events as u64 } else { 0 })
                    + s.inflight as u64
                    + if s.vpending { s.vevents as u64 } else { 0 }
            })
            .sum();
        in_fabric + held + self.audit.events_taken
    }

    /// Zeroes every metric at the end of warm-up.
    pub fn reset_stats(&mut self, now: Ps) {
        self.n = Counters::default();
        self.cstates.reset();
        for c in &mut self.cpus {
            c.reset_time(now);
        }
        self.src_handled.fill(0);
        for l in self.src_latency.iter_mut().flatten() {
            l.reset();
        }
        for t in &mut self.tasks {
            t.ops = 0;
        }
        self.fabric.reset(now);
        for p in &mut self.paths {
            p.reset(now);
        }
        P::reset(self, now);
        self.last_sample = Default::default();
    }
}

impl<P: Parts> Model for Machine<P> {
    type Event = Ev;

    #[inline]
    fn handle(&mut self, s: &mut Scheduler<Ev>, ev: Ev) {
        match ev {
            Ev::Fire(i) => self.fire(s, i),
            Ev::Arrive(i) => {
                let (raised, flow) = self.srcs[i as usize].in_fabric.pop_front().expect("a write per Arrive");
                self.arrive(s, i, raised, flow)
            }
            Ev::Done(c) => {
                let cpu = &mut self.cpus[c as usize];
                cpu.timer = None;
                cpu.top_mut().left = 0;
                self.run_top(s, c as usize);
            }
            Ev::Sample => {
                let now = s.now();
                self.sample(now);
                if now + self.interval <= self.end {
                    s.at(now + self.interval, Ev::Sample);
                }
            }
            Ev::PathDone(k) => self.path_done(s, k),
            Ev::Wake(c) => self.wake_done(s, c as usize),
            Ev::Part { part, code, arg } => P::handle(self, s, part, code, arg),
        }
    }

    /// An arrival touches its source's first two lines (see `Source`), then
    /// its CPU's hot lines; a phase end its CPU's and its top frame.
    #[inline]
    fn prefetch(&self, ev: &Ev) {
        self.prefetch_far(ev);
        if let Ev::Done(c) = *ev {
            if let Some(top) = self.cpus.get(c as usize).and_then(|cpu| cpu.stack.last()) {
                crate::engine::prefetch_lines(top, 1);
            }
        }
    }

    /// A few events ahead: what the event names, and an arrival's CPU by
    /// `hint_cpu`, reading nothing that is likely out of cache.
    #[inline]
    fn prefetch_far(&self, ev: &Ev) {
        let cpu = match *ev {
            Ev::Fire(i) | Ev::Arrive(i) => {
                if let Some(src) = self.srcs.get(i as usize) {
                    crate::engine::prefetch_lines(src, 2);
                }
                self.hint_cpu.get(i as usize).copied()
            }
            Ev::Done(c) => Some(c),
            _ => None,
        };
        if let Some(cpu) = cpu.and_then(|c| self.cpus.get(c as usize)) {
            crate::engine::prefetch_lines(cpu, crate::platform::cpu::HOT_LINES);
        }
    }
}

impl<P: Parts> Protocol for Machine<P> {
    type Config = Scenario;
    /// The lifetime audit, and the writes not yet handed to a handler at the end.
    type Audit = (Audit, u64);

    fn build(sc: &Scenario, seed: u64, tracer: Tracer) -> Self {
        Machine::new(sc, seed, tracer)
    }

    fn start(&mut self, s: &mut Scheduler<Ev>) {
        Machine::start(self, s)
    }

    fn reset(&mut self, now: Ps) {
        self.reset_stats(now)
    }

    fn report(&mut self, now: Ps, events: u64) -> Report {
        Machine::report(self, now, events)
    }

    fn finish(&mut self, _now: Ps) -> ((Audit, u64), Tracer) {
        P::audit(self);
        let pending = self.pending_events();
        if let Some(log) = &self.fabric.log {
            self.audit.fabric_peak = crate::platform::fabric::peak_in_service(log) as u64;
        }
        self.audit.path_peak =
            self.paths.iter().filter_map(|p| p.log.as_deref()).map(crate::platform::fabric::peak_in_service).max().unwrap_or(0) as u64;
        let spinning = |f: &crate::platform::cpu::Frame| {
            matches!(f.work, crate::platform::cpu::Work::MaskAck { phase: crate::platform::cpu::MaskPhase::Flush, .. })
                && f.left == crate::engine::time::NEVER
        };
        self.audit.stranded_flushes = self.cpus.iter().filter(|c| c.mask_flush.is_none() && c.stack.iter().any(spinning)).count() as u64;
        ((self.audit.clone(), pending), std::mem::replace(&mut self.tracer, Tracer::disabled()))
    }
}
