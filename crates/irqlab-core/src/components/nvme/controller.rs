//! The controller's side of an I/O: fetching commands into its slots,
//! serving each on the die that holds its block (or on any free channel),
//! holding finished reads while the root complex has no posted credits, and
//! writing data and completion entry up the link, where the CQ signals.

use super::*;

impl Disk {
    /// Fixed, or `service_min` plus an Erlang-k: the sum of k exponentials
    /// of mean `(service - service_min) / k`.
    fn service_time(&mut self) -> Ps {
        if self.erlang_k == 0 {
            return self.service;
        }
        let mean = (self.service - self.service_min) as f64 * 1e-12 / self.erlang_k as f64;
        let sum: f64 = (0..self.erlang_k).map(|_| exp1(&mut self.rng)).sum();
        self.service_min + s_to_ps(sum * mean)
    }
}

/// Gives fetched I/Os their channels: with dies, each joins its die's queue
/// and an idle die starts it; otherwise free channels take queued I/Os, a
/// random one or the oldest.
pub(super) fn disk_kick<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, d: u32) {
    loop {
        let disk = &mut m.parts.get().disks[d as usize];
        let (die, io) = match disk.order {
            ServiceOrder::Die => {
                if disk.fetched >= disk.fetch_slots {
                    return; // the controller is full: the rest wait in their submission queues
                }
                let Some(io) = disk.sq.pop_front() else { return };
                disk.fetched += 1;
                // A random read's block, and so its die, is uniform over the array.
                let die = disk.rng.gen_range(0..disk.channels);
                if disk.die_busy[die as usize] {
                    disk.die_queues[die as usize].push_back(io);
                    continue;
                }
                (die, io)
            }
            _ if disk.busy >= disk.channels || disk.sq.is_empty() => return,
            ServiceOrder::Random => {
                let k = disk.rng.gen_range(0..disk.sq.len());
                (0, disk.sq.swap_remove_back(k).expect("k < len"))
            }
            ServiceOrder::Fifo => (0, disk.sq.pop_front().expect("not empty")),
        };
        start_io(m, s, d, die, io);
    }
}

/// A channel (die `die` with dies) starts an I/O; it finishes its service time
/// after it may start.
fn start_io<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, d: u32, die: u32, (submitted, cq): (Ps, u32)) {
    let me = m.parts.get();
    let disk = &mut me.disks[d as usize];
    let t = disk.service_time();
    disk.busy += 1;
    if disk.order == ServiceOrder::Die {
        disk.die_busy[die as usize] = true;
    }
    let io = InService { disk: d, die, submitted, cq };
    let slot = match me.free_slots.pop() {
        Some(slot) => {
            me.channel_ios[slot as usize] = io;
            slot
        }
        None => {
            me.channel_ios.push(io);
            (me.channel_ios.len() - 1) as u32
        }
    };
    s.at(s.now().max(submitted) + t, P::ev(NvmeEv::DiskDone, slot));
}

/// A channel finished an I/O: DMA its data and completion entry.
pub(super) fn disk_done<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, slot: u32) {
    let me = m.parts.get();
    let io = me.channel_ios[slot as usize];
    me.free_slots.push(slot);
    let disk = &mut me.disks[io.disk as usize];
    if disk.dma_inflight >= disk.credits {
        // The root complex has no room: the data stays in the device, in the
        // controller's buffer if it has room (its die goes on), else in its
        // die (or channel), which stays busy.
        if disk.buffered < disk.read_buffer {
            disk.buffered += 1;
            disk.parked.push_back(InService { die: IN_BUFFER, ..io });
            release_die(m, s, io.disk, io.die);
            disk_kick(m, s, io.disk);
        } else {
            disk.parked.push_back(io);
        }
        return;
    }
    dma_out(m, s, io);
}

/// Sends a finished I/O's data and completion entry up the link; its channel is free again.
pub(super) fn dma_out<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, InService { disk: d, die, submitted, cq }: InService) {
    let me = m.parts.get();
    let disk = &mut me.disks[d as usize];
    disk.dma_inflight += 1;
    let link = disk.link;
    let c = &mut me.cqs[cq as usize];
    c.landing.push_back(submitted);
    let sk = c.path;
    let cost = m.dma_write;
    m.dma(s, DmaFor { owner: P::ID, arg: cq }, cost, sk, link);
    // The controller signals once it has posted the entry, not once the entry
    // has landed (a posted write is never acknowledged): the MSI follows the
    // entry up the link, and PCIe ordering lands the entry first.
    let c = &mut m.parts.get().cqs[cq as usize];
    if !c.polled {
        c.modq.add(s.now(), 1);
        cq_signal(m, s, cq);
    }
    let disk = &mut m.parts.get().disks[d as usize];
    if disk.order == ServiceOrder::Die {
        disk.fetched -= 1; // posted: its slot in the controller is free
    }
    if die == IN_BUFFER {
        disk.buffered -= 1; // its die was released when it entered the buffer
    } else {
        release_die(m, s, d, die);
    }
    disk_kick(m, s, d);
}

/// A channel (or die) has passed its read on; a die starts the next one queued for it.
fn release_die<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, d: u32, die: u32) {
    let disk = &mut m.parts.get().disks[d as usize];
    disk.busy -= 1;
    if disk.order == ServiceOrder::Die {
        disk.die_busy[die as usize] = false;
        if let Some(next) = disk.die_queues[die as usize].pop_front() {
            start_io(m, s, d, die, next);
        }
    }
}
