//! Components' threads in the kernel: work a device's user (fio's jobs) does
//! in process context on a CPU — the submission path of an I/O, a polled
//! queue's reaping. It queues per CPU in FIFO order and runs when the CPU
//! would otherwise idle; interrupts and softirqs nest over it, so a CPU busy
//! in hardirq delays it (and the I/Os behind it): the CPU can saturate.

use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::cpu::{Frame, Level, Mask, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// Queues `len` of work for component `owner` on CPU `c`; its
    /// `thread_done(arg)` hook runs when the work is through.
    pub fn thread_work(&mut self, s: &mut Scheduler<Ev>, c: usize, owner: u8, arg: u32, len: Ps) {
        self.cpus[c].threads.push_back((owner, arg, len));
        // An idle CPU starts it now; a busy one takes it when it would go idle (`run_top`).
        if self.idle_host(c) && !self.asleep(s, c) {
            self.pause_top(s, c);
            self.run_top(s, c);
        }
    }

    /// Whether the CPU runs the host's idle loop and nothing over it.
    #[inline]
    pub(crate) fn idle_host(&self, c: usize) -> bool {
        let top = self.cpus[c].top();
        top.work == Work::Idle && top.level == Level::Host && self.cpus[c].stack.len() == 1
    }

    /// The CPU would idle: run what waits for process context, and say whether
    /// a frame was pushed. A job thread and ksoftirqd (softirq work deferred
    /// to it, see `napi_done`) take turns, as CFS would share the CPU.
    #[inline]
    pub(crate) fn idle_work(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        let cpu = &self.cpus[c];
        let softirq = !cpu.napi_list[0].is_empty() || cpu.softirq_work[0] > 0;
        if (cpu.threads.is_empty() && !softirq) || !self.idle_host(c) {
            return false;
        }
        let cpu = &mut self.cpus[c];
        if softirq && (cpu.threads.is_empty() || cpu.thread_ran) {
            cpu.thread_ran = false;
            // ksoftirqd's run brackets its pass with one more disable/enable pair.
            cpu.softirq_work[0] += self.c.pmr_ksoftirqd;
            return self.start_softirqs(s, c, Level::Host);
        }
        cpu.thread_ran = true;
        self.start_thread(s, c)
    }

    /// Starts the next queued thread work, if any.
    #[inline]
    fn start_thread(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        let Some((owner, arg, len)) = self.cpus[c].threads.pop_front() else { return false };
        self.push_frame(s, c, Frame::new(Work::Thread { owner, arg }, Level::Host, Mask::Open, len));
        P::thread_start(self, s, c, owner, arg);
        true
    }

    /// A thread's work ran to its end.
    pub(crate) fn thread_done(&mut self, s: &mut Scheduler<Ev>, c: usize, owner: u8, arg: u32) {
        self.pop_frame(s, c);
        P::thread_done(self, s, c, owner, arg);
    }
}
