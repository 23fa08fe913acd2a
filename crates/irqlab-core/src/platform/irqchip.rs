//! The interrupt controller's per-CPU pending state (a GIC redistributor's
//! pending LPIs, a local APIC's IRR). An interrupt is a pending *bit*: a second
//! MSI write for a source that is already pending is merged into it (edge
//! semantics), and the handler then sees both completions.
//!
//! Pending interrupts are taken highest priority first (superpriority, then
//! NMI, then normal), and in arrival order within a priority.

use crate::platform::mask::{Mask, Prio};
use std::collections::VecDeque;

/// 16 bytes, so that a CPU's two sets and the byte each reads on every phase
/// boundary share a cache line with its other hot fields (`Cpu`); the FIFOs
/// behind the box are read only when something is pending.
#[derive(Default)]
pub struct Pending {
    /// Bit p set: the FIFO of priority p is not empty (the take path is on every
    /// phase boundary, so it reads one byte instead of three queues).
    nonempty: u8,
    /// One FIFO per [`Prio`], indexed by its value.
    by_prio: Box<[VecDeque<u32>; 3]>,
}

impl Pending {
    #[inline]
    pub fn push(&mut self, src: u32, p: Prio) {
        self.by_prio[p as usize].push_back(src);
        self.nonempty |= 1 << p as u8;
    }

    /// The interrupt the CPU takes next under `mask`: the highest admitted priority, oldest first.
    #[inline]
    pub fn take(&mut self, mask: Mask) -> Option<u32> {
        let ready = self.nonempty & mask.admitted();
        if ready == 0 {
            return None;
        }
        let p = 7 - ready.leading_zeros() as usize;
        let q = &mut self.by_prio[p];
        let s = q.pop_front();
        if q.is_empty() {
            self.nonempty &= !(1 << p);
        }
        s
    }

    #[inline]
    /// Interrupts waiting, of every priority (for the trace's counter).
    pub fn len(&self) -> usize {
        self.by_prio.iter().map(|q| q.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.nonempty == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_first_then_fifo_and_masking_holds_back() {
        let mut p = Pending::default();
        p.push(1, Prio::Normal);
        p.push(2, Prio::Nmi);
        p.push(3, Prio::Normal);
        p.push(4, Prio::Super);
        assert_eq!(p.take(Mask::All), None);
        assert_eq!(p.take(Mask::Daif), Some(4));
        assert_eq!(p.take(Mask::Daif), None);
        assert_eq!(p.take(Mask::Pmr), Some(2));
        assert_eq!(p.take(Mask::Pmr), None);
        assert_eq!(p.take(Mask::Open), Some(1));
        assert_eq!(p.take(Mask::Open), Some(3));
        assert!(p.is_empty());
    }
}
