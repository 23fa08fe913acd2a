//! `[[nvme]]`: SSDs, their queues and vectors, and the fio jobs that drive them.

use crate::components::moderation::params::{Moderation, ModerationKind};
use crate::scenario::check::{err, targets, Check, Ctx};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// fio-like closed-loop jobs on a disk: each job keeps `iodepth` I/Os in flight.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fio {
    /// Jobs (threads) per disk.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub jobs: u32,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub iodepth: u32,
    /// From reaping a completion to the resubmitted I/O reaching the submission queue (not CPU-modelled).
    #[serde(default)]
    pub resubmit: Time,
}

/// NVMe SSDs: each disk has `queues` SQ/CQ pairs, serves I/Os at up to `iops`
/// with `channels` in parallel, DMAs each completion, and raises its CQ's MSI-X
/// vector per completion entry (subject to the vector's mask and moderation).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nvme {
    pub name: String,
    /// Disks.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub count: u32,
    /// Queue pairs per disk (each with its MSI-X vector).
    #[serde(default = "crate::scenario::units::one_u32")]
    pub queues: u32,
    /// CPUs the vectors target: vector v (over all disks) goes to `cpus[v % len]`.
    pub cpus: Vec<u32>,
    /// The socket whose root complex (and interrupt fabric) the disks hang off.
    #[serde(default)]
    pub socket: u32,
    /// Device ceiling per disk, I/Os per second.
    pub iops: Rate,
    /// I/Os served in parallel per disk (each takes `channels / iops`).
    #[serde(default = "crate::scenario::units::one_u32")]
    pub channels: u32,
    /// Exponentially distributed service times instead of fixed.
    #[serde(default)]
    pub exponential: bool,
    /// Hardirq cost per interrupt (`nvme_irq` entry, CQ doorbell).
    #[serde(default)]
    pub handler: Time,
    /// Hardirq cost per completion entry reaped (`nvme_handle_cqe`, `blk_mq_complete_request`, waking the job).
    #[serde(default)]
    pub per_cqe: Time,
    /// Queue depth of each CQ; at most this many I/Os per queue are outstanding.
    #[serde(default = "d_depth")]
    pub depth: u32,
    pub fio: Fio,
    #[serde(default)]
    pub moderation: Moderation,
}

fn d_depth() -> u32 {
    1023
}

/// Names unique among devices, sizes in range, vectors on host CPUs of the
/// platform, and a moderation NVMe supports.
pub fn check(list: &[Nvme], ctx: &Ctx, names: &mut HashSet<String>) -> Check {
    for (i, n) in list.iter().enumerate() {
        let p = format!("nvme[{i}]");
        if !names.insert(n.name.clone()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", n.name));
        }
        for (key, v, lo, hi) in
            [("count", n.count, 1, 64), ("queues", n.queues, 1, 128), ("channels", n.channels, 1, 65536), ("depth", n.depth, 1, 65535)]
        {
            if v < lo || v > hi {
                return err(format!("{p}.{key}"), format!("{v}: expected {lo} to {hi}"));
            }
        }
        if n.socket >= ctx.sockets {
            return err(format!("{p}.socket"), format!("{}: expected 0 to platform.sockets - 1 ({})", n.socket, ctx.sockets - 1));
        }
        if n.fio.jobs == 0 || n.fio.iodepth == 0 {
            return err(format!("{p}.fio"), "jobs and iodepth must be at least 1");
        }
        if n.iops.0 <= 0.0 {
            return err(format!("{p}.iops"), "must be above 0");
        }
        targets(&p, &n.cpus, None, ctx)?;
        if n.moderation.kind == ModerationKind::Polling || n.moderation.kind == ModerationKind::Dim {
            return err(format!("{p}.moderation.kind"), "NVMe queues take \"none\" or \"static\" (aggregation time and threshold)");
        }
        n.moderation.check(&p)?;
    }
    Ok(())
}
