//! `process_nmi()`: queued NMIs become pending, at most two (one if NMIs are
//! masked in the guest or one is being injected); the excess is dropped, which
//! the architecture allows (x86 itself keeps at most one pending).

/// Per-vCPU NMI state.
#[derive(Clone, Copy, Debug, Default)]
pub struct NmiState {
    /// `nmi_queued`: raised by `kvm_inject_nmi`, not yet processed.
    pub queued: u32,
    /// `nmi_pending`: processed, waiting for injection.
    pub pending: u32,
    /// An NMI was injected on this entry attempt (`nmi_injected`).
    pub injected: bool,
    pub dropped: u64,
    pub delivered: u64,
}

impl NmiState {
    /// `process_nmi()`; returns how many NMIs were dropped. `masked`: the guest is in its NMI handler.
    pub fn process(&mut self, masked: bool) -> u32 {
        let limit = if masked || self.injected { 1 } else { 2 };
        let total = self.pending + std::mem::take(&mut self.queued);
        self.pending = total.min(limit);
        let dropped = total - self.pending;
        self.dropped += dropped as u64;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_pending_at_most_one_when_masked_or_injecting() {
        let mut n = NmiState { queued: 5, ..Default::default() };
        assert_eq!(n.process(false), 3);
        assert_eq!(n.pending, 2);
        n.queued = 1;
        assert_eq!(n.process(true), 2);
        assert_eq!(n.pending, 1);
        n.injected = true;
        n.queued = 1;
        assert_eq!(n.process(false), 1);
        assert_eq!(n.dropped, 6);
    }
}
