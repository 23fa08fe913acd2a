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
            let mut points: Vec<(Ps, i32)> = log.iter().flat_map(|&(s, d)| [(s, 1), (d, -1)]).collect();
            points.sort_by_key(|&(t, d)| (t, d)); // ends before starts at the same instant
            let mut n = 0;
            for (_, d) in points { n += d; prop_assert!(n <= slots as i32); }
            for w in log.windows(2) { prop_assert!(w[0].0 <= w[1].0); }
        }
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
