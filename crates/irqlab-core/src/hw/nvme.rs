//! NVMe SSDs driven by fio-like closed-loop jobs. A disk serves I/Os from its
//! submission queues with `channels` in parallel up to its IOPS ceiling; each
//! finished I/O is DMA'd (data and completion entry) through the platform
//! fabric, and once the entry has landed the controller signals the CQ's MSI-X
//! vector, subject to the vector's mask and the queue's aggregation. The
//! interrupt is level-like per CQ (the NVMe interrupt status): a message is
//! sent when the CQ goes from "nothing to signal" to "entries to signal", and
//! not again until the host has reaped and written the CQ head doorbell. The
//! handler (`nvme_irq`) reaps every entry it finds; each reaped I/O is
//! resubmitted by its job (closed loop).
//!
//! I/Os are identical, so a disk keeps only their submission times. A channel
//! takes a random queued command (dies serve out of order; FIFO service would
//! keep every batch of resubmissions together, lap after lap), and the I/O a
//! channel finishes is taken to be the oldest in service.

use crate::engine::rng::{exp_sample, Rng};
use crate::engine::stats::Latency;
use crate::engine::time::{s_to_ps, Ps};
use crate::engine::Scheduler;
use crate::machine::{Ev, Machine};
use crate::moderation::QueueMod;
use rand::Rng as _;
use std::collections::VecDeque;

pub struct Disk {
    pub group: u32,
    pub service: Ps,
    pub exponential: bool,
    pub rng: Rng,
    pub channels: u32,
    pub busy: u32,
    /// I/Os waiting for a channel: (submitted, cq). The time may lie ahead (a resubmission on its way).
    pub sq: VecDeque<(Ps, u32)>,
    /// I/Os in service, oldest first.
    pub in_service: VecDeque<(Ps, u32)>,
}

pub struct Cq {
    pub disk: u32,
    pub socket: u32,
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
}

pub struct NvmeGroup {
    pub name: String,
    pub handler: Ps,
    pub per_cqe: Ps,
    pub resubmit: Ps,
    pub completed: u64,
    pub latency: Latency,
}

impl Disk {
    fn service_time(&mut self) -> Ps {
        if self.exponential {
            s_to_ps(exp_sample(&mut self.rng, self.service as f64 * 1e-12))
        } else {
            self.service
        }
    }
}

impl Machine {
    /// Starts queued I/Os on free channels; each finishes `service` after it may start.
    pub(crate) fn disk_kick(&mut self, s: &mut Scheduler<Ev>, d: u32) {
        let now = s.now();
        let disk = &mut self.disks[d as usize];
        while disk.busy < disk.channels && !disk.sq.is_empty() {
            // Flash dies serve queued commands out of order: take any one, not the oldest.
            let k = disk.rng.gen_range(0..disk.sq.len());
            let io = disk.sq.swap_remove_back(k).expect("k < len");
            let t = disk.service_time();
            disk.busy += 1;
            disk.in_service.push_back(io);
            s.at(now.max(io.0) + t, Ev::DiskDone(d));
        }
    }

    /// A channel finished an I/O: DMA its data and completion entry.
    pub(crate) fn disk_done(&mut self, s: &mut Scheduler<Ev>, d: u32) {
        let disk = &mut self.disks[d as usize];
        let (submitted, cq) = disk.in_service.pop_front().expect("a DiskDone per I/O in service");
        disk.busy -= 1;
        let c = &mut self.cqs[cq as usize];
        c.landing.push_back(submitted);
        let sk = c.socket;
        self.dma(s, crate::hw::fabric::DmaFor::Cq(cq), self.dma_write, sk);
        self.disk_kick(s, d);
    }

    /// A device DMA write: through the shared path if there is one, else it lands at once.
    pub(crate) fn dma(&mut self, s: &mut Scheduler<Ev>, to: crate::hw::fabric::DmaFor, cost: Ps, socket: u32) {
        use crate::hw::fabric::{DmaFor, Write};
        match self.paths.get_mut(socket as usize) {
            Some(p) => {
                if let Some((_, end)) = p.submit(s.now(), Write::Dma(to), cost) {
                    s.at(end, Ev::PathDone(socket));
                }
            }
            None => match to {
                DmaFor::Cq(q) => self.cqe_landed(s, q),
                DmaFor::Rx(q) => self.pkt_landed(s, q),
            },
        }
    }

    /// The path finished a write: it lands, and the next one starts.
    pub(crate) fn path_done(&mut self, s: &mut Scheduler<Ev>, socket: u32) {
        use crate::hw::fabric::{DmaFor, Write};
        let now = s.now();
        let (w, next) = self.paths[socket as usize].done(now);
        if let Some((_, end)) = next {
            s.at(end, Ev::PathDone(socket));
        }
        match w {
            Write::Dma(DmaFor::Cq(q)) => self.cqe_landed(s, q),
            Write::Dma(DmaFor::Rx(q)) => self.pkt_landed(s, q),
            Write::Msi(i) => {
                let latency = self.fabric.latency();
                if latency == 0 {
                    let (raised, flow) = self.srcs[i as usize].in_fabric.pop_front().expect("the MSI's write");
                    self.arrive(s, i, raised, flow);
                } else {
                    s.at(now + latency, Ev::Arrive(i));
                }
            }
        }
    }

    /// A completion entry landed in host memory: the controller may signal.
    pub(crate) fn cqe_landed(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let now = s.now();
        let cq = &mut self.cqs[q as usize];
        let t = cq.landing.pop_front().expect("a CqeLanded per completion in flight");
        cq.posted.push_back(t);
        cq.modq.add(now, 1);
        self.cq_signal(s, q);
    }

    /// Aggregation: signal now, or when the time threshold expires.
    pub(crate) fn cq_signal(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let cq = &mut self.cqs[q as usize];
        if !cq.is && cq.modq.signal_now(s, Ev::CqTimer(q)) {
            cq.is = true;
            let src = cq.src;
            self.send_msi(s, src);
        }
    }

    pub(crate) fn cq_timer(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let cq = &mut self.cqs[q as usize];
        if cq.is {
            cq.modq.timer = None; // the doorbell will signal what waits
        } else if cq.modq.expired() {
            cq.is = true;
            let src = cq.src;
            self.send_msi(s, src);
        }
    }

    /// The handler wrote the CQ head doorbell: entries that landed meanwhile signal anew.
    pub(crate) fn nvme_doorbell(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let now = s.now();
        let cq = &mut self.cqs[q as usize];
        cq.is = false;
        // What the handler left (landed after it reaped) is what waits now.
        cq.modq.unsignalled = 0;
        if !cq.posted.is_empty() {
            cq.modq.add(now, cq.posted.len() as u32);
            self.cq_signal(s, q);
        }
    }

    /// `nvme_irq()`: reap every posted entry; returns the handler's length.
    pub(crate) fn nvme_reap(&mut self, s: &mut Scheduler<Ev>, q: u32) -> Ps {
        let now = s.now();
        let cq = &mut self.cqs[q as usize];
        let n = cq.posted.len() as u64;
        let d = cq.disk;
        let g = self.disks[d as usize].group as usize;
        let grp = &mut self.nvme[g];
        let resubmit_at = now + grp.resubmit;
        for t in cq.posted.drain(..) {
            grp.latency.record(now - t);
            grp.completed += 1;
            cq.outstanding -= 1;
            // The job resubmits at once; it counts from its new submission.
            cq.backlog.push_back(resubmit_at);
        }
        let mut admitted = 0;
        while cq.outstanding < cq.depth {
            let Some(t) = cq.backlog.pop_front() else { break };
            cq.outstanding += 1;
            self.disks[d as usize].sq.push_back((t, q));
            admitted += 1;
        }
        let len = grp.handler + n * grp.per_cqe;
        if admitted > 0 {
            self.disk_kick(s, d);
        }
        len
    }
}
