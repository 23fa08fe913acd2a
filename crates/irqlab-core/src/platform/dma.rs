//! Device DMA through its remapping unit's shared path (`fabric::DmaPath`): a write is
//! queued behind the one in service, and when it lands its owner is told
//! (`Component::dma_landed`); an MSI on the path reaches the interrupt
//! controller after the fabric's latency (a posted one is posted at the
//! remapping unit, and its notification takes that latency).

use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::fabric::{DmaFor, Write};
use crate::platform::machine::{Ev, Machine, Parts};

impl<P: Parts> Machine<P> {
    /// A device DMA write on its `link` (`add_link`): through its remapping
    /// unit's path if there is one, else it lands at once (its owner's `dma_landed`).
    pub fn dma(&mut self, s: &mut Scheduler<Ev>, to: DmaFor, cost: Ps, path: u32, link: u32) {
        match self.paths.get_mut(path as usize) {
            Some(p) => {
                if let Some((_, end)) = p.submit(s.now(), link, Write::Dma(to), cost) {
                    s.at(end, Ev::PathDone(path));
                }
            }
            None => P::dma_landed(self, s, to.owner, to.arg),
        }
    }

    /// The path finished a write: it lands, and the next one starts.
    pub fn path_done(&mut self, s: &mut Scheduler<Ev>, path: u32) {
        let now = s.now();
        let p = &mut self.paths[path as usize];
        let (w, next) = p.done(now);
        if let Some((_, end)) = next {
            s.at(end, Ev::PathDone(path));
        }
        // Reads whose completions waited for this write (a mask's `readl`).
        if p.has_flushed() {
            for c in p.take_flushed() {
                self.mask_flushed(s, c as usize);
            }
        }
        match w {
            Write::Dma(to) => P::dma_landed(self, s, to.owner, to.arg),
            Write::Msi(i) => {
                let latency = self.remap_to_apic(i);
                if latency == 0 {
                    let (raised, flow) = self.srcs[i as usize].in_fabric.pop_front().expect("the MSI's write");
                    self.arrive(s, i, raised, flow);
                } else {
                    s.at(now + latency, Ev::Arrive(i));
                }
            }
        }
    }
}

impl<P: Parts> Machine<P> {
    /// A device's PCIe link to its socket's root complex: its posted writes
    /// (DMA and MSI) keep their order on it. Returns the link's id.
    pub fn add_link(&mut self) -> u32 {
        self.links += 1;
        self.links - 1
    }

    /// The device on `link`, through path `path`, sets Relaxed Ordering on its
    /// data writes (`DmaPath::relax`); without a DMA path, nothing to reorder.
    pub fn relax_link(&mut self, link: u32, path: u32) {
        if let Some(p) = self.paths.get_mut(path as usize) {
            p.relax(link);
        }
    }
}
