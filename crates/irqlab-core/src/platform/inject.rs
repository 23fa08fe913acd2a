//! The hypervisor layer: VMs whose vCPUs are pinned 1:1 to pCPUs, and the
//! trap-and-emulate injection path. A physical interrupt for a device assigned
//! to a VM exits the running guest (guest masking does not hold it back: with
//! HCR_EL2.IMO set, physical IRQs are taken to EL2), the hypervisor acks it,
//! injects the virtual interrupt, and re-enters; the guest takes it when its own
//! mask allows.

use crate::engine::{Ps, Scheduler};
use crate::platform::cpu::{Frame, HaltPhase, HypPhase, Level, Mask, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    pub fn take_for_guest(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32, origin: Ps, flow: u64, events: u32) {
        self.srcs[i as usize].inflight += events;
        // A halted vCPU is out of guest mode already: no exit, straight to the handler.
        let mut f = if matches!(self.cpus[c].top().work, Work::Halt { .. }) {
            Frame::new(Work::Hyp { src: i, phase: HypPhase::Handler }, Level::Host, Mask::Daif, self.c.hyp_handler)
        } else {
            self.n.vm_exits += 1;
            Frame::new(Work::Hyp { src: i, phase: HypPhase::Exit }, Level::Host, Mask::Daif, self.c.hyp_exit)
        };
        f.origin = origin;
        f.flow = flow;
        self.push_frame(s, c, f);
    }

    pub fn hyp_phase_done(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32, phase: HypPhase, f: Frame) {
        let w = |phase| Work::Hyp { src: i, phase };
        match phase {
            HypPhase::Exit => self.set_phase(s, c, w(HypPhase::Handler), Mask::Daif, self.c.hyp_handler),
            HypPhase::Handler => self.set_phase(s, c, w(HypPhase::Inject), Mask::Daif, self.c.hyp_inject),
            HypPhase::Inject => {
                self.inject(s.now(), c, i, f);
                if self.under_halt(c) {
                    // Back to the halt, which the pending interrupt ends (`deliver`).
                    self.pop_frame(s, c);
                } else {
                    self.set_phase(s, c, w(HypPhase::Entry), Mask::Daif, self.c.hyp_entry);
                }
            }
            HypPhase::Entry => {
                self.pop_frame(s, c);
            }
        }
    }

    /// Makes the virtual interrupt pending for the vCPU (a list register), or
    /// merges into the one already pending.
    fn inject(&mut self, now: Ps, c: usize, i: u32, f: Frame) {
        let moved = std::mem::take(&mut self.srcs[i as usize].inflight);
        self.vpend(now, c, i, f.origin, f.flow, moved);
    }

    /// Source `i`'s virtual interrupt pending at pCPU `c`, or merged into the
    /// one already pending; returns whether it is newly pending.
    fn vpend(&mut self, now: Ps, c: usize, i: u32, raised: Ps, flow: u64, events: u32) -> bool {
        let src = &mut self.srcs[i as usize];
        if src.vpending {
            src.vevents += events;
            self.n.vmerged += 1;
            if self.tracer.on() {
                self.tracer.merge_flow(src.vflow, flow);
            }
            return false;
        }
        src.vpending = true;
        src.vraised = raised;
        src.vflow = flow;
        src.vevents = events;
        let prio = src.prio;
        self.cpus[c].vpending.push(i, prio);
        if self.tracer.on() {
            self.trace_pending(now, c);
        }
        true
    }

    /// A virtual interrupt for source `i` made pending at pCPU `c` (its vCPU's)
    /// from outside the guest-exit path: a posted interrupt (VT-d posting the
    /// vector into the vCPU's descriptor, or KVM's irqfd after a host handler).
    /// A running guest that admits it takes it at once, without an exit; else
    /// when it next runs. `events` and `flow` are what the guest's handler
    /// delivers (0 when a host handler already counted the write).
    pub fn post_virtual(&mut self, s: &mut Scheduler<Ev>, i: u32, c: usize, raised: Ps, flow: u64, events: u32) {
        if !self.vpend(s.now(), c, i, raised, flow, events) {
            return;
        }
        let prio = self.srcs[i as usize].prio;
        let top = *self.cpus[c].top();
        let halted = matches!(top.work, Work::Halt { phase: HaltPhase::Poll | HaltPhase::Blocked });
        if (top.level == Level::Guest && top.mask.admits(prio)) || halted {
            self.pause_top(s, c);
            self.run_top(s, c);
        }
    }
}
