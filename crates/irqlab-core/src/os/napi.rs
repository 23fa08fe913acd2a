//! NAPI and the softirq loop. A queue's hardirq only schedules its NAPI
//! context (`napi_schedule`); `net_rx_action` then polls each scheduled context:
//! its owner says what a round costs (`napi_poll`, e.g. up to `budget`
//! packets) and, when it ends, whether to poll again (budget used up) or
//! complete (`napi_complete_done`, which re-arms its interrupt). Busy-polled
//! queues are scheduled by the packet itself, with no interrupt.

use crate::engine::time::{Ps, PS_PER_MS};
use crate::engine::Scheduler;
use crate::platform::cpu::{Frame, Level, Mask, Work};
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::Parts;

/// `MAX_SOFTIRQ_RESTART` and `MAX_SOFTIRQ_TIME` (kernel/softirq.c): `__do_softirq`
/// runs the pending softirqs again at most this many times in all, and not past this
/// long, before it wakes ksoftirqd.
const MAX_SOFTIRQ_RESTART: u32 = 10;
const MAX_SOFTIRQ_TIME: Ps = 2 * PS_PER_MS;

impl<P: Parts> Machine<P> {
    /// Puts NAPI context `q` on CPU `c`'s poll list, unless it is already scheduled.
    pub fn napi_enqueue(&mut self, c: usize, q: u32) {
        let n = &mut self.napis[q as usize];
        if !n.scheduled {
            n.scheduled = true;
            self.cpus[c].napi_list[n.level as usize].push_back(q);
        }
    }

    pub fn napi_scheduled(&self, q: u32) -> bool {
        self.napis[q as usize].scheduled
    }

    /// A busy-polled context has work: the poll loop takes it at once
    /// (`napi_busy_loop` polls under `local_bh_disable`, not in a softirq pass).
    pub fn napi_schedule(&mut self, s: &mut Scheduler<Ev>, q: u32) {
        let c = self.napis[q as usize].cpu as usize;
        let level = self.napis[q as usize].level;
        self.napi_enqueue(c, q);
        if self.softirq_can_run(c, level) {
            self.pause_top(s, c);
            self.begin_softirqs(s, c, level, false);
            self.run_top(s, c);
        }
    }

    /// A fresh `__do_softirq` (on irq exit, or in ksoftirqd): its limits start
    /// now; then `run_softirqs`.
    pub fn start_softirqs(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level) -> bool {
        self.begin_softirqs(s, c, level, true)
    }

    /// `start_softirqs`; `pass`: a `handle_softirqs` pass, whose
    /// `local_irq_enable`/`_disable` pair pseudo-NMI makes PMR writes.
    fn begin_softirqs(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level, pass: bool) -> bool {
        let now = s.now();
        let budget = self.c.netdev_budget;
        let pass = if pass { self.softirq_pass(level) } else { 0 };
        let cpu = &mut self.cpus[c];
        let sn = &mut cpu.softnet[level as usize];
        (sn.left, sn.rx_since, sn.restarts, sn.do_since) = (budget, now, MAX_SOFTIRQ_RESTART, now);
        sn.pass_left = cpu.napi_list[level as usize].len();
        cpu.softirq_work[level as usize] += pass;
        self.run_softirqs(s, c, level)
    }

    /// What one `handle_softirqs` pass at `level` adds: its `local_irq_enable`/
    /// `_disable` pair, PMR writes under pseudo-NMI (0 under DAIF, and for a
    /// guest's softirqs: `cpu.masking` is the host's).
    #[inline]
    pub(crate) fn softirq_pass(&self, level: Level) -> Ps {
        if level == Level::Host {
            self.c.pmr_softirq
        } else {
            0
        }
    }

    /// A poll round took `work` packets: whether this `__do_softirq` must stop
    /// and leave the rest to ksoftirqd. `net_rx_action` polls each context of
    /// the list it took once; one that used its budget waits in `repoll` for
    /// the next `net_rx_action`. It ends when that list is through with
    /// something to repoll (contexts scheduled meanwhile and nothing to
    /// repoll: it takes them on), or at `netdev_budget` packets or
    /// `netdev_budget_usecs` (a time squeeze); then it re-raises NET_RX and
    /// `__do_softirq` restarts while it has restarts and time left.
    fn softnet_spent(&mut self, c: usize, level: Level, work: u32, now: Ps) -> bool {
        let (budget, limit) = (self.c.netdev_budget, self.c.netdev_budget_time);
        let pass = self.softirq_pass(level);
        let lv = level as usize;
        let cpu = &mut self.cpus[c];
        let sn = &mut cpu.softnet[lv];
        sn.left -= work as i64;
        let squeezed = sn.left <= 0 || now - sn.rx_since >= limit;
        if !squeezed && sn.pass_left == 0 && sn.repoll.is_empty() {
            // `goto start`: what was scheduled meanwhile, on the same budget (or nothing left).
            sn.pass_left = cpu.napi_list[lv].len();
            return false;
        }
        if !squeezed && sn.pass_left > 0 {
            return false;
        }
        self.n.time_squeeze += squeezed as u64;
        // The list's rest, then what was scheduled meanwhile (already in that
        // order in the poll list), then `repoll`, are the poll list again.
        cpu.end_rx_pass(lv);
        let sn = &mut cpu.softnet[lv];
        sn.restarts = sn.restarts.saturating_sub(1);
        // handle_softirqs(): `time_before(jiffies, end) && !need_resched() && --max_restart`.
        // A job thread queued on the CPU stands for a pending reschedule (a
        // wake-up on it, or on its idle loop); one merely interrupted does not.
        let need_resched = level == Level::Host && !cpu.threads.is_empty();
        let restart = !need_resched && sn.restarts > 0 && now - sn.do_since < MAX_SOFTIRQ_TIME;
        (sn.left, sn.rx_since, sn.pass_left) = (budget, now, cpu.napi_list[lv].len());
        if restart {
            // NET_RX re-raised: `handle_softirqs` goes round again, one more pass.
            cpu.softirq_work[lv] += pass;
        }
        if restart || cpu.napi_list[lv].is_empty() {
            return false;
        }
        self.n.ksoftirqd_wakeups += 1;
        // A guest's ksoftirqd runs at once on its otherwise idle vCPU (the guest's
        // idle loop is not modelled): a fresh `__do_softirq` there.
        (sn.restarts, sn.do_since) = (MAX_SOFTIRQ_RESTART, now);
        level == Level::Host
    }

    /// Softirqs run on irq exit or after a softirq frame, never inside interrupt or softirq context.
    pub fn softirq_can_run(&self, c: usize, level: Level) -> bool {
        let top = self.cpus[c].top();
        top.level == level && !matches!(top.work, Work::Irq { .. } | Work::MaskAck { .. } | Work::Softirq | Work::Napi { .. })
    }

    /// `__do_softirq()`: the next NAPI poll or the pending generic softirq work.
    /// Returns whether it pushed a frame (the caller must be allowed to: see `softirq_can_run`).
    pub fn run_softirqs(&mut self, s: &mut Scheduler<Ev>, c: usize, level: Level) -> bool {
        let lv = level as usize;
        if let Some(q) = self.cpus[c].napi_list[lv].pop_front() {
            let sn = &mut self.cpus[c].softnet[lv];
            sn.pass_left = sn.pass_left.saturating_sub(1);
            let n = self.napis[q as usize];
            let left = P::napi_poll(self, n.owner, n.arg);
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

    /// A poll round ended: its owner hands the work on; then repoll or complete.
    /// First, what landed while it ran and fits its budget is taken in the same
    /// round (the driver reads its completion queue as it goes).
    pub fn napi_done(&mut self, s: &mut Scheduler<Ev>, c: usize, q: u32, level: Level) {
        let n = self.napis[q as usize];
        let more = P::napi_continue(self, n.owner, n.arg);
        if more > 0 {
            self.set_phase(s, c, Work::Napi { q }, Mask::Open, more);
            return;
        }
        self.pop_frame(s, c);
        self.napis[q as usize].scheduled = false;
        let n = self.napis[q as usize];
        if P::napi_done(self, s, n.owner, n.arg) {
            self.napis[q as usize].scheduled = true;
            self.cpus[c].softnet[level as usize].repoll.push_back(q);
        }
        // Out of budget or time with restarts and time left, `__do_softirq`
        // runs NET_RX again; past them, or with a thread waiting to run
        // (`need_resched`, checked only there), the rest waits for ksoftirqd,
        // which runs when the CPU would idle (at once on an idle CPU; in turns
        // with job threads): a flood does not starve process context.
        let defer = self.softnet_spent(c, level, n.work, s.now());
        if defer || !(self.softirq_can_run(c, level) && self.run_softirqs(s, c, level)) {
            self.resched_on_return(s, c, level);
        }
    }
}
