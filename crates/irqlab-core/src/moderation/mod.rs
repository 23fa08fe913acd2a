//! M5: interrupt moderation. A queue's own moderation (static thresholds or
//! Linux DIM) decides when a device queue signals its vector; GSIM
//! ([`gsim`]) moderates globally, in the OS, after the handler.

pub mod dim;
pub mod gsim;

use crate::engine::time::Ps;
use crate::scenario::{Moderation, ModerationKind};

/// A device queue's moderation state: when its pending work may raise an interrupt.
pub struct QueueMod {
    pub kind: ModerationKind,
    /// Current thresholds: time since the first unsignalled completion, and count.
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
            usecs: m.usecs.ps(),
            frames: m.frames,
            dim: None,
            events: 0,
            pkts: 0,
            bytes: 0,
        };
        if m.kind == ModerationKind::Dim {
            let d = dim::Dim::default();
            (q.usecs, q.frames) = d.profile();
            q.dim = Some(d);
        }
        q
    }

    /// With `waiting` completions unsignalled since `first`: fire now, or at which time.
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
mod tests;
