//! NAPI and the softirq loop. A NIC queue's hardirq only schedules its NAPI
//! context (`napi_schedule`); `net_rx_action` then polls each scheduled queue
//! for up to `budget` packets per round. A queue that used its whole budget is
//! polled again; one that did not completes (`napi_complete_done`) and re-arms
//! its interrupt. Busy-polled queues are scheduled by the packet itself, with no
//! interrupt.

use crate::engine::Scheduler;
use crate::hw::cpu::{Frame, Level, Mask, Work};
use crate::machine::{Ev, Machine};

impl Machine {
    /// Puts queue `q` on its CPU's poll list.
    pub(crate) fn napi_enqueue(&mut self, c: usize, q: u32) {
        let rx = &mut self.rxqs[q as usize];
        if !rx.napi_scheduled {
            rx.napi_scheduled = true;
            self.cpus[c].napi_list[rx.level as usize].push_back(q);
        }
    }

    /// A busy-polled queue has a packet: the poll loop takes it at once.
    pub(crate) fn napi_schedule(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let c = self.rxqs[q as usize].cpu as usize;
        let level = self.rxqs[q as usize].level;
        self.napi_enqueue(c, q);
        if self.softirq_can_run(c, level) {
            self.pause_top(s, c);
            self.run_softirqs(s, c, level);
            self.run_top(s, c);
        }
    }

    /// Softirqs run on irq exit or after a softirq frame, never inside interrupt or softirq context.
    pub(crate) fn softirq_can_run(&self, c: usize, level: Level) -> bool {
        let top = self.cpus[c].top();
        top.level == level && !matches!(top.work, Work::Irq { .. } | Work::Softirq | Work::Napi { .. })
    }

    /// `__do_softirq()`: the next NAPI poll or the pending generic softirq work.
    /// Returns whether it pushed a frame (the caller must be allowed to: see `softirq_can_run`).
    pub(crate) fn run_softirqs(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level) -> bool {
        let lv = level as usize;
        if let Some(q) = self.cpus[c].napi_list[lv].pop_front() {
            let rx = &mut self.rxqs[q as usize];
            let grp = &self.nics[rx.group as usize];
            rx.poll_n = (rx.ring_pkts.len() as u32).min(grp.budget);
            let left = grp.per_poll + rx.poll_n as u64 * grp.per_packet;
            self.push_frame(s, c, Frame::new(Work::Napi { q }, level, Mask::Open, left));
            return true;
        }
        let work = std::mem::take(&mut self.cpus[c].softirq_work[lv]);
        if work > 0 {
            self.push_frame(s, c, Frame::new(Work::Softirq, level, Mask::Open, work));
            return true;
        }
        false
    }

    /// A poll round ended: hand its packets up the stack, then repoll or complete.
    pub(crate) fn napi_done(&mut self, s: &mut Scheduler<Ev>, c: usize, q: u32, level: Level) {
        let now = s.now();
        self.pop_frame(s, c);
        let rx = &mut self.rxqs[q as usize];
        let grp = &mut self.nics[rx.group as usize];
        grp.polls += 1;
        // The round's cost was set by the packets it found when it started.
        let n = rx.poll_n;
        for _ in 0..n {
            let (t, bytes) = rx.ring_pkts.pop_front().expect("n <= ring");
            grp.rx_pkts += 1;
            grp.life_rx += 1;
            grp.rx_bytes += bytes as u64;
            grp.payload_bytes += bytes.saturating_sub(crate::hw::nic::HEADERS) as u64;
            grp.latency.record(now - t);
            rx.modq.pkts += 1;
            rx.modq.bytes += bytes as u64;
        }
        rx.napi_scheduled = false;
        if n == grp.budget {
            // Budget used up: more may be waiting; poll again later in this softirq run.
            self.napi_enqueue(c, q);
        } else if rx.polling {
            if !rx.ring_pkts.is_empty() {
                self.napi_enqueue(c, q);
            }
        } else {
            self.rx_rearm(s, q);
        }
        if self.softirq_can_run(c, level) {
            self.run_softirqs(s, c, level);
        }
    }
}
