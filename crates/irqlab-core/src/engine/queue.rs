//! The pending-event set. A trait, so that a calendar or ladder queue can replace
//! the binary heap without touching models.

use super::time::Ps;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A priority queue of events ordered by `(time, insertion order)`.
pub trait EventQueue<E> {
    /// Adds `ev` at `at`; `now` is the current simulated time (`at >= now`).
    fn push(&mut self, now: Ps, at: Ps, ev: E);
    /// Removes the earliest event; ties go to the one inserted first.
    fn pop(&mut self) -> Option<(Ps, E)>;
    fn peek_time(&self) -> Option<Ps>;
    /// Pops the earliest event if it is due at or before `until`.
    fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        match self.peek_time() {
            Some(t) if t <= until => self.pop(),
            _ => None,
        }
    }
    /// The event most likely to be popped next, for a prefetch hint; `None`
    /// if the queue cannot tell cheaply. It changes nothing.
    fn peek_event(&mut self) -> Option<&E> {
        None
    }
    /// Calls `f` on events that will be popped soon but not next, for a
    /// prefetch hint a few events ahead of use; each is offered once, and a
    /// queue that cannot tell cheaply offers none. It changes nothing.
    #[inline]
    fn for_soon(&mut self, _f: impl FnMut(&E)) {}
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `key` is `(time << 64) | seq`: one integer compare orders by time, then insertion.
struct Entry<E> {
    key: u128,
    ev: E,
}

impl<E> Entry<E> {
    #[inline]
    fn at(&self) -> Ps {
        time_of(self.key)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.cmp(&self.key)
    }
}

const NO_HELD: u128 = u128::MAX;

/// The time in a key (`(time << 64) | seq`).
#[inline(always)]
fn time_of(key: u128) -> Ps {
    (key >> 64) as Ps
}

/// Binary heap keyed by `(time, seq)` plus a FIFO for events scheduled at the
/// current instant, which are common (a handler that triggers the next step at
/// once) and need no heap work.
///
/// A pop hands out a copy of the top and leaves it in place (`spent_top`):
/// most handlers push an event next (a source its next arrival, a CPU its
/// next phase end), and that push overwrites the spent top and sifts it down
/// once, where a pop and a push would sift twice. The next pop, or a move of
/// the events out, removes a spent top that nothing overwrote (`settle`);
/// `len` and `peek_time` leave it out. Keys are unique, so the pop order is
/// the same either way.
///
/// A push that finds no spent top to overwrite is held out of the heap if it
/// is earlier than the event held so far (which then goes in): a second event
/// a handler schedules is often the next one due (a CPU's phase end, a few
/// hundred ns ahead, beside arrivals µs ahead), and a held event that is the
/// earliest leaves with one comparison, no sift up and no sift down. A pop
/// takes the held event when its key is below the heap top's. On the
/// reference model this is 7 % more interrupts per second; the NVMe and NIC
/// figures, with hundreds of events pending, run at the same speed.
pub struct HeapQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    spent_top: bool,
    /// One event held out of the heap (`NO_HELD` when none): the earliest
    /// of those pushed while no spent top could take them.
    held_key: u128,
    held_ev: Option<E>,
    now_fifo: VecDeque<E>,
    fifo_at: Ps,
    seq: u64,
}

impl<E> Default for HeapQueue<E> {
    fn default() -> Self {
        Self::with_capacity(1024)
    }
}

impl<E> HeapQueue<E> {
    /// A queue with room for `n` events before the heap reallocates.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(n),
            spent_top: false,
            held_key: NO_HELD,
            held_ev: None,
            now_fifo: VecDeque::with_capacity(64),
            fifo_at: 0,
            seq: 0,
        }
    }

    /// Removes a top that was handed out and not overwritten. A held event
    /// takes its place: it is usually the next due, so its sift down stops
    /// at once, where a pop sifts the heap's last leaf from the top through
    /// every level (on the NVMe figure, ~1,200 pending, this is 1.6 % of its
    /// instructions). Keys are unique: the order out is the same either way.
    #[inline(always)]
    fn settle(&mut self) {
        if self.spent_top {
            self.spent_top = false;
            if let Some(ev) = self.held_ev.take() {
                let key = std::mem::replace(&mut self.held_key, NO_HELD);
                // Dropping the guard sifts the held entry down from the top.
                *self.heap.peek_mut().expect("a spent top is in the heap") = Entry { key, ev };
            } else {
                self.heap.pop();
            }
        }
    }

    /// Empties the queue into a vector in pop order. (Without `pop`: another
    /// caller of `BinaryHeap::pop` keeps LLVM from inlining it in the run loop.)
    pub(crate) fn drain_in_order(&mut self) -> Vec<(Ps, E)> {
        self.settle();
        if let Some(ev) = self.held_ev.take() {
            self.heap.push(Entry { key: std::mem::replace(&mut self.held_key, NO_HELD), ev });
        }
        // Ord is reversed (earliest is greatest), so the ascending sort is latest first.
        let mut out: Vec<(Ps, E)> = std::mem::take(&mut self.heap).into_sorted_vec().into_iter().rev().map(|e| (e.at(), e.ev)).collect();
        let at = self.fifo_at;
        out.extend(self.now_fifo.drain(..).map(|e| (at, e)));
        out
    }

    /// Adds `ev` at `at` behind every event already at `at`, whatever the
    /// current instant: for moving events in from another queue in their order.
    pub(crate) fn push_keyed(&mut self, at: Ps, ev: E) {
        debug_assert!(self.now_fifo.is_empty(), "push_keyed is for an emptied queue");
        self.settle();
        self.seq += 1;
        self.heap.push(Entry { key: ((at as u128) << 64) | self.seq as u128, ev });
    }
}

impl<E: Copy> HeapQueue<E> {
    /// Hands out the top, leaving it in place for the next push to overwrite.
    #[inline(always)]
    fn take_top(&mut self) -> Option<(Ps, E)> {
        let top = self.heap.peek()?;
        let out = (top.at(), top.ev);
        self.spent_top = true;
        Some(out)
    }
}

impl<E: Copy> EventQueue<E> for HeapQueue<E> {
    #[inline(always)]
    fn push(&mut self, now: Ps, at: Ps, ev: E) {
        if at == now && (self.now_fifo.is_empty() || self.fifo_at == now) {
            self.fifo_at = now;
            self.now_fifo.push_back(ev);
        } else {
            self.seq += 1;
            let e = Entry { key: ((at as u128) << 64) | self.seq as u128, ev };
            if self.spent_top {
                self.spent_top = false;
                // Dropping the guard sifts the new entry down from the top.
                *self.heap.peek_mut().expect("a spent top is in the heap") = e;
            } else if e.key < self.held_key {
                // The earlier of the two stays held: it may be the next out.
                if let Some(ev) = self.held_ev.replace(e.ev) {
                    self.heap.push(Entry { key: self.held_key, ev });
                }
                self.held_key = e.key;
            } else {
                self.heap.push(e);
            }
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<(Ps, E)> {
        self.pop_until(Ps::MAX)
    }

    #[inline]
    fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        self.settle();
        let top = self.heap.peek().map_or(NO_HELD, |t| t.key);
        let key = top.min(self.held_key);
        // Keyed entries at the FIFO's instant were pushed before it filled (while
        // time was still earlier), so they keep their place ahead of it.
        if !self.now_fifo.is_empty() && (key == NO_HELD || time_of(key) > self.fifo_at) {
            if self.fifo_at <= until {
                return self.now_fifo.pop_front().map(|e| (self.fifo_at, e));
            }
            return None;
        }
        if key == NO_HELD || time_of(key) > until {
            return None;
        }
        if key < top {
            self.held_key = NO_HELD;
            return self.held_ev.take().map(|e| (time_of(key), e));
        }
        self.take_top()
    }

    fn peek_time(&self) -> Option<Ps> {
        // Under a spent top, the earliest of the rest (a scan: only tests ask).
        let h = match self.spent_top {
            false => self.heap.peek().map(|e| e.at()),
            true => self.heap.iter().filter(|e| !std::ptr::eq(*e, self.heap.peek().unwrap())).map(|e| e.at()).min(),
        };
        let h = match (h, self.held_ev.is_some()) {
            (Some(h), true) => Some(h.min(time_of(self.held_key))),
            (None, true) => Some(time_of(self.held_key)),
            (h, false) => h,
        };
        match (h, self.now_fifo.is_empty()) {
            (Some(h), false) => Some(h.min(self.fifo_at)),
            (None, false) => Some(self.fifo_at),
            (h, true) => h,
        }
    }

    fn len(&self) -> usize {
        self.heap.len() - self.spent_top as usize + self.now_fifo.len() + self.held_ev.is_some() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Popping returns events sorted by time, and equal times in insertion order,
        /// whatever mix of "now" and future pushes made them.
        #[test]
        fn pops_in_time_then_insertion_order(ops in proptest::collection::vec((0u64..5, 0u8..3), 1..400)) {
            let mut q = HeapQueue::default();
            let mut now = 0;
            let mut id = 0u64;
            let mut model: Vec<(Ps, u64)> = Vec::new(); // (time, id) of what is pending
            let mut popped = Vec::new();
            for (dt, op) in ops {
                if op < 2 {
                    let at = now + dt;
                    q.push(now, at, id);
                    model.push((at, id));
                    id += 1;
                } else if let Some((t, e)) = q.pop() {
                    prop_assert!(t >= now, "time went backwards");
                    now = t;
                    // The reference: the earliest time, and among those the lowest id.
                    let best = *model.iter().min().unwrap();
                    prop_assert_eq!((t, e), best);
                    model.retain(|x| *x != best);
                    popped.push(t);
                }
            }
            prop_assert_eq!(q.len(), model.len());
        }
    }
}
