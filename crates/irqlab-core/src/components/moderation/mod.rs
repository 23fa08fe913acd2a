//! M5: interrupt moderation. A queue's own moderation (static thresholds or
//! Linux DIM) decides when a device queue signals its vector; GSIM
//! ([`gsim`]) moderates globally, in the OS, after the handler.

pub mod params;

pub mod dim;
pub mod gsim;

use crate::engine::time::{Ps, NEVER};
use crate::engine::{Scheduler, TimerHandle};
use crate::platform::machine::Ev;

use crate::scenario::{Moderation, ModerationKind};
pub use gsim::GlobalModeration;

/// A device queue's moderation state: when its pending work may raise an interrupt.
pub struct QueueMod {
    pub kind: ModerationKind,
    /// Timer reset mode (see `Moderation::cqe_mode`).
    pub cqe_mode: bool,
    /// Completions not signalled yet, and the armed time threshold.
    pub unsignalled: u32,
    /// Where the time threshold counts from: the first unsignalled completion,
    /// in timer reset mode the latest one, and with `from_event` the queue's
    /// last interrupt.
    pub first: Ps,
    /// mlx5's EQE mode (`MLX5_CQ_PERIOD_MODE_START_FROM_EQE`, a NIC queue
    /// without `cqe_mode`): the period restarts when the CQ generates an event,
    /// so it is the least gap between two interrupts, and a completion that
    /// comes when it has run out signals at once. (NVMe's aggregation time
    /// counts from the first completion: `from_event` is off there.)
    pub from_event: bool,
    pub last_event: Ps,
    pub timer: Option<TimerHandle>,
    /// Current thresholds: time (counted from `first`) and count.
    pub usecs: Ps,
    pub frames: u32,
    pub dim: Option<dim::Dim>,
    /// DIM counters: interrupts, packets, bytes.
    pub events: u64,
    pub pkts: u64,
    pub bytes: u64,
}

impl QueueMod {
    pub fn new(m: &Moderation) -> Self {
        let mut q = QueueMod {
            kind: m.kind,
            cqe_mode: m.cqe_mode,
            unsignalled: 0,
            first: 0,
            from_event: false,
            last_event: 0,
            timer: None,
            usecs: m.usecs.ps(),
            frames: m.frames,
            dim: None,
            events: 0,
            pkts: 0,
            bytes: 0,
        };
        if m.kind == ModerationKind::Dim {
            let d = dim::Dim::new(m.cqe_mode);
            (q.usecs, q.frames) = d.default_profile();
            q.dim = Some(d);
        }
        q
    }

    /// `n` more completions wait to be signalled.
    #[inline]
    pub fn add(&mut self, now: Ps, n: u32) {
        if self.unsignalled == 0 || self.cqe_mode {
            self.first = if self.from_event && self.unsignalled == 0 { self.last_event } else { now };
        }
        self.unsignalled += n;
    }

    /// Whether the queue signals now (the waiting completions count as signalled);
    /// if not yet, arms the time threshold to deliver `timer` then.
    #[inline]
    pub fn signal_now(&mut self, s: &mut Scheduler<Ev>, timer: Ev) -> bool {
        if self.unsignalled == 0 {
            return false;
        }
        let due = self.due(self.unsignalled, self.first);
        match due {
            Some(at) if !(self.from_event && at <= s.now()) => {
                if self.timer.is_none() && at != NEVER {
                    self.timer = Some(s.timer_after(at.saturating_sub(s.now()), timer));
                }
                false
            }
            _ => {
                self.unsignalled = 0;
                self.last_event = s.now();
                if let Some(h) = self.timer.take() {
                    s.cancel(h);
                }
                true
            }
        }
    }

    /// The time threshold's timer fired: whether anything waits to be signalled
    /// (it now counts as signalled). In timer reset mode a completion since the
    /// timer was armed moved the threshold: the timer is armed again for it.
    #[inline]
    pub fn expired(&mut self, s: &mut Scheduler<Ev>, timer: Ev) -> bool {
        self.timer = None;
        if self.cqe_mode && self.unsignalled > 0 {
            let at = self.first + self.usecs;
            if at > s.now() {
                self.timer = Some(s.timer_after(at - s.now(), timer));
                return false;
            }
        }
        let fired = std::mem::take(&mut self.unsignalled) > 0;
        if fired {
            self.last_event = s.now();
        }
        fired
    }

    /// With `waiting` completions unsignalled, the time counted from `first`: fire now, or at which time.
    #[inline]
    pub fn due(&self, waiting: u32, first: Ps) -> Option<Ps> {
        match self.kind {
            ModerationKind::None => None,
            ModerationKind::Polling => Some(crate::engine::time::NEVER),
            ModerationKind::Static | ModerationKind::Dim => {
                if self.frames > 0 && waiting >= self.frames {
                    None
                } else {
                    Some(first + self.usecs)
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
