//! The MSI write path: a device writes a vector's message (unless the
//! MSI-X entry is masked: then it waits in the Pending Bit Array), the write
//! crosses the fabric or the socket's DMA path, and arrives at the interrupt
//! controller (`Machine::arrive`). Signals that do not cross the fabric (SGIs,
//! SDEI) take `raise_direct`.

use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};

impl<P: Parts> Machine<P> {
    /// The device writes vector `i`'s MSI-X message, unless the vector is
    /// masked (the message waits in the PBA) or its previous message has not
    /// entered the fabric yet (this one merges into it).
    #[inline(always)]
    pub fn send_msi(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let now = s.now();
        let src = &mut self.srcs[i as usize];
        if src.masked {
            if src.pba {
                self.n.pba_merged += 1;
            }
            src.pba = true;
            return;
        }
        // (`path` and `link` lie beyond the two lines a plain arrival reads:
        // only a machine with DMA paths looks at them.)
        let (sk, link) = if self.paths.is_empty() { (0, 0) } else { (src.path, src.link) };
        if self.paths.get(sk as usize).is_some_and(|p| p.msi_queued(link, i)) {
            self.n.msi_merged_at_device += 1;
            return;
        }
        self.n.writes += 1;
        self.audit.writes += 1;
        let flow = self.audit.writes;
        if self.tracer.on() {
            let track = self.msi_tracks[src.group as usize];
            let name = self.source_name(i).into_owned();
            self.tracer.instant(now, track, "msi", &name, Some(flow));
            if let Some(t) = self.backlog_track {
                // A machine with DMA paths sends its MSIs there, not through the fabric.
                let ahead = match self.paths.get(sk as usize) {
                    Some(p) => p.backlog(now),
                    None => self.fabric.backlog(now),
                };
                if self.backlog_drained < now {
                    self.tracer.counter(self.backlog_drained, t, 0.0);
                }
                self.tracer.counter(now, t, ahead as f64 / 1e3);
                self.backlog_drained = now + ahead;
            }
        }
        if let Some(p) = self.paths.get_mut(sk as usize) {
            self.srcs[i as usize].in_fabric.push_back((now, flow));
            let msi = p.msi;
            if let Some((_, end)) = p.submit(now, link, crate::platform::fabric::Write::Msi(i), msi) {
                s.at(end, Ev::PathDone(sk));
            }
            return;
        }
        let mut at = self.fabric.submit(now);
        if at != now {
            // (Not when nothing delays the write: the plain path reads no more.)
            at = at - self.fabric.latency() + self.remap_to_apic(i);
        }
        if at == now {
            self.arrive(s, i, now, flow);
        } else {
            // The fabric is FIFO, so a source's writes leave it in the order they entered.
            self.srcs[i as usize].in_fabric.push_back((now, flow));
            s.at(at, Ev::Arrive(i));
        }
    }

    /// From the end of vector `i`'s remapping to the interrupt controller: the
    /// fabric's latency, or nothing for a posted vector, whose message ends at
    /// the remapping unit (it sets the PIR bit there, and only the posted-MSI
    /// notification travels on to the CPU).
    #[inline]
    pub(crate) fn remap_to_apic(&self, i: u32) -> crate::engine::time::Ps {
        if self.srcs[i as usize].poster == crate::platform::source::NO_OWNER {
            self.fabric.latency()
        } else {
            0
        }
    }

    /// Clears the vector's mask bit: a message held in the PBA is written now.
    pub fn unmask_msi(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let src = &mut self.srcs[i as usize];
        src.masked = false;
        if std::mem::take(&mut src.pba) {
            self.send_msi(s, i);
        }
    }

    /// A signal that does not cross the PCIe fabric (an SGI, an SMC to
    /// firmware): it reaches the target after the source's fixed latency.
    pub fn raise_direct(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let now = s.now();
        self.audit.writes += 1;
        let flow = self.audit.writes;
        let latency = self.srcs[i as usize].latency;
        if latency == 0 {
            self.arrive(s, i, now, flow);
        } else {
            // A fixed latency keeps each source's signals in order.
            self.srcs[i as usize].in_fabric.push_back((now, flow));
            s.at(now + latency, Ev::Arrive(i));
        }
    }
}
