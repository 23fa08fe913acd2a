//! Running a CPU: start the top frame's phase, pause it when something is
//! pushed over it, and move through phases and frames as they finish. At every
//! boundary the interrupt controller is asked whether an interrupt is now
//! deliverable, so unmasking delivers what was held back.

use crate::engine::time::NEVER;
use crate::engine::Scheduler;
use crate::platform::cpu::{Frame, IrqPhase, Level, Mask, MaskPhase, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// Stops the running phase of the top frame, keeping the work it has left.
    #[inline(always)]
    pub fn pause_top(&mut self, s: &mut Scheduler<Ev>, c: usize) {
        let now = s.now();
        let cpu = &mut self.cpus[c];
        if let Some(h) = cpu.timer.take() {
            s.cancel(h);
            let started = cpu.started;
            let f = cpu.top_mut();
            f.left -= (now - started).min(f.left);
        }
        cpu.account(now);
    }

    /// Runs the top frame (which is paused): delivers what the mask admits,
    /// finishes zero-length phases, and arms the timer for the rest.
    pub fn run_top(&mut self, s: &mut Scheduler<Ev>, c: usize) {
        debug_assert!(self.cpus[c].timer.is_none(), "run_top on a running top, cpu {c}");
        if self.c.cstates && self.cpus[c].waking {
            return; // leaving an idle state: `Ev::Wake` runs it
        }
        loop {
            // Delivering, or ending a phase, can pend an interrupt whose own
            // run_top starts the new top: then it runs, and arming a second
            // timer here would leave the first to end some later frame's phase
            // early (found by the scenario fuzzer: an idle vCPU "finished").
            if self.deliver(s, c) {
                if self.cpus[c].timer.is_some() {
                    return;
                }
                continue;
            }
            let left = self.cpus[c].top().left;
            if left == 0 {
                self.phase_done(s, c);
                if self.cpus[c].timer.is_some() {
                    return;
                }
                continue;
            }
            // Only the idle loop runs for ever: it gives way to threads and
            // ksoftirqd, and a guest's, with nothing to take, may halt.
            if left == NEVER && (self.idle_work(s, c) || self.guest_halt(s, c)) {
                continue;
            }
            if self.tracer.on() {
                self.resume_guest_slice(s.now(), c);
            }
            let cpu = &mut self.cpus[c];
            cpu.started = s.now();
            if left != NEVER {
                cpu.timer = Some(s.timer_after(left, Ev::Done(c as u32)));
            }
            return;
        }
    }

    /// A guest frame that runs again after the host ran over it (`push_frame`
    /// ended its slice) opens a new one. Here, once nothing pending takes the
    /// CPU at this instant, rather than when the host's frame pops: a VM entry
    /// followed at once by the next exit made a slice of no length.
    #[cold]
    fn resume_guest_slice(&mut self, now: crate::engine::Ps, c: usize) {
        let top = *self.cpus[c].top();
        if top.level == Level::Guest && !top.traced {
            self.cpus[c].top_mut().traced = self.trace_begin(now, c, &top);
        }
    }

    /// Takes the next interrupt the top frame admits, if any.
    #[inline]
    fn deliver(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        let cpu = &mut self.cpus[c];
        if cpu.pending.is_empty() && cpu.vpending.is_empty() {
            return false;
        }
        let top = *cpu.top();
        let guest = top.level == Level::Guest;
        // A running guest's mask does not hold back physical interrupts: they exit.
        // (A take's new count goes to the trace when its frame is pushed: `trace_push`.)
        if let Some(src) = cpu.pending.take(if guest { Mask::Open } else { top.mask }) {
            self.take_physical(s, c, src);
            return true;
        }
        if guest {
            if let Some(src) = cpu.vpending.take(top.mask) {
                self.take_virtual(s, c, src);
                return true;
            }
        } else if !cpu.vpending.is_empty() {
            // A halted vCPU with an interrupt for it: polling sees it, a blocked one is woken.
            return self.halt_kick(s, c);
        }
        false
    }

    #[inline(always)]
    pub fn push_frame(&mut self, s: &mut Scheduler<Ev>, c: usize, mut f: Frame) {
        debug_assert!(self.cpus[c].timer.is_none(), "push over a running frame on cpu {c}: {:?} <- {f:?}", self.cpus[c].stack);
        let now = s.now();
        self.cpus[c].account(now);
        // (Tested here, so that an untraced run does not call out for each push.)
        f.traced = self.tracer.on() && self.trace_push(now, c, &f);
        self.cpus[c].stack.push(f);
    }

    /// Traces a push of `f`: opens its slice, after ending the guest's if
    /// the host runs over it.
    #[cold]
    #[inline(never)]
    fn trace_push(&mut self, now: crate::engine::Ps, c: usize, f: &Frame) -> bool {
        if matches!(f.work, Work::Irq { .. }) {
            // An interrupt taken: its CPU's pending count fell (a counter
            // written only when it changes, so a take from nothing pending
            // writes nothing). Here rather than at the take, which is on every
            // interrupt's path whether tracing or not.
            self.trace_pending(now, c);
        }
        if f.level == Level::Host && self.cpus[c].stack.last().is_some_and(|t| t.level == Level::Guest) {
            // The guest stops while the host runs (a VM exit): its slices, on
            // the vCPU's own track, end here and start again as each guest
            // frame runs on (`run_top`), or they would read as guest time
            // through the exit.
            let cpu = &mut self.cpus[c];
            for g in cpu.stack.iter_mut().rev().take_while(|g| g.level == Level::Guest) {
                if std::mem::take(&mut g.traced) {
                    self.tracer.end(now, cpu.vtrack);
                }
            }
        }
        self.trace_begin(now, c, f)
    }

    /// Pops the top frame, closing its slice if the phase was cut short.
    #[inline(always)]
    pub fn pop_frame(&mut self, s: &mut Scheduler<Ev>, c: usize) -> Frame {
        let now = s.now();
        self.cpus[c].account(now);
        debug_assert!(self.cpus[c].timer.is_none(), "pop of a running frame on cpu {c}: {:?}", self.cpus[c].top());
        let f = self.cpus[c].stack.pop().expect("pop on a CPU with frames");
        self.cpus[c].popped_at = now;
        if f.traced {
            let track = self.track_of(c, f.level);
            self.tracer.end(now, track);
        }
        f
    }

    /// Moves the top frame to its next phase.
    pub fn set_phase(&mut self, s: &mut Scheduler<Ev>, c: usize, work: Work, mask: Mask, left: crate::engine::Ps) {
        let now = s.now();
        debug_assert!(self.cpus[c].timer.is_none(), "set_phase on a running frame on cpu {c}");
        let mut f = *self.cpus[c].top();
        f.work = work;
        f.mask = mask;
        f.left = left;
        f.traced = self.tracer.on() && self.trace_begin(now, c, &f);
        *self.cpus[c].top_mut() = f;
    }

    /// Like [`Self::set_phase`], but where the next step reads as the same
    /// call (`nvme_irq` looking again at its CQ, `handler_continue`; a mask
    /// whose read came straight back), its trace slice runs on, so that a
    /// trace has one slice per interrupt (a review counted 5,805 handler
    /// slices for 4,308 interrupts). A step that reads as another (a posted-MSI
    /// pass's next vector) gets its own slice, and so does one whose slice
    /// began before the trace's window (it began nowhere).
    pub fn continue_phase(&mut self, s: &Scheduler<Ev>, c: usize, work: Work, mask: Mask, left: crate::engine::Ps) {
        debug_assert!(self.cpus[c].timer.is_none(), "continue_phase on a running frame on cpu {c}");
        let now = s.now();
        let mut f = *self.cpus[c].top();
        f.work = work;
        f.mask = mask;
        f.left = left;
        if self.tracer.on() {
            let track = self.track_of(c, f.level);
            let same = f.traced && self.tracer.recorded_open_name(track) == Some(self.label(c, &f).1.as_str());
            if !same {
                self.end_top_slice(now, c);
                f.traced = self.trace_begin(now, c, &f);
            }
        }
        *self.cpus[c].top_mut() = f;
    }

    /// The top frame's phase ran to its end.
    fn phase_done(&mut self, s: &mut Scheduler<Ev>, c: usize) {
        let now = s.now();
        self.cpus[c].account(now);
        let f = *self.cpus[c].top();
        // A handler's slice is ended by `irq_phase_done`, unless it loops; a
        // mask's runs on into its exit unless its read waits (`continue_phase`).
        // (`traced` first: an untraced run pays one test, as it did.)
        if f.traced && !matches!(f.work, Work::Irq { phase: IrqPhase::Handler, .. } | Work::MaskAck { phase: MaskPhase::Mask, .. }) {
            self.end_top_slice(now, c);
        }
        match f.work {
            Work::Task { task, phase } => self.task_phase_done(s, c, task, phase),
            Work::Switch { next } => self.switch_done(s, c, next),
            Work::Irq { src, phase } => self.irq_phase_done(s, c, src, phase, f),
            Work::MaskAck { src, phase: MaskPhase::Mask } => {
                if self.cpus[c].mask_flush.is_some() {
                    self.end_top_slice(now, c);
                    self.set_phase(s, c, Work::MaskAck { src, phase: MaskPhase::Flush }, Mask::Daif, NEVER);
                } else {
                    let exit = self.srcs[src as usize].exit - self.pmr_exit_saves(c, 1, Level::Host, src);
                    self.continue_phase(s, c, Work::MaskAck { src, phase: MaskPhase::Exit }, Mask::Daif, exit);
                }
            }
            // The path said the writes ahead are through (`mask_flushed`).
            Work::MaskAck { src, phase: MaskPhase::Flush } => {
                let exit = self.srcs[src as usize].exit - self.pmr_exit_saves(c, 1, Level::Host, src);
                self.set_phase(s, c, Work::MaskAck { src, phase: MaskPhase::Tail }, Mask::Daif, exit);
            }
            Work::MaskAck { src: i, phase: MaskPhase::Exit | MaskPhase::Tail } => {
                let (wake, saves) = (self.pmr_woke(f.woke_idle), self.pmr_exit_saves(c, 1, Level::Host, i));
                let src = &self.srcs[i as usize];
                self.cpus[c].irq_arch += src.entry + wake + src.exit - saves;
                self.pop_frame(s, c);
                self.irq_exit_tail(s, c, f.level, i);
            }
            Work::Softirq => {
                self.pop_frame(s, c);
                if !(self.softirq_can_run(c, f.level) && self.run_softirqs(s, c, f.level)) {
                    self.resched_on_return(s, c, f.level);
                }
            }
            Work::Napi { q } => self.napi_done(s, c, q, f.level),
            Work::Hyp { src, phase } => self.hyp_phase_done(s, c, src, phase, f),
            Work::Thread { owner, arg } => self.thread_done(s, c, owner, arg),
            Work::Halt { phase } => self.halt_phase_done(s, c, phase),
            Work::Idle => unreachable!("idle never ends"),
        }
    }

    /// Closes the top frame's open slice, if its phase opened one (a phase
    /// that ended, or one cut short before `set_phase` starts the next).
    #[inline(always)]
    pub(crate) fn end_top_slice(&mut self, now: crate::engine::Ps, c: usize) {
        let f = *self.cpus[c].top();
        if f.traced {
            let track = self.track_of(c, f.level);
            self.tracer.end(now, track);
            self.cpus[c].top_mut().traced = false;
        }
    }

    pub fn track_of(&self, c: usize, level: Level) -> crate::engine::trace::TrackId {
        match level {
            Level::Host => self.cpus[c].track,
            Level::Guest => self.cpus[c].vtrack,
        }
    }

    /// Opens a slice for a phase that takes time; returns whether it did.
    /// (Callers test `tracer.on()` first: an untraced run never calls it.)
    #[cold]
    #[inline(never)]
    fn trace_begin(&mut self, now: crate::engine::Ps, c: usize, f: &Frame) -> bool {
        if !self.tracer.on() || f.left == 0 || f.work == Work::Idle {
            return false;
        }
        let (cat, name, flow) = self.label(c, f);
        let track = self.track_of(c, f.level);
        self.tracer.begin(now, track, cat, &name, flow);
        true
    }

    /// Trace category and name of a frame's phase (only computed when tracing).
    fn label(&self, c: usize, f: &Frame) -> (&'static str, String, Option<u64>) {
        use crate::platform::cpu::{HypPhase as H, IrqPhase as I, TaskPhase as T};
        match f.work {
            Work::Idle => ("idle", "idle".into(), None),
            Work::Task { task, phase } => {
                let t = &self.tasks[task as usize];
                match phase {
                    T::User => ("task", format!("{} user", t.name), None),
                    T::Entry => ("exception", "exception entry".into(), None),
                    T::IrqsOff => ("exception", "irqs off".into(), None),
                    T::Body => ("exception", t.kind_name().into(), None),
                    T::Exit => ("exception", "exception exit".into(), None),
                }
            }
            Work::Switch { .. } => ("sched", "context switch".into(), None),
            Work::Irq { src, phase } => match phase {
                I::Entry => ("hardirq", "irq entry".into(), None),
                I::Handler => {
                    if let Some((_, vector, flow)) = self.cpus[c].demux.filter(|d| d.0 == src) {
                        return ("hardirq", format!("{} handler", self.source_name(vector)), Some(flow));
                    }
                    let s = &self.srcs[src as usize];
                    let name = s.handler_name.clone().unwrap_or_else(|| format!("{} handler", self.source_name(src)));
                    ("hardirq", name, Some(f.flow))
                }
                I::Exit => ("hardirq", "irq exit".into(), None),
            },
            Work::MaskAck { phase: MaskPhase::Flush, .. } => ("hardirq", "readl flush (behind the device's writes)".into(), Some(f.flow)),
            Work::MaskAck { phase: MaskPhase::Tail, .. } => ("hardirq", "irq exit".into(), None),
            Work::MaskAck { .. } => ("hardirq", "mask_ack_irq (disabled)".into(), Some(f.flow)),
            Work::Softirq => ("softirq", "softirq".into(), None),
            Work::Napi { q } => ("softirq", format!("napi poll rx{q}"), None),
            Work::Thread { .. } => ("thread", "submit/reap".into(), None),
            Work::Halt { phase } => (
                "hypervisor",
                match phase {
                    crate::platform::cpu::HaltPhase::Exit => "hlt exit",
                    crate::platform::cpu::HaltPhase::Poll => "halt poll",
                    crate::platform::cpu::HaltPhase::Blocked => "vcpu blocked",
                    crate::platform::cpu::HaltPhase::Wake => "vcpu wake-up",
                    crate::platform::cpu::HaltPhase::Entry => "vm entry",
                }
                .into(),
                None,
            ),
            Work::Hyp { phase, .. } => (
                "hypervisor",
                match phase {
                    H::Exit => "vm exit",
                    H::Handler => "hyp irq",
                    H::Inject => "inject",
                    H::Entry => "vm entry",
                }
                .into(),
                None,
            ),
        }
    }
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
