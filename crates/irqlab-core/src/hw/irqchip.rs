//! The interrupt controller's per-CPU pending state (a GIC redistributor's
//! pending LPIs, a local APIC's IRR). An interrupt is a pending *bit*: a second
//! MSI write for a source that is already pending is merged into it (edge
//! semantics), and the handler then sees both completions.
//!
//! Pending interrupts are taken NMI priority first, then in arrival order.

use std::collections::VecDeque;

#[derive(Default)]
pub struct Pending {
    nmi: VecDeque<u32>,
    normal: VecDeque<u32>,
}

impl Pending {
    #[inline]
    pub fn push(&mut self, src: u32, nmi: bool) {
        if nmi {
            self.nmi.push_back(src)
        } else {
            self.normal.push_back(src)
        }
    }

    /// The interrupt the CPU takes next, given which priorities its mask admits.
    #[inline]
    pub fn take(&mut self, admits_nmi: bool, admits_normal: bool) -> Option<u32> {
        if admits_nmi {
            if let Some(s) = self.nmi.pop_front() {
                return Some(s);
            }
        }
        if admits_normal {
            return self.normal.pop_front();
        }
        None
    }

    pub fn len(&self) -> usize {
        self.nmi.len() + self.normal.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.nmi.is_empty() && self.normal.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmi_first_then_fifo_and_masking_holds_back() {
        let mut p = Pending::default();
        p.push(1, false);
        p.push(2, true);
        p.push(3, false);
        assert_eq!(p.take(false, false), None);
        assert_eq!(p.take(true, false), Some(2));
        assert_eq!(p.take(true, false), None);
        assert_eq!(p.take(true, true), Some(1));
        assert_eq!(p.take(true, true), Some(3));
        assert!(p.is_empty());
    }
}
