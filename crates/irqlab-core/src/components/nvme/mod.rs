//! NVMe SSDs driven by fio-like closed-loop jobs. A disk serves I/Os from its
//! submission queues with `channels` in parallel up to its IOPS ceiling; each
//! finished I/O is DMA'd (data and completion entry) through the platform
//! fabric, and once it has posted the entry the controller signals the CQ's
//! MSI-X vector (the message follows the entry up the link, and PCIe ordering
//! lands the entry first), subject to the vector's mask and the queue's
//! aggregation. The interrupt is level-like per CQ (the NVMe interrupt
//! status): a message is sent when the CQ goes from "nothing to signal" to
//! "entries to signal", and not again until the host has reaped and written
//! the CQ head doorbell. The handler (`nvme_irq`) reaps every entry it finds;
//! each reaped I/O is resubmitted by its job (closed loop). The controller's
//! side is in `controller.rs`.
//!
//! With a `submit` cost the job's thread resubmits on the CPU that reaped the
//! I/O, as thread work (`Machine::thread_work`): the CPU can saturate, and a
//! CPU busy in hardirq delays submissions. A polled queue (`moderation.kind =
//! "polling"`, `io_uring` IOPOLL on a poll queue) has no interrupt: the thread
//! polls the CQ (`poll` per pass) and reaps in process context; the polling
//! jobs of one CPU take turns (`PollTurns`), each with a CQ of its own. An I/O's
//! latency runs from its submission to its job's reaping, as fio's clat does:
//! when the job's thread starts the work for the batch `nvme_irq` reaped
//! (its `io_getevents` returns), or the poll pass that finds it; with no
//! `submit` cost, when `nvme_irq` reaps it.
//!
//! An I/O is its submission time and its CQ. Which queued command a channel
//! serves next is the disk's `service_order` (`params::ServiceOrder`): the die
//! that holds its block, in order there; or any free channel, taking a random
//! or the oldest command. The I/O a channel finishes is the one it took: its
//! `DiskDone` names the slot it holds (`channel_ios`).
//! (Until this was so, a finish completed the oldest I/O in service, which
//! hid the service times' spread whenever several I/Os were in service.)

mod controller;
pub mod params;
mod poll;
#[cfg(test)]
mod tests;

use crate::components::moderation::params::ModerationKind;
use crate::components::moderation::QueueMod;
use crate::engine::rng::{exp1, stream, Rng};
use crate::engine::stats::{Latency, Report};
use crate::engine::time::{ps_to_s, s_to_ps, Ps, PS_PER_MS};
use crate::engine::Scheduler;
use crate::platform::cpu::Level;
use crate::platform::fabric::DmaFor;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Component, Has};
use crate::scenario::Scenario;
use controller::{disk_done, disk_kick, dma_out};
use params::ServiceOrder;
use poll::{iopoll_pass, poll_soon, poll_turn, PollTurns};
use rand::Rng as _;
use std::collections::VecDeque;

crate::part_events! {
    pub enum NvmeEv {
        /// A disk channel finished an I/O (the argument is its slot in `Nvme::channel_ios`).
        DiskDone,
        /// A CQ's aggregation time expired (the argument is the CQ).
        CqTimer,
        /// The running polling job's slice on a CPU is over (the argument is the CPU).
        PollTurn,
        /// A reaped batch's fixed `fio.resubmit` delay is over: its I/Os reach
        /// the submission queue (the argument is the CQ).
        Resubmit,
    }
}

/// Every `[[nvme]]` group of the scenario: its disks, their completion queues
/// (one MSI-X vector each) and the fio jobs that keep them busy.
#[derive(Default)]
pub struct Nvme {
    pub disks: Vec<Disk>,
    pub cqs: Vec<Cq>,
    pub groups: Vec<NvmeGroup>,
    /// The I/O each busy channel serves, wherever its disk. A channel's
    /// `DiskDone` names its slot, so the I/O that finishes is the one whose
    /// service time ran out, whatever order they started in.
    pub channel_ios: Vec<InService>,
    /// Slots of `channel_ios` free for the next I/O to start.
    free_slots: Vec<u32>,
    /// Completions at the previous sample (the `iops` series is its difference).
    last_completed: u64,
    /// Per CPU, the polling jobs that take turns there (turns are taken where two or more).
    turns: Vec<PollTurns>,
}

/// How long one `nvme_irq` may run before the report warns: a handler that
/// long (its loop kept finding entries) has stopped being an interrupt handler.
const LOOP_WARN: Ps = PS_PER_MS;

/// Thread work for a CQ is a resubmission batch, or (with these bits) a poll
/// pass, the switch to the jobs a batch woke, or a poll pass's completion of
/// the requests it reaped.
const POLL: u32 = 1 << 31;
const WAKE: u32 = 1 << 30;
const REAP: u32 = 1 << 29;

/// An I/O a channel holds: from its start until its DMA leaves the device.
#[derive(Clone, Copy)]
pub struct InService {
    pub disk: u32,
    /// The die (with `ServiceOrder::Die`; 0 otherwise), or `IN_BUFFER` once
    /// the read has left it for the controller's buffer.
    pub die: u32,
    pub submitted: Ps,
    pub cq: u32,
}

/// `InService::die` of a finished read held in the controller's buffer, its die free.
const IN_BUFFER: u32 = u32::MAX;

pub struct Disk {
    pub group: u32,
    /// Mean service time of a command, the part of it every command takes,
    /// and the Erlang shape of the rest's distribution (0: fixed).
    pub service: Ps,
    pub service_min: Ps,
    pub erlang_k: u32,
    pub rng: Rng,
    pub channels: u32,
    pub busy: u32,
    pub order: ServiceOrder,
    /// I/Os submitted and not yet given a channel (with dies: not yet fetched
    /// into the controller): (submitted, cq). The time may lie ahead (a resubmission on its way).
    pub sq: VecDeque<(Ps, u32)>,
    /// With `ServiceOrder::Die`: each die's waiting I/Os, in order, and whether it reads one now.
    pub die_queues: Vec<VecDeque<(Ps, u32)>>,
    pub die_busy: Vec<bool>,
    /// PCIe flow control: completions (data + CQE) the disk may have queued
    /// in the root complex at once; one that finds none left keeps its
    /// channel (or die) busy in `parked` until an earlier one lands, unless
    /// the controller's buffer (`read_buffer`) has room for it.
    pub credits: u32,
    pub dma_inflight: u32,
    /// The disk's PCIe link: its data and its CQs' MSIs, in order.
    pub link: u32,
    pub parked: VecDeque<InService>,
    /// Of `parked`, the reads in the controller's buffer (their dies free), and its size.
    pub buffered: u32,
    pub read_buffer: u32,
    /// Commands in the controller (taken from `sq`, not yet posted) and how
    /// many it may hold (`fetch_slots`; `u32::MAX`: no limit).
    pub fetched: u32,
    pub fetch_slots: u32,
}

pub struct Cq {
    pub disk: u32,
    /// The DMA path its disk writes through (`Platform::path`).
    pub path: u32,
    /// The vector (source index).
    pub src: u32,
    /// Completions in flight through the fabric, then posted and not yet reaped: submission times.
    pub landing: VecDeque<Ps>,
    pub posted: VecDeque<Ps>,
    /// I/Os outstanding at the device for this queue, and those the block layer holds back (queue full).
    pub outstanding: u32,
    pub depth: u32,
    pub backlog: VecDeque<Ps>,
    /// Aggregation, with the completions posted since the vector last signalled.
    pub modq: QueueMod,
    /// Interrupt status: a message was sent and the host has not written the head doorbell since.
    pub is: bool,
    /// The CPU whose job threads reap and resubmit (the vector's target).
    pub cpu: u32,
    pub polled: bool,
    /// A polling job's own CQ, which polls only in its job's turn (`PollTurns`).
    pub takes_turns: bool,
    /// A poll pass is queued or running.
    pub polling: bool,
    /// When the running `nvme_irq` made its first pass.
    pub irq_since: Ps,
    /// Entries the running `nvme_irq` has taken in its loop, to complete
    /// once it has written the head doorbell (`nvme_pci_complete_batch`).
    pub batch: u64,
    /// The running `nvme_irq` has written the head doorbell.
    pub rung: bool,
    /// Reaped I/Os whose resubmission (thread work) has not finished, batch by batch.
    pub submitting: VecDeque<u32>,
    /// fio jobs whose I/Os use this queue.
    pub jobs: u32,
    /// Reaped by `nvme_irq` and not yet seen by their jobs' thread: submission
    /// times, taken batch by batch (`submitting`) when its thread work starts,
    /// as fio's clat ends when the job reaps.
    pub unseen: VecDeque<Ps>,
    /// A polled queue's requests in submission order (io_uring's `iopoll_list`):
    /// submission time, and whether the block layer has completed it
    /// (`iopoll_completed`) without fio having it yet.
    pub iopoll: VecDeque<(Ps, bool)>,
    /// How many of them are completed.
    pub iopoll_done: u32,
    /// The walk's polls that found nothing in a pass that reaped nothing, for
    /// the next pass to pay.
    pub walk_due: Ps,
}

impl Cq {
    /// The block layer admits the next held-back I/O if the queue has room
    /// (a polled one joins the job's `iopoll_list`); its submission time.
    fn admit_one(&mut self) -> Option<Ps> {
        if self.outstanding >= self.depth {
            return None;
        }
        let t = self.backlog.pop_front()?;
        self.outstanding += 1;
        if self.polled {
            self.iopoll.push_back((t, false));
        }
        Some(t)
    }
}

pub struct NvmeGroup {
    pub name: String,
    pub handler: Ps,
    pub per_cqe: Ps,
    /// The part of `per_cqe` before the head doorbell (`nvme_poll_cq`'s loop).
    pub handle_cqe: Ps,
    pub poll: Ps,
    /// A request `io_do_iopoll` polls that finds the CQ empty.
    pub poll_walk: Ps,
    pub submit: Ps,
    /// The switch to a woken job's thread, and how many there were.
    pub wake: Ps,
    pub wakes: u64,
    /// Polling jobs' turns begun (`PollTurns`), for a polled group.
    pub turns: u64,
    /// `io_do_iopoll` passes, and the polls on their walks that found the CQ empty.
    pub passes: u64,
    pub empty_polls: u64,
    pub polled: bool,
    pub resubmit: Ps,
    pub completed: u64,
    /// Completions `nvme_irq` reaped on a later pass of its loop: they landed
    /// while it ran, and needed no interrupt of their own.
    pub loop_reaped: u64,
    /// The longest one `nvme_irq` ran (over the whole run): a loop that keeps
    /// finding entries holds its CPU in hardirq, which the report says.
    pub longest_irq: Ps,
    pub latency: Latency,
}

impl Component for Nvme {
    type Ev = NvmeEv;

    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let mut me = Nvme::default();
        let gsim = sc.gsim.is_some();
        for (g, n) in sc.nvme.iter().enumerate() {
            let polled = n.moderation.kind == ModerationKind::Polling;
            let group = m.add_group(&n.name, &format!("{} msi", n.name));
            me.groups.push(NvmeGroup {
                name: n.name.clone(),
                handler: n.handler.ps(),
                per_cqe: n.per_cqe.ps(),
                handle_cqe: n.handle_cqe.map_or(params::HANDLE_CQE, |t| t.ps()).min(n.per_cqe.ps()),
                poll: n.poll.ps(),
                poll_walk: n.poll_walk.ps(),
                submit: n.submit.ps(),
                wake: n.wake.ps(),
                wakes: 0,
                turns: 0,
                passes: 0,
                empty_polls: 0,
                polled,
                resubmit: n.fio.resubmit.ps(),
                completed: 0,
                loop_reaped: 0,
                longest_irq: 0,
                latency: Latency::default(),
            });
            for k in 0..n.count {
                let d = me.disks.len() as u32;
                let first_cq = me.cqs.len() as u32;
                let link = m.add_link();
                let path = sc.platform.path(n.socket, n.iommu_of(k));
                if n.relaxed_ordering {
                    m.relax_link(link, path);
                }
                // Polling jobs that take turns on their CPU keep a queue each
                // (`PollTurns`); otherwise a queue is the disk's, shared by its jobs.
                let turns = n.turns(sc.platform.cpus);
                let per_job = turns.is_some();
                // A job is one thread, and blk-mq maps a thread's CPU to one queue
                // (`blk_mq_map_queues`): all of a job's I/Os use the queue of its CPU,
                // jobs round-robin over the disk's queues, so its resubmissions are
                // that CPU's thread work, one after another. (Until 2026-11-26 the
                // I/Os were spread one by one: one job at iodepth 256 resubmitted from
                // eight CPUs at once, and only jobs × iodepth mattered.)
                // The round-robin carries on across disks: restarting at queue 0
                // piled the remainder jobs of every disk on the same CPUs (a review:
                // 200 jobs on 8 disks of 8 queues put 8 on CPUs 0, 8, 16, 24 and 6 on the rest).
                let queue_of = |j: u32| (k * n.fio.jobs + j) % n.queues;
                let cpu_of = |q: u32| n.cpus[((k * n.queues + q) as usize) % n.cpus.len()];
                let made: Vec<(String, u32)> = if per_job {
                    (0..n.fio.jobs).map(|j| (format!("{}.{k}.q{}.j{j}", n.name, queue_of(j)), cpu_of(queue_of(j)))).collect()
                } else {
                    (0..n.queues).map(|q| (format!("{}.{k}.q{q}", n.name), cpu_of(q))).collect()
                };
                for (name, cpu) in made {
                    let cqi = me.cqs.len() as u32;
                    // A polled queue's vector never fires: GSIM has nothing of it to moderate.
                    let src = m.add_vector(name, group, cpu, path, n.moderation.gsim && gsim && !polled, P::ID, cqi);
                    m.srcs[src as usize].link = link;
                    // A poll queue has no interrupt vector (`nvme_create_queue`
                    // with no IRQ): posted MSI has nothing of it to post.
                    m.srcs[src as usize].msi = !polled;
                    // `nvme_irq` loops while entries are pending (`handler_continue`).
                    m.srcs[src as usize].continues = true;
                    me.cqs.push(Cq {
                        disk: d,
                        path,
                        src,
                        landing: VecDeque::new(),
                        posted: VecDeque::new(),
                        outstanding: 0,
                        depth: n.depth,
                        backlog: VecDeque::new(),
                        modq: QueueMod::new(&n.moderation),
                        is: false,
                        cpu,
                        polled,
                        takes_turns: per_job,
                        polling: false,
                        submitting: VecDeque::new(),
                        unseen: VecDeque::new(),
                        irq_since: 0,
                        batch: 0,
                        rung: false,
                        jobs: 0,
                        iopoll: VecDeque::new(),
                        iopoll_done: 0,
                        walk_due: 0,
                    });
                }
                // Each queue admits up to its depth.
                m.audit.ios_owned += n.fio.jobs as u64 * n.fio.iodepth as u64;
                for j in 0..n.fio.jobs {
                    let q = first_cq + if per_job { j } else { queue_of(j) };
                    let cq = &mut me.cqs[q as usize];
                    cq.jobs += 1;
                    cq.backlog.extend(std::iter::repeat_n(0, n.fio.iodepth as usize));
                    // An IOPOLL job spins on its CPU between completions.
                    if polled {
                        m.cpus[cq.cpu as usize].spins = true;
                    }
                    if let Some(slice) = turns {
                        let c = cq.cpu as usize;
                        if me.turns.len() <= c {
                            me.turns.resize_with(c + 1, PollTurns::default);
                        }
                        me.turns[c].jobs.push((q, slice));
                    }
                }
                let (channels, service) = match n.latency {
                    Some(l) => ((n.iops.0 * l.ps() as f64 * 1e-12).round().max(1.0) as u32, l.ps()),
                    None => {
                        let ch = n.channels.unwrap_or(1);
                        (ch, (ch as f64 / n.iops.0 * 1e12).round() as Ps)
                    }
                };
                let cv = n.service_cv;
                let mut disk = Disk {
                    group: g as u32,
                    service,
                    service_min: n.service_min.ps().min(service),
                    erlang_k: if cv == 0.0 { 0 } else { (1.0 / (cv * cv)).round() as u32 },
                    rng: stream(seed, &format!("nvme/{}.{k}", n.name)),
                    channels,
                    busy: 0,
                    order: n.service_order,
                    sq: VecDeque::new(),
                    die_queues: if n.service_order == ServiceOrder::Die { vec![VecDeque::new(); channels as usize] } else { Vec::new() },
                    die_busy: if n.service_order == ServiceOrder::Die { vec![false; channels as usize] } else { Vec::new() },
                    credits: n.dma_credits,
                    link,
                    dma_inflight: 0,
                    parked: VecDeque::new(),
                    buffered: 0,
                    read_buffer: n.read_buffer,
                    fetched: 0,
                    fetch_slots: n.fetch_slots.unwrap_or(u32::MAX),
                };
                for q in first_cq..me.cqs.len() as u32 {
                    let cq = &mut me.cqs[q as usize];
                    while let Some(t) = cq.admit_one() {
                        disk.sq.push_back((t, q));
                    }
                }
                me.disks.push(disk);
            }
        }
        me
    }

    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        for d in 0..m.parts.get_ref().disks.len() {
            disk_kick(m, s, d as u32);
        }
        // CPUs do not switch in step: each starts with another of its jobs and
        // its first turn ends at another point of the slice (spread evenly, an
        // assumption), so the jobs spinning at once are not every CPU's first.
        let me = m.parts.get();
        let n = me.turns.len() as u64;
        for (c, t) in me.turns.iter_mut().enumerate() {
            t.jobs.sort_unstable();
            if t.jobs.len() > 1 {
                t.active = c % t.jobs.len();
                s.at(s.now() + t.jobs[t.active].1 / n * (c as u64 + 1), P::ev(NvmeEv::PollTurn, c as u32));
            }
        }
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, ev: NvmeEv, arg: u32) {
        match ev {
            NvmeEv::DiskDone => disk_done(m, s, arg),
            NvmeEv::CqTimer => cq_timer(m, s, arg),
            NvmeEv::PollTurn => poll_turn(m, s, arg as usize),
            NvmeEv::Resubmit => resubmit(m, s, arg),
        }
    }

    /// `nvme_irq()`: take every posted entry; returns the loop's first pass.
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, i: u32) -> Ps {
        let q = m.srcs[i as usize].owner_arg;
        let cq = &mut m.parts.get().cqs[q as usize];
        cq.irq_since = s.now();
        cq.rung = false;
        let (n, irq) = reap_entries(m, s, c, q);
        m.parts.get().cqs[q as usize].batch = n;
        irq
    }

    /// `nvme_poll_cq` loops while `nvme_cqe_pending()` (drivers/nvme/host/pci.c):
    /// entries that landed while the loop took the last ones are taken in the
    /// same `nvme_irq`, `handle_cqe` each. Once it finds none it writes the
    /// head doorbell (`nvme_ring_cq_doorbell`), and only then does `nvme_irq`
    /// complete the batch (`nvme_pci_complete_batch`: the rest of `per_cqe`
    /// for each entry), so what lands meanwhile signals anew. Handlers that
    /// GSIM's timer or a posted-MSI notification runs loop the same way
    /// (`Machine::continue_runs`).
    fn handler_continue<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, i: u32) -> Ps {
        let q = m.srcs[i as usize].owner_arg;
        if m.parts.get_ref().cqs[q as usize].rung {
            return 0; // the batch is complete
        }
        let (n, _) = reap_entries(m, s, c, q);
        let me = m.parts.get();
        let cq = &mut me.cqs[q as usize];
        let g = &mut me.groups[me.disks[cq.disk as usize].group as usize];
        g.longest_irq = g.longest_irq.max(s.now() - cq.irq_since);
        if n > 0 {
            g.loop_reaped += n;
            cq.batch += n;
            return n * g.handle_cqe;
        }
        let batch = std::mem::take(&mut cq.batch) * (g.per_cqe - g.handle_cqe);
        ring_cq_doorbell(m, s, q);
        batch
    }

    /// `nvme_irq` is through; a handler that ended before its loop did (one
    /// that does not continue) writes the head doorbell now.
    #[inline]
    fn handler_end<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, _c: usize, i: u32, _level: Level) {
        let src = &m.srcs[i as usize];
        if src.owner != P::ID {
            return;
        }
        let q = src.owner_arg;
        let cq = &mut m.parts.get().cqs[q as usize];
        cq.batch = 0;
        if !std::mem::take(&mut cq.rung) {
            ring_cq_doorbell(m, s, q);
        }
    }

    /// A completion entry landed in host memory, where a handler or a poll finds it.
    fn dma_landed<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
        let me = m.parts.get();
        let cq = &mut me.cqs[q as usize];
        let t = cq.landing.pop_front().expect("a landed DMA per completion in flight");
        cq.posted.push_back(t);
        let d = cq.disk;
        let disk = &mut me.disks[d as usize];
        disk.dma_inflight -= 1;
        if let Some(io) = disk.parked.pop_front() {
            dma_out(m, s, io);
        }
        if m.parts.get_ref().cqs[q as usize].polled {
            poll_soon(m, s, q);
        }
    }

    /// The job's thread runs for a batch that `nvme_irq` reaped: its `io_getevents`
    /// (or io_uring CQ peek) returns, and fio's completion latency ends here.
    fn thread_start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, _c: usize, arg: u32) {
        if arg & (POLL | WAKE | REAP) != 0 {
            return; // the switch in, or the completions, come before fio sees the batch
        }
        let now = s.now();
        let me = m.parts.get();
        let cq = &mut me.cqs[arg as usize];
        // The batch starting is the oldest not yet resubmitted: `resubmit` pops
        // `submitting` when it ends, and a CQ's batches run in turn on its CPU.
        let Some(&n) = cq.submitting.front() else { return };
        let grp = &mut me.groups[me.disks[cq.disk as usize].group as usize];
        if grp.submit == 0 {
            return; // the reap recorded them (a polled reap's per_cqe is this work)
        }
        for t in cq.unseen.drain(..n as usize) {
            grp.latency.record(now - t);
        }
    }

    /// A poll pass found the CQ (reap what it holds), or a batch of resubmissions went in.
    fn thread_done<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, arg: u32) {
        if arg & (WAKE | REAP) != 0 {
            return; // its batch's work follows in the CPU's queue
        }
        let q = arg & !POLL;
        if arg & POLL != 0 {
            m.parts.get().cqs[q as usize].polling = false;
            iopoll_pass(m, s, c, q);
            return;
        }
        resubmit(m, s, q);
    }

    fn sample<P: Has<Self>>(m: &mut Machine<P>, now: Ps) {
        let dt = ps_to_s(m.interval);
        let me = m.parts.get();
        if me.groups.is_empty() {
            return;
        }
        let total: u64 = me.groups.iter().map(|g| g.completed).sum();
        let v = (total - std::mem::replace(&mut me.last_completed, total)) as f64 / dt;
        m.push_series("iops", now, v);
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        let me = m.parts.get();
        me.last_completed = 0;
        for g in &mut me.groups {
            g.completed = 0;
            g.wakes = 0;
            g.turns = 0;
            g.passes = 0;
            g.empty_polls = 0;
            g.loop_reaped = 0;
            g.latency.reset();
        }
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, _now: Ps, secs: f64) {
        for g in &m.parts.get_ref().groups {
            let p = format!("nvme.{}", g.name);
            r.metric(format!("{p}.iops"), g.completed as f64 / secs);
            r.metric(format!("{p}.completed"), g.completed as f64);
            r.metric(format!("{p}.loop_share"), g.loop_reaped as f64 / g.completed.max(1) as f64);
            if g.wake > 0 {
                r.metric(format!("{p}.wakes_per_s"), g.wakes as f64 / secs);
            }
            if g.polled {
                r.metric(format!("{p}.poll_turns_per_s"), g.turns as f64 / secs);
                r.metric(format!("{p}.poll_passes_per_s"), g.passes as f64 / secs);
                r.metric(format!("{p}.poll_walk_per_pass"), g.empty_polls as f64 / g.passes.max(1) as f64);
            }
            if g.longest_irq >= LOOP_WARN {
                r.warn(format!(
                    "nvme {}: one nvme_irq ran {:.1} ms, reaping what kept landing, and held its CPU in hardirq \
                     (per_cqe is near the gap between completions; with submit = 0 the jobs resubmit without CPU time)",
                    g.name,
                    g.longest_irq as f64 / 1e9
                ));
            }
            r.histogram(format!("{p}.latency"), &g.latency);
        }
    }

    /// Every I/O the jobs own is somewhere: queued, in service, landing, posted or held back.
    fn audit<P: Has<Self>>(m: &mut Machine<P>) {
        let me = m.parts.get_ref();
        // In service: the channel slots that hold an I/O.
        let in_service = (me.channel_ios.len() - me.free_slots.len()) as u64;
        m.audit.ios_found = in_service
            + me.disks
                .iter()
                .map(|d| (d.sq.len() + d.parked.len() + d.die_queues.iter().map(VecDeque::len).sum::<usize>()) as u64)
                .sum::<u64>()
            + me.cqs
                .iter()
                .map(|q| {
                    // A polled queue's requests completed but not yet fio's are in neither list.
                    (q.landing.len() + q.posted.len() + q.backlog.len() + q.iopoll_done as usize) as u64
                        + q.submitting.iter().map(|&n| n as u64).sum::<u64>()
                })
                .sum::<u64>();
    }
}

/// Aggregation: signal now, or when the time threshold expires.
fn cq_signal<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let cq = &mut m.parts.get().cqs[q as usize];
    if !cq.is && cq.modq.signal_now(s, P::ev(NvmeEv::CqTimer, q)) {
        cq.is = true;
        let src = cq.src;
        m.send_msi(s, src);
    }
}

fn cq_timer<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let cq = &mut m.parts.get().cqs[q as usize];
    if cq.is {
        cq.modq.timer = None; // the doorbell will signal what waits
    } else if cq.modq.expired(s, P::ev(NvmeEv::CqTimer, q)) {
        cq.is = true;
        let src = cq.src;
        m.send_msi(s, src);
    }
}

/// The handler wrote the CQ head doorbell (`nvme_ring_cq_doorbell`): entries
/// posted beyond it (landed since the loop's last look, or still on their
/// way) signal anew.
fn ring_cq_doorbell<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let now = s.now();
    let cq = &mut m.parts.get().cqs[q as usize];
    cq.rung = true;
    cq.is = false;
    // What the loop left (posted after its last look) is what waits now.
    cq.modq.unsignalled = 0;
    let waiting = cq.posted.len() + cq.landing.len();
    if waiting > 0 {
        cq.modq.add(now, waiting as u32);
        cq_signal(m, s, q);
    }
}

/// Reaps every posted entry of CQ `q` on CPU `c` (in `nvme_irq`, or a poll
/// pass) and hands them to their jobs; returns how many, and the length of
/// `nvme_irq` that reaped them (a poll pass ignores it: its thread work
/// carries `per_cqe`, ahead of the point where fio sees the batch).
fn reap_entries<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, q: u32) -> (u64, Ps) {
    let now = s.now();
    let me = m.parts.get();
    let cq = &mut me.cqs[q as usize];
    let n = cq.posted.len() as u64;
    let d = cq.disk;
    let g = me.disks[d as usize].group as usize;
    let grp = &mut me.groups[g];
    // The kernel completes the requests here; fio sees them when the job's
    // thread runs (`thread_start`), or now if the thread's time is not modelled.
    let job_later = grp.submit > 0;
    for t in cq.posted.drain(..) {
        if job_later {
            cq.unseen.push_back(t);
        } else {
            grp.latency.record(now - t);
        }
        grp.completed += 1;
        cq.outstanding -= 1;
    }
    let (submit, per_cqe, polled) = (grp.submit, grp.per_cqe, cq.polled);
    // The loop's part; the batch's part of per_cqe follows the doorbell (`handler_continue`).
    let irq = grp.handler + n * grp.handle_cqe;
    if n == 0 {
        return (0, irq);
    }
    // A polled reap is the thread's own work: it costs per_cqe there, with the submissions.
    let thread = if polled { submit + per_cqe } else { submit };
    if thread > 0 {
        // Jobs with a batch still in hand are awake; each I/O of this batch
        // beyond them belongs to a job that slept (at most one per job).
        let awake = cq.submitting.iter().sum::<u32>().min(cq.jobs);
        let woken = if polled { 0 } else { (n as u32).min(cq.jobs - awake) };
        cq.submitting.push_back(n as u32);
        // The pass's polls that found the CQ empty come before its completions.
        let walk = std::mem::take(&mut cq.walk_due);
        let wake = grp.wake;
        if woken > 0 && wake > 0 {
            grp.wakes += woken as u64;
            m.thread_work(s, c, P::ID, q | WAKE, woken as u64 * wake);
        }
        if polled && submit > 0 && per_cqe > 0 {
            // `io_do_iopoll` completes the batch (`nvme_pci_complete_batch`, the
            // CQEs posted to io_uring) before `io_uring_enter` returns to fio:
            // fio's latency ends after it, as it does after `nvme_irq`'s.
            m.thread_work(s, c, P::ID, q | REAP, walk + n * per_cqe);
            m.thread_work(s, c, P::ID, q, n * submit);
        } else {
            m.thread_work(s, c, P::ID, q, walk + n * thread);
        }
        return (n, irq);
    }
    // Not CPU-modelled: each job resubmits after the fixed delay; it counts from
    // then. The I/Os reach the submission queue only then, so no die or channel
    // is taken for them while they are on their way (until 2026-11-29 they went
    // in at once and held a die for the delay; an audit).
    if grp.resubmit > 0 {
        cq.submitting.push_back(n as u32);
        s.at(now + grp.resubmit, P::ev(NvmeEv::Resubmit, q));
        return (n, irq);
    }
    cq.backlog.extend(std::iter::repeat_n(now, n as usize));
    admit(m, s, q);
    (n, irq)
}

/// The job threads' submissions of a reaped batch went in: the I/Os enter the SQ now.
fn resubmit<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let now = s.now();
    let cq = &mut m.parts.get().cqs[q as usize];
    let n = cq.submitting.pop_front().expect("a batch per resubmission's thread work");
    cq.backlog.extend(std::iter::repeat_n(now, n as usize));
    admit(m, s, q);
}

/// The block layer admits held-back I/Os up to the queue's depth, and the disk starts them.
fn admit<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let me = m.parts.get();
    let cq = &mut me.cqs[q as usize];
    let d = cq.disk;
    let mut admitted = 0;
    while let Some(t) = cq.admit_one() {
        me.disks[d as usize].sq.push_back((t, q));
        admitted += 1;
    }
    if admitted > 0 {
        disk_kick(m, s, d);
    }
}
