//! The interrupt flow of `handle_fasteoi_irq` / `handle_edge_irq` reduced to its
//! costs: exception entry, the driver's handler, `irq_exit()`; softirq work a
//! handler raised runs on irq exit unless we interrupted interrupt context
//! (`invoke_softirq()` is skipped when `in_interrupt()`).

use crate::engine::Scheduler;
use crate::platform::cpu::{Frame, IdleWake, IrqPhase, Level, Mask, MaskPhase, Prio, TaskPhase, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{Parts, NO_OWNER};

impl<P: Parts> Machine<P> {
    /// The CPU acknowledges a physical interrupt (reads IAR): the pending bit
    /// clears, so a later write raises a new interrupt rather than merging.
    #[inline(always)]
    pub fn take_physical(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32) {
        let src = &mut self.srcs[i as usize];
        if src.sdei | src.disabled {
            return self.take_sdei_or_disabled(s, c, i);
        }
        src.pending = false;
        let (origin, flow, events) = (src.raised, src.flow, src.events);
        src.events = 0;
        if src.vm != crate::platform::source::NO_VM {
            self.take_for_guest(s, c, i, origin, flow, events);
            return;
        }
        self.note_delivery(flow, events);
        self.push_irq(s, c, i, Level::Host, origin, flow);
    }

    /// `take_physical` for an SDEI event or a disabled vector, out of line:
    /// the common path is inlined where the interrupt is taken. (Not `cold`:
    /// under GSIM a vector that fires while disabled is common.)
    #[inline(never)]
    fn take_sdei_or_disabled(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32) {
        let src = &mut self.srcs[i as usize];
        if src.sdei {
            // Firmware dispatch first; the event is consumed when its handler starts.
            let (origin, flow) = (src.raised, src.flow);
            self.push_irq(s, c, i, Level::Host, origin, flow);
            return;
        }
        src.pending = false;
        // `mask_irq` does nothing on a vector already masked (a message
        // that was on its way when the first one masked it): no write, no read.
        let (entry, exit, flow, masked) = (src.entry, src.exit, src.flow, src.masked);
        let (woke, saves) = (self.pmr_idle_wake(c, s.now(), Level::Host, i), self.pmr_exit_saves(c, 0, Level::Host, i));
        let (entry, exit) = (entry + self.pmr_woke(woke), exit - saves);
        self.mask_disabled(i);
        let mask = if masked { 0 } else { self.c.msix_mask };
        // The read that flushes the mask write is answered behind the
        // device's posted writes; if none are on the path, one phase.
        let (phase, left) = if !masked && self.mask_flush_waits(s.now(), c, i) {
            (MaskPhase::Mask, entry + mask)
        } else {
            (MaskPhase::Exit, entry + mask + exit)
        };
        let mut f = Frame::new(Work::MaskAck { src: i, phase }, Level::Host, Mask::Daif, left);
        f.flow = flow;
        f.woke_idle = woke;
        self.push_frame(s, c, f);
    }

    /// What an interrupt's frame masks: an NMI must not nest in itself, and an
    /// SDEI/FEAT_NMI handler masks even superpriority.
    #[inline]
    fn irq_mask(&self, i: u32, phase: IrqPhase) -> Mask {
        match (self.srcs[i as usize].prio, phase) {
            (Prio::Super, _) => Mask::All,
            (Prio::Nmi, _) | (Prio::Normal, IrqPhase::Entry | IrqPhase::Exit) => Mask::Daif,
            (Prio::Normal, IrqPhase::Handler) => self.c.irq_handler_mask,
        }
    }

    /// Pseudo-NMI's IRQ path depends on what the interrupt interrupted, the
    /// frame `depth` below CPU `c`'s top (0: the interrupt is about to be
    /// pushed; 1: it is the top). `None` where it does not apply: DAIF masking,
    /// a guest's interrupts or an interrupted guest, and NMIs and SDEI events,
    /// whose paths keep their costs (SDEI's `exit` is `SDEI_EVENT_COMPLETE`,
    /// with no PMR in it).
    #[inline(always)]
    fn pmr_under(&self, c: usize, depth: usize, level: Level, i: u32) -> Option<Work> {
        if !self.c.pmr_irq_path {
            return None; // DAIF masking: the common case pays one test
        }
        let st = &self.cpus[c].stack;
        let under = &st[st.len() - 1 - depth];
        (level == Level::Host && under.level == Level::Host && self.srcs[i as usize].prio == Prio::Normal).then_some(under.work)
    }

    /// What an interrupt's return to EL1 (kernel code, the idle loop) saves on
    /// the source's `exit`, which is a return to EL0's (`pmr::EXIT_TO_EL1`
    /// against `EXIT_TO_EL0`).
    #[inline(always)]
    pub(crate) fn pmr_exit_saves(&self, c: usize, depth: usize, level: Level, i: u32) -> crate::engine::Ps {
        match self.pmr_under(c, depth, level, i) {
            None | Some(Work::Task { phase: TaskPhase::User, .. }) => 0,
            // (Never more than the exit: every normal source's includes the EL0 return.)
            Some(_) => self.c.pmr_el1_return_saves.min(self.srcs[i as usize].exit),
        }
    }

    /// What an interrupt about to be pushed pays before its entry in the idle
    /// loop: waking from `wfi`, `cpu_do_idle`'s PMR restore, `local_irq_enable()`
    /// and the stopped tick's section (`pmr::IDLE_WAKE`); still pending when
    /// the previous one returned (a frame popped this instant), it is taken on
    /// `kernel_exit`'s `eret` and pays the tick's section only (`pmr::IDLE_TICK`).
    /// Nothing on a CPU whose idle time a thread spends polling (its tick
    /// runs). A vCPU blocked in the host (`kvm_vcpu_block` → `schedule()`)
    /// leaves its pCPU in the host's idle loop too.
    #[inline(always)]
    pub(crate) fn pmr_idle_wake(&self, c: usize, now: crate::engine::Ps, level: Level, i: u32) -> IdleWake {
        let idle = match self.pmr_under(c, 0, level, i) {
            Some(Work::Idle) => !self.cpus[c].spins,
            Some(Work::Halt { phase }) => phase == crate::platform::cpu::HaltPhase::Blocked,
            _ => false,
        };
        if !idle {
            IdleWake::No
        } else if now > self.cpus[c].popped_at {
            IdleWake::Wfi
        } else {
            IdleWake::Tick
        }
    }

    /// The idle loop's accesses an interrupt frame paid (or pays) on its entry.
    #[inline(always)]
    pub(crate) fn pmr_woke(&self, w: IdleWake) -> crate::engine::Ps {
        self.c.pmr_idle[w as usize]
    }

    /// Pushes an interrupt frame; with no entry cost the handler starts at once.
    #[inline(always)]
    fn push_irq(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32, level: Level, origin: crate::engine::Ps, flow: u64) {
        let woke = self.pmr_idle_wake(c, s.now(), level, i);
        let entry = self.srcs[i as usize].entry + self.pmr_woke(woke);
        let phase = if entry == 0 { IrqPhase::Handler } else { IrqPhase::Entry };
        let left = if entry == 0 { self.handler_start(s, c, i, level, origin) } else { entry };
        let mut f = Frame::new(Work::Irq { src: i, phase }, level, self.irq_mask(i, phase), left);
        f.origin = origin;
        f.flow = flow;
        f.woke_idle = woke;
        self.push_frame(s, c, f);
    }

    /// The handler starts now: counts the interrupt and its latency; returns the handler's length.
    #[inline(always)]
    pub(crate) fn handler_start(
        &mut self,
        s: &mut Scheduler<Ev>,
        c: usize,
        i: u32,
        level: Level,
        origin: crate::engine::Ps,
    ) -> crate::engine::Ps {
        let now = s.now();
        let lat = now - origin;
        let g = self.srcs[i as usize].group as usize;
        if let Some(l) = &mut self.src_latency[g] {
            l.record(lat);
        }
        match level {
            Level::Host => {
                self.n.host_irqs += 1;
                if !self.src_local[g] {
                    self.n.irq_latency.record(lat);
                }
            }
            Level::Guest => {
                self.n.guest_irqs += 1;
                self.n.virq_latency.record(lat);
            }
        }
        self.cpus[c].irqs += 1;
        let src = &mut self.srcs[i as usize];
        self.src_handled[src.group as usize] += 1;
        if !src.special {
            return src.handler;
        }
        src.handler_origin = origin;
        let (handler, sdei, owner) = (src.handler, src.sdei, src.owner);
        if sdei {
            src.pending = false;
            let (flow, events) = (src.flow, std::mem::take(&mut src.events));
            self.note_delivery(flow, events);
        }
        if owner == NO_OWNER {
            return handler;
        }
        P::handler_start(self, s, c, i, owner)
    }

    /// The guest takes a virtual interrupt the hypervisor injected.
    pub fn take_virtual(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32) {
        let src = &mut self.srcs[i as usize];
        src.vpending = false;
        let (origin, flow, events) = (src.vraised, src.vflow, src.vevents);
        src.vevents = 0;
        self.note_delivery(flow, events);
        self.push_irq(s, c, i, Level::Guest, origin, flow);
    }

    pub(crate) fn note_delivery(&mut self, flow: u64, events: u32) {
        if flow == 0 {
            return; // a host handler delivered this write already (a remapped VF's injection)
        }
        self.audit.events_delivered += events as u64;
        if let Some(set) = &mut self.audit.delivered {
            if !set.insert(flow) {
                self.audit.double_deliveries += 1;
            }
        }
    }

    pub fn irq_phase_done(&mut self, s: &mut Scheduler<Ev>, c: usize, i: u32, phase: IrqPhase, f: Frame) {
        if phase == IrqPhase::Handler && (self.srcs[i as usize].special || self.srcs[i as usize].gsim) {
            // (Only owned sources continue, and they are `special`: plain ones pay no test.)
            let src = &self.srcs[i as usize];
            if src.continues {
                let more = P::handler_continue(self, s, c, i, src.owner);
                if more > 0 {
                    // The same call goes on: its slice too (`continue_phase`).
                    let m = self.irq_mask(i, IrqPhase::Handler);
                    return self.continue_phase(s, c, Work::Irq { src: i, phase: IrqPhase::Handler }, m, more);
                }
            }
            self.end_top_slice(s.now(), c);
            P::handler_end(self, s, c, i, f.level);
        } else if phase == IrqPhase::Handler && f.traced {
            self.end_top_slice(s.now(), c);
        }
        if phase != IrqPhase::Handler && f.level == Level::Host {
            let src = &self.srcs[i as usize];
            self.cpus[c].irq_arch += if phase == IrqPhase::Entry {
                src.entry + self.pmr_woke(f.woke_idle)
            } else {
                src.exit - self.pmr_exit_saves(c, 1, f.level, i)
            };
        }
        match phase {
            IrqPhase::Entry => {
                let h = self.handler_start(s, c, i, f.level, f.origin);
                let m = self.irq_mask(i, IrqPhase::Handler);
                self.set_phase(s, c, Work::Irq { src: i, phase: IrqPhase::Handler }, m, h);
            }
            IrqPhase::Handler if self.srcs[i as usize].exit > 0 => {
                let x = self.srcs[i as usize].exit - self.pmr_exit_saves(c, 1, f.level, i);
                let m = self.irq_mask(i, IrqPhase::Exit);
                self.set_phase(s, c, Work::Irq { src: i, phase: IrqPhase::Exit }, m, x);
            }
            IrqPhase::Handler | IrqPhase::Exit => {
                self.pop_frame(s, c);
                self.irq_exit(s, c, f.level, i);
            }
        }
    }

    /// What source `i`'s handler leaves for its `irq_exit()`: its softirq work,
    /// and its owner's hook (a NIC queue's NAPI).
    #[inline(always)]
    pub(crate) fn raise_exit_work(&mut self, c: usize, level: Level, i: u32) {
        self.cpus[c].softirq_work[level as usize] += self.srcs[i as usize].softirq;
        let owner = self.srcs[i as usize].owner;
        if owner != NO_OWNER {
            P::irq_exit(self, c, i, level, owner);
        }
    }

    /// `irq_exit()`: raise the handler's softirq work and run it unless we are
    /// still in interrupt context; then, returning to user, maybe reschedule.
    fn irq_exit(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level, i: u32) {
        self.raise_exit_work(c, level, i);
        self.irq_exit_tail(s, c, level, i);
    }

    /// A pseudo-NMI taken over code with interrupts masked returns without
    /// `irq_exit()`: no softirqs, no preemption (arm64 `el1_interrupt` →
    /// `__el1_pnmi`, `arm64_exit_nmi`). Taken over code with interrupts on (user
    /// code, or kernel code with the PMR open) it comes through the IRQ path
    /// (`el0_interrupt`, `__el1_irq` → `gic_handle_irq` →
    /// `__gic_handle_irq_from_irqson`, with `nmi_enter`/`nmi_exit` only around
    /// its handler), whose `irq_exit_rcu()` and `exit_to_user_mode()` run as
    /// for any interrupt. An SDEI event (or a FEAT_NMI superpriority interrupt)
    /// never runs them. (Asked only where the tail would act: a plain
    /// interrupt's return to the idle loop reads no more.)
    #[inline(always)]
    fn nmi_return(&self, i: u32, under: Mask) -> bool {
        match self.srcs[i as usize].prio {
            Prio::Normal => false,
            Prio::Nmi => !under.admits(Prio::Normal),
            Prio::Super => true,
        }
    }

    /// The rest of `irq_exit()` for source `i`'s interrupt, also for one that
    /// raised nothing itself (`MaskAck`): pending softirqs run, or the task is
    /// rescheduled.
    #[inline(always)]
    pub(crate) fn irq_exit_tail(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level, i: u32) {
        let lv = level as usize;
        let work = self.cpus[c].softirq_work[lv];
        let top = *self.cpus[c].top();
        if top.level == level {
            match top.work {
                Work::Irq { .. } | Work::MaskAck { .. } => {} // nested: the outer irq_exit runs it
                Work::Softirq if work > 0 => {
                    // __do_softirq() loops while work is pending: the interrupted run takes
                    // it on, in one more pass (its PMR pair under pseudo-NMI, charged per IRQ
                    // that raised work, where the kernel restarts once for all a pass saw).
                    let pass = self.softirq_pass(level);
                    self.cpus[c].top_mut().left += work + pass;
                    self.cpus[c].softirq_work[lv] = 0;
                }
                Work::Softirq | Work::Napi { .. } => {} // the running softirq takes the poll list on
                _ => {
                    if work > 0 || !self.cpus[c].napi_list[lv].is_empty() {
                        if self.nmi_return(i, top.mask) {
                            return;
                        }
                        if self.start_softirqs(s, c, level) {
                            return;
                        }
                    }
                }
            }
        }
        if let Work::Task { phase: TaskPhase::User, .. } = top.work {
            if !self.nmi_return(i, top.mask) {
                self.resched_on_return(s, c, level);
            }
        }
    }

    /// The return to user mode once interrupt and softirq work are through
    /// (`exit_to_user_mode`, after `irq_exit()` ran `__do_softirq()`): a task
    /// whose slice is over, or that a thread waits behind, is switched out.
    #[inline(always)]
    pub(crate) fn resched_on_return(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level) {
        let top = *self.cpus[c].top();
        if let Work::Task { phase: TaskPhase::User, .. } = top.work {
            if top.level == level && self.need_resched(c, s.now(), false) {
                let f = self.pop_frame(s, c);
                self.switch_out(s, c, f);
            }
        }
    }
}

#[cfg(test)]
#[path = "irq_tests.rs"]
mod tests;
