//! An idle vCPU that halts in the host (`hypervisor.guest_idle = "hlt"`).
//!
//! A guest's idle loop executes HLT (x86; a trapped WFI on arm64), which exits;
//! KVM's `kvm_vcpu_halt` (virt/kvm/kvm_main.c) then polls for a wake-up event
//! for up to the vCPU's own `halt_poll_ns` window and, if none comes, blocks
//! (`kvm_vcpu_block`) until an interrupt for the vCPU wakes its thread (with
//! posted interrupts, the wake-up vector: `pi_wakeup_handler`). A halt caught
//! while polling costs the pCPU the poll and the VM entry; a blocked one the
//! wake-up and the entry, and the interrupt waits for both. After each halt
//! the window adapts: it grows (×`halt_poll_ns_grow` = 2, from
//! `halt_poll_ns_grow_start`) after a short halt that polling missed, and
//! shrinks (÷`halt_poll_ns_shrink` = 2, to 0 under the start) after one
//! longer than `halt_poll_ns`. The halt's frames are the host's, over the
//! guest's idle frame, which takes the interrupt once the vCPU is back in.

use crate::engine::time::NEVER;
use crate::engine::Scheduler;
use crate::platform::cpu::{Frame, HaltPhase, Level, Mask, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// The guest's idle loop runs with nothing to take: HLT exits to the host.
    /// Returns whether it pushed the halt's frame.
    #[inline]
    pub(crate) fn guest_halt(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        if !self.c.guest_hlt {
            return false;
        }
        let cpu = &self.cpus[c];
        let top = cpu.top();
        if top.level != Level::Guest || top.work != Work::Idle || cpu.stack.len() != 1 {
            return false;
        }
        self.n.halt_exits += 1;
        self.n.vm_exits += 1;
        let cpu = &mut self.cpus[c];
        // `kvm_vcpu_halt` clamps the vCPU's window to `halt_poll_ns` as it starts.
        cpu.halt_poll = cpu.halt_poll.min(self.c.halt_poll_max);
        let exit = self.c.hyp_exit;
        self.push_frame(s, c, Frame::new(Work::Halt { phase: HaltPhase::Exit }, Level::Host, Mask::Daif, exit));
        true
    }

    /// A phase of the halt ran to its end.
    pub(crate) fn halt_phase_done(&mut self, s: &mut Scheduler<Ev>, c: usize, phase: HaltPhase) {
        let halt = |phase| Work::Halt { phase };
        match phase {
            HaltPhase::Exit => {
                // `kvm_vcpu_halt` starts its clock here, after the exit.
                self.cpus[c].halt_since = s.now();
                if !self.cpus[c].vpending.is_empty() {
                    // An interrupt came during the exit: `__kvm_emulate_halt`
                    // (arch/x86/kvm/x86.c) finds `kvm_vcpu_has_events` and leaves
                    // the vCPU runnable, so `kvm_vcpu_halt` never runs: no poll,
                    // no wake-up, and the window stays as it was. (x86's: arm64's
                    // `kvm_handle_wfx` → `kvm_vcpu_wfi` always calls
                    // `kvm_vcpu_halt`, whose first check would count a poll.)
                    self.n.halt_skipped += 1;
                    let entry = self.c.hyp_entry;
                    self.set_phase(s, c, halt(HaltPhase::Entry), Mask::Daif, entry);
                } else if self.cpus[c].halt_poll > 0 {
                    let window = self.cpus[c].halt_poll;
                    self.set_phase(s, c, halt(HaltPhase::Poll), Mask::Open, window);
                } else {
                    self.set_phase(s, c, halt(HaltPhase::Blocked), Mask::Open, NEVER);
                }
            }
            HaltPhase::Poll => self.set_phase(s, c, halt(HaltPhase::Blocked), Mask::Open, NEVER),
            HaltPhase::Blocked => unreachable!("a blocked vCPU ends by a wake-up"),
            HaltPhase::Wake => {
                let entry = self.c.hyp_entry;
                self.set_phase(s, c, halt(HaltPhase::Entry), Mask::Daif, entry);
            }
            HaltPhase::Entry => {
                self.pop_frame(s, c);
            }
        }
    }

    /// A virtual interrupt is pending for the halted vCPU on `c`, whose halt
    /// frame is the top and paused: a poll sees it at once, a blocked vCPU is
    /// woken. Returns whether the halt moved on.
    pub(crate) fn halt_kick(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        let (next, len, waited) = match self.cpus[c].top().work {
            Work::Halt { phase: HaltPhase::Poll } => (HaltPhase::Entry, self.c.hyp_entry, false),
            Work::Halt { phase: HaltPhase::Blocked } => (HaltPhase::Wake, self.c.hyp_wake, true),
            _ => return false,
        };
        self.halt_end(s, c, waited);
        // The poll or the block is cut short: its slice ends here.
        self.end_top_slice(s.now(), c);
        self.set_phase(s, c, Work::Halt { phase: next }, Mask::Daif, len);
        true
    }

    /// The halt is over (`kvm_vcpu_halt`'s end): count it and adapt the
    /// vCPU's polling window to how long it lasted.
    fn halt_end(&mut self, s: &Scheduler<Ev>, c: usize, waited: bool) {
        if waited {
            self.n.halt_wakeups += 1;
        } else {
            self.n.halt_polled += 1;
        }
        let (max, start) = (self.c.halt_poll_max, self.c.halt_poll_grow_start);
        let cpu = &mut self.cpus[c];
        let (halt, poll) = (s.now() - cpu.halt_since, cpu.halt_poll);
        cpu.halt_poll = if max == 0 || halt <= poll {
            poll.min(max)
        } else if poll > 0 && halt > max {
            // shrink_halt_poll_ns
            Some(poll / 2).filter(|&v| v >= start).unwrap_or(0)
        } else if poll < max && halt < max {
            // grow_halt_poll_ns
            (poll * 2).max(start)
        } else {
            poll
        };
    }

    /// Whether the frame under the top is a halt (a host interrupt for the
    /// guest handled while its vCPU is out of guest mode).
    #[inline]
    pub(crate) fn under_halt(&self, c: usize) -> bool {
        let st = &self.cpus[c].stack;
        st.len() >= 2 && matches!(st[st.len() - 2].work, Work::Halt { .. })
    }
}

#[cfg(test)]
#[path = "halt_tests.rs"]
mod tests;
