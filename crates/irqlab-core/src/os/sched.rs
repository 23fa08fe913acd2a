//! The scheduler: a FIFO run queue per CPU (per vCPU in a guest), time slices
//! checked on return to user (where Linux acts on `TIF_NEED_RESCHED`), and
//! `context_switch()` as a frame with a cost.

use crate::engine::{Ps, Scheduler};
use crate::platform::cpu::{Frame, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// Whether the current task should give way now: it yields, or its slice
    /// is used up, and someone else is runnable.
    pub fn need_resched(&self, c: usize, now: Ps, yielding: bool) -> bool {
        let cpu = &self.cpus[c];
        !cpu.rq.is_empty() && (yielding || now - cpu.slice_start >= self.c.timeslice)
    }

    /// Saves the current task's frame (already popped) and starts a context switch.
    pub fn switch_out(&mut self, s: &mut Scheduler<Ev>, c: usize, saved: Frame) {
        let cpu = &mut self.cpus[c];
        let cur = cpu.current.take().expect("a task frame was running");
        cpu.rq.push_back(cur);
        let next = cpu.rq.pop_front().expect("need_resched saw a runnable task");
        self.tasks[cur as usize].saved = Some(saved);
        self.n.switches += 1;
        // __schedule runs under local_irq_disable: the PMR under pseudo-NMI (a
        // pseudo-NMI is taken in a context switch), DAIF.I otherwise.
        let sw = Frame::new(Work::Switch { next }, saved.level, self.c.irq_handler_mask, self.c.switch);
        self.push_frame(s, c, sw);
    }

    pub fn switch_done(&mut self, s: &mut Scheduler<Ev>, c: usize, next: u32) {
        self.pop_frame(s, c);
        let cpu = &mut self.cpus[c];
        cpu.current = Some(next);
        cpu.slice_start = s.now();
        let t = &mut self.tasks[next as usize];
        let f = t.saved.take().unwrap_or_else(|| t.first_frame(next));
        self.push_frame(s, c, f);
    }
}
