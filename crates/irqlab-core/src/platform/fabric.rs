//! The platform interrupt fabric: the path of an MSI write through the PCIe
//! root port and, with interrupt remapping, the IOMMU. Each write occupies one of
//! `slots` for `msi_write`; writes beyond capacity wait in FIFO order. Capacity is
//! `slots / msi_write` writes per second.
//!
//! With a fixed occupancy and FIFO order, the slot that frees first is always the
//! one taken `slots` writes ago, so a ring of finish times replaces a queue and
//! the fabric needs no events of its own.

use crate::engine::stats::Latency;
use crate::engine::time::Ps;
use std::collections::VecDeque;

pub struct Fabric {
    write: Ps,
    latency: Ps,
    free_at: Vec<Ps>,
    next: usize,
    pub busy: Ps,
    pub wait: Latency,
    /// Write intervals `(start, done)`, kept only when auditing.
    pub log: Option<Vec<(Ps, Ps)>>,
}

impl Fabric {
    pub fn new(write: Ps, slots: u32, latency: Ps) -> Self {
        Fabric { write, latency, free_at: vec![0; slots as usize], next: 0, busy: 0, wait: Latency::default(), log: None }
    }

    pub fn slots(&self) -> usize {
        self.free_at.len()
    }

    pub fn latency(&self) -> Ps {
        self.latency
    }

    pub fn has_cost(&self) -> bool {
        self.write > 0
    }

    /// Submits a write at `now`; returns when the interrupt controller sees it.
    #[inline]
    pub fn submit(&mut self, now: Ps) -> Ps {
        if self.write == 0 {
            return now + self.latency;
        }
        let i = self.next;
        self.next = if i + 1 == self.free_at.len() { 0 } else { i + 1 };
        let start = now.max(self.free_at[i]);
        let done = start + self.write;
        self.free_at[i] = done;
        self.busy += self.write;
        self.wait.record(start - now);
        if let Some(log) = &mut self.log {
            log.push((start, done));
        }
        done + self.latency
    }

    /// Work queued ahead of a write submitted now, in ps (for the trace counter).
    pub fn backlog(&self, now: Ps) -> Ps {
        self.free_at.iter().map(|&f| f.saturating_sub(now)).min().unwrap_or(0)
    }

    pub fn reset(&mut self) {
        self.busy = 0;
        self.wait.reset();
    }
}

/// The most intervals of `log` that overlap at any instant (one ending when
/// another starts does not overlap it): what an audited fabric or path had in
/// service at its busiest.
pub fn peak_in_service(log: &[(Ps, Ps)]) -> usize {
    let mut points: Vec<(Ps, i32)> = log.iter().flat_map(|&(s, d)| [(s, 1), (d, -1)]).collect();
    points.sort_unstable(); // ends (-1) before starts (+1) at the same instant
    let (mut n, mut peak) = (0i32, 0i32);
    for (_, d) in points {
        n += d;
        peak = peak.max(n);
    }
    peak as usize
}

/// A device DMA write waiting for (or crossing) the path: the component that
/// submitted it, and what lands (e.g. an NVMe CQ's completion, an RX queue's packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFor {
    pub owner: u8,
    pub arg: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Dma(DmaFor),
    Msi(u32),
}

/// The shared posted-write path of a platform whose devices DMA: one write at a
/// time, MSI writes first. An MSI's interrupt-remapping step holds the path for
/// `msi_write` (the posted writes behind it wait: PCIe ordering), but the MSI
/// itself does not queue behind DMA. So beyond the platform's MSI limit it is
/// DMA — completions, received packets — that slows down, and the interrupt
/// rate stays high: the collapse the M5 brief describes. Event-driven: the
/// machine gets `Ev::PathDone` when the write in service is through.
pub struct DmaPath {
    pub msi: Ps,
    pub busy: Option<(Write, Ps)>,
    pub msi_q: VecDeque<(u32, Ps)>,
    pub dma_q: VecDeque<(DmaFor, Ps, Ps)>,
    /// Work queued behind the write in service, in ps (DMA only: what a device's buffer holds).
    pub dma_backlog: Ps,
    pub busy_time: Ps,
    pub wait: Latency,
    /// Write intervals `(start, done)`, kept only when auditing.
    pub log: Option<Vec<(Ps, Ps)>>,
}

impl DmaPath {
    pub fn new(msi: Ps) -> Self {
        DmaPath {
            msi,
            busy: None,
            msi_q: VecDeque::new(),
            dma_q: VecDeque::new(),
            dma_backlog: 0,
            busy_time: 0,
            wait: Latency::default(),
            log: None,
        }
    }

    /// Queues a write; returns the write to start now (and its end) if the path was idle.
    #[inline]
    pub fn submit(&mut self, now: Ps, w: Write, cost: Ps) -> Option<(Write, Ps)> {
        if self.busy.is_none() {
            return Some(self.start(now, w, cost, now));
        }
        match w {
            Write::Msi(i) => self.msi_q.push_back((i, now)),
            Write::Dma(d) => {
                self.dma_q.push_back((d, cost, now));
                self.dma_backlog += cost;
            }
        }
        None
    }

    fn start(&mut self, now: Ps, w: Write, cost: Ps, queued: Ps) -> (Write, Ps) {
        self.wait.record(now - queued);
        self.busy_time += cost;
        self.busy = Some((w, now + cost));
        if let Some(log) = &mut self.log {
            log.push((now, now + cost));
        }
        (w, now + cost)
    }

    /// The write in service is through; returns it and the next one started (if any).
    #[inline]
    pub fn done(&mut self, now: Ps) -> (Write, Option<(Write, Ps)>) {
        let (w, _) = self.busy.take().expect("a PathDone per write in service");
        // MSIs and DMA writes take turns: an MSI never waits behind more than one DMA write.
        let msi_turn = !matches!(w, Write::Msi(_)) || self.dma_q.is_empty();
        let next = if let Some((i, q)) = if msi_turn { self.msi_q.pop_front() } else { None } {
            Some(self.start(now, Write::Msi(i), self.msi, q))
        } else if let Some((d, cost, q)) = self.dma_q.pop_front() {
            self.dma_backlog -= cost;
            Some(self.start(now, Write::Dma(d), cost, q))
        } else {
            None
        };
        (w, next)
    }

    /// Whether vector `i` has a message queued and not yet started (a new one merges into it).
    pub fn msi_queued(&self, i: u32) -> bool {
        self.msi_q.iter().any(|&(j, _)| j == i)
    }

    pub fn reset(&mut self) {
        self.busy_time = 0;
        self.wait.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Never more than `slots` writes in service at once, FIFO start order,
        /// and no slot idles while a write waits.
        #[test]
        fn capacity_is_never_exceeded(slots in 1u32..5, write in 1u64..50, gaps in proptest::collection::vec(0u64..40, 1..300)) {
            let mut f = Fabric::new(write, slots, 0);
            f.log = Some(vec![]);
            let mut now = 0;
            for g in gaps { now += g; f.submit(now); }
            let log = f.log.unwrap();
            prop_assert!(peak_in_service(&log) <= slots as usize);
            for w in log.windows(2) { prop_assert!(w[0].0 <= w[1].0); }
        }
    }

    #[test]
    fn peak_counts_overlaps_not_touching_ends() {
        assert_eq!(peak_in_service(&[(0, 10), (10, 20), (20, 30)]), 1);
        assert_eq!(peak_in_service(&[(0, 10), (5, 20), (9, 30)]), 3);
        assert_eq!(peak_in_service(&[]), 0);
    }

    #[test]
    fn one_slot_is_a_fifo_server() {
        let mut f = Fabric::new(10, 1, 5);
        assert_eq!(f.submit(0), 15);
        assert_eq!(f.submit(0), 25);
        assert_eq!(f.submit(100), 115);
        assert_eq!(f.busy, 30);
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn msi_goes_ahead_of_queued_dma_and_holds_it_back() {
        let mut p = DmaPath::new(300);
        let first = p.submit(0, Write::Dma(DmaFor { owner: 0, arg: 0 }), 40);
        assert_eq!(first, Some((Write::Dma(DmaFor { owner: 0, arg: 0 }), 40)));
        assert_eq!(p.submit(10, Write::Dma(DmaFor { owner: 0, arg: 1 }), 40), None);
        assert_eq!(p.submit(20, Write::Msi(7), 300), None);
        // At 40 the MSI starts before the DMA that queued earlier (after a DMA write, it is the MSIs' turn).
        assert_eq!(p.done(40), (Write::Dma(DmaFor { owner: 0, arg: 0 }), Some((Write::Msi(7), 340))));
        assert_eq!(p.done(340), (Write::Msi(7), Some((Write::Dma(DmaFor { owner: 0, arg: 1 }), 380))));
        assert_eq!(p.done(380), (Write::Dma(DmaFor { owner: 0, arg: 1 }), None));
        assert_eq!(p.busy_time, 380);
        assert_eq!(p.dma_backlog, 0);
    }
}
