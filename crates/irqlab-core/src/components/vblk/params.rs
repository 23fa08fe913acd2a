//! `[vblk]`: fio jobs in a guest reading a block device (M3).

use crate::scenario::check::{err, Check, Estimate, BYTES_PER_PENDING, BYTES_PER_TASK};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// fio random reads from the guest (dom0 or a domU) on an NVMe-attached
/// volume with provisioned IOPS (an EBS gp3-like volume): each job keeps
/// `iodepth` I/Os in flight; each completion is an MSI to its job's vCPU.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vblk {
    /// fio `--bs`, in bytes.
    #[serde(default = "d_bs")]
    pub bs: u32,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub iodepth: u32,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub numjobs: u32,
    /// The vCPU each job runs on (and its queue's vector targets): job j on
    /// `cpus[j % len]`; default vCPU j.
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
    /// Provisioned IOPS: I/Os start at most at this rate.
    pub iops: Rate,
    /// Median device latency of a 4 KiB read (log-normal).
    pub latency: Time,
    /// Log-normal shape (σ of the log): the spread of the device latency.
    #[serde(default)]
    pub latency_sigma: f64,
    /// Transfer time per KiB beyond 4 KiB, added to the log-normal latency (it does not vary).
    #[serde(default)]
    pub per_kib: Time,
    /// Guest CPU per I/O to submit: fio, the read syscall, blk-mq, `nvme_queue_rq`.
    #[serde(default)]
    pub submit: Time,
    /// Guest CPU per completion: `nvme_irq`, `nvme_try_complete_req`, waking fio, fio's reap.
    #[serde(default)]
    pub complete: Time,
}

fn d_bs() -> u32 {
    4096
}

impl Vblk {
    pub fn cpu_of(&self, job: u32) -> u32 {
        match &self.cpus {
            Some(c) => c[job as usize % c.len()],
            None => job,
        }
    }

    /// `vcpus`: the guest's vCPUs, if `[vcpu_sched]` is configured; `gic`: whether `[gic]` is.
    /// What the guest's reads cost a run of `secs` with `threads` vCPUs and
    /// pCPUs (`budget.rs`): a closed loop, at most `iops`, and no faster than
    /// its reads come back; a read is about 16 events (submission, device, LPI
    /// or doorbell, hypervisor items, wake-up, entry: 14 measured on the figure).
    pub fn estimate(&self, threads: u32, secs: f64, e: &mut Estimate) {
        let inflight = self.numjobs as f64 * self.iodepth as f64;
        let per_s = self.iops.0.min(inflight / (self.latency.ps() as f64 / 1e12).max(1e-9));
        let memory = inflight * BYTES_PER_PENDING + threads as f64 * BYTES_PER_TASK;
        e.add("vblk.iops", per_s * secs * 16.0, "vblk.numjobs", memory);
    }

    pub fn check(&self, vcpus: Option<u32>, gic: bool) -> Check {
        let p = "vblk";
        let Some(vcpus) = vcpus.filter(|_| gic) else {
            return err(p, "needs [vcpu_sched] and [gic] sections: its jobs run on vCPUs and complete through the GIC");
        };
        if self.bs == 0 || self.bs > 64 << 20 {
            return err(format!("{p}.bs"), "must be between 1 byte and 64 MiB");
        }
        if self.iodepth == 0 || self.iodepth > 65536 {
            return err(format!("{p}.iodepth"), "must be between 1 and 65536");
        }
        if self.numjobs == 0 || self.numjobs > 4096 {
            return err(format!("{p}.numjobs"), "must be between 1 and 4096");
        }
        if let Some(c) = &self.cpus {
            if c.is_empty() {
                return err(format!("{p}.cpus"), "must list at least one vCPU");
            }
            for (j, &v) in c.iter().enumerate() {
                if v >= vcpus {
                    return err(format!("{p}.cpus[{j}]"), format!("vCPU {v} does not exist (vcpu_sched.vcpus = {vcpus})"));
                }
            }
        } else if self.numjobs > vcpus {
            return err(
                format!("{p}.numjobs"),
                format!("{} jobs need {} vCPUs (vcpu_sched.vcpus = {vcpus}); list their vCPUs in vblk.cpus", self.numjobs, self.numjobs),
            );
        }
        if !(self.iops.0.is_finite() && self.iops.0 > 0.0 && self.iops.0 <= 1e9) {
            return err(format!("{p}.iops"), "must be above 0 and at most 1G/s");
        }
        if self.latency.ps() == 0 || self.latency.ps() > 1_000_000_000_000 {
            return err(format!("{p}.latency"), "must be above 0 and at most 1s");
        }
        if !(self.latency_sigma.is_finite() && (0.0..=3.0).contains(&self.latency_sigma)) {
            return err(format!("{p}.latency_sigma"), format!("{} is out of range, expected 0 to 3", self.latency_sigma));
        }
        for (k, t) in [("per_kib", self.per_kib), ("submit", self.submit), ("complete", self.complete)] {
            if t.ps() > 1_000_000_000_000 {
                return err(format!("{p}.{k}"), "must be at most 1s");
            }
        }
        Ok(())
    }
}
