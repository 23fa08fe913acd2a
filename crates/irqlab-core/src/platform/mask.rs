//! What running code masks, and the priority classes of interrupts: the
//! vocabulary the CPU (`cpu`) and the interrupt controller (`irqchip`) share.

/// What the running code masks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Interrupts enabled.
    Open,
    /// `ICC_PMR_EL1` at the "IRQs off" priority (pseudo-NMI): NMI-priority interrupts still get through.
    Pmr,
    /// `PSTATE.DAIF.I` set: no IRQ gets through, pseudo-NMIs included (exception
    /// entry and exit always run like this). Only what bypasses DAIF.I does:
    /// firmware-dispatched SDEI events and FEAT_NMI superpriority interrupts.
    Daif,
    /// Everything masked, superpriority too (`PSTATE.ALLINT`, or the body of an
    /// SDEI/NMI handler that must not nest).
    All,
}

/// Interrupt priority classes, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Prio {
    /// An ordinary IRQ (device MSI, SGI used as IPI).
    Normal = 0,
    /// GIC priority above the PMR "IRQs off" value: a pseudo-NMI.
    Nmi = 1,
    /// Beyond DAIF.I: an SDEI event dispatched by EL3 firmware, or a FEAT_NMI
    /// superpriority interrupt.
    Super = 2,
}

impl Mask {
    /// The priorities this mask admits, as bits by [`Prio`] value.
    #[inline]
    pub fn admitted(self) -> u8 {
        match self {
            Mask::Open => 0b111,
            Mask::Pmr => 0b110,
            Mask::Daif => 0b100,
            Mask::All => 0,
        }
    }

    #[inline]
    pub fn admits(self, p: Prio) -> bool {
        match self {
            Mask::Open => true,
            Mask::Pmr => p >= Prio::Nmi,
            Mask::Daif => p == Prio::Super,
            Mask::All => false,
        }
    }
}
