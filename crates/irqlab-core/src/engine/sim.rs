//! The scheduler: the clock, the queue, and cancellable timers. A model is any
//! type that implements [`Model`]; the run loop pops events and calls `handle`.

use super::adaptive::EventSet;
use super::queue::EventQueue;
use super::time::Ps;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How many events pass between two looks at the stop flag: often enough to
/// stop within milliseconds, rare enough to cost nothing per event.
const STOP_POLL: u64 = 1 << 12;

/// Shared with whoever started a run, from another thread: a flag that stops
/// it (Ctrl-C), and the simulated time it has reached (for a progress bar),
/// both looked at every `STOP_POLL` events.
#[derive(Clone, Default, Debug)]
pub struct RunControl {
    pub stop: Arc<AtomicBool>,
    /// Simulated time reached, ps (published every `STOP_POLL` events).
    pub now: Arc<AtomicU64>,
}

/// A handle to a scheduled timer, used to cancel it. Stale handles are harmless:
/// cancelling a timer that already fired or was cancelled does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerHandle {
    slot: u32,
    gen: u32,
}

/// What the queue carries: the model's event and, for a timer, the slot and
/// generation that say whether it is still live (cancellation is lazy).
#[derive(Clone, Copy)]
pub struct Envelope<E> {
    ev: E,
    slot: u32, // 0 = not a timer
    gen: u32,
}

pub struct Scheduler<E, Q = EventSet<Envelope<E>>> {
    now: Ps,
    queue: Q,
    timer_gen: Vec<u32>, // slot 0 unused
    free_slots: Vec<u32>,
    events: u64,
    /// Events popped with a time before the clock's: a broken queue (the audit).
    reversals: u64,
    /// Set from outside (Ctrl-C) to end the run early; `stopped` says it did.
    control: Option<RunControl>,
    stopped: bool,
    _e: std::marker::PhantomData<E>,
}

/// Asks the CPU to bring the first `lines` cache lines of `v` into cache (for
/// [`Model::prefetch`]). A hint only: no result depends on it, and on targets
/// without a stable prefetch instruction it does nothing.
#[inline(always)]
pub fn prefetch_lines<T>(v: &T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = v as *const T as *const i8;
        let n = lines.min(std::mem::size_of::<T>().div_ceil(64));
        for l in 0..n {
            // SAFETY: a prefetch never faults, and the address lies within `v`.
            unsafe { _mm_prefetch(p.add(l * 64), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, lines);
}

pub trait Model {
    type Event: Copy;
    fn handle(&mut self, s: &mut Scheduler<Self::Event>, ev: Self::Event);
    /// A hint: `ev` is probably the next event to be handled. A large model
    /// prefetches the state it will touch (a source among 65,536) so that the
    /// cache miss overlaps the handling of the current event. It must change
    /// nothing; the default does nothing.
    #[inline]
    fn prefetch(&self, _ev: &Self::Event) {}
    /// The same hint for an event a few pops away (`EventQueue::for_soon`):
    /// it may compute addresses from the event but should read no model
    /// state, which is likely not in cache yet.
    #[inline]
    fn prefetch_far(&self, _ev: &Self::Event) {}
}

impl<E: Copy> Default for Scheduler<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> Scheduler<E> {
    pub fn new() -> Self {
        Self {
            now: 0,
            queue: EventSet::default(),
            timer_gen: vec![0],
            free_slots: Vec::new(),
            events: 0,
            reversals: 0,
            control: None,
            stopped: false,
            _e: std::marker::PhantomData,
        }
    }

    /// A flag that, once set, ends `run_until` within `STOP_POLL` events.
    pub fn set_control(&mut self, control: RunControl) {
        self.control = Some(control);
    }

    /// Whether the run ended early because the stop flag was set.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    #[inline]
    pub fn now(&self) -> Ps {
        self.now
    }

    /// Events handed to the model so far (cancelled timers are not counted).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Events the queue handed out earlier than the clock (0 unless the queue is broken).
    pub fn time_reversals(&self) -> u64 {
        self.reversals
    }

    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Schedules `ev` at absolute time `at`. Times in the past are a model bug;
    /// they are clamped to now so that time never goes backwards.
    #[inline]
    pub fn at(&mut self, at: Ps, ev: E) {
        debug_assert!(at >= self.now, "event scheduled in the past");
        let at = at.max(self.now);
        self.queue.push(self.now, at, Envelope { ev, slot: 0, gen: 0 });
    }

    #[inline]
    pub fn after(&mut self, d: Ps, ev: E) {
        self.at(self.now.saturating_add(d), ev)
    }

    /// Like [`Scheduler::after`], but the event can be cancelled until it fires.
    #[inline(always)]
    pub fn timer_after(&mut self, d: Ps, ev: E) -> TimerHandle {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.timer_gen.push(0);
                (self.timer_gen.len() - 1) as u32
            }
        };
        let gen = self.timer_gen[slot as usize];
        let at = self.now.saturating_add(d);
        self.queue.push(self.now, at, Envelope { ev, slot, gen });
        TimerHandle { slot, gen }
    }

    /// Cancels a timer; returns whether it was still pending.
    #[inline]
    pub fn cancel(&mut self, h: TimerHandle) -> bool {
        let g = &mut self.timer_gen[h.slot as usize];
        if *g != h.gen {
            return false;
        }
        *g = g.wrapping_add(1);
        self.free_slots.push(h.slot);
        true
    }

    /// Pops the next live event due at or before `until`, advancing the clock.
    #[inline]
    pub fn next_before(&mut self, until: Ps) -> Option<E> {
        loop {
            let (t, env) = self.queue.pop_until(until)?;
            self.reversals += (t < self.now) as u64;
            self.now = t;
            if env.slot != 0 {
                let g = &mut self.timer_gen[env.slot as usize];
                if *g != env.gen {
                    continue; // cancelled
                }
                *g = g.wrapping_add(1);
                self.free_slots.push(env.slot);
            }
            self.events += 1;
            return Some(env.ev);
        }
    }

    /// Publishes the clock to the run's control and says whether it asks to stop.
    #[cold]
    fn poll_control(&self) -> bool {
        let Some(c) = &self.control else { return false };
        c.now.store(self.now, Ordering::Relaxed);
        c.stop.load(Ordering::Relaxed)
    }

    /// Runs `model` until simulated time `until`; the clock ends at `until`.
    pub fn run_until<M: Model<Event = E>>(&mut self, model: &mut M, until: Ps) {
        if self.stopped {
            return;
        }
        while let Some(ev) = self.next_before(until) {
            self.queue.for_soon(|e| model.prefetch_far(&e.ev));
            if let Some(next) = self.queue.peek_event() {
                model.prefetch(&next.ev);
            }
            model.handle(self, ev);
            if self.events.is_multiple_of(STOP_POLL) && self.poll_control() {
                self.stopped = true;
                return;
            }
        }
        self.now = self.now.max(until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Ev {
        Tick(u32),
    }

    struct Log(Vec<(Ps, u32)>);
    impl Model for Log {
        type Event = Ev;
        fn handle(&mut self, s: &mut Scheduler<Ev>, ev: Ev) {
            let Ev::Tick(i) = ev;
            self.0.push((s.now(), i));
        }
    }

    #[test]
    fn cancelled_timers_never_fire() {
        let mut s = Scheduler::new();
        let a = s.timer_after(10, Ev::Tick(1));
        let _b = s.timer_after(20, Ev::Tick(2));
        assert!(s.cancel(a));
        assert!(!s.cancel(a), "second cancel is a no-op");
        // The freed slot is reused; the stale entry must still be skipped.
        let _c = s.timer_after(5, Ev::Tick(3));
        let mut log = Log(vec![]);
        s.run_until(&mut log, 100);
        assert_eq!(log.0, vec![(5, 3), (20, 2)]);
        assert_eq!(s.events(), 2);
        assert_eq!(s.now(), 100);
    }

    #[test]
    fn cancel_after_fire_is_harmless() {
        let mut s = Scheduler::new();
        let a = s.timer_after(1, Ev::Tick(1));
        let mut log = Log(vec![]);
        s.run_until(&mut log, 2);
        assert!(!s.cancel(a));
        let b = s.timer_after(1, Ev::Tick(2));
        assert!(!s.cancel(a), "stale handle must not cancel the slot's new timer");
        s.run_until(&mut log, 10);
        assert_eq!(log.0, vec![(1, 1), (3, 2)]);
        assert!(!s.cancel(b));
    }

    #[test]
    fn a_stop_flag_ends_the_run_early_and_says_so_and_the_clock_is_published() {
        struct Forever;
        impl Model for Forever {
            type Event = Ev;
            fn handle(&mut self, s: &mut Scheduler<Ev>, ev: Ev) {
                s.after(1, ev);
            }
        }
        let control = RunControl::default();
        let mut s = Scheduler::new();
        s.set_control(control.clone());
        s.after(1, Ev::Tick(0));
        s.run_until(&mut Forever, 10 * STOP_POLL);
        assert!(!s.stopped() && s.now() == 10 * STOP_POLL);
        // One event per ps: the clock is published at each poll, the last one a poll before the horizon.
        let seen = control.now.load(Ordering::Relaxed);
        assert!(seen > 8 * STOP_POLL && seen <= 10 * STOP_POLL, "{seen}");
        control.stop.store(true, Ordering::Relaxed);
        s.run_until(&mut Forever, Ps::MAX);
        assert!(s.stopped());
        assert!(s.events() <= 12 * STOP_POLL, "{} events", s.events());
    }

    #[test]
    fn run_until_stops_at_the_horizon() {
        let mut s = Scheduler::new();
        s.at(5, Ev::Tick(1));
        s.at(15, Ev::Tick(2));
        let mut log = Log(vec![]);
        s.run_until(&mut log, 10);
        assert_eq!(log.0, vec![(5, 1)]);
        s.run_until(&mut log, 20);
        assert_eq!(log.0, vec![(5, 1), (15, 2)]);
    }
}
