//! A radix heap over event times: the pending-event set whose cost per event
//! stays flat as the pending events grow.
//!
//! Why it works here: a discrete-event run is monotone, every time pushed is at
//! or after the last time popped (`last`). A radix heap files each event by
//! where its time first differs from `last`. Here that is a 6-bit digit: the
//! bucket is (the digit's position, the event's digit there), 10 positions of
//! 64 digits and a top one of 16 (bits 60 to 63). Every event in a lower bucket is earlier than every event in a
//! higher one, so the lowest non-empty bucket holds the minimum. Pushing is an
//! append to a bucket. When the run (below) is empty, popping finds the
//! minimum of the lowest non-empty bucket, makes it `last`, and spreads that
//! bucket into lower ones. An event moves down at most once per digit
//! position, so at most 11 times and in practice two or three; every access
//! is an append to or a scan of a contiguous vector, so a million pending
//! events stay cache friendly where a binary heap's sift walks 20 levels of
//! cache misses. (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster algorithms for the
//! shortest path problem", J. ACM 37(2), 1990, with its multi-digit buckets.)
//!
//! The run: a bucket of a few events at one of the low positions is sorted
//! instead of spread, and its events leave from the sorted vector with no
//! further move; a push that falls inside its span is inserted in order. With
//! 65,536 sources that halves the moves per event and turns the pop that
//! most often happens, the spread of a bucket of one, into a read (measured on
//! `bench::scale_scenario(2048)`: 25 % less wall time with the prefetch
//! below). The run's events are also the next few to leave, so it offers them
//! to `for_soon`: the model can prefetch their state several events ahead.
//!
//! Why 6 bits: measured with the hold bench (`cargo bench -p irqlab-core --
//! hold`) against 1-bit buckets (one per bit, this queue until 2026-11), 4 and
//! 8: 6 was the fastest or within a few per cent from 64 to 10^6 pending, and
//! twice the 1-bit heap at 10^6 (1-bit buckets move an event once per bit, a
//! dozen times or more; 8-bit buckets scatter a spread over 256 vectors).
//!
//! Same-time events leave in insertion order without a sequence number:
//! events with equal times always share a bucket (an event's bucket relative
//! to `last` does not change until its bucket is spread), each bucket is
//! appended to in push order, and spreading keeps the order; sorting a bucket
//! into the run is stable, and a push inside the run goes behind the events
//! at its time. The order is the binary heap's `(time, insertion)` exactly,
//! which the property tests check.

use super::queue::EventQueue;
use super::time::Ps;

/// Bits per digit.
const DIGIT: u32 = 6;
/// Buckets per digit position.
const WIDTH: usize = 1 << DIGIT;
/// Digit positions in a 64-bit time.
const POSITIONS: usize = 64usize.div_ceil(DIGIT as usize);
const BUCKETS: usize = WIDTH * POSITIONS;
/// 64-bit words of the non-empty bitmap; the summary word has one bit per word.
const WORDS: usize = BUCKETS.div_ceil(64);
const _: () = assert!(WORDS <= 64, "the summary word has one bit per bitmap word");

/// A bucket of at most this many events, at a digit position up to `RUN_POS`,
/// is sorted into the run instead of spread: its events leave in order with no
/// further move, and are offered to `for_soon` (they leave within that many pops).
const RUN_SORT: usize = 64;
/// A run of at most this many events is placed by rank (see `next_run`):
/// the count of keys below each, over all `RANK_SORT` slots, which the
/// compiler vectorises. The count is quadratic; with 2,048 CPUs most runs
/// hold 10 to 25 events and the largest about 35, and those past 32 sort
/// their keys.
const RANK_SORT: usize = 32;
/// Bits of a run's sort key that hold the event's index in its bucket.
const RUN_INDEX_BITS: u32 = RUN_SORT.trailing_zeros();
/// The highest digit position whose buckets may become a run: a bucket there
/// spans 2^18 ps (262 ns), so few pushes land inside a run while it drains.
const RUN_POS: usize = 3;
/// A run that pushes have grown past this many events goes back to the buckets
/// (all but the events at `last`): a push inside a run costs a shift of the run.
const RUN_MAX: usize = 512;
const _: () = assert!(
    RUN_SORT.is_power_of_two() && RUN_POS as u32 * DIGIT + RUN_INDEX_BITS <= 32,
    "a run's sort key (offset in the bucket, index) fits in 32 bits"
);

pub struct RadixQueue<E> {
    /// Bucket `p * WIDTH + d` holds the times whose highest digit differing
    /// from `last` is at position `p`, with digit `d` there.
    buckets: Vec<Vec<(Ps, E)>>,
    /// The run: every pending event before `run_end`, sorted by time (equal
    /// times in insertion order), popped from `head`. Every event in a bucket
    /// is at or after `run_end`, and `run_end > last` (but at `Ps::MAX`).
    run: Vec<(Ps, E)>,
    head: usize,
    run_end: Ps,
    /// Bit `b % 64` of word `b / 64` set when bucket `b` is non-empty; bit `w`
    /// of `summary` when word `w` is not zero.
    nonempty: [u64; WORDS],
    summary: u64,
    /// The time last popped; every time pushed is at or after it.
    last: Ps,
    /// The smallest time in the lowest non-empty bucket and where it is, while
    /// known: the prefetch hint and `pop_until` both ask, pushes keep it.
    min: Option<(Ps, u32, u32)>,
    len: usize,
    /// The events of the last run sorted from a bucket, the next few to leave
    /// (`for_soon`): a prefetch lead of several events where `peek_event` gives one.
    soon: Vec<E>,
}

impl<E> Default for RadixQueue<E> {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            run: Vec::new(),
            head: 0,
            run_end: 1,
            nonempty: [0; WORDS],
            summary: 0,
            last: 0,
            min: None,
            len: 0,
            soon: Vec::with_capacity(RUN_SORT),
        }
    }
}

impl<E> RadixQueue<E> {
    /// Empties the queue and starts it at `now`: every later push is at or after it.
    pub fn reset(&mut self, now: Ps) {
        for b in &mut self.buckets {
            b.clear();
        }
        self.run.clear();
        self.soon.clear();
        self.nonempty = [0; WORDS];
        (self.head, self.summary, self.last, self.min, self.len) = (0, 0, now, None, 0);
        self.run_end = now.saturating_add(1);
    }

    /// The bucket of `at`, or `None` if `at` is `last` itself.
    #[inline]
    fn bucket_of(&self, at: Ps) -> Option<usize> {
        debug_assert!(at >= self.last, "radix heap: time {at} before the last popped {}", self.last);
        let x = at ^ self.last;
        if x == 0 {
            return None;
        }
        let pos = (63 - x.leading_zeros()) / DIGIT;
        let digit = (at >> (pos * DIGIT)) as usize & (WIDTH - 1);
        Some(pos as usize * WIDTH + digit)
    }

    #[inline]
    fn mark(&mut self, b: usize) {
        self.nonempty[b / 64] |= 1 << (b % 64);
        self.summary |= 1 << (b / 64);
    }

    #[inline]
    fn unmark(&mut self, b: usize) {
        let w = &mut self.nonempty[b / 64];
        *w &= !(1 << (b % 64));
        if *w == 0 {
            self.summary &= !(1 << (b / 64));
        }
    }

    /// The lowest non-empty bucket.
    #[inline]
    fn lowest(&self) -> Option<usize> {
        if self.summary == 0 {
            return None;
        }
        let w = self.summary.trailing_zeros() as usize;
        Some(w * 64 + self.nonempty[w].trailing_zeros() as usize)
    }

    #[inline]
    fn run_len(&self) -> usize {
        self.run.len() - self.head
    }

    /// The earliest time outside the run and where it is: the lowest non-empty
    /// bucket holds it, found by a scan whose first minimum is the earliest inserted.
    #[inline]
    fn find_min(&mut self) -> Option<(Ps, u32, u32)> {
        if self.min.is_none() {
            self.min = self.scan_min();
        }
        self.min
    }

    /// `find_min` without the cache.
    #[inline]
    fn scan_min(&self) -> Option<(Ps, u32, u32)> {
        let b = self.lowest()?;
        let v = &self.buckets[b];
        let (mut best, mut at) = (0, v[0].0);
        for (j, e) in v.iter().enumerate().skip(1) {
            if e.0 < at {
                best = j;
                at = e.0;
            }
        }
        Some((at, b as u32, best as u32))
    }

    /// Makes `at`, the earliest time of bucket `b`, the new `last` (the run is
    /// empty). A small, narrow bucket becomes the run, sorted; any other is
    /// spread into lower buckets, its events at `at` into the run.
    #[inline]
    fn next_run(&mut self, at: Ps, b: u32)
    where
        E: Copy,
    {
        let b = b as usize;
        self.last = at;
        self.min = None;
        self.unmark(b);
        self.run.clear();
        self.head = 0;
        let mut v = std::mem::take(&mut self.buckets[b]);
        let pos = b / WIDTH;
        let span = 1u64 << (pos as u32 * DIGIT);
        let start = at & !(span - 1);
        match start.checked_add(span) {
            Some(end) if pos <= RUN_POS && v.len() <= RUN_SORT => {
                // Sorted by a 32-bit key, the time's offset in the bucket
                // above the event's index there, so that equal times keep the
                // bucket's order, which is their insertion order. A run of up
                // to `RANK_SORT` (with 2,048 CPUs most hold 10 to 25) is placed
                // by rank, with no branch that depends on the times: the
                // comparison sort it replaces mispredicted about once an event
                // there (callgrind's branch simulation, `bench::scale_scenario(2048)`:
                // 6.7 M mispredicts against 5.8 M; 5 % more events a second).
                let key = |j: usize, e: &(Ps, E)| (((e.0 - start) as u32) << RUN_INDEX_BITS) | j as u32;
                if v.len() <= RANK_SORT {
                    // Each event's place is the count of keys below its own
                    // (keys are unique); the spare slots hold a key above all.
                    let mut keys = [u32::MAX; RANK_SORT];
                    for (j, e) in v.iter().enumerate() {
                        keys[j] = key(j, e);
                    }
                    self.run.resize(v.len(), v[0]);
                    for (j, e) in v.iter().enumerate() {
                        let rank: u32 = keys.iter().map(|&k| (k < keys[j]) as u32).sum();
                        self.run[rank as usize] = *e;
                    }
                } else {
                    let mut keys = [0u32; RUN_SORT];
                    for (j, e) in v.iter().enumerate() {
                        keys[j] = key(j, e);
                    }
                    let keys = &mut keys[..v.len()];
                    keys.sort_unstable();
                    self.run.extend(keys.iter().map(|&k| v[(k & (RUN_SORT as u32 - 1)) as usize]));
                }
                self.soon.clear();
                self.soon.extend(self.run.iter().map(|e| e.1));
                v.clear();
                self.run_end = end;
            }
            _ => {
                for (t, e) in v.drain(..) {
                    match self.bucket_of(t) {
                        None => self.run.push((t, e)),
                        Some(nb) => {
                            self.buckets[nb].push((t, e));
                            self.mark(nb);
                        }
                    }
                }
                self.run_end = at.saturating_add(1);
            }
        }
        self.buckets[b] = v; // keeps its capacity
    }

    /// Adds an event before `run_end` to the run, behind every event at its time.
    #[inline]
    fn run_insert(&mut self, at: Ps, ev: E)
    where
        E: Copy,
    {
        match self.run.last() {
            Some(e) if e.0 > at => {
                let k = self.head + self.run[self.head..].partition_point(|e| e.0 <= at);
                self.run.insert(k, (at, ev));
                if self.run_len() > RUN_MAX {
                    self.refile_run();
                }
            }
            _ => self.run.push((at, ev)),
        }
    }

    /// Puts a run that pushes have grown back into the buckets, but for its
    /// events at `last` (a FIFO at its front, which never shifts).
    #[cold]
    fn refile_run(&mut self)
    where
        E: Copy,
    {
        let keep = self.head + self.run[self.head..].partition_point(|e| e.0 <= self.last);
        for k in keep..self.run.len() {
            let (t, e) = self.run[k];
            let nb = self.bucket_of(t).expect("after last");
            self.buckets[nb].push((t, e));
            self.mark(nb);
        }
        self.run.truncate(keep);
        self.run_end = self.last.saturating_add(1);
        self.min = None;
    }

    #[inline]
    fn pop_run(&mut self) -> (Ps, E)
    where
        E: Copy,
    {
        let e = self.run[self.head];
        self.head += 1;
        self.len -= 1;
        self.last = e.0;
        // A long run of same-instant events with no new run: drop what was
        // popped so that the vector does not grow with the simulation.
        if self.head >= 4096 && self.head * 2 >= self.run.len() {
            self.run.drain(..self.head);
            self.head = 0;
        }
        e
    }
}

impl<E: Copy> EventQueue<E> for RadixQueue<E> {
    #[inline]
    fn push(&mut self, _now: Ps, at: Ps, ev: E) {
        self.len += 1;
        if at < self.run_end {
            return self.run_insert(at, ev);
        }
        match self.bucket_of(at) {
            None => self.run_insert(at, ev), // `at` is `last` at `Ps::MAX`
            Some(b) => {
                let v = &mut self.buckets[b];
                v.push((at, ev));
                let pos = (v.len() - 1) as u32;
                self.mark(b);
                // A new earliest time, unless an equal one was there first.
                if let Some((m, _, _)) = self.min {
                    if at < m {
                        self.min = Some((at, b as u32, pos));
                    }
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
        if self.run_len() == 0 {
            let (at, b, _) = self.find_min()?;
            if at > until {
                return None;
            }
            self.next_run(at, b);
        } else if self.run[self.head].0 > until {
            return None;
        }
        Some(self.pop_run())
    }

    #[inline]
    fn peek_event(&mut self) -> Option<&E> {
        if self.run_len() > 0 {
            return Some(&self.run[self.head].1);
        }
        let (_, b, i) = self.find_min()?;
        Some(&self.buckets[b as usize][i as usize].1)
    }

    fn peek_time(&self) -> Option<Ps> {
        if self.run_len() > 0 {
            return Some(self.run[self.head].0);
        }
        self.min.or_else(|| self.scan_min()).map(|m| m.0)
    }

    #[inline]
    fn for_soon(&mut self, mut f: impl FnMut(&E)) {
        for e in self.soon.drain(..) {
            f(&e);
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

    /// A run that pushes grow past `RUN_MAX` goes back to the buckets while
    /// events at the current instant still wait at its head: the pop order
    /// stays a binary heap's. (Mutation testing: `head - partition_point`
    /// for `head +` went unnoticed, since the refile test had none left.)
    #[test]
    fn a_refile_with_events_left_at_the_current_instant_keeps_the_order() {
        let (mut r, mut h) = (RadixQueue::default(), HeapQueue::default());
        for i in 0..3u32 {
            r.push(0, 1000, i);
            h.push(0, 1000, i);
        }
        assert_eq!(r.pop(), h.pop()); // two events at 1000 left at the run's head
        for i in 0..600u32 {
            let at = 1001 + (i as u64 * 7) % 23;
            r.push(1000, at, 100 + i);
            h.push(1000, at, 100 + i);
        }
        loop {
            let (a, b) = (r.pop(), h.pop());
            assert_eq!(a, b);
            if a.is_none() {
                break;
            }
        }
    }

    proptest! {
        /// `peek_event` (the run loop's prefetch hint) names the event the next
        /// pop returns, and may be asked between pushes. (Nothing tested it.)
        #[test]
        fn peek_event_is_the_next_pop(ops in proptest::collection::vec((0u8..4, 0u64..100_000), 1..400)) {
            let mut r = RadixQueue::default();
            let (mut now, mut id) = (0u64, 0u32);
            for (op, x) in ops {
                if op < 2 {
                    let at = now + if op == 0 { x % 3 } else { x };
                    r.push(now, at, id);
                    id += 1;
                } else if op == 3 {
                    let _ = r.peek_event();
                } else {
                    let p = r.peek_event().copied();
                    let a = r.pop();
                    prop_assert_eq!(p, a.map(|x| x.1));
                    if let Some((t, _)) = a {
                        now = t;
                    }
                }
            }
        }
    }

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

    proptest! {
        /// A bucket of 1 to `RUN_SORT` events at a low digit position becomes
        /// a run, placed by rank (up to `RANK_SORT`) or by its keys' sort:
        /// either way in time order, and equal times in the order pushed.
        /// Each batch is pushed two buckets ahead at position `pos` (0 to 3),
        /// up to 40 ticks apart that span the bucket, so that many events
        /// share a tick; a run forms at `pos` or, if the batch crosses a
        /// higher digit, one position lower after a spread.
        #[test]
        fn runs_of_every_size_come_out_in_order(
            batches in proptest::collection::vec((0u32..=3, proptest::collection::vec(0u64..40, 1..=RUN_SORT)), 1..8),
        ) {
            let mut radix = RadixQueue::default();
            let mut heap = HeapQueue::default();
            let mut now: Ps = 0;
            let mut id = 0u32;
            for (pos, batch) in batches {
                let span = 1u64 << (pos * DIGIT);
                let base = (now | (span - 1)) + 1 + span;
                let tick = (span / 40).max(1);
                for x in batch {
                    let at = base + (x * tick).min(span - 1);
                    radix.push(now, at, id);
                    heap.push(now, at, id);
                    id += 1;
                }
                while let Some(a) = radix.pop() {
                    prop_assert_eq!(Some(a), heap.pop());
                    now = a.0;
                }
                prop_assert!(heap.pop().is_none());
            }
        }
    }

    proptest! {
        /// Times anywhere in the 64-bit range (up to `Ps::MAX` once the clock
        /// has moved): every digit position, the top one (4 bits wide)
        /// included, keeps the order.
        #[test]
        fn the_whole_time_range_keeps_the_order(ops in proptest::collection::vec((0u8..3, any::<u64>(), 0u32..64), 1..300)) {
            let mut radix = RadixQueue::default();
            let mut heap = HeapQueue::default();
            let mut now: Ps = 0;
            for (id, (op, x, shift)) in ops.into_iter().enumerate() {
                if op < 2 {
                    // A distance of any magnitude, from 0 to the rest of the range.
                    let at = now + (x >> shift) % (Ps::MAX - now).saturating_add(1).max(1);
                    radix.push(now, at, id as u32);
                    heap.push(now, at, id as u32);
                } else {
                    let a = radix.pop();
                    prop_assert_eq!(a, heap.pop());
                    if let Some((t, _)) = a {
                        now = t;
                    }
                }
                prop_assert_eq!(radix.peek_time(), heap.peek_time());
            }
            while let Some(a) = radix.pop() {
                prop_assert_eq!(Some(a), heap.pop());
            }
            prop_assert!(heap.pop().is_none());
        }
    }

    /// Pushes that land inside a run, in reverse time order (each one a shift
    /// of the run), until it holds more than `RUN_MAX`: the run goes back to
    /// the buckets and the order stays the binary heap's.
    #[test]
    fn a_run_grown_by_pushes_goes_back_to_the_buckets_in_order() {
        let mut radix = RadixQueue::default();
        let mut heap = HeapQueue::default();
        for (i, at) in [1_000_000u64, 1_000_100, 1_000_200].into_iter().enumerate() {
            radix.push(0, at, i as u32);
            heap.push(0, at, i as u32);
        }
        assert_eq!(radix.pop(), heap.pop());
        let (now, end) = (radix.last, radix.run_end);
        assert!(end > now + 2 * RUN_MAX as u64, "the run spans room for the pushes");
        let mut biggest = 0;
        for k in 0..(2 * RUN_MAX as u32) {
            // Later pushes go earlier, and every tenth repeats a time already there.
            let at = if k % 10 == 9 { end - 1 - (k as u64 - 1) / 2 } else { end - 1 - k as u64 / 2 };
            radix.push(now, at, 100 + k);
            heap.push(now, at, 100 + k);
            biggest = biggest.max(radix.run_len());
        }
        assert!(biggest <= RUN_MAX, "the run was refiled (largest {biggest})");
        while let Some(a) = radix.pop() {
            assert_eq!(Some(a), heap.pop());
        }
        assert!(heap.pop().is_none());
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
