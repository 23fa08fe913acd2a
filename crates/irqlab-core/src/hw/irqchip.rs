//! The interrupt controller's per-CPU pending state (a GIC redistributor's
//! pending LPIs, a local APIC's IRR). An interrupt is a pending *bit*: a second
//! MSI write for a source that is already pending is merged into it (edge
//! semantics), and the handler then sees both completions.
//!
//! Pending interrupts are taken highest priority first (superpriority, then
//! NMI, then normal), and in arrival order within a priority.

use crate::hw::cpu::{Mask, Prio};
use std::collections::VecDeque;

#[derive(Default)]
pub struct Pending {
    /// One FIFO per [`Prio`], indexed by its value.
    by_prio: [VecDeque<u32>; 3],
    len: usize,
}

impl Pending {
    #[inline]
    pub fn push(&mut self, src: u32, p: Prio) {
        self.by_prio[p as usize].push_back(src);
        self.len += 1;
    }

    /// The interrupt the CPU takes next under `mask` (`None`: `Open`, as for a
    /// running guest, whose mask does not hold back physical interrupts).
    #[inline]
    pub fn take(&mut self, mask: Mask) -> Option<u32> {
        for p in [Prio::Super, Prio::Nmi, Prio::Normal] {
            if !mask.admits(p) {
                return None; // lower priorities are masked too
            }
            if let Some(s) = self.by_prio[p as usize].pop_front() {
                self.len -= 1;
                return Some(s);
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
