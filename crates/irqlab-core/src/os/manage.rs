//! Disabling and enabling interrupts, like kernel/irq/manage.c and resend.c.
//! Disabling is lazy (`disable_irq_nosync` with the lazy-disable flag): the
//! interrupt stays unmasked until it fires again, when the flow (`os/irq.rs`,
//! `arrive`) masks it at the device and marks it pending (`IRQS_PENDING`);
//! enabling re-sends a pending one (`check_irq_resend`) and unmasks it.

use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// `disable_irq_nosync()`, lazily; returns whether it was enabled.
    pub fn disable_source(&mut self, i: u32) -> bool {
        let src = &mut self.srcs[i as usize];
        !std::mem::replace(&mut src.disabled, true)
    }

    /// `enable_irq()` after GSIM's timer: a pending interrupt is re-sent
    /// (`check_irq_resend`) and the vector unmasked.
    pub fn enable_source(&mut self, s: &mut Scheduler<Ev>, i: u32) {
        let src = &mut self.srcs[i as usize];
        src.disabled = false;
        if std::mem::take(&mut src.sw_pending) {
            self.n.resends += 1;
            self.pend(s, i);
        }
        if self.srcs[i as usize].masked {
            self.unmask_msi(s, i);
        }
    }
}
