//! The scheduler's pending-event set: the binary heap while few events are
//! pending, the radix heap when many are.
//!
//! Measured on this 2-core machine with the binary heap's spent-top pops
//! (`queue.rs`): on the NVMe figure and examples, whose 500 to 2,000 pending
//! events are mostly near-term, the heap is 7 to 15 % faster than the radix
//! heap; on `bench::scale_scenario`, whose pending arrivals are all tens of
//! µs ahead, the radix heap is 9 % ahead at 1,024 pending and 15 % at 2,048;
//! in the hold bench (`cargo bench -p irqlab-core --
//! hold`) it is about 15 times the binary heap at 10^6 (where an overwritten
//! top's full sift down makes the heap slower than without spent tops; the set
//! never holds that many in the heap). So the set starts as a heap
//! and moves its events to the radix heap past `GROW` pending, and back under
//! `SHRINK`; the gap between the two keeps a count that hovers from moving
//! them back and forth. Both hand events out in the same `(time, insertion)`
//! order, and a move pops them in that order into the other, so no result
//! depends on which one holds them.

use super::queue::{EventQueue, HeapQueue};
use super::radix::RadixQueue;
use super::time::Ps;

/// Pending events past which the radix heap takes over.
const GROW: usize = 2048;
/// Pending events under which the binary heap takes back.
const SHRINK: usize = 1024;

pub struct EventSet<E> {
    heap: HeapQueue<E>,
    radix: RadixQueue<E>,
    large: bool,
    grow: usize,
    shrink: usize,
}

impl<E> Default for EventSet<E> {
    fn default() -> Self {
        Self::with_thresholds(GROW, SHRINK)
    }
}

impl<E> EventSet<E> {
    /// A set that moves to the radix heap past `grow` pending and back under
    /// `shrink` (tests use small ones to move often).
    pub fn with_thresholds(grow: usize, shrink: usize) -> Self {
        assert!(shrink < grow, "EventSet: shrink {shrink} must be below grow {grow}");
        Self { heap: HeapQueue::with_capacity(grow + 1), radix: RadixQueue::default(), large: false, grow, shrink }
    }
}

impl<E: Copy> EventSet<E> {
    /// Whether the radix heap holds the events (for tests).
    pub fn is_radix(&self) -> bool {
        self.large
    }

    // The radix side is kept out of line: inlined, it makes the scheduler's
    // loop too large for LLVM to inline the binary heap's pop, which cost the
    // small queues 20 % (measured on the reference model). With many events
    // pending, a call is nothing beside the cache misses.
    #[inline(never)]
    fn push_radix(&mut self, now: Ps, at: Ps, ev: E) {
        self.radix.push(now, at, ev);
    }

    #[inline(never)]
    fn pop_radix(&mut self, until: Ps) -> Option<(Ps, E)> {
        let e = self.radix.pop_until(until);
        if self.radix.len() < self.shrink {
            self.move_to_heap();
        }
        e
    }

    #[inline(never)]
    fn peek_radix(&mut self) -> Option<&E> {
        self.radix.peek_event()
    }

    #[cold]
    fn move_to_radix(&mut self, now: Ps) {
        self.radix.reset(now);
        for (at, ev) in self.heap.drain_in_order() {
            self.radix.push(now, at, ev);
        }
        self.large = true;
    }

    #[cold]
    fn move_to_heap(&mut self) {
        while let Some((at, ev)) = self.radix.pop() {
            self.heap.push_keyed(at, ev);
        }
        self.large = false;
    }
}

impl<E: Copy> EventQueue<E> for EventSet<E> {
    #[inline(always)]
    fn push(&mut self, now: Ps, at: Ps, ev: E) {
        if self.large {
            self.push_radix(now, at, ev);
        } else {
            self.heap.push(now, at, ev);
            if self.heap.len() > self.grow {
                self.move_to_radix(now);
            }
        }
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<(Ps, E)> {
        self.pop_until(Ps::MAX)
    }

    #[inline(always)]
    fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        if !self.large {
            return self.heap.pop_until(until);
        }
        self.pop_radix(until)
    }

    #[inline]
    fn peek_event(&mut self) -> Option<&E> {
        if self.large {
            self.peek_radix()
        } else {
            self.heap.peek_event()
        }
    }

    #[inline]
    fn for_soon(&mut self, f: impl FnMut(&E)) {
        if self.large {
            self.radix.for_soon(f);
        }
    }

    fn peek_time(&self) -> Option<Ps> {
        if self.large {
            self.radix.peek_time()
        } else {
            self.heap.peek_time()
        }
    }

    fn len(&self) -> usize {
        if self.large {
            self.radix.len()
        } else {
            self.heap.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs `ops` (a push `dt` ahead of the clock, or a pop) on an event set
    /// that moves past `grow` pending and back under `shrink`, and on one
    /// binary heap: both hand out the same events, and hold as many.
    fn matches_one_heap(grow: usize, shrink: usize, ops: &[(u8, u64)]) -> Result<(), TestCaseError> {
        let mut set = EventSet::with_thresholds(grow, shrink);
        let mut heap = HeapQueue::default();
        let (mut now, mut id) = (0, 0u32);
        for &(op, dt) in ops {
            if op < 2 {
                set.push(now, now + dt, id);
                heap.push(now, now + dt, id);
                id += 1;
            } else {
                let a = set.pop();
                prop_assert_eq!(a, heap.pop());
                if let Some((t, _)) = a {
                    now = t;
                }
            }
            prop_assert_eq!(set.len(), heap.len());
        }
        while let Some(a) = set.pop() {
            prop_assert_eq!(Some(a), heap.pop());
        }
        prop_assert!(heap.pop().is_none());
        Ok(())
    }

    proptest! {
        /// Through every move between the two (the pending count swings across
        /// both thresholds), the set hands out what one binary heap does.
        /// (How often it moves varies with the case; `moves_both_ways` pins that it does.)
        #[test]
        fn same_order_as_one_binary_heap(ops in proptest::collection::vec((0u8..4, 0u64..1_000_000), 1..600)) {
            let ops: Vec<(u8, u64)> = ops.into_iter().map(|(op, x)| (op, if op == 0 { x % 4 } else { x })).collect();
            matches_one_heap(24, 6, &ops)?;
        }

        /// Many events at equal times while the set moves between heap and
        /// radix heap: ties keep their insertion order. The shrink threshold is
        /// close to the grow one, so that several tied events move at once.
        /// (Mutation testing: `push_keyed`'s `seq -= 1` went unnoticed.)
        #[test]
        fn ties_keep_insertion_order_across_moves(ops in proptest::collection::vec((0u8..3, 0u64..3), 1..400)) {
            matches_one_heap(12, 10, &ops)?;
        }
    }

    /// A pop leaves a spent top in the heap; pushes at the current instant
    /// (to the FIFO, not over the top) then cross the threshold, and the move
    /// to the radix heap must leave the spent event behind.
    #[test]
    fn a_spent_top_is_not_moved_to_the_radix_heap() {
        let mut set = EventSet::with_thresholds(5, 2);
        for i in 0..4u32 {
            set.push(0, 10 + i as u64, i);
        }
        assert_eq!(set.pop(), Some((10, 0)));
        set.push(10, 10, 100);
        assert!(!set.is_radix());
        set.push(10, 10, 102); // five pending, six if the spent top counted
        assert!(!set.is_radix(), "the spent top must not count");
        set.push(10, 10, 104);
        assert!(set.is_radix());
        assert_eq!(set.len(), 6);
        let order: Vec<(Ps, u32)> = std::iter::from_fn(|| set.pop()).collect();
        assert_eq!(order, vec![(10, 100), (10, 102), (10, 104), (11, 1), (12, 2), (13, 3)]);
    }

    #[test]
    fn a_growing_then_draining_queue_moves_both_ways() {
        let mut set = EventSet::default();
        for i in 0..5000u32 {
            set.push(0, 1 + (i as u64 * 7919) % 10_000, i);
        }
        assert!(set.is_radix());
        let mut last = 0;
        while let Some((t, _)) = set.pop() {
            assert!(t >= last);
            last = t;
        }
        assert!(!set.is_radix());
    }
}
