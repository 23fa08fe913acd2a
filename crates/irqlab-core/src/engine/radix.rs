//! A radix heap over event times: the pending-event set whose cost per event
//! stays flat as the pending events grow.
//!
//! Why it works here: a discrete-event run is monotone, every time pushed is at
//! or after the last time popped. A radix heap keeps events in buckets by the
//! highest bit where their time differs from the last popped time (`last`);
//! pushing is an append to a bucket, and when the earliest bucket (bucket 0,
//! time `last` itself) is empty, popping finds the minimum of the lowest
//! non-empty bucket, makes it `last` and spreads that bucket into lower ones.
//! Each event moves down at most once per bit of its time, and in practice a
//! few times; every access is an append to or a scan of a contiguous vector,
//! so a million pending events stay cache friendly where a binary heap's sift
//! walks 20 levels of cache misses. (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster
//! algorithms for the shortest path problem", J. ACM 37(2), 1990.)
//!
//! Same-time events leave in insertion order without a sequence number:
//! events with equal times always share a bucket (an event's bucket relative
//! to `last` does not change until its bucket is spread), each bucket is
//! appended to in push order, and spreading keeps the order. Bucket 0 is then
//! a FIFO of the events at `last`. The order is the binary heap's
//! `(time, insertion)` exactly, which the property test checks.

use super::queue::EventQueue;
use super::time::Ps;

/// Bucket `b` (1 ..= 64) holds times whose highest bit differing from `last`
/// is bit `b - 1`; bucket 0 the times equal to `last`.
const BUCKETS: usize = 65;

pub struct RadixQueue<E> {
    buckets: Vec<Vec<(Ps, E)>>,
    /// Bucket 0 is popped from the front: its next index.
    head: usize,
    /// Bit `b` set when bucket `b` (1 ..= 64) is non-empty (bucket 0 is `head < len`).
    nonempty: u128,
    /// The time last popped (bucket 0's time); every time pushed is at or after it.
    last: Ps,
    /// The smallest time in the lowest non-empty bucket and where it is, while
    /// known: the prefetch hint and `pop_until` both ask, pushes keep it.
    min: Option<(Ps, u8, u32)>,
    len: usize,
}

impl<E> Default for RadixQueue<E> {
    fn default() -> Self {
        Self { buckets: (0..BUCKETS).map(|_| Vec::new()).collect(), head: 0, nonempty: 0, last: 0, min: None, len: 0 }
    }
}

impl<E> RadixQueue<E> {
    /// Empties the queue and starts it at `now`: every later push is at or after it.
    pub fn reset(&mut self, now: Ps) {
        for b in &mut self.buckets {
            b.clear();
        }
        (self.head, self.nonempty, self.last, self.min, self.len) = (0, 0, now, None, 0);
    }

    #[inline]
    fn bucket_of(&self, at: Ps) -> usize {
        debug_assert!(at >= self.last, "radix heap: time {at} before the last popped {}", self.last);
        64 - (at ^ self.last).leading_zeros() as usize
    }

    #[inline]
    fn bucket0_len(&self) -> usize {
        self.buckets[0].len() - self.head
    }

    /// The earliest time outside bucket 0 and where it is: the lowest non-empty
    /// bucket holds it (its times are below every higher bucket's), found by a
    /// scan whose first minimum is the earliest inserted.
    #[inline]
    fn find_min(&mut self) -> Option<(Ps, u8, u32)> {
        if self.min.is_some() || self.nonempty == 0 {
            return self.min;
        }
        let b = self.nonempty.trailing_zeros() as usize;
        let v = &self.buckets[b];
        let (mut best, mut at) = (0, v[0].0);
        for (j, e) in v.iter().enumerate().skip(1) {
            if e.0 < at {
                best = j;
                at = e.0;
            }
        }
        self.min = Some((at, b as u8, best as u32));
        self.min
    }

    /// Makes `at`, the earliest time of bucket `b`, the new `last`: spreads
    /// bucket `b` into lower buckets, its events at `at` into bucket 0 (empty now).
    #[inline]
    fn spread(&mut self, at: Ps, b: u8) {
        let b = b as usize;
        self.last = at;
        self.min = None;
        self.nonempty &= !(1u128 << b);
        self.buckets[0].clear();
        self.head = 0;
        let mut v = std::mem::take(&mut self.buckets[b]);
        for (t, e) in v.drain(..) {
            let nb = self.bucket_of(t);
            self.buckets[nb].push((t, e));
            self.nonempty |= 1u128 << nb;
        }
        self.nonempty &= !1; // bucket 0 is tracked by `head`
        self.buckets[b] = v; // keeps its capacity
    }

    #[inline]
    fn pop_bucket0(&mut self) -> (Ps, E)
    where
        E: Copy,
    {
        let e = self.buckets[0][self.head];
        self.head += 1;
        self.len -= 1;
        // A long run of same-instant events without a spread: drop what was
        // popped so that bucket 0 does not grow with the run.
        if self.head >= 4096 && self.head * 2 >= self.buckets[0].len() {
            self.buckets[0].drain(..self.head);
            self.head = 0;
        }
        e
    }
}

impl<E: Copy> EventQueue<E> for RadixQueue<E> {
    #[inline]
    fn push(&mut self, _now: Ps, at: Ps, ev: E) {
        let b = self.bucket_of(at);
        let v = &mut self.buckets[b];
        v.push((at, ev));
        self.len += 1;
        if b != 0 {
            self.nonempty |= 1u128 << b;
            // A new earliest time, unless an equal one was there first.
            if let Some((m, _, _)) = self.min {
                if at < m {
                    self.min = Some((at, b as u8, (v.len() - 1) as u32));
                }
            }
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<(Ps, E)> {
        self.pop_until(Ps::MAX)
    }

    #[inline]
    fn pop_until(&mut self, until: Ps) -> Option<(Ps, E)> {
        if self.bucket0_len() == 0 {
            let (at, b, _) = self.find_min()?;
            if at > until {
                return None;
            }
            self.spread(at, b);
        } else if self.last > until {
            return None;
        }
        Some(self.pop_bucket0())
    }

    #[inline]
    fn peek_event(&mut self) -> Option<&E> {
        if self.bucket0_len() > 0 {
            return Some(&self.buckets[0][self.head].1);
        }
        let (_, b, i) = self.find_min()?;
        Some(&self.buckets[b as usize][i as usize].1)
    }

    fn peek_time(&self) -> Option<Ps> {
        if self.bucket0_len() > 0 {
            return Some(self.last);
        }
        match self.min {
            Some((at, _, _)) => Some(at),
            None if self.nonempty == 0 => None,
            None => {
                let b = self.nonempty.trailing_zeros() as usize;
                self.buckets[b].iter().map(|e| e.0).min()
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::HeapQueue;
    use proptest::prelude::*;

    proptest! {
        /// The radix heap hands out exactly what the binary heap does, in the
        /// same order, for any mix of same-instant pushes, future pushes (near
        /// and far: the bucket moves), pops and pops up to a horizon.
        #[test]
        fn same_order_as_the_binary_heap(ops in proptest::collection::vec((0u8..4, 0u64..1_000_000_000_000), 1..600)) {
            let mut radix = RadixQueue::default();
            let mut heap = HeapQueue::default();
            let mut now: Ps = 0;
            let mut id = 0u32;
            for (op, x) in ops {
                match op {
                    0 | 1 => {
                        // Near (0 … 7 ps) or far in the future.
                        let at = now + if op == 0 { x % 8 } else { x };
                        radix.push(now, at, id);
                        heap.push(now, at, id);
                        id += 1;
                    }
                    2 => {
                        let a = radix.pop();
                        prop_assert_eq!(a, heap.pop());
                        if let Some((t, _)) = a {
                            prop_assert!(t >= now, "time went backwards");
                            now = t;
                        }
                    }
                    _ => {
                        let until = now + x % 1000;
                        let a = radix.pop_until(until);
                        prop_assert_eq!(a, heap.pop_until(until));
                        match a {
                            Some((t, _)) => now = t,
                            None => now = until, // the run loop's clock ends at the horizon
                        }
                    }
                }
                prop_assert_eq!(radix.len(), heap.len());
                prop_assert_eq!(radix.peek_time(), heap.peek_time());
            }
            while let Some(a) = radix.pop() {
                prop_assert_eq!(Some(a), heap.pop());
            }
            prop_assert!(heap.pop().is_none());
        }
    }

    #[test]
    fn a_million_pending_come_out_sorted() {
        let mut q = RadixQueue::default();
        let mut r = crate::engine::rng::stream(7, "radix");
        for i in 0..1_000_000u32 {
            q.push(0, crate::engine::rng::exp_sample(&mut r, 1e9) as Ps, i);
        }
        let mut prev = (0, 0u32);
        let mut n = 0;
        while let Some((t, i)) = q.pop() {
            assert!(t > prev.0 || (t == prev.0 && (n == 0 || i > prev.1)), "{:?} after {prev:?}", (t, i));
            prev = (t, i);
            n += 1;
        }
        assert_eq!(n, 1_000_000);
    }
}
