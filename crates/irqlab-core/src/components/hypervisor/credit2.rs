//! Xen's credit2 (`xen/common/sched/credit2.c`) and null (`sched/null.c`)
//! schedulers: which vCPU a pCPU runs next (`csched2_schedule`,
//! `runq_candidate`), which pCPU a woken vCPU is sent to (`runq_tickle`), and
//! credits and slices (`burn_credits`, `reset_credit`, `csched2_runtime`).
//!
//! credit2 keeps one runqueue for the socket (`credit2_runqueue=socket`, the
//! default), so a vCPU runs wherever a pCPU is free and migrates when its own
//! is busy. null gives each vCPU one pCPU for good.

use super::params::{SchedKind, Vwfi};
use super::state::{ev, hv, notify_switch, push_work, raise_resched, send_ipi, HypEv, Hypervisor, Mode, Vcpu, VcpuState};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};

/// `CSCHED2_RATELIMIT_TICKLE_TOLERANCE`: a vCPU this close to the rate limit may be preempted.
const TICKLE_TOLERANCE: Ps = 50_000_000;

fn may_run(vc: &Vcpu, p: u32) -> bool {
    vc.pinned.is_none_or(|c| c == p)
}

/// KVM's "another task is runnable on this CPU" (`single_task_running()`),
/// with per-CPU runqueues: a queued vCPU tickled to `p`, or one with no live
/// tickle (none, or to a pCPU that has scheduled since) that last ran on `p`.
pub(super) fn others_runnable(h: &Hypervisor, p: u32) -> bool {
    h.runq.iter().any(|&u| {
        let vc = &h.vcpus[u as usize];
        let tickled = vc.tickled_cpu.filter(|&t| h.pcpus[t as usize].tickled);
        may_run(vc, p) && (tickled == Some(p) || (tickled.is_none() && vc.processor == p))
    })
}

/// Xen's adaptive WFI (the review's proposal): another vCPU is runnable on
/// pCPU `p`. credit2's runqueue is the socket's, so that is any queued vCPU
/// that may run on `p` and is not held for another pCPU tickled for it that
/// has not scheduled yet (`rqd->tickled`), wherever it last ran: a pCPU
/// that schedules pulls it (`runq_candidate`). (Until 2026-11-26 it was
/// KVM's per-CPU rule, which left a pCPU idling in a guest's WFI while a vCPU
/// it would have taken waited; a review found it.)
pub(super) fn runnable_here(h: &Hypervisor, p: u32) -> bool {
    h.runq.iter().any(|&u| {
        let vc = &h.vcpus[u as usize];
        let held = vc.tickled_cpu.is_some_and(|t| t != p && h.pcpus[t as usize].tickled);
        may_run(vc, p) && !held
    })
}

/// Whether a schedule on `p` now would take a queued vCPU: the scheduler's
/// own choice, against which the WFI policies are checked (the statistics'
/// "others"), independently of the predicates above.
pub(super) fn would_take_one(h: &Hypervisor, p: u32) -> bool {
    best_queued(h, p, None).is_some()
}

/// `burn_credits`: the running vCPU pays for its time.
fn burn(h: &mut Hypervisor, p: u32, now: Ps) {
    let pc = &mut h.pcpus[p as usize];
    if let Some(v) = pc.cur {
        h.vcpus[v as usize].credit -= now.saturating_sub(pc.last_burn) as i64;
    }
    pc.last_burn = now;
}

/// `runq_candidate`: the runqueue's best vCPU for `p` (most credit, first
/// queued on ties), against a current one with `floor` credit. A vCPU tickled
/// to another pCPU that has not scheduled yet is left for it, and one that last
/// ran elsewhere is pulled only with `migrate_resist` more credit.
fn best_queued(h: &Hypervisor, p: u32, floor: Option<i64>) -> Option<u32> {
    let mut best: Option<u32> = None;
    for &u in &h.runq {
        let vc = &h.vcpus[u as usize];
        if !may_run(vc, p) {
            continue;
        }
        if vc.tickled_cpu.is_some_and(|t| t != p && h.pcpus[t as usize].tickled) {
            continue;
        }
        let base = best.map(|b| h.vcpus[b as usize].credit).or(floor);
        if vc.processor != p && base.is_some_and(|b| b + h.c.migrate_resist as i64 > vc.credit) {
            continue;
        }
        if best.is_none_or(|b| vc.credit > h.vcpus[b as usize].credit) {
            best = Some(u);
        }
    }
    best
}

/// `reset_credit`: everyone's credit is clipped to the carry-over and topped
/// up, after the vCPUs running on other pCPUs are charged for their time so
/// far (`burn_credits` on each running unit first: charged after the top-up,
/// a vCPU above the carry-over lost credit it had not yet spent; a review).
fn reset_credit(h: &mut Hypervisor, now: Ps) {
    for p in 0..h.pcpus.len() as u32 {
        burn(h, p, now);
    }
    let (init, carry) = (h.c.credit_init as i64, h.c.min_timer as i64);
    for vc in &mut h.vcpus {
        vc.credit = vc.credit.min(carry) + init;
    }
}

/// `schedule()` on pCPU `p`: pick what runs next and switch to it.
pub(super) fn schedule<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, p: u32) {
    let now = s.now();
    let h = hv(m);
    burn(h, p, now);
    let pc = &mut h.pcpus[p as usize];
    pc.resched = false;
    pc.tickled = false;
    if let Some(t) = pc.slice.take() {
        s.cancel(t);
    }
    let cur = pc.cur;
    let ran = now.saturating_sub(pc.ran_since);
    let cur_runnable = cur.filter(|&v| h.vcpus[v as usize].state == VcpuState::Running);
    let next = match h.kind.expect("configured") {
        SchedKind::Null => cur_runnable.or_else(|| best_queued(h, p, None)),
        SchedKind::Credit2 => match cur_runnable {
            Some(v) if h.c.ratelimit > 0 && ran < h.c.ratelimit => Some(v),
            _ => {
                let q = best_queued(h, p, cur_runnable.map(|v| h.vcpus[v as usize].credit));
                match (cur_runnable, q) {
                    (Some(v), Some(u)) if h.vcpus[v as usize].credit >= h.vcpus[u as usize].credit => Some(v),
                    (c, None) => c,
                    (_, u) => u,
                }
            }
        },
    };
    if next.is_some_and(|v| epoch_over(h.vcpus[v as usize].credit, head_credit(h, Some(v)))) {
        reset_credit(h, now);
    }
    if next != cur {
        h.stats.switches += 1;
        if let Some(u) = cur {
            if h.vcpus[u as usize].state == VcpuState::Running {
                h.vcpus[u as usize].state = VcpuState::Runnable;
                h.runq.push(u);
            }
        }
        if let Some(v) = next {
            h.runq.retain(|&u| u != v);
            let vc = &mut h.vcpus[v as usize];
            if vc.processor != p {
                h.stats.migrations += 1;
            }
            vc.processor = p;
            vc.state = VcpuState::Running;
            vc.tickled_cpu = None;
        }
        let pc = &mut h.pcpus[p as usize];
        pc.cur = next;
        pc.ran_since = now;
        // `ctxt_switch_from` and `ctxt_switch_to` return at once for the idle
        // vCPU (xen/arch/arm/domain.c): going idle only saves, coming back
        // only restores, half of a switch between two vCPUs each.
        let cost = if cur.is_some() && next.is_some() { h.c.context_switch } else { h.c.context_switch / 2 };
        let (out, inn) = (h.on_switch_out, h.on_switch_in);
        let preempted = cur.filter(|&u| h.vcpus[u as usize].state == VcpuState::Runnable && h.kind == Some(SchedKind::Credit2));
        push_work(m, p, cost);
        if let Some(u) = cur {
            notify_switch(m, s, out, u);
        }
        if let Some(v) = next {
            notify_switch(m, s, inn, v);
        }
        // `csched2_context_saved`: a vCPU taken off its pCPU while still
        // runnable goes back in the runqueue and is offered to another pCPU
        // (`runq_tickle`): an idle one, or one whose vCPU it out-credits.
        if let Some(u) = preempted {
            hv(m).stats.preempts += 1;
            tickle::<P>(m, s, u, p);
            // The audit: left waiting although `runq_tickle` would place it.
            let h = hv(m);
            if h.vcpus[u as usize].tickled_cpu.is_none() && h.vcpus[u as usize].state == VcpuState::Runnable {
                let order = tickle_order(h, u);
                if idle_target(h, &order).is_some() || preempt_target(h, u, &order, now).is_some() {
                    h.stats.preempted_unoffered += 1;
                }
            }
        }
    }
    // null arms no timer: `null_schedule` returns `next_time = -1` (`sched/null.c`),
    // so a vCPU alone on its pCPU is never interrupted by the scheduler.
    if let Some(v) = next.filter(|_| hv(m).kind == Some(SchedKind::Credit2)) {
        set_slice::<P>(hv(m), s, p, v);
    }
}

/// `csched2_runtime`: run until the runqueue's head (its most credit, any
/// vCPU) would have more credit, or for its own credit if none waits with
/// credit left; at least `CSCHED2_MIN_TIMER` and what is left of the rate
/// limit, at most `CSCHED2_MAX_TIMER` (`credit_init`).
fn set_slice<P: Parts>(h: &mut Hypervisor, s: &mut Scheduler<Ev>, p: u32, v: u32) {
    let ran = s.now().saturating_sub(h.pcpus[p as usize].ran_since);
    let len = runtime(&h.c, h.vcpus[v as usize].credit, head_credit(h, Some(v)), ran);
    h.pcpus[p as usize].slice = Some(s.timer_after(len, ev::<P>(HypEv::Slice, p)));
}

/// The runqueue head's credit (Xen keeps the runqueue sorted by credit), but
/// `except`'s: the one being scheduled is out of it there.
fn head_credit(h: &Hypervisor, except: Option<u32>) -> Option<i64> {
    h.runq.iter().filter(|&&u| Some(u) != except).map(|&u| h.vcpus[u as usize].credit).max()
}

/// The slice `csched2_runtime` gives a vCPU with `credit` when the runqueue's
/// head has `head` and the vCPU has run `ran` since it was switched in.
fn runtime(c: &super::state::Costs, credit: i64, head: Option<i64>, ran: Ps) -> Ps {
    let min_time = c.min_timer.max(c.ratelimit.saturating_sub(ran));
    let rt = match head.filter(|&h| h > 0) {
        Some(h) => credit - h,
        None => credit,
    };
    (rt.max(0) as Ps).clamp(min_time, c.credit_init.max(min_time))
}

/// `csched2_schedule`'s reset condition: an epoch ends when the chosen vCPU
/// and the runqueue's head both have no credit left (`CSCHED2_CREDIT_RESET`):
/// the head may have credit the chosen one does not (affinity, a tickle).
fn epoch_over(credit: i64, head: Option<i64>) -> bool {
    credit.max(head.unwrap_or(i64::MIN)) <= 0
}

/// The pCPUs `v` may run on, its own first (`runq_tickle`'s order).
fn tickle_order(h: &Hypervisor, v: u32) -> Vec<u32> {
    let np = h.pcpus.len() as u32;
    let home = h.vcpus[v as usize].processor;
    (0..np).map(|k| (home + k) % np).filter(|&c| may_run(&h.vcpus[v as usize], c)).collect()
}

/// An idle pCPU not tickled yet, the first in `order`.
fn idle_target(h: &Hypervisor, order: &[u32]) -> Option<u32> {
    order.iter().copied().find(|&c| h.pcpus[c as usize].cur.is_none() && !h.pcpus[c as usize].tickled)
}

/// credit2 only: the pCPU where `v` would preempt, among those past the rate
/// limit: its own if it scores above 0 there (`tickle_score`: its credit over
/// the running vCPU's), else the best score elsewhere, less `migrate_resist`.
fn preempt_target(h: &mut Hypervisor, v: u32, order: &[u32], now: Ps) -> Option<u32> {
    if h.kind != Some(SchedKind::Credit2) {
        return None;
    }
    let home = h.vcpus[v as usize].processor;
    let mut best: Option<(i64, u32)> = None;
    for &c in order {
        burn(h, c, now);
        let pc = &h.pcpus[c as usize];
        let Some(u) = pc.cur else { continue };
        if pc.tickled || now.saturating_sub(pc.ran_since) + TICKLE_TOLERANCE < h.c.ratelimit {
            continue;
        }
        let resist = if c != home { h.c.migrate_resist as i64 } else { 0 };
        let score = h.vcpus[v as usize].credit - h.vcpus[u as usize].credit - resist;
        // Its own pCPU is in its soft affinity (all pCPUs by default): taken
        // at once if it scores at all, before any other is looked at.
        if c == home && score > 0 {
            return Some(c);
        }
        if score > 0 && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `runq_tickle`: a woken vCPU `v` needs a pCPU. An idle one (its own first),
/// else the one where it would preempt with the best score, else none (it waits
/// in the runqueue). `from` is the pCPU running this code.
pub(super) fn tickle<P: Parts>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, v: u32, from: u32) {
    let now = s.now();
    let h = hv(m);
    let order = tickle_order(h, v);
    if let Some(c) = idle_target(h, &order) {
        h.vcpus[v as usize].tickled_cpu = Some(c);
        return raise_resched(m, s, c, Some(from));
    }
    // KVM: a halted vCPU's thread polls only while no other task could run on
    // its CPU (`kvm_vcpu_can_poll`: `single_task_running()`), so a polling pCPU
    // takes a woken vCPU next to an idle one: `wake` ends the poll there. (It
    // was busy to this search: a woken vCPU waited out the 1 ms rate limit
    // while other pCPUs polled, a review found.)
    if let Some(&c) = order.iter().find(|&&c| h.pcpus[c as usize].polling.is_some() && !h.pcpus[c as usize].tickled) {
        h.vcpus[v as usize].tickled_cpu = Some(c);
        h.pcpus[c as usize].tickled = true;
        return;
    }
    if let Some(c) = preempt_target(h, v, &order, now) {
        h.vcpus[v as usize].tickled_cpu = Some(c);
        return raise_resched(m, s, c, Some(from));
    }
    // Adaptive WFI: a pCPU idling in a guest's WFI is made to execute it again,
    // now trapping since `v` is tickled to it. The vCPU's own pCPU is tried first,
    // as `runq_tickle` does. Like `tickle_cpu` (`cpu_raise_softirq`), the pCPU
    // running this code needs no IPI: its guest, with nothing to do, runs WFI at
    // its entry. Any other is kicked only if it idles in WFI and is not tickled yet.
    if matches!(h.vwfi, Some(Vwfi::Adaptive | Vwfi::Kvm)) {
        let will_wfi = |c: u32| {
            h.pcpus[c as usize].cur.is_some_and(|u| {
                let uc = &h.vcpus[u as usize];
                uc.cur.is_none() && uc.guest_q.is_empty() && uc.virqs.is_empty()
            })
        };
        let takes = |c: u32| {
            let pc = &h.pcpus[c as usize];
            !pc.tickled && if c == from { will_wfi(c) } else { pc.mode == Mode::GuestIdle }
        };
        let pick = order.iter().copied().find(|&c| takes(c));
        if let Some(c) = pick {
            h.vcpus[v as usize].tickled_cpu = Some(c);
            h.pcpus[c as usize].tickled = true;
            if c != from {
                send_ipi(m, from, HypEv::SendKick, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::time::{PS_PER_MS, PS_PER_US};

    fn costs() -> super::super::state::Costs {
        super::super::state::Costs { ratelimit: PS_PER_MS, min_timer: 500 * PS_PER_US, credit_init: 10 * PS_PER_MS, ..Default::default() }
    }

    /// `csched2_runtime` in Xen's terms: own credit alone, or its lead over the
    /// head; never under the rest of the rate limit or `CSCHED2_MIN_TIMER`.
    #[test]
    fn a_slice_is_the_lead_over_the_head_within_the_timers() {
        let c = costs();
        let ms = PS_PER_MS as i64;
        // Nobody waits with credit: its own credit (3 ms), not a whole 10 ms.
        assert_eq!(runtime(&c, 3 * ms, None, 0), 3 * PS_PER_MS);
        assert_eq!(runtime(&c, 3 * ms, Some(-ms), 0), 3 * PS_PER_MS);
        // A head with 2.5 ms: 0.5 ms of lead, raised to the 1 ms rate limit when just switched in...
        assert_eq!(runtime(&c, 3 * ms, Some(5 * ms / 2), 0), PS_PER_MS);
        // ...and to what is left of it (0.7 ms) after running 0.3 ms; never under 0.5 ms.
        assert_eq!(runtime(&c, 3 * ms, Some(5 * ms / 2), 300 * PS_PER_US), 700 * PS_PER_US);
        assert_eq!(runtime(&c, 3 * ms, Some(5 * ms / 2), 5 * PS_PER_MS), 500 * PS_PER_US);
        // At most CSCHED2_MAX_TIMER.
        assert_eq!(runtime(&c, 12 * ms, None, 0), 10 * PS_PER_MS);
    }

    /// The reset condition looks at the head too (`top_credit`).
    #[test]
    fn an_epoch_ends_when_neither_the_chosen_nor_the_head_has_credit() {
        assert!(epoch_over(-5, None));
        assert!(epoch_over(0, Some(-3)));
        assert!(!epoch_over(-5, Some(7)), "the head still has credit");
        assert!(!epoch_over(2, Some(-3)));
    }
}
