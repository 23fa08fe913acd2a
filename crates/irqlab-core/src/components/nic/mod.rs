//! A NIC's receive side. Packets arrive on the wire at the offered load, spread
//! over RX queues (RSS); each is DMA'd through the platform fabric into its
//! queue's ring, or dropped when the ring has no free descriptor or the NIC's
//! on-chip buffer is full because the fabric does not take its writes. A queue
//! raises its MSI-X vector only when armed (after `napi_complete_done`), and
//! then as its moderation allows; the handler schedules NAPI, whose poll
//! (`os/napi.rs`, with this queue's `napi_poll`/`napi_done`) takes up to
//! `budget` packets per round.

pub mod params;

#[cfg(test)]
mod tests;
use crate::components::moderation::QueueMod;
use crate::components::nic::params::{tlps, VfIrqs};
use crate::engine::rng::{exp_sample, stream, Rng};
use crate::engine::stats::{Latency, Report};
use crate::engine::time::{ps_to_s, s_to_ps, Ps};
use crate::engine::Scheduler;
use crate::platform::cpu::Level;
use crate::platform::fabric::DmaFor;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Component, Has};
use crate::scenario::{ModerationKind, Scenario};
use rand::Rng as _;
use std::collections::VecDeque;

crate::part_events! {
    pub enum NicEv {
        /// A packet arrives at an RX queue (the argument is the queue).
        PktArrive,
        /// The queue's moderation timer.
        RxTimer,
    }
}

/// Every `[[nic]]` of the scenario: its RX queues, each with a vector and a NAPI context.
#[derive(Default)]
pub struct Nic {
    pub rxqs: Vec<RxQueue>,
    pub groups: Vec<NicGroup>,
    pub devices: Vec<NicDevice>,
    /// Payload bytes at the previous sample (the `goodput_gbps` series).
    last_payload: u64,
}

/// Preamble, start delimiter, FCS and inter-frame gap: bytes on the wire beyond the frame.
pub const WIRE_OVERHEAD: u32 = 24;
/// IPv4 + TCP (with timestamps) headers and the Ethernet header: what is not payload in a frame.
pub const HEADERS: u32 = 14 + 20 + 32;
/// Each frame's completion entry, written after its data: mlx5's 64-byte CQE
/// (`struct mlx5_cqe64`), one per frame as CQE compression is off by default
/// (en_main.c: `rx_cqe_compress_def = slow_pci_heuristic(mdev)`).
const CQE_BYTES: u32 = 64;
/// The event queue entry the NIC writes before each MSI-X (`struct mlx5_eqe`,
/// `MLX5_EQE_SIZE`; `mlx5_eq_comp_int` reads it to find the CQ).
const EQE_BYTES: u32 = 64;
/// Marks a DMA write as an EQE (in `DmaFor::arg`, beside the queue): it lands
/// in no ring.
const EQE_WRITE: u32 = 1 << 31;

pub struct RxQueue {
    pub group: u32,
    /// The physical NIC (`NicDevice`) whose link and buffer it uses.
    pub dev: u32,
    /// The DMA path its device writes through (`Platform::path`).
    pub path: u32,
    pub src: u32,
    /// Its NAPI context (`Machine::napi_register`).
    pub napi: u32,
    pub rng: Rng,
    /// Mean gap between trains on this queue, from the last frame of one to
    /// the first of the next, seconds (with `train` 1, between frames).
    pub idle_gap_s: f64,
    /// Frames per train, the frames still to come in this one, and their
    /// spacing (a frame's mean time on the wire at link speed).
    pub train: u32,
    pub train_left: u32,
    pub wire_ps: Ps,
    pub ring: u32,
    /// Packets in flight through the fabric, then in the ring: (arrived, bytes).
    pub landing: VecDeque<(Ps, u32)>,
    pub ring_pkts: VecDeque<(Ps, u32)>,
    /// Re-armed by `napi_complete_done`; an interrupt disarms it.
    pub armed: bool,
    pub polling: bool,
    /// Coalescing, with the packets that landed since the queue last signalled.
    pub modq: QueueMod,
    /// Packets the current poll round will take (decided when it starts).
    pub poll_n: u32,
    /// A remapped VF's queue: its host vector's CPU (where `vfio_msihandler`
    /// runs), and the pCPU of the vCPU the interrupt is then posted to.
    pub remapped: Option<(u32, u32)>,
}

/// A physical NIC: its PCIe link, on-chip buffer and posted credits, shared
/// by the `[[nic]]` entries (PF, VFs) that name it as their `device`.
pub struct NicDevice {
    pub name: String,
    pub link: u32,
    /// Received frames not yet written up the link: (queue, arrival, bytes).
    pub held: VecDeque<(u32, Ps, u32)>,
    /// Their bytes.
    pub held_bytes: u64,
    /// The on-chip buffer's size (`buffer_kib`).
    pub buffer_bytes: u64,
    /// Posted-write TLPs the NIC may have in the root complex (`posted_credits`).
    pub posted_credits: u32,
    /// TLPs of its frames written up the link and not yet landed. (Frames take
    /// credits only when there is a DMA path: without one they land at once.)
    pub credits_used: u32,
}

pub struct NicGroup {
    pub name: String,
    /// Frame sizes and their cumulative shares.
    pub sizes: Vec<(u32, f64)>,
    pub handler: Ps,
    pub per_packet: Ps,
    pub per_poll: Ps,
    /// A remapped VF's host handler (`vfio_msihandler` → irqfd → posted notification).
    pub vfio_handler: Ps,
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

impl Component for Nic {
    type Ev = NicEv;

    fn build<P: Has<Self>>(m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let mut me = Nic::default();
        let gsim = sc.gsim.is_some();
        for (g, n) in sc.nic.iter().enumerate() {
            let group = m.add_group(&n.name, &format!("{} msi", n.name));
            let sizes: Vec<(u32, f64)> = if n.packets.is_empty() { vec![(1514, 1.0)] } else { n.packets.clone() };
            let total: f64 = sizes.iter().map(|s| s.1).sum();
            let mean_wire: f64 = sizes.iter().map(|(b, w)| (*b + WIRE_OVERHEAD) as f64 * w / total).sum();
            let mut acc = 0.0;
            let cdf = sizes.iter().map(|(b, w)| {
                acc += w / total;
                (*b, acc)
            });
            let pkts_per_s = n.gbps * 1e9 / 8.0 / mean_wire;
            let wire_s = mean_wire * 8.0 / (n.link_gbps.unwrap_or(n.gbps) * 1e9);
            // A train of `train` frames takes (train - 1) wire times from its
            // first frame to its last; the idle gap keeps the mean load.
            let mean_gap_s = n.queues as f64 / pkts_per_s;
            let idle_gap_s = n.train as f64 * mean_gap_s - (n.train - 1) as f64 * wire_s;
            me.groups.push(NicGroup {
                name: n.name.clone(),
                sizes: cdf.collect(),
                handler: n.handler.ps(),
                per_packet: n.per_packet.ps(),
                per_poll: n.per_poll.ps(),
                vfio_handler: n.vfio_handler.ps(),
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
            let dev = match me.devices.iter().position(|d| d.name == n.device_name()) {
                Some(d) => d as u32,
                None => {
                    let link = m.add_link();
                    if n.relaxed_ordering {
                        m.relax_link(link, sc.platform.path(n.socket, n.iommu));
                    }
                    me.devices.push(NicDevice {
                        name: n.device_name().to_string(),
                        link,
                        held: VecDeque::new(),
                        held_bytes: 0,
                        buffer_bytes: n.buffer_kib as u64 * 1024,
                        posted_credits: n.posted_credits,
                        credits_used: 0,
                    });
                    (me.devices.len() - 1) as u32
                }
            };
            let link = me.devices[dev as usize].link;
            for q in 0..n.queues {
                let c = n.cpus[(q as usize) % n.cpus.len()];
                let (cpu, level) = match vm {
                    Some(v) => (sc.vms[v as usize].pcpus[c as usize], Level::Guest),
                    None => (c, Level::Host),
                };
                let qi = me.rxqs.len() as u32;
                // Where the physical interrupt goes: a host handler (GSIM can moderate it), an exit, or the guest.
                let (target, remapped, exits, posted_to) = match (vm, n.vf_irqs) {
                    (None, _) => (cpu, None, None, None),
                    (Some(_), VfIrqs::Exit) => (cpu, None, vm, None),
                    (Some(_), VfIrqs::Posted) => (cpu, None, None, Some(cpu)),
                    (Some(_), VfIrqs::Remapped) => {
                        let host = n.host_cpus[(q as usize) % n.host_cpus.len()];
                        (host, Some((host, cpu)), None, None)
                    }
                };
                // A busy-polled queue's vector never fires: GSIM has nothing of it
                // to moderate, nor posted MSI to post.
                let polled = n.moderation.kind == ModerationKind::Polling;
                let moderated = exits.is_none() && posted_to.is_none() && n.moderation.gsim && gsim && !polled;
                let path = sc.platform.path(n.socket, n.iommu);
                let src = m.add_vector(format!("{}.rx{q}", n.name), group, target, path, moderated, P::ID, qi);
                let v = &mut m.srcs[src as usize];
                v.msi = !polled;
                (v.link, v.vm, v.posted_to) =
                    (link, exits.unwrap_or(crate::platform::source::NO_VM), posted_to.unwrap_or(crate::platform::source::NOT_POSTED));
                let napi = m.napi_register(P::ID, qi, cpu, level);
                // A busy-polled queue's CPU spins between packets.
                if n.moderation.kind == ModerationKind::Polling {
                    m.cpus[cpu as usize].spins = true;
                }
                me.rxqs.push(RxQueue {
                    group: g as u32,
                    dev,
                    path,
                    src,
                    napi,
                    rng: stream(seed, &format!("nic/{}.rx{q}", n.name)),
                    idle_gap_s,
                    train: n.train,
                    train_left: n.train,
                    wire_ps: s_to_ps(wire_s),
                    ring: n.ring,
                    landing: VecDeque::new(),
                    ring_pkts: VecDeque::new(),
                    armed: true,
                    polling: n.moderation.kind == ModerationKind::Polling,
                    modq: QueueMod { from_event: !n.moderation.cqe_mode, ..QueueMod::new(&n.moderation) },
                    poll_n: 0,
                    remapped,
                });
            }
        }
        me
    }

    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        for (q, rx) in m.parts.get().rxqs.iter_mut().enumerate() {
            let gap = exp_sample(&mut rx.rng, rx.idle_gap_s);
            s.at(s_to_ps(gap), P::ev(NicEv::PktArrive, q as u32));
        }
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, ev: NicEv, q: u32) {
        match ev {
            NicEv::PktArrive => pkt_arrive(m, s, q),
            NicEv::RxTimer => rx_timer(m, s, q),
        }
    }

    /// The hardirq handler only schedules NAPI (in `irq_exit`); DIM counts the
    /// interrupt. Under the host's pseudo-NMI each pays a nested IRQs-off
    /// section (R1 W1, sync): `__napi_schedule`'s `local_irq_save` (net/core/dev.c),
    /// and a remapped VF's host half `eventfd_signal_mask`'s `spin_lock_irqsave`
    /// (fs/eventfd.c). A guest's handler pays none: `cpu.masking` is the host's.
    fn handler_start<P: Has<Self>>(m: &mut Machine<P>, _s: &mut Scheduler<Ev>, c: usize, i: u32) -> Ps {
        let q = m.srcs[i as usize].owner_arg;
        let napi = m.parts.get_ref().rxqs[q as usize].napi;
        let (nested, host_napi) = (m.c.pmr_nested, m.napis[napi as usize].level == Level::Host);
        let me = m.parts.get();
        let rx = &mut me.rxqs[q as usize];
        if let Some((host, _)) = rx.remapped {
            if c == host as usize {
                return me.groups[rx.group as usize].vfio_handler + nested; // the host's half: vfio_msihandler
            }
        }
        rx.modq.events += 1;
        me.groups[rx.group as usize].handler + if host_napi { nested } else { 0 }
    }

    /// A remapped VF's host handler is through: KVM's irqfd posts the interrupt to the vCPU.
    fn handler_end<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, i: u32, level: Level) {
        let src = &m.srcs[i as usize];
        if src.owner != P::ID || level != Level::Host {
            return;
        }
        if let Some((host, vcpu)) = m.parts.get_ref().rxqs[src.owner_arg as usize].remapped {
            if c == host as usize {
                // The guest's latency runs from the device's write, as on the posted and exit paths.
                let origin = m.srcs[i as usize].handler_origin;
                m.post_virtual(s, i, vcpu as usize, origin, 0, 0);
            }
        }
    }

    /// `napi_schedule()` from the handler: the poll runs in this `irq_exit()`'s softirq.
    #[inline]
    fn irq_exit<P: Has<Self>>(m: &mut Machine<P>, c: usize, i: u32, level: Level) {
        let q = m.srcs[i as usize].owner_arg;
        let rx = &m.parts.get_ref().rxqs[q as usize];
        if rx.remapped.is_some() && level == Level::Host {
            return; // the host's half schedules nothing: the guest's handler will
        }
        let napi = rx.napi;
        m.napi_enqueue(c, napi);
    }

    /// The packet's DMA landed: it is in the ring, where a poll finds it.
    fn dma_landed<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
        if q & EQE_WRITE != 0 {
            return; // an event queue entry: the handler's cost reads it
        }
        let me = m.parts.get();
        let rx = &mut me.rxqs[q as usize];
        let p = rx.landing.pop_front().expect("a landed DMA per packet in flight");
        rx.ring_pkts.push_back(p);
        let d = rx.dev;
        if m.paths.get(rx.path as usize).is_some() {
            // Its TLPs left the root complex: the NIC may write what it holds.
            me.devices[d as usize].credits_used -= tlps(p.1);
            issue_held(m, s, d);
        }
        let rx = &mut m.parts.get().rxqs[q as usize];
        if rx.polling {
            let napi = rx.napi;
            if !m.napi_scheduled(napi) {
                m.napi_schedule(s, napi);
            }
        }
    }

    /// A poll round takes up to `budget` packets: its cost is set by what it finds now.
    fn napi_poll<P: Has<Self>>(m: &mut Machine<P>, q: u32) -> Ps {
        let me = m.parts.get();
        let rx = &mut me.rxqs[q as usize];
        let grp = &me.groups[rx.group as usize];
        rx.poll_n = (rx.ring_pkts.len() as u32).min(grp.budget);
        let (napi, n, len) = (rx.napi, rx.poll_n, grp.per_poll + rx.poll_n as u64 * grp.per_packet);
        m.napis[napi as usize].work = n;
        len
    }

    /// `mlx5e_poll_rx_cq` reads CQEs until the budget or an empty queue: frames
    /// that landed while the round ran are taken in it, `per_packet` each.
    fn napi_continue<P: Has<Self>>(m: &mut Machine<P>, q: u32) -> Ps {
        let me = m.parts.get();
        let rx = &mut me.rxqs[q as usize];
        let grp = &me.groups[rx.group as usize];
        let more = (rx.ring_pkts.len() as u32 - rx.poll_n).min(grp.budget - rx.poll_n);
        if more == 0 {
            return 0;
        }
        rx.poll_n += more;
        let (napi, n) = (rx.napi, rx.poll_n);
        m.napis[napi as usize].work = n;
        more as Ps * grp.per_packet
    }

    /// Hands the round's packets up the stack; then repoll (budget used up, or
    /// busy polling with more waiting) or complete and re-arm.
    fn napi_done<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) -> bool {
        let now = s.now();
        let me = m.parts.get();
        let rx = &mut me.rxqs[q as usize];
        let grp = &mut me.groups[rx.group as usize];
        grp.polls += 1;
        let n = rx.poll_n;
        for _ in 0..n {
            let (t, bytes) = rx.ring_pkts.pop_front().expect("n <= ring");
            grp.rx_pkts += 1;
            grp.life_rx += 1;
            grp.rx_bytes += bytes as u64;
            grp.payload_bytes += bytes.saturating_sub(HEADERS) as u64;
            grp.latency.record(now - t);
            rx.modq.pkts += 1;
            rx.modq.bytes += bytes as u64;
        }
        if n == grp.budget {
            true
        } else if rx.polling {
            !rx.ring_pkts.is_empty()
        } else {
            rx_rearm(m, s, q);
            false
        }
    }

    fn sample<P: Has<Self>>(m: &mut Machine<P>, now: Ps) {
        let dt = ps_to_s(m.interval);
        let me = m.parts.get();
        if me.groups.is_empty() {
            return;
        }
        let total: u64 = me.groups.iter().map(|g| g.payload_bytes).sum();
        let v = (total - std::mem::replace(&mut me.last_payload, total)) as f64 * 8.0 / dt / 1e9;
        m.push_series("goodput_gbps", now, v);
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        let me = m.parts.get();
        me.last_payload = 0;
        for g in &mut me.groups {
            (g.rx_pkts, g.rx_bytes, g.payload_bytes, g.offered_pkts) = (0, 0, 0, 0);
            (g.drops_ring, g.drops_buffer, g.polls) = (0, 0, 0);
            g.latency.reset();
        }
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, _now: Ps, secs: f64) {
        for g in &m.parts.get_ref().groups {
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
    }

    /// Every packet offered is received, dropped, or still in flight or in a ring.
    fn audit<P: Has<Self>>(m: &mut Machine<P>) {
        let me = m.parts.get_ref();
        m.audit.pkts_found = me.rxqs.iter().map(|q| (q.landing.len() + q.ring_pkts.len()) as u64).sum::<u64>()
            + me.groups.iter().map(|g| g.life_rx + g.life_drops).sum::<u64>()
            + me.devices.iter().map(|d| d.held.len() as u64).sum::<u64>();
        m.audit.pkts_offered = me.groups.iter().map(|g| g.life_offered).sum();
    }
}

/// A packet arrives from the wire at queue `q`.
fn pkt_arrive<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let now = s.now();
    let me = m.parts.get();
    let rx = &mut me.rxqs[q as usize];
    let g = rx.group as usize;
    let next = if rx.train_left > 1 {
        rx.train_left -= 1;
        now + rx.wire_ps
    } else {
        rx.train_left = rx.train;
        now + s_to_ps(exp_sample(&mut rx.rng, rx.idle_gap_s))
    };
    s.at(next, P::ev(NicEv::PktArrive, q));
    let u: f64 = rx.rng.gen();
    let grp = &mut me.groups[g];
    let bytes = grp.sizes.iter().find(|(_, c)| u < *c).unwrap_or(grp.sizes.last().expect("a size")).0;
    grp.offered_pkts += 1;
    grp.life_offered += 1;
    if m.paths.get(rx.path as usize).is_none() {
        // No DMA path: the write lands at once, nothing waits on chip.
        write_up(m, s, q, now, bytes);
        return;
    }
    let d = rx.dev;
    let dev = &mut me.devices[d as usize];
    if dev.held_bytes + bytes as u64 > dev.buffer_bytes {
        // The link has not taken enough of what came before: the buffer is full.
        grp.drops_buffer += 1;
        grp.life_drops += 1;
        return;
    }
    dev.held.push_back((q, now, bytes));
    dev.held_bytes += bytes as u64;
    issue_held(m, s, d);
}

/// The NIC writes the frames it holds up its link, oldest first, while the
/// root complex has credits for them. A frame's MSI follows only what was
/// written before it, not what still waits on chip.
fn issue_held<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, d: u32) {
    loop {
        let dev = &mut m.parts.get().devices[d as usize];
        let Some(&(q, t, bytes)) = dev.held.front() else { return };
        let need = tlps(bytes);
        if dev.credits_used + need > dev.posted_credits {
            return;
        }
        dev.held.pop_front();
        dev.held_bytes -= bytes as u64;
        dev.credits_used += need;
        if !write_up(m, s, q, t, bytes) {
            m.parts.get().devices[d as usize].credits_used -= need;
        }
    }
}

/// DMA of a frame into queue `q`'s ring, if it has a free descriptor (else
/// the frame is dropped: `rx_out_of_buffer`). Returns whether it was written.
fn write_up<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32, arrived: Ps, bytes: u32) -> bool {
    let me = m.parts.get();
    let rx = &mut me.rxqs[q as usize];
    let grp = &mut me.groups[rx.group as usize];
    if rx.landing.len() + rx.ring_pkts.len() >= rx.ring as usize {
        grp.drops_ring += 1;
        grp.life_drops += 1;
        return false;
    }
    let cost = m.dma_write + (bytes + CQE_BYTES) as Ps * grp.dma_per_kib / 1024;
    rx.landing.push_back((arrived, bytes));
    let (sk, link) = (rx.path, me.devices[rx.dev as usize].link);
    m.dma(s, DmaFor { owner: P::ID, arg: q }, cost, sk, link);
    // An armed queue signals once the frame and its CQE are posted, not once
    // they land (a posted write is never acknowledged): the MSI follows them
    // up the link, and PCIe ordering lands them first.
    let rx = &mut m.parts.get().rxqs[q as usize];
    if rx.armed && !rx.polling {
        rx.modq.add(s.now(), 1);
        rx_signal(m, s, q);
    }
    true
}

/// An armed queue signals as its moderation allows, and is disarmed.
fn rx_signal<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let rx = &mut m.parts.get().rxqs[q as usize];
    if rx.modq.signal_now(s, P::ev(NicEv::RxTimer, q)) {
        rx.armed = false;
        send_eqe_and_msi(m, s, q);
    }
}

/// The CQ's completion event: the NIC writes an EQE up the link, then the
/// vector's MSI behind it (PCIe ordering lands the EQE first). The EQE holds
/// the DMA path for its bytes; it takes no posted credit in the model.
fn send_eqe_and_msi<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let me = m.parts.get();
    let rx = &me.rxqs[q as usize];
    let (src, sk, link) = (rx.src, rx.path, me.devices[rx.dev as usize].link);
    let cost = m.dma_write + EQE_BYTES as Ps * me.groups[rx.group as usize].dma_per_kib / 1024;
    if m.paths.get(sk as usize).is_some() {
        m.dma(s, DmaFor { owner: P::ID, arg: EQE_WRITE | q }, cost, sk, link);
    }
    m.send_msi(s, src);
}

fn rx_timer<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let rx = &mut m.parts.get().rxqs[q as usize];
    let fired = rx.modq.expired(s, P::ev(NicEv::RxTimer, q));
    // A disarmed queue counts no completion (`dma_landed`) and has no timer.
    debug_assert!(!fired || rx.armed, "rx{q}: completions waited on a disarmed queue");
    if fired && rx.armed {
        rx.armed = false;
        send_eqe_and_msi(m, s, q);
    }
}

/// `napi_complete_done()`: re-arm the queue; DIM looks at its counters.
fn rx_rearm<P: Has<Nic>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let now = s.now();
    let rx = &mut m.parts.get().rxqs[q as usize];
    if rx.modq.kind == ModerationKind::Dim {
        let sample =
            crate::components::moderation::dim::Sample { time: now, events: rx.modq.events, pkts: rx.modq.pkts, bytes: rx.modq.bytes };
        let dim = rx.modq.dim.as_mut().expect("dim state");
        if dim.update(sample) {
            (rx.modq.usecs, rx.modq.frames) = dim.profile();
        }
    }
    rx.armed = true;
    let n = (rx.ring_pkts.len() + rx.landing.len()) as u32;
    if n > 0 {
        // Packets posted since the poll took its last (landed, or on their
        // way): the armed CQ signals for them.
        rx.modq.add(now, n);
        rx_signal(m, s, q);
    }
}
