//! A NIC's receive side. Packets arrive on the wire at the offered load, spread
//! over RX queues (RSS); each is DMA'd through the platform fabric into its
//! queue's ring, or dropped when the ring has no free descriptor or the NIC's
//! on-chip buffer is full because the fabric does not take its writes. A queue
//! raises its MSI-X vector only when armed (after `napi_complete_done`), and
//! then as its moderation allows; the handler schedules NAPI, whose poll
//! (`os/napi.rs`) takes up to `budget` packets per round.

use crate::engine::rng::{exp_sample, Rng};
use crate::engine::stats::Latency;
use crate::engine::time::{s_to_ps, Ps};
use crate::engine::Scheduler;
use crate::hw::cpu::Level;
use crate::machine::{Ev, Machine};
use crate::moderation::QueueMod;
use crate::scenario::ModerationKind;
use rand::Rng as _;
use std::collections::VecDeque;

/// Preamble, start delimiter, FCS and inter-frame gap: bytes on the wire beyond the frame.
pub const WIRE_OVERHEAD: u32 = 24;
/// IPv4 + TCP (with timestamps) headers and the Ethernet header: what is not payload in a frame.
pub const HEADERS: u32 = 14 + 20 + 32;

pub struct RxQueue {
    pub group: u32,
    pub socket: u32,
    pub src: u32,
    pub cpu: u32,
    pub level: Level,
    pub rng: Rng,
    /// Mean gap between packets on this queue, seconds.
    pub mean_gap_s: f64,
    pub ring: u32,
    /// Packets in flight through the fabric, then in the ring: (arrived, bytes).
    pub landing: VecDeque<(Ps, u32)>,
    pub ring_pkts: VecDeque<(Ps, u32)>,
    /// Re-armed by `napi_complete_done`; an interrupt disarms it.
    pub armed: bool,
    pub polling: bool,
    pub napi_scheduled: bool,
    /// Coalescing, with the packets that landed since the queue last signalled.
    pub modq: QueueMod,
    /// Packets the current poll round will take (decided when it starts).
    pub poll_n: u32,
}

pub struct NicGroup {
    pub name: String,
    /// Frame sizes and their cumulative shares.
    pub sizes: Vec<(u32, f64)>,
    /// How long the on-chip buffer lasts at line rate: writes that would wait longer are dropped.
    pub buffer: Ps,
    pub handler: Ps,
    pub per_packet: Ps,
    pub per_poll: Ps,
    pub budget: u32,
    pub dma_per_kib: Ps,
    pub rx_pkts: u64,
    pub rx_bytes: u64,
    pub payload_bytes: u64,
    pub offered_pkts: u64,
    pub drops_ring: u64,
    pub drops_buffer: u64,
    pub latency: Latency,
    pub polls: u64,
    /// Lifetime counts (never reset), for the conservation check.
    pub life_offered: u64,
    pub life_rx: u64,
    pub life_drops: u64,
}

impl Machine {
    /// A packet arrives from the wire at queue `q`.
    pub(crate) fn pkt_arrive(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let now = s.now();
        let rx = &mut self.rxqs[q as usize];
        let g = rx.group as usize;
        s.at(now + s_to_ps(exp_sample(&mut rx.rng, rx.mean_gap_s)), Ev::PktArrive(q));
        let u: f64 = rx.rng.gen();
        let grp = &mut self.nics[g];
        let bytes = grp.sizes.iter().find(|(_, c)| u < *c).unwrap_or(grp.sizes.last().expect("a size")).0;
        grp.offered_pkts += 1;
        grp.life_offered += 1;
        if rx.landing.len() + rx.ring_pkts.len() >= rx.ring as usize {
            grp.drops_ring += 1;
            grp.life_drops += 1;
            return;
        }
        if self.paths.get(rx.socket as usize).is_some_and(|p| p.dma_backlog > grp.buffer) {
            // The NIC's buffer holds what the path has not taken yet: it is full.
            grp.drops_buffer += 1;
            grp.life_drops += 1;
            return;
        }
        let cost = self.dma_write + bytes as Ps * grp.dma_per_kib / 1024;
        rx.landing.push_back((now, bytes));
        let sk = rx.socket;
        self.dma(s, crate::hw::fabric::DmaFor::Rx(q), cost, sk);
    }

    /// The packet's DMA landed: it is in the ring, and the queue may signal.
    pub(crate) fn pkt_landed(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let now = s.now();
        let rx = &mut self.rxqs[q as usize];
        let p = rx.landing.pop_front().expect("a PktLanded per packet in flight");
        rx.ring_pkts.push_back(p);
        if rx.polling {
            if !rx.napi_scheduled {
                self.napi_schedule(s, q);
            }
            return;
        }
        if !rx.armed {
            return;
        }
        rx.modq.add(now, 1);
        self.rx_signal(s, q);
    }

    /// An armed queue signals as its moderation allows, and is disarmed.
    fn rx_signal(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let rx = &mut self.rxqs[q as usize];
        if rx.modq.signal_now(s, Ev::RxTimer(q)) {
            rx.armed = false;
            let src = rx.src;
            self.send_msi(s, src);
        }
    }

    pub(crate) fn rx_timer(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let rx = &mut self.rxqs[q as usize];
        if rx.modq.expired() && rx.armed {
            rx.armed = false;
            let src = rx.src;
            self.send_msi(s, src);
        }
    }

    /// `napi_complete_done()`: re-arm the queue; DIM looks at its counters.
    pub(crate) fn rx_rearm(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let now = s.now();
        let rx = &mut self.rxqs[q as usize];
        if rx.modq.kind == ModerationKind::Dim {
            let sample = crate::moderation::dim::Sample { time: now, events: rx.modq.events, pkts: rx.modq.pkts, bytes: rx.modq.bytes };
            let dim = rx.modq.dim.as_mut().expect("dim state");
            if dim.update(sample, &mut rx.rng) {
                (rx.modq.usecs, rx.modq.frames) = dim.profile();
            }
        }
        rx.armed = true;
        if !rx.ring_pkts.is_empty() {
            // Packets that landed since the poll took its last: the armed CQ signals for them.
            let n = rx.ring_pkts.len() as u32;
            rx.modq.add(now, n);
            self.rx_signal(s, q);
        }
    }
}
