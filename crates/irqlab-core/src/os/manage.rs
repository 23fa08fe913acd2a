//! Disabling and enabling interrupts, like kernel/irq/manage.c and resend.c.
//! Disabling is lazy (`disable_irq_nosync` with the lazy-disable flag): the
//! interrupt stays unmasked until it fires again, when the CPU that takes it
//! masks it at the device and marks it pending (`IRQS_PENDING`: `os/irq.rs`,
//! `take_physical`, a `Work::MaskAck` frame; a posted vector in its pass);
//! enabling re-sends a pending one (`check_irq_resend`) and unmasks it.

use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::cpu::{Level, MaskPhase, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// `disable_irq_nosync()`, lazily; returns whether it was enabled.
    pub fn disable_source(&mut self, i: u32) -> bool {
        let src = &mut self.srcs[i as usize];
        !std::mem::replace(&mut src.disabled, true)
    }

    /// `handle_edge_irq()` on a disabled interrupt that fired: `mask_ack_irq()`
    /// and `IRQS_PENDING`; its writes wait for `enable_irq` (or GSIM's
    /// callback). The caller charges the time (`Costs::msix_mask`).
    pub fn mask_disabled(&mut self, i: u32) {
        let src = &mut self.srcs[i as usize];
        src.sw_pending = true;
        src.masked = true;
        self.n.masked_while_disabled += 1;
    }

    /// `mask_ack_irq()`'s flushing `readl` of vector `i` from CPU `c`: whether
    /// its completion must wait for posted writes the device sent before it
    /// that are still on the socket's DMA path (then `Cpu::mask_flush` holds
    /// when its round trip would end, until `mask_flushed`). A machine without
    /// DMA paths answers at once.
    pub(crate) fn mask_flush_waits(&mut self, now: Ps, c: usize, i: u32) -> bool {
        let src = &self.srcs[i as usize];
        let (sk, link, entry) = (src.path as usize, src.link, src.entry);
        let Some(p) = self.paths.get_mut(sk) else { return false };
        let waits = !p.flush(link, c as u32);
        if waits {
            self.cpus[c].mask_flush = Some(now + entry + self.c.msix_mask);
        } else {
            self.n.msix_flush_wait.record(0);
        }
        waits
    }

    /// The device's writes ahead of CPU `c`'s flushing read are through: its
    /// `readl` returns (at once if it was already spinning, else when its
    /// round trip ends), and the exit follows. An SDEI event or NMI may have
    /// been taken over the spinning frame (DAIF does not hold them): the frame
    /// then ends its spin when it is back on top.
    pub(crate) fn mask_flushed(&mut self, s: &mut Scheduler<Ev>, c: usize) {
        let round_trip_end = self.cpus[c].mask_flush.take().expect("a flushing read was waiting");
        self.n.msix_flush_wait.record(s.now().saturating_sub(round_trip_end));
        let spinning = |f: &crate::platform::cpu::Frame| matches!(f.work, Work::MaskAck { phase: MaskPhase::Flush, .. });
        let Some(k) = self.cpus[c].stack.iter().rposition(spinning) else {
            return; // still in its round trip: it goes on to the exit when that ends
        };
        if k + 1 == self.cpus[c].stack.len() {
            self.pause_top(s, c);
            self.cpus[c].top_mut().left = 0;
            self.run_top(s, c);
        } else {
            self.cpus[c].stack[k].left = 0;
        }
    }

    /// Re-enables a disabled interrupt from a callback on CPU `c` that runs
    /// its pending handler itself (`handle_irq_event_percpu`, as GSIM's timer
    /// does) instead of re-sending it; unmasks the vector. Returns the handler's
    /// length if it was pending: the caller runs it and calls its owner's
    /// `handler_end` when it is through.
    pub fn enable_and_run(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32) -> Option<Ps> {
        let src = &mut self.srcs[i as usize];
        src.disabled = false;
        let ran = if std::mem::take(&mut src.sw_pending) {
            let raised = src.raised;
            // As `take_physical`: an SDEI event is delivered when its handler starts.
            if !src.sdei {
                let (flow, events) = (src.flow, std::mem::take(&mut src.events));
                self.note_delivery(flow, events);
            }
            self.n.run_from_timer += 1;
            // The interrupt is handled now: it counts, with its latency, as one taken through the flow.
            Some(self.handler_start(s, c, i, Level::Host, raised))
        } else {
            None
        };
        if self.srcs[i as usize].masked {
            self.unmask_msi(s, i);
        }
        ran
    }

    /// Handlers a callback ran back to back (`enable_and_run`, a posted-MSI
    /// pass) loop as they would from their own interrupt: each one that
    /// `continues` is asked for more work (`handler_continue`, e.g. `nvme_irq`
    /// reaping what landed meanwhile); returns the total, 0 when all are through.
    pub fn continue_runs(&mut self, s: &mut Scheduler<Ev>, c: usize, ran: &[u32]) -> Ps {
        let mut more = 0;
        for &i in ran {
            let src = &self.srcs[i as usize];
            if src.continues {
                let owner = src.owner;
                more += P::handler_continue(self, s, c, i, owner);
            }
        }
        more
    }

    /// The handler `enable_and_run` started is through: its owner's
    /// `handler_end`, then what its `irq_exit` would raise (softirq work, NAPI),
    /// which runs on the exit of the interrupt whose callback ran it.
    pub fn end_run(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32) {
        P::handler_end(self, s, c, i, Level::Host);
        self.raise_exit_work(c, Level::Host, i);
    }
}
