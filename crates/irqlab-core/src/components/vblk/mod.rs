//! fio jobs in a guest against a volume with provisioned IOPS (M3's workload).
//!
//! Each job runs on one vCPU and keeps `iodepth` reads in flight: it submits
//! (guest CPU), the volume serves the read (at most `iops` start per second,
//! each taking a log-normal latency plus the transfer of what exceeds 4 KiB),
//! the device's MSI goes through the GIC to the job's vCPU, whose handler
//! completes the read and wakes fio (guest CPU), which reaps it when its thread
//! next runs on the vCPU (after the vIRQs and work queued before it) and submits
//! the next one. Completion latency runs from the end of the submission to
//! fio's thread having the result (fio's `clat`), so that IOPS x (clat +
//! submit) is the reads in flight.
//!
//! Depends one way on the hypervisor (guest work on vCPUs) and the GIC (the MSI).

pub mod params;
#[cfg(test)]
mod tests;

use crate::components::gicv4;
use crate::components::hypervisor::{self, GuestWork};
use crate::engine::rng::{stream, Rng};
use crate::engine::stats::{Latency, Report};
use crate::engine::time::Ps;
use crate::engine::Scheduler;
use crate::platform::machine::{Ev, Machine};
use crate::platform::parts::{ev_of, Component, Has};
use crate::scenario::Scenario;
use rand_distr::{Distribution, StandardNormal};

crate::part_events! {
    pub enum VblkEv {
        /// The guest finished submitting an I/O (arg: I/O).
        Submitted,
        /// The volume finished an I/O and raises its MSI (arg: I/O).
        DeviceDone,
        /// The guest's completion handler is done, fio is woken (arg: I/O).
        Completed,
        /// fio's thread runs and reaps it (arg: I/O).
        Reaped,
    }
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum IoState {
    #[default]
    Submitting,
    AtDevice,
    Completing,
    /// Completed, waiting for fio's thread to reap it.
    Reaping,
}

#[derive(Default)]
pub struct Vblk {
    pub on: bool,
    /// Per I/O slot: its job's vCPU, its state and when it was submitted.
    pub vcpu: Vec<u32>,
    pub state: Vec<IoState>,
    issued: Vec<Ps>,
    submit: Ps,
    complete: Ps,
    /// Median device latency (log-normal, σ), and the transfer time beyond 4 KiB, added as is.
    median: Ps,
    sigma: f64,
    transfer: Ps,
    /// Provisioned rate: one I/O may start every `gap`.
    gap: Ps,
    next_start: Ps,
    rng: Option<Rng>,
    pub completed: u64,
    /// Per job, completions since warm-up.
    pub per_job: Vec<u64>,
    iodepth: u32,
    /// Completions of an I/O that was not at the device (must stay 0).
    pub bad: u64,
    pub clat: Latency,
}

impl Component for Vblk {
    type Ev = VblkEv;

    fn build<P: Has<Self>>(_m: &mut Machine<P>, sc: &Scenario, seed: u64) -> Self {
        let Some(b) = &sc.vblk else { return Vblk::default() };
        let n = (b.numjobs * b.iodepth) as usize;
        let extra_kib = (b.bs as u64).saturating_sub(4096) / 1024;
        Vblk {
            on: true,
            vcpu: (0..n as u32).map(|k| b.cpu_of(k / b.iodepth)).collect(),
            state: vec![IoState::Submitting; n],
            issued: vec![0; n],
            submit: b.submit.ps(),
            complete: b.complete.ps(),
            median: b.latency.ps(),
            sigma: b.latency_sigma,
            transfer: extra_kib * b.per_kib.ps(),
            gap: (1e12 / b.iops.0).round() as Ps,
            per_job: vec![0; b.numjobs as usize],
            iodepth: b.iodepth,
            rng: Some(stream(seed, "vblk")),
            ..Vblk::default()
        }
    }

    /// Every job submits its first `iodepth` reads.
    fn start<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>) {
        let n = m.parts.get().vcpu.len() as u32;
        for io in 0..n {
            submit::<P>(m, s, io);
        }
    }

    fn handle<P: Has<Self>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, e: VblkEv, io: u32) {
        let now = s.now();
        match e {
            VblkEv::Submitted => {
                let me = m.parts.get();
                me.state[io as usize] = IoState::AtDevice;
                me.issued[io as usize] = now;
                let start = now.max(me.next_start);
                me.next_start = start + me.gap;
                let z: f64 = StandardNormal.sample(me.rng.as_mut().expect("built"));
                // The device's latency varies; moving the extra KiB over the link does not.
                let lat = (me.median as f64 * (me.sigma * z).exp()) as Ps + me.transfer;
                s.at(start + lat, P::ev(VblkEv::DeviceDone, io));
            }
            VblkEv::DeviceDone => {
                let me = m.parts.get();
                let (v, cost) = (me.vcpu[io as usize], me.complete);
                if me.state[io as usize] != IoState::AtDevice {
                    me.bad += 1;
                }
                me.state[io as usize] = IoState::Completing;
                let then = Some(P::ev(VblkEv::Completed, io));
                gicv4::send_msi(m, s, v, GuestWork { cost, then });
            }
            VblkEv::Completed => {
                let me = m.parts.get();
                if me.state[io as usize] != IoState::Completing {
                    me.bad += 1;
                }
                me.state[io as usize] = IoState::Reaping;
                me.completed += 1;
                me.per_job[(io / me.iodepth) as usize] += 1;
                // fio's thread gets the vCPU behind what is queued there (the
                // clat ended here until 2026-11-26: with the vCPU busy, direct
                // injection's faster reads read as slower, a review found).
                let (v, then) = (me.vcpu[io as usize], Some(P::ev(VblkEv::Reaped, io)));
                hypervisor::guest_work(m, s, v, GuestWork { cost: 0, then });
            }
            VblkEv::Reaped => {
                let me = m.parts.get();
                if me.state[io as usize] != IoState::Reaping {
                    me.bad += 1;
                }
                me.clat.record(now - me.issued[io as usize]);
                submit::<P>(m, s, io);
            }
        }
    }

    fn reset<P: Has<Self>>(m: &mut Machine<P>, _now: Ps) {
        let me = m.parts.get();
        me.completed = 0;
        me.per_job.iter_mut().for_each(|c| *c = 0);
        me.clat.reset();
    }

    fn report<P: Has<Self>>(m: &mut Machine<P>, r: &mut Report, now: Ps, secs: f64) {
        let me = m.parts.get_ref();
        if !me.on {
            return;
        }
        r.metric("vblk.iops", me.completed as f64 / secs);
        r.metric("vblk.completed", me.completed as f64);
        r.metric("vblk.bad_completions", me.bad as f64);
        r.metric("vblk.jobs_without_completion", me.per_job.iter().filter(|&&c| c == 0).count() as f64);
        // A job stalled late in the run still has completions: the age of the oldest read in flight shows it.
        let oldest = (me.state.iter().zip(&me.issued)).filter(|&(st, _)| *st != IoState::Submitting).map(|(_, &t)| now - t).max();
        r.metric("vblk.oldest_inflight_us", oldest.unwrap_or(0) as f64 / 1e6);
        r.histogram("vblk.clat", &me.clat);
    }
}

fn submit<P: Has<Vblk>>(m: &mut Machine<P>, s: &mut Scheduler<Ev>, io: u32) {
    let me = m.parts.get();
    me.state[io as usize] = IoState::Submitting;
    let (v, cost) = (me.vcpu[io as usize], me.submit);
    let then = Some(ev_of::<Vblk, P>(VblkEv::Submitted, io));
    hypervisor::guest_work(m, s, v, GuestWork { cost, then });
}
