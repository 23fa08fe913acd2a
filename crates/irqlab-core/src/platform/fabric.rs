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

    /// Slot time spent on writes up to `now`: `busy` counts a write whole when
    /// it is submitted, so the work still queued past `now` (each slot's chain
    /// runs unbroken from `now` to its `free_at`) comes off. Over the window this
    /// never passes `slots` × its length, however long the queue has grown.
    pub fn busy_until(&self, now: Ps) -> Ps {
        let ahead: Ps = self.free_at.iter().map(|&f| f.saturating_sub(now)).sum();
        self.busy.saturating_sub(ahead)
    }

    /// Work queued ahead of a write submitted now, in ps (for the trace counter).
    pub fn backlog(&self, now: Ps) -> Ps {
        self.free_at.iter().map(|&f| f.saturating_sub(now)).min().unwrap_or(0)
    }

    /// Starts the measured window at `now`: the work already queued past `now`
    /// is served in it, so it counts (and `busy_until` takes off what is left at the end).
    pub fn reset(&mut self, now: Ps) {
        self.busy = self.free_at.iter().map(|&f| f.saturating_sub(now)).sum();
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

/// One device link's side of the path: PCIe ordering makes it a FIFO, unless
/// the device sets Relaxed Ordering on its data (`relaxed`).
#[derive(Default)]
struct Link {
    /// Writes waiting, with their cost and arrival.
    waiting: VecDeque<(Write, Ps, Ps)>,
    /// The device's data writes carry the Relaxed Ordering attribute: one may
    /// pass the link's earlier MSIs (a posted write with RO set may pass an
    /// earlier posted write), while an MSI still may not pass the data before it.
    relaxed: bool,
    /// Writes submitted and writes through, and the reads waiting for the
    /// writes ahead of them (how many must be through, and the reader).
    pushed: u64,
    through: u64,
    flushes: VecDeque<(u64, u32)>,
}

/// The posted-write path of a socket's root complex, for devices that DMA:
/// one write at a time into memory, each device's link in order, the links
/// served round-robin. PCIe ordering makes each link a FIFO (a posted write
/// may not pass an earlier one: an MSI waits behind the data its device sent
/// before it, and the device's later writes wait behind the MSI). An MSI holds
/// the path for `msi_write` — interrupt remapping, during which no posted write
/// goes on — a DMA write for its cost. So beyond the platform's MSI limit DMA
/// slows down while the interrupt rate stays high (the collapse of the M5
/// brief), and an MSI waits longer the more its own link and the others hold.
/// Event-driven: the machine gets `Ev::PathDone` when the write in service is through.
/// A device that sets Relaxed Ordering on its data (`relax`) lets its queued
/// data pass an MSI waiting at the head of its link (off by default:
/// docs/m5-global-interrupt-moderation.md, "Relaxed ordering").
///
/// A CPU's read of a device register (`readl` after an MSI-X mask write) is
/// answered by a completion that PCIe ordering keeps behind the posted writes
/// the device's link sent before it (a completion may not pass a posted
/// request: PCIe Base Specification, "Transaction Ordering", rule D2a), so the
/// path also tells a reader when the writes ahead of its completion are through
/// (`flush`).
pub struct DmaPath {
    pub msi: Ps,
    /// The write in service, its end, and its link.
    pub busy: Option<(Write, Ps, u32)>,
    /// Per link (global link ids; only this socket's are used).
    links: Vec<Link>,
    /// Links with writes waiting, in round-robin order.
    ready: VecDeque<u32>,
    /// The cost of the writes waiting (not the one in service), for `backlog`.
    queued: Ps,
    /// Readers whose writes ahead are through, for the machine to resume (`take_flushed`).
    flushed: Vec<u32>,
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
            links: Vec::new(),
            ready: VecDeque::new(),
            queued: 0,
            flushed: Vec::new(),
            busy_time: 0,
            wait: Latency::default(),
            log: None,
        }
    }

    /// Queues a write from `link`; returns the write to start now (and its end) if the path was idle.
    #[inline]
    pub fn submit(&mut self, now: Ps, link: u32, w: Write, cost: Ps) -> Option<(Write, Ps)> {
        let l = link as usize;
        self.grow(l);
        self.links[l].pushed += 1;
        if self.busy.is_none() {
            return Some(self.start(now, link, w, cost, now));
        }
        let k = &mut self.links[l];
        if k.waiting.is_empty() {
            self.ready.push_back(link);
        }
        k.waiting.push_back((w, cost, now));
        self.queued += cost;
        None
    }

    /// The device on `link` sets Relaxed Ordering on its data writes.
    pub fn relax(&mut self, link: u32) {
        self.grow(link as usize);
        self.links[link as usize].relaxed = true;
    }

    /// Makes room for link `l` (links are numbered as they are added).
    #[inline(always)]
    fn grow(&mut self, l: usize) {
        if l >= self.links.len() {
            self.grow_to(l);
        }
    }

    #[cold]
    fn grow_to(&mut self, l: usize) {
        self.links.resize_with(l + 1, Link::default);
    }

    /// A read's completion on `link` for `reader`: returns true if no write the
    /// link sent before it is still waiting or in service; otherwise the reader
    /// is listed in `take_flushed` once the last of them is through.
    pub fn flush(&mut self, link: u32, reader: u32) -> bool {
        let l = link as usize;
        self.grow(l);
        let k = &mut self.links[l];
        if k.through == k.pushed {
            return true;
        }
        k.flushes.push_back((k.pushed, reader));
        false
    }

    /// Whether a reader's writes ahead came through since the last `take_flushed`.
    #[inline]
    pub fn has_flushed(&self) -> bool {
        !self.flushed.is_empty()
    }

    /// The readers whose writes ahead came through since the last call.
    pub fn take_flushed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.flushed)
    }

    /// The path's work queued, all links together, in ps (for the trace's
    /// backlog counter). Not a new write's wait: the links are served in turn,
    /// so one waits about a write per link with writes queued.
    pub fn backlog(&self, now: Ps) -> Ps {
        self.queued + self.busy.map_or(0, |(_, end, _)| end.saturating_sub(now))
    }

    fn start(&mut self, now: Ps, link: u32, w: Write, cost: Ps, queued: Ps) -> (Write, Ps) {
        self.wait.record(now - queued);
        self.busy_time += cost;
        self.busy = Some((w, now + cost, link));
        if let Some(log) = &mut self.log {
            log.push((now, now + cost));
        }
        (w, now + cost)
    }

    /// The write in service is through; returns it and the next one started (if any).
    #[inline]
    pub fn done(&mut self, now: Ps) -> (Write, Option<(Write, Ps)>) {
        let (w, _, from) = self.busy.take().expect("a PathDone per write in service");
        let f = &mut self.links[from as usize];
        f.through += 1;
        while f.flushes.front().is_some_and(|&(ahead, _)| ahead <= f.through) {
            let (_, reader) = f.flushes.pop_front().expect("a front");
            self.flushed.push(reader);
        }
        let next = self.ready.pop_front().map(|link| {
            let k = &mut self.links[link as usize];
            // With Relaxed Ordering the link's first data write goes ahead of
            // the MSIs queued before it; data never waits behind an MSI then.
            let first_data = match k.waiting.front() {
                Some((Write::Msi(_), _, _)) if k.relaxed => k.waiting.iter().position(|(w, _, _)| matches!(w, Write::Dma(_))),
                _ => None,
            };
            let (nw, cost, queued) = match first_data {
                Some(i) => k.waiting.remove(i),
                None => k.waiting.pop_front(),
            }
            .expect("a ready link has a write");
            self.queued -= cost;
            if !k.waiting.is_empty() {
                self.ready.push_back(link);
            }
            self.start(now, link, nw, cost, queued)
        });
        (w, next)
    }

    /// Time spent on writes up to `now` (`busy_time` counts a write whole when it starts).
    pub fn busy_until(&self, now: Ps) -> Ps {
        let ahead = self.busy.map_or(0, |(_, end, _)| end.saturating_sub(now));
        self.busy_time.saturating_sub(ahead)
    }

    /// Whether vector `i`'s message is the last write queued on `link`, not
    /// yet started: a new one merges into it. Not if writes were queued behind
    /// it: a message for them must follow them, or it could reach the CPU
    /// before the entries it is for (a review; no device signals so today).
    pub fn msi_queued(&self, link: u32, i: u32) -> bool {
        self.links.get(link as usize).is_some_and(|k| matches!(k.waiting.back(), Some((Write::Msi(v), _, _)) if *v == i))
    }

    /// Starts the measured window at `now`: what is left of the write in service counts.
    pub fn reset(&mut self, now: Ps) {
        self.busy_time = self.busy.map_or(0, |(_, end, _)| end.saturating_sub(now));
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

        /// The busy time a window reports is exactly the time the writes spent in
        /// the fabric within it, however far the queue runs past its end (it
        /// counted each write whole when submitted: a utilisation of 1.28 on an
        /// overloaded fabric, a review found).
        #[test]
        fn busy_time_is_what_the_window_saw(slots in 1u32..4, write in 1u64..50, gaps in proptest::collection::vec(0u64..30, 2..300), cut in 0.0f64..1.0) {
            let mut f = Fabric::new(write, slots, 0);
            f.log = Some(vec![]);
            let times: Vec<Ps> = gaps.iter().scan(0, |t, g| { *t += g; Some(*t) }).collect();
            let (a, b) = ((*times.last().unwrap() as f64 * cut) as Ps, *times.last().unwrap());
            let mut reset = false;
            for &t in &times {
                if !reset && t >= a { f.reset(a); reset = true; }
                f.submit(t);
            }
            let seen: Ps = f.log.as_ref().unwrap().iter().map(|&(s, e)| e.min(b).saturating_sub(s.max(a))).sum();
            prop_assert_eq!(f.busy_until(b), seen);
            prop_assert!(f.busy_until(b) <= slots as Ps * (b - a));
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
    /// What the report and the trace read of a fabric: its shape, whether a
    /// write costs anything (with no cost a write only takes the latency), the
    /// work ahead of a write (the soonest-free slot's), and each write's wait.
    /// (Mutation testing: these, and every slot after the first being used,
    /// went unchecked.)
    #[test]
    fn shape_backlog_and_waits_of_a_two_slot_fabric() {
        let mut free = Fabric::new(0, 4, 50);
        assert!(!free.has_cost());
        assert_eq!(free.submit(100), 150);
        let mut f = Fabric::new(1000, 2, 50);
        assert_eq!((f.slots(), f.latency(), f.has_cost()), (2, 50, true));
        assert_eq!(f.backlog(0), 0);
        assert_eq!(f.submit(0), 1050);
        assert_eq!(f.backlog(400), 0, "a slot is free");
        assert_eq!(f.submit(400), 1450, "on the second slot, at once");
        assert_eq!(f.backlog(600), 400, "both busy: the first frees at 1000");
        assert_eq!(f.submit(600), 2050);
        assert_eq!(f.submit(700), 2450);
        let w = f.wait.summary();
        assert_eq!((w.count, w.max), (4, 0.7), "the last write waited 700 ps");
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    const A: DmaFor = DmaFor { owner: 0, arg: 0 };
    const B: DmaFor = DmaFor { owner: 0, arg: 1 };

    #[test]
    fn an_msi_waits_behind_its_own_links_data_and_holds_what_follows() {
        let mut p = DmaPath::new(300);
        assert_eq!(p.submit(0, 0, Write::Dma(A), 40), Some((Write::Dma(A), 40)));
        assert_eq!(p.submit(10, 0, Write::Dma(B), 40), None);
        assert_eq!(p.submit(20, 0, Write::Msi(7), 300), None);
        assert_eq!(p.submit(30, 0, Write::Dma(A), 40), None);
        // In link order: the data before the MSI, the MSI, then the data after it.
        assert_eq!(p.done(40), (Write::Dma(A), Some((Write::Dma(B), 80))));
        assert_eq!(p.done(80), (Write::Dma(B), Some((Write::Msi(7), 380))));
        assert_eq!(p.done(380), (Write::Msi(7), Some((Write::Dma(A), 420))));
        assert_eq!(p.done(420), (Write::Dma(A), None));
        assert_eq!(p.busy_time, 420);
    }

    /// A device's new message for a vector merges into one of its link's that
    /// has not started only if nothing was queued behind that one.
    #[test]
    fn a_message_merges_only_into_one_last_on_its_link() {
        let mut p = DmaPath::new(300);
        p.submit(0, 0, Write::Dma(A), 40);
        p.submit(10, 0, Write::Msi(7), 300);
        assert!(p.msi_queued(0, 7) && !p.msi_queued(0, 8) && !p.msi_queued(1, 7));
        p.submit(20, 0, Write::Dma(B), 40);
        assert!(!p.msi_queued(0, 7), "a message behind B's data must follow it");
        p.submit(30, 0, Write::Msi(7), 300);
        assert!(p.msi_queued(0, 7));
        assert_eq!(p.done(40), (Write::Dma(A), Some((Write::Msi(7), 340))));
        assert!(p.msi_queued(0, 7), "the second is still last");
    }

    #[test]
    fn links_take_turns() {
        let mut p = DmaPath::new(300);
        p.submit(0, 0, Write::Dma(A), 40);
        p.submit(1, 0, Write::Dma(A), 40);
        p.submit(2, 0, Write::Dma(A), 40);
        p.submit(3, 1, Write::Msi(9), 300);
        assert!(p.msi_queued(1, 9) && !p.msi_queued(0, 9));
        // Link 0 queued first, then link 1, then link 0 again.
        assert_eq!(p.done(40).1, Some((Write::Dma(A), 80)));
        assert_eq!(p.done(80).1, Some((Write::Msi(9), 380)));
        assert_eq!(p.done(380).1, Some((Write::Dma(A), 420)));
        assert_eq!(p.done(420).1, None);
    }

    /// With Relaxed Ordering on its link, a device's data goes ahead of its MSI
    /// waiting at the head; the MSI still follows the data sent before it.
    #[test]
    fn relaxed_data_passes_its_links_waiting_msi() {
        let mut p = DmaPath::new(300);
        p.relax(0);
        assert_eq!(p.submit(0, 0, Write::Dma(A), 40), Some((Write::Dma(A), 40)));
        p.submit(10, 0, Write::Dma(B), 40);
        p.submit(20, 0, Write::Msi(7), 300);
        p.submit(30, 0, Write::Dma(A), 40);
        p.submit(31, 1, Write::Dma(B), 40); // link 1 keeps strict order, and its turn
                                            // B was sent before the MSI, so it goes first either way; then link 1's
                                            // turn; then link 0's data sent after the MSI passes it.
        assert_eq!(p.done(40).1, Some((Write::Dma(B), 80)));
        assert_eq!(p.done(80).1, Some((Write::Dma(B), 120)));
        assert_eq!(p.done(120).1, Some((Write::Dma(A), 160)));
        assert_eq!(p.done(160).1, Some((Write::Msi(7), 460)));
        assert_eq!(p.done(460), (Write::Msi(7), None));
        // A strict link keeps the order it was sent in.
        let mut q = DmaPath::new(300);
        q.submit(0, 0, Write::Dma(A), 40);
        q.submit(20, 0, Write::Msi(7), 300);
        q.submit(30, 0, Write::Dma(B), 40);
        assert_eq!(q.done(40).1, Some((Write::Msi(7), 340)));
    }

    use proptest::prelude::*;

    proptest! {
        /// Whatever the links send and whichever are relaxed: every write goes
        /// through once; an MSI never goes before any write its link sent ahead
        /// of it; a strict link keeps its order whole.
        #[test]
        fn relaxed_links_never_let_an_msi_pass_data(
            writes in proptest::collection::vec((0u32..3, proptest::bool::ANY, 0u64..60), 1..120),
            relaxed in proptest::collection::vec(proptest::bool::ANY, 3),
        ) {
            let mut p = DmaPath::new(300);
            for (l, &r) in relaxed.iter().enumerate() {
                if r { p.relax(l as u32); }
            }
            let mut sent: Vec<Vec<u32>> = vec![vec![]; 3]; // per link, ids in send order
            let mut is_msi = vec![];
            let mut served = vec![];
            let mut ends = std::collections::BTreeMap::new();
            let mut now = 0;
            for (id, &(link, msi, gap)) in writes.iter().enumerate() {
                now += gap;
                while let Some((&t, _)) = ends.iter().next() {
                    if t > now { break; }
                    ends.remove(&t);
                    let (w, next) = p.done(t);
                    served.push(w);
                    if let Some((_, e)) = next { ends.insert(e, ()); }
                }
                let id = id as u32;
                let w = if msi { Write::Msi(id) } else { Write::Dma(DmaFor { owner: 0, arg: id }) };
                sent[link as usize].push(id);
                is_msi.push(msi);
                if let Some((_, e)) = p.submit(now, link, w, if msi { 300 } else { 40 }) { ends.insert(e, ()); }
            }
            while let Some((&t, _)) = ends.iter().next() {
                ends.remove(&t);
                let (w, next) = p.done(t);
                served.push(w);
                if let Some((_, e)) = next { ends.insert(e, ()); }
            }
            let order: Vec<u32> = served.iter().map(|w| match w { Write::Msi(i) => *i, Write::Dma(d) => d.arg }).collect();
            prop_assert_eq!(order.len(), writes.len());
            let pos: std::collections::HashMap<u32, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
            prop_assert_eq!(pos.len(), writes.len(), "each write once");
            for (l, ids) in sent.iter().enumerate() {
                for (a, &x) in ids.iter().enumerate() {
                    for &y in &ids[a + 1..] {
                        // x was sent before y on link l: only data may pass, and only on a relaxed link.
                        if !relaxed[l] || is_msi[y as usize] {
                            prop_assert!(pos[&x] < pos[&y], "link {} (relaxed {}): {} sent before {} went after it", l, relaxed[l], x, y);
                        }
                    }
                }
            }
        }
    }

    /// A read's completion waits for the writes its own link sent before it,
    /// not for later ones nor for other links' (PCIe ordering is per link).
    #[test]
    fn a_reads_completion_waits_for_its_own_links_earlier_writes() {
        let mut p = DmaPath::new(300);
        assert!(p.flush(0, 5), "nothing on the path: answered at once");
        p.submit(0, 0, Write::Dma(A), 40); // in service
        p.submit(1, 1, Write::Msi(9), 300);
        p.submit(2, 0, Write::Msi(7), 300);
        assert!(!p.flush(1, 6) && !p.flush(0, 5) && p.flush(2, 4));
        p.submit(3, 0, Write::Dma(B), 40); // after the read: not ahead of it
        assert_eq!(p.done(40).0, Write::Dma(A));
        assert!(!p.has_flushed(), "link 0 still has its MSI ahead of the read");
        assert_eq!(p.done(340).0, Write::Msi(9));
        assert_eq!(p.take_flushed(), vec![6]);
        assert_eq!(p.done(640).0, Write::Msi(7));
        assert_eq!(p.take_flushed(), vec![5], "through before link 0's later write");
        assert_eq!(p.done(680), (Write::Dma(B), None));
        assert!(!p.has_flushed());
    }

    /// With auditing on, the path logs each write's (start, end), one at a
    /// time, which the audit's `path_peak` reads. (Mutation testing: a logged
    /// end of start - cost or start x cost went unnoticed by the unit tests.)
    #[test]
    fn the_audit_log_has_each_writes_start_and_end() {
        let mut p = DmaPath::new(300);
        p.log = Some(vec![]);
        p.submit(10, 0, Write::Dma(A), 40);
        p.submit(20, 1, Write::Msi(9), 300);
        p.done(50);
        p.done(350);
        let log = p.log.take().expect("logging");
        assert_eq!(log, vec![(10, 50), (50, 350)]);
        assert_eq!(peak_in_service(&log), 1);
    }

    /// `has_flushed` is what the machine asks before it resumes the readers
    /// (`path_done`): true once a write a read waited for is through, until
    /// `take_flushed` hands them over. (Mutation testing: it always false, no
    /// unit test noticed; no mask's `readl` would then ever complete.)
    #[test]
    fn has_flushed_is_true_from_the_last_write_ahead_until_taken() {
        let mut p = DmaPath::new(300);
        p.submit(0, 0, Write::Dma(A), 40);
        assert!(!p.flush(0, 5));
        assert!(!p.has_flushed());
        assert_eq!(p.done(40), (Write::Dma(A), None));
        assert!(p.has_flushed());
        assert_eq!(p.take_flushed(), vec![5]);
        assert!(!p.has_flushed());
    }

    /// The write in service counts for the part of it inside the window.
    #[test]
    fn a_write_across_the_windows_edges_counts_for_what_is_inside() {
        let mut p = DmaPath::new(300);
        p.submit(0, 0, Write::Msi(1), 300);
        p.reset(100); // 200 of it left inside
        assert_eq!(p.done(300), (Write::Msi(1), None));
        p.submit(350, 0, Write::Dma(A), 100);
        assert_eq!(p.busy_until(400), 200 + 50);
    }

    /// The trace's backlog: what is left of the write in service and every
    /// write queued behind it, all links together; and each write's wait.
    #[test]
    fn backlog_is_the_rest_of_the_write_in_service_and_all_queued() {
        let mut p = DmaPath::new(300);
        assert_eq!(p.backlog(0), 0);
        p.submit(0, 0, Write::Dma(A), 40);
        p.submit(10, 1, Write::Msi(9), 300);
        p.submit(20, 0, Write::Dma(B), 40);
        assert_eq!(p.backlog(30), 10 + 300 + 40);
        assert_eq!(p.done(40).1, Some((Write::Msi(9), 340)));
        assert_eq!(p.backlog(100), 240 + 40);
        assert_eq!(p.done(340).1, Some((Write::Dma(B), 380)));
        assert_eq!(p.done(380).1, None);
        assert_eq!(p.backlog(380), 0);
        let w = p.wait.summary();
        assert_eq!((w.count, w.max), (3, 0.32), "B waited from 20 to 340");
    }
}
