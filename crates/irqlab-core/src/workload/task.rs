//! A task's loop through its phases. One pass is one operation (a syscall, a
//! fault, a yield), which is what throughput counts.

use crate::engine::{Ps, Scheduler};
use crate::platform::cpu::{Frame, Level, Mask, TaskPhase, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;
use crate::scenario::ExceptionKind;

pub struct TaskState {
    pub name: String,
    pub group: u32,
    pub level: Level,
    pub work: Ps,
    pub kind: ExceptionKind,
    pub body: Ps,
    pub irqs_off: Ps,
    /// What its IRQs-off section masks.
    pub irqs_off_mask: Mask,
    /// Pseudo-NMI's extra time per operation (0 under DAIF), for the report.
    pub pmr_tax: Ps,
    /// The frame to resume when switched back in.
    pub saved: Option<Frame>,
    pub ops: u64,
    /// When the current operation began (its user phase), for the per-call latency.
    pub op_start: Ps,
    /// Operations in a row that took no time (see `op_done`).
    pub zero_ops: u32,
}

/// Operations in a row that take no time after which the next takes 1 ps, so
/// that its CPU hands back to the event queue: a loop that never advances time
/// (validation refuses them, but a yield left to the run budget and `--force`
/// can make one) stays where Ctrl-C and the event cap are seen. No real run
/// comes near it; kept out of the interrupt path (a counter in `run_top` cost
/// the reference model 1.2 % of its instructions).
const ZERO_OPS_GUARD: u32 = 4096;

impl TaskState {
    pub fn first_frame(&self, id: u32) -> Frame {
        Frame::new(Work::Task { task: id, phase: TaskPhase::User }, self.level, Mask::Open, self.work)
    }

    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            ExceptionKind::None => "none",
            ExceptionKind::Syscall => "syscall",
            ExceptionKind::Pagefault => "page fault",
            ExceptionKind::Yield => "sched_yield",
        }
    }
}

impl<P: Parts> Machine<P> {
    pub fn task_phase_done(&mut self, s: &mut Scheduler<Ev>, c: usize, t: u32, phase: TaskPhase) {
        let task = &self.tasks[t as usize];
        let (kind, body, off, off_mask) = (task.kind, task.body, task.irqs_off, task.irqs_off_mask);
        let w = |phase| Work::Task { task: t, phase };
        match phase {
            TaskPhase::User if kind == ExceptionKind::None => self.op_done(s, c, t, false),
            TaskPhase::User => self.set_phase(s, c, w(TaskPhase::Entry), Mask::Daif, self.c.exc_entry),
            TaskPhase::Entry if off > 0 => self.set_phase(s, c, w(TaskPhase::IrqsOff), off_mask, off),
            TaskPhase::Entry | TaskPhase::IrqsOff => self.set_phase(s, c, w(TaskPhase::Body), Mask::Open, body - off),
            TaskPhase::Body => self.set_phase(s, c, w(TaskPhase::Exit), Mask::Daif, self.c.exc_exit),
            TaskPhase::Exit => self.op_done(s, c, t, kind == ExceptionKind::Yield),
        }
    }

    /// One operation finished, back in user mode: count it, then either keep
    /// going or let the scheduler switch.
    fn op_done(&mut self, s: &mut Scheduler<Ev>, c: usize, t: u32, yielding: bool) {
        let now = s.now();
        let task = &mut self.tasks[t as usize];
        task.ops += 1;
        task.zero_ops = if now == task.op_start { task.zero_ops + 1 } else { 0 };
        let stalled = task.zero_ops >= ZERO_OPS_GUARD;
        if stalled {
            task.zero_ops = 0;
        }
        // Per-call latency: user work to return, including whatever interrupted it.
        self.n.op_latency.record(now - std::mem::replace(&mut task.op_start, now));
        let mut fresh = self.tasks[t as usize].first_frame(t);
        if stalled {
            fresh.left = fresh.left.max(1);
        }
        if self.need_resched(c, s.now(), yielding) {
            self.pop_frame(s, c);
            self.switch_out(s, c, fresh);
        } else {
            self.set_phase(s, c, fresh.work, fresh.mask, fresh.left);
        }
    }
}

#[cfg(test)]
mod tests {
    /// A yield alone on its CPU with no costs (the budget refuses it; `--force`
    /// lets it run) makes its operations at one instant: every 4,096th takes
    /// 1 ps, so time moves and the run ends instead of spinning in `run_top`
    /// beyond the reach of Ctrl-C and the event cap.
    #[test]
    fn a_loop_that_takes_no_time_still_ends() {
        let text = "name = \"y\"\nduration = \"20ps\"\n[cpu]\ncontext_switch = \"1us\"\n\
                    [[task]]\nname = \"t\"\nwork = \"0ns\"\nexception = \"yield\"\n";
        let sc = crate::load(text, "y.toml", &[]).unwrap();
        let out = crate::run(&sc, Default::default());
        let ops = out.report.metrics["ops_per_s"] * 20e-12;
        // 4,096 at each of the 21 instants from 0 to 20 ps, and the ones that took 1 ps.
        assert!((4096.0 * 20.0..=4097.0 * 22.0).contains(&ops), "{ops} operations in 20 ps");
    }
}
