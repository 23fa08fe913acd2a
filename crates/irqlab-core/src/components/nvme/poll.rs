//! Polled queues (`moderation.kind = "polling"`, io_uring IOPOLL on a poll
//! queue): the job's poll passes, as `io_do_iopoll` walks its requests, and the
//! turns the polling jobs of one CPU take at its scheduler's slice.

use super::*;

/// The polling jobs of one CPU: one spins and resubmits at a time, for its
/// slice, then the next (the scheduler preempts it there: `need_resched()`).
/// Each job has a completion queue of its own in the model (its share of the
/// CPU's poll queue), so the I/Os it waits for are that queue's.
#[derive(Default)]
pub(super) struct PollTurns {
    /// Each job's CQ and slice (its group's `poll_slice`), and the one spinning.
    pub(super) jobs: Vec<(u32, Ps)>,
    pub(super) active: usize,
}

/// A polled CQ has entries: queue a pass of the job's poll loop on its CPU,
/// if the job is the one spinning there (else its entries wait for its turn).
pub(super) fn poll_soon<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, q: u32) {
    let me = m.parts.get();
    let cq = &mut me.cqs[q as usize];
    if cq.polling {
        return;
    }
    if cq.takes_turns {
        let t = &me.turns[cq.cpu as usize];
        if t.jobs.len() > 1 && t.jobs[t.active].0 != q {
            return;
        }
    }
    cq.polling = true;
    let (cpu, g) = (cq.cpu, me.disks[cq.disk as usize].group);
    let pass = me.groups[g as usize].poll + std::mem::take(&mut cq.walk_due);
    m.thread_work(s, cpu as usize, P::ID, q | POLL, pass);
}

/// A pass of `io_do_iopoll` (io_uring/rw.c) over the job's `iopoll_list`, in
/// submission order: it stops at the first request already completed, or at
/// the first poll that completes something (one `nvme_poll` takes every entry
/// the CQ holds, and `iob.complete` marks their requests completed); a poll
/// that finds the CQ empty goes on to the next request (`poll_walk` each).
/// Only the unbroken run of completed requests from where it stopped reaches
/// fio (`wq_list_for_each_resume`, `wq_list_cut`): requests completed out of
/// order wait for a later pass, which polls the unfinished ones ahead of them.
pub(super) fn iopoll_pass<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize, q: u32) {
    let me = m.parts.get();
    let cq = &mut me.cqs[q as usize];
    let walk_cost = me.groups[me.disks[cq.disk as usize].group as usize].poll_walk;
    let (mut empty_polls, mut stop) = (0u64, None);
    for i in 0..cq.iopoll.len() {
        if cq.iopoll[i].1 {
            stop = Some(i);
            break;
        }
        if !cq.posted.is_empty() {
            for t in cq.posted.drain(..) {
                // The request it completes: the oldest not completed with that
                // submission time (requests submitted at one instant are alike;
                // the list is in submission order, so its times never fall).
                let from = cq.iopoll.partition_point(|r| r.0 < t);
                let k = (from..cq.iopoll.len()).find(|&k| !cq.iopoll[k].1).expect("a posted entry's request is in the list");
                debug_assert_eq!(cq.iopoll[k].0, t);
                cq.iopoll[k].1 = true;
                cq.iopoll_done += 1;
            }
            stop = Some(i);
            break;
        }
        empty_polls += 1;
    }
    let walk = empty_polls * walk_cost;
    let grp = &mut me.groups[me.disks[cq.disk as usize].group as usize];
    grp.passes += 1;
    grp.empty_polls += empty_polls;
    if let Some(i) = stop {
        let run = cq.iopoll.range(i..).take_while(|r| r.1).count();
        cq.iopoll_done -= run as u32;
        cq.posted.extend(cq.iopoll.drain(i..i + run).map(|(t, _)| t));
    }
    // The walk is paid before the batch's completions (`reap_entries` takes it),
    // or, if the pass reaped nothing, by the next pass.
    cq.walk_due += walk;
    reap_entries(m, s, c, q);
    let cq = &mut m.parts.get().cqs[q as usize];
    // Completed requests left behind a gap, or entries that landed during the
    // pass's thread work, are found by the next pass.
    if !cq.posted.is_empty() || cq.iopoll_done > 0 {
        poll_soon(m, s, q);
    }
}

/// The slice of CPU `c`'s running polling job is over: the scheduler switches
/// to the next (`wake`, the switch to its thread), which polls at once: what
/// completed for it meanwhile, done in the block layer (`iopoll_completed`),
/// is reaped and resubmitted now, and fio's latency of it ends here.
pub(super) fn poll_turn<P: Has<Nvme>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, c: usize) {
    let me = m.parts.get();
    let t = &mut me.turns[c];
    t.active = (t.active + 1) % t.jobs.len();
    let (q, slice) = t.jobs[t.active];
    s.at(s.now() + slice, P::ev(NvmeEv::PollTurn, c as u32));
    let cq = &me.cqs[q as usize];
    let grp = &mut me.groups[me.disks[cq.disk as usize].group as usize];
    grp.turns += 1;
    let (wake, waiting) = (grp.wake, !cq.posted.is_empty() || cq.iopoll_done > 0);
    if wake > 0 {
        m.thread_work(s, c, P::ID, q | WAKE, wake);
    }
    if waiting {
        poll_soon(m, s, q);
    }
}
