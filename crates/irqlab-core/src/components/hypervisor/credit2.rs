//! Xen's credit2 (`xen/common/sched/credit2.c`) and null (`sched/null.c`)
//! schedulers: which vCPU a pCPU runs next (`csched2_schedule`,
//! `runq_candidate`), which pCPU a woken vCPU is sent to (`runq_tickle`), and
//! credits and slices (`burn_credits`, `reset_credit`, `csched2_runtime`).
//!
//! credit2 keeps one runqueue for the socket (`credit2_runqueue=socket`, the
//! default; Xen splits a socket into runqueues of at most 16 pCPUs,
//! `sched_credit2_max_cpus_runqueue`, and on Arm every pCPU is socket 0, so
//! this holds up to 16 pCPUs), so a vCPU runs wherever a pCPU is free and
//! migrates when its own is busy. null gives each vCPU one pCPU for good.
//!
//! Left out: a vCPU taken off its pCPU while runnable is queued and offered at
//! the decision, where Xen does both once the context switch is over
//! (`csched2_context_saved`), a switch's cost (1–2 µs) later.

use super::params::{SchedKind, Vwfi};
use super::state::{ev, hv, notify_switch, push_work, raise_resched, send_ipi, HypEv, Hypervisor, Mode, Vcpu, VcpuState};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine, Parts};

/// `CSCHED2_RATELIMIT_TICKLE_TOLERANCE`: a vCPU this close to the rate limit may be preempted.
const TICKLE_TOLERANCE: Ps = 50_000_000;
/// `CSCHED2_MIGRATE_COMPENSATION`: credit a vCPU gains each time a pCPU
/// pulls it from another (`csched2_schedule`).
const MIGRATE_COMPENSATION: i64 = 50_000_000;

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

/// The proposed adaptive WFI (the review's proposal; Xen has only `trap` and `native`): another vCPU is runnable on
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

/// `burn_credits`: the running vCPU pays for its time, down to
/// `CSCHED2_CREDIT_MIN` (−`credit_init`; `t2c_update`).
fn burn(h: &mut Hypervisor, p: u32, now: Ps) {
    let pc = &mut h.pcpus[p as usize];
    if let Some(v) = pc.cur {
        let vc = &mut h.vcpus[v as usize];
        vc.credit = (vc.credit - now.saturating_sub(pc.last_burn) as i64).max(-(h.c.credit_init as i64));
    }
    pc.last_burn = now;
}

/// `runq_insert`: credit2's runqueue is sorted by credit, most first, FIFO
/// among equals; a credit reset keeps that order, so it is never re-sorted.
/// null's waitqueue is FIFO (`null_unit_insert`).
pub(super) fn runq_insert(h: &mut Hypervisor, v: u32) {
    let credit = h.vcpus[v as usize].credit;
    let pos = match h.kind {
        Some(SchedKind::Credit2) => h.runq.iter().position(|&u| credit > h.vcpus[u as usize].credit),
        _ => None,
    };
    h.runq.insert(pos.unwrap_or(h.runq.len()), v);
}

/// `runq_candidate`: the first vCPU in credit order that `p` may take
/// against `floor`, the credit of the runnable current vCPU, or without one
/// the idle unit's (`CSCHED2_IDLE_CREDIT`, below any vCPU's). The scan ends at
/// the first with no more credit than that; a vCPU tickled to another pCPU
/// that has not scheduled yet is left for it, and one that last ran elsewhere
/// is pulled only with `migrate_resist` more credit than that.
/// (Until 2026-11-29 it took the most credit and weighed a remote vCPU
/// against the best found so far, which could leave a remote vCPU for a local
/// one with less; an audit against credit2.c.)
fn best_queued(h: &Hypervisor, p: u32, floor: Option<i64>) -> Option<u32> {
    if h.kind == Some(SchedKind::Null) {
        return best_waiting(h, p, floor);
    }
    let snext = floor.unwrap_or(-(h.c.credit_init as i64) - 1);
    for &u in &h.runq {
        let vc = &h.vcpus[u as usize];
        if vc.credit <= snext {
            break;
        }
        if !may_run(vc, p) || vc.tickled_cpu.is_some_and(|t| t != p && h.pcpus[t as usize].tickled) {
            continue;
        }
        if vc.processor != p && snext + h.c.migrate_resist as i64 > vc.credit {
            continue;
        }
        return Some(u);
    }
    None
}

/// null: a waiting vCPU that may run on `p` (its pinned one).
fn best_waiting(h: &Hypervisor, p: u32, floor: Option<i64>) -> Option<u32> {
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

/// `reset_credit`: everyone's credit is topped up by `credit_init` and
/// clipped to it plus the carry-over, after the vCPUs running on other pCPUs
/// are charged for their time so far (`burn_credits` on each running unit
/// first: charged after the top-up, a vCPU above the carry-over lost credit it
/// had not yet spent; a review). Twice `credit_init` when the chosen vCPU
/// `next` sits at the floor, so that it is in the black again.
fn reset_credit(h: &mut Hypervisor, now: Ps, next: u32) {
    for p in 0..h.pcpus.len() as u32 {
        burn(h, p, now);
    }
    let (init, carry) = (h.c.credit_init as i64, h.c.min_timer as i64);
    let top_up = if h.vcpus[next as usize].credit == -init { 2 * init } else { init };
    for vc in &mut h.vcpus {
        vc.credit = (vc.credit + top_up).min(init + carry);
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
    if let Some(v) = next.filter(|&v| epoch_over(h.vcpus[v as usize].credit, head_credit(h, Some(v)))) {
        reset_credit(h, now, v);
    }
    if next != cur {
        h.stats.switches += 1;
        if let Some(u) = cur {
            if h.vcpus[u as usize].state == VcpuState::Running {
                h.vcpus[u as usize].state = VcpuState::Runnable;
                runq_insert(h, u);
            }
        }
        if let Some(v) = next {
            h.runq.retain(|&u| u != v);
            let vc = &mut h.vcpus[v as usize];
            if vc.processor != p {
                h.stats.migrations += 1;
                if h.kind == Some(SchedKind::Credit2) {
                    vc.credit += MIGRATE_COMPENSATION;
                }
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
/// the running vCPU's), else the best score elsewhere, less `migrate_resist`,
/// the lowest-numbered on a tie (`for_each_cpu` over the others).
fn preempt_target(h: &mut Hypervisor, v: u32, order: &[u32], now: Ps) -> Option<u32> {
    if h.kind != Some(SchedKind::Credit2) {
        return None;
    }
    let home = h.vcpus[v as usize].processor;
    let mut best: Option<(i64, u32)> = None;
    // `order` starts at its own pCPU; among the others a tie goes to the
    // lowest-numbered, whatever the order's wrap.
    for &c in order {
        burn(h, c, now);
        let pc = &h.pcpus[c as usize];
        let Some(u) = pc.cur else { continue };
        if pc.tickled || now.saturating_sub(pc.ran_since) + TICKLE_TOLERANCE <= h.c.ratelimit {
            continue;
        }
        let resist = if c != home { h.c.migrate_resist as i64 } else { 0 };
        let score = h.vcpus[v as usize].credit - h.vcpus[u as usize].credit - resist;
        // Its own pCPU is in its soft affinity (all pCPUs by default): taken
        // at once if it scores at all, before any other is looked at.
        if c == home && score > 0 {
            return Some(c);
        }
        if score > 0 && best.is_none_or(|(b, bc)| score > b || (score == b && c < bc)) {
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

    /// A credit2 hypervisor of `np` idle pCPUs and vCPUs of the given
    /// (credit in µs, last pCPU), none queued.
    fn hyp(np: u32, vcpus: &[(i64, u32)]) -> Hypervisor {
        let pcpus = (0..np).map(|_| super::super::state::Pcpu::idle(Default::default())).collect();
        let vcpus = vcpus.iter().map(|&(credit_us, processor)| Vcpu::runnable(processor, None, credit_us * PS_PER_US as i64)).collect();
        let c = super::super::state::Costs { migrate_resist: 500 * PS_PER_US, ..costs() };
        Hypervisor { kind: Some(SchedKind::Credit2), pcpus, vcpus, c, ..Default::default() }
    }

    /// `runq_insert`: most credit first, FIFO among equals.
    #[test]
    fn the_runqueue_is_kept_in_credit_order_first_come_first_among_equals() {
        let mut h = hyp(1, &[(3, 0), (5, 0), (3, 0), (7, 0)]);
        for v in 0..4 {
            runq_insert(&mut h, v);
        }
        assert_eq!(h.runq, vec![3, 1, 0, 2]);
    }

    /// `runq_candidate` (credit2.c): the first acceptable vCPU in credit
    /// order, a remote one weighed against the current vCPU's credit or the
    /// idle unit's, not against a local candidate with less credit.
    #[test]
    fn a_pcpu_takes_the_first_acceptable_vcpu_in_credit_order() {
        // vCPU 0 last ran here with 4.8 ms, vCPU 1 elsewhere with 5.0 ms.
        let mut h = hyp(2, &[(4_800, 0), (5_000, 1)]);
        runq_insert(&mut h, 0);
        runq_insert(&mut h, 1);
        let us = PS_PER_US as i64;
        // Idle here: resistance is against the idle unit, so the remote one goes first.
        assert_eq!(best_queued(&h, 0, None), Some(1));
        // Against a current vCPU with 4.6 ms, the remote one lacks the 0.5 ms; the local one wins.
        assert_eq!(best_queued(&h, 0, Some(4_600 * us)), Some(0));
        // Against 4.8 ms nobody has more credit: the scan stops, the current vCPU stays.
        assert_eq!(best_queued(&h, 0, Some(4_800 * us)), None);
    }

    /// `runq_tickle`: a woken vCPU that scores the same on several busy pCPUs
    /// goes to the lowest-numbered (`for_each_cpu`), not the next after its own.
    #[test]
    fn a_preemption_tie_goes_to_the_lowest_numbered_pcpu() {
        // vCPUs 0-3 run on pCPUs 0-3; vCPU 4 (last on pCPU 2) wakes with more credit than all but pCPU 2's.
        let mut h = hyp(4, &[(1_000, 0), (1_000, 1), (9_000, 2), (1_000, 3), (5_000, 2)]);
        let now = 2 * PS_PER_MS;
        for p in 0..4u32 {
            h.pcpus[p as usize].cur = Some(p);
            h.pcpus[p as usize].last_burn = now;
            h.vcpus[p as usize].state = VcpuState::Running;
        }
        let order = tickle_order(&h, 4);
        assert_eq!(order, vec![2, 3, 0, 1]);
        assert_eq!(preempt_target(&mut h, 4, &order, now), Some(0));
    }

    /// `t2c_update` floors credit at `CSCHED2_CREDIT_MIN`, and `reset_credit`
    /// tops up twice when the chosen vCPU sits there.
    #[test]
    fn credit_stops_at_the_floor_and_a_reset_from_it_tops_up_twice() {
        let mut h = hyp(1, &[(2_000, 0), (12_000, 0)]);
        h.pcpus[0].cur = Some(0);
        burn(&mut h, 0, 30 * PS_PER_MS);
        assert_eq!(h.vcpus[0].credit, -10 * PS_PER_MS as i64);
        reset_credit(&mut h, 30 * PS_PER_MS, 0);
        assert_eq!(h.vcpus[0].credit, 10 * PS_PER_MS as i64, "-10 + 2 x 10 ms");
        assert_eq!(h.vcpus[1].credit, 10_500 * PS_PER_US as i64, "clipped to credit_init + the carry-over");
    }

    /// The reset condition looks at the head too (`top_credit`).
    #[test]
    fn an_epoch_ends_when_neither_the_chosen_nor_the_head_has_credit() {
        assert!(epoch_over(-5, None));
        assert!(epoch_over(0, Some(-3)));
        assert!(!epoch_over(-5, Some(7)), "the head still has credit");
        assert!(!epoch_over(2, Some(-3)));
    }

    /// `runq_candidate` resists a remote vCPU only while
    /// `snext->credit + CSCHED2_MIGRATE_RESIST > svc->credit`: exactly
    /// `migrate_resist` more credit than the current vCPU is enough.
    #[test]
    fn a_remote_vcpu_with_exactly_the_resistance_more_is_pulled() {
        let mut h = hyp(2, &[(5_000, 1)]);
        runq_insert(&mut h, 0);
        let us = PS_PER_US as i64;
        assert_eq!(best_queued(&h, 0, Some(4_500 * us)), Some(0));
        assert_eq!(best_queued(&h, 0, Some(4_500 * us + 1)), None);
    }

    /// `reset_credit` adds a second `credit_init` only when the chosen vCPU
    /// sits exactly at `CSCHED2_CREDIT_MIN`, not whenever it is in the red.
    #[test]
    fn a_reset_above_the_floor_tops_up_once() {
        let mut h = hyp(1, &[(-1, 0), (-9_000, 0)]);
        reset_credit(&mut h, 0, 0);
        let us = PS_PER_US as i64;
        assert_eq!(h.vcpus[0].credit, 9_999 * us, "-1 us + 10 ms");
        assert_eq!(h.vcpus[1].credit, 1_000 * us, "-9 ms + 10 ms");
    }

    /// `is_preemptable`: a vCPU within `CSCHED2_RATELIMIT_TICKLE_TOLERANCE`
    /// (50 us) of the rate limit may already be preempted by a tickle.
    #[test]
    fn a_vcpu_within_the_tickle_tolerance_of_the_rate_limit_may_be_preempted() {
        // vCPU 0 runs on pCPU 0 since 0; vCPU 1 (last on pCPU 0) wakes with far more credit.
        let mut h = hyp(1, &[(1_000, 0), (5_000, 0)]);
        h.pcpus[0].cur = Some(0);
        h.vcpus[0].state = VcpuState::Running;
        let order = tickle_order(&h, 1);
        // 940 us into the 1 ms rate limit: still protected; at exactly 950 us
        // too (`is_preemptable`: ran > ratelimit - 50 us).
        assert_eq!(preempt_target(&mut h, 1, &order, 940 * PS_PER_US), None);
        assert_eq!(preempt_target(&mut h, 1, &order, 950 * PS_PER_US), None);
        // 960 us in: within 50 us of it.
        assert_eq!(preempt_target(&mut h, 1, &order, 960 * PS_PER_US), Some(0));
    }

    /// `runq_tickle` starts from `max = 0`: a woken vCPU with no more credit
    /// than the one running on its own pCPU does not preempt it there.
    #[test]
    fn a_woken_vcpu_does_not_preempt_an_equal_on_its_own_pcpu() {
        let mut h = hyp(1, &[(3_000, 0), (3_000, 0)]);
        let now = 2 * PS_PER_MS;
        h.pcpus[0].cur = Some(0);
        h.pcpus[0].last_burn = now;
        h.vcpus[0].state = VcpuState::Running;
        let order = tickle_order(&h, 1);
        assert_eq!(preempt_target(&mut h, 1, &order, now), None);
        h.vcpus[1].credit += 1;
        assert_eq!(preempt_target(&mut h, 1, &order, now), Some(0));
    }

    /// A machine of the acceptance scenario (credit2) whose hypervisor is
    /// `hyp(np, vcpus)`, its clock at `now`.
    fn machine(np: u32, vcpus: &[(i64, u32)], now: Ps) -> (Machine<crate::components::Components>, Scheduler<Ev>) {
        use crate::components::Components;
        let sc = crate::load(super::super::tests::BASE, "m3.toml", &["vcpu_sched.scheduler=credit2".to_string()]).expect("valid scenario");
        let mut m: Machine<Components> = Machine::new(&sc, 7, crate::engine::trace::Tracer::disabled());
        *hv(&mut m) = hyp(np, vcpus);
        let mut s = Scheduler::new();
        s.at(now, ev::<Components>(HypEv::Slice, 0));
        assert!(s.next_before(now + 1).is_some() && s.now() == now);
        (m, s)
    }

    /// `csched2_schedule`: a vCPU pulled from another pCPU is given
    /// `CSCHED2_MIGRATE_COMPENSATION` (50 us).
    #[test]
    fn a_vcpu_pulled_from_another_pcpu_is_compensated() {
        use crate::components::Components;
        let (mut m, mut s) = machine(2, &[(5_000, 1)], 0);
        runq_insert(hv(&mut m), 0);
        schedule::<Components>(&mut m, &mut s, 0);
        let h = hv(&mut m);
        assert_eq!((h.pcpus[0].cur, h.vcpus[0].processor), (Some(0), 0));
        assert_eq!(h.vcpus[0].credit, 5_050 * PS_PER_US as i64);
    }

    /// The rate limit keeps the current vCPU while it has run less than
    /// `ratelimit` (`now - state_entry_time < ratelimit`): at 1 ms it gives way.
    #[test]
    fn the_rate_limit_protects_for_less_than_its_length() {
        use crate::components::Components;
        for (now, cur) in [(PS_PER_MS - 1, 0), (PS_PER_MS, 1)] {
            let (mut m, mut s) = machine(1, &[(3_000, 0), (5_000, 0)], now);
            let h = hv(&mut m);
            (h.pcpus[0].cur, h.pcpus[0].last_burn, h.vcpus[0].state) = (Some(0), now, VcpuState::Running);
            runq_insert(h, 1);
            schedule::<Components>(&mut m, &mut s, 0);
            assert_eq!(hv(&mut m).pcpus[0].cur, Some(cur), "after {now} ps");
        }
    }
}
