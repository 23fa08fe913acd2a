//! Waking a CPU from its idle state (`cstate`): work that finds the CPU
//! asleep starts the state's exit and waits in its queues; `Ev::Wake` ends the
//! exit and the CPU runs what waited.

use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

impl<P: Parts> Machine<P> {
    /// Work for CPU `c` (an interrupt it admits, a thread) that finds it asleep
    /// in an idle state: the state's exit starts, or is already under way.
    /// `true` when the caller must leave the work queued for `Ev::Wake`.
    #[inline(always)]
    pub(crate) fn asleep(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        if !self.c.cstates {
            return false; // no idle states: one test
        }
        self.cpus[c].waking || self.start_exit(s, c)
    }

    /// Starts CPU `c`'s exit from the idle state its idle period reached, if
    /// it sleeps in one that costs anything.
    #[cold]
    #[inline(never)]
    fn start_exit(&mut self, s: &mut Scheduler<Ev>, c: usize) -> bool {
        let now = s.now();
        // Not asleep: busy, spinning in a poll loop, or back in the idle
        // loop only this instant (the work is taken on the way out).
        if !self.idle_host(c) || self.cpus[c].spins || now <= self.cpus[c].popped_at {
            return false;
        }
        let Some(k) = self.cstates.state_for(now - self.cpus[c].popped_at) else { return false };
        self.cstates.wakes[k] += 1;
        let exit = self.cstates.exit[k];
        if exit == 0 {
            return false;
        }
        self.cstates.exit_time += exit;
        self.cpus[c].waking = true;
        if self.tracer.on() {
            let name = format!("{} exit", self.cstates.names()[k]);
            self.tracer.begin(now, self.cpus[c].track, "idle", &name, None);
        }
        s.after(exit, Ev::Wake(c as u32));
        true
    }

    /// CPU `c`'s exit is over: it takes what waited.
    pub(crate) fn wake_done(&mut self, s: &mut Scheduler<Ev>, c: usize) {
        self.cpus[c].waking = false;
        if self.tracer.on() {
            self.tracer.end(s.now(), self.cpus[c].track);
        }
        self.pause_top(s, c);
        self.run_top(s, c);
    }
}

#[cfg(test)]
#[path = "cstate_tests.rs"]
mod machine_tests;
