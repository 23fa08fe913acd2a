//! The scenario sections of M5 (interrupt moderation and its workloads):
//! `[gsim]`, per-queue `moderation`, `[[nvme]]` and `[[nic]]`.

use super::{one_u32, Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn d_delay_us() -> u32 {
    100
}
fn d_update_ms() -> u32 {
    1
}
fn d_scale() -> u32 {
    150
}
fn d_min_sleep() -> Time {
    Time(10 * crate::engine::time::PS_PER_US)
}
fn d_every() -> u32 {
    16
}
fn yes() -> bool {
    true
}

/// Global software interrupt moderation (the GSIM genirq patch). Names follow
/// the patch's module parameters; both targets 0 is fixed mode (`mod_ns = delay_ns`).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gsim {
    /// Maximum moderation delay (`delay_us`).
    #[serde(default = "d_delay_us")]
    pub delay_us: u32,
    /// Target total interrupt rate, interrupts/s (0: no rate target).
    #[serde(default)]
    pub target_intr_rate: Rate,
    /// Maximum share of a CPU's time in hardirq, percent (0: no hardirq target).
    #[serde(default)]
    pub hardirq_percent: u32,
    /// Control period (`update_ms`).
    #[serde(default = "d_update_ms")]
    pub update_ms: u32,
    /// The `local_high` scale (150 in the patch; 200 in an earlier version).
    #[serde(default = "d_scale")]
    pub scale: u32,
    /// Below this accumulated `sleep_ns` the hook does not moderate.
    #[serde(default = "d_min_sleep")]
    pub min_sleep: Time,
    /// The hook reads the clock every this many interrupts.
    #[serde(default = "d_every")]
    pub clock_every: u32,
    /// Run-time changes (procfs writes); each resets `mod_ns` to `delay_ns`.
    #[serde(default)]
    pub change: Vec<GsimChange>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GsimChange {
    pub at: Time,
    #[serde(default)]
    pub delay_us: Option<u32>,
    #[serde(default)]
    pub target_intr_rate: Option<Rate>,
    #[serde(default)]
    pub hardirq_percent: Option<u32>,
}

/// A queue's own (per-source) moderation.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModerationKind {
    /// An interrupt as soon as the queue has work and the vector is armed.
    #[default]
    None,
    /// Time and frame thresholds (`ethtool -C rx-usecs/rx-frames`; NVMe aggregation time/threshold).
    Static,
    /// Linux DIM (`lib/dim`, `net_dim`): per-queue adaptive profiles.
    Dim,
    /// No interrupts: the queue is busy-polled (the upper bound of throughput).
    Polling,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Moderation {
    #[serde(default)]
    pub kind: ModerationKind,
    /// Static: interrupt at most this long after the first unsignalled completion.
    #[serde(default)]
    pub usecs: Time,
    /// Static: or as soon as this many completions are waiting (0: no count threshold).
    #[serde(default)]
    pub frames: u32,
    /// Whether GSIM may moderate this queue's vector (when `[gsim]` is present).
    #[serde(default = "yes")]
    pub gsim: bool,
}

// By hand: a derived Default would say gsim = false for queues without a moderation table.
impl Default for Moderation {
    fn default() -> Self {
        Moderation { kind: ModerationKind::None, usecs: Time(0), frames: 0, gsim: true }
    }
}

/// fio-like closed-loop jobs on a disk: each job keeps `iodepth` I/Os in flight.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fio {
    /// Jobs (threads) per disk.
    #[serde(default = "one_u32")]
    pub jobs: u32,
    #[serde(default = "one_u32")]
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
    #[serde(default = "one_u32")]
    pub count: u32,
    /// Queue pairs per disk (each with its MSI-X vector).
    #[serde(default = "one_u32")]
    pub queues: u32,
    /// CPUs the vectors target: vector v (over all disks) goes to `cpus[v % len]`.
    pub cpus: Vec<u32>,
    /// The socket whose root complex (and interrupt fabric) the disks hang off.
    #[serde(default)]
    pub socket: u32,
    /// Device ceiling per disk, I/Os per second.
    pub iops: Rate,
    /// I/Os served in parallel per disk (each takes `channels / iops`).
    #[serde(default = "one_u32")]
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

/// A NIC's receive side: `queues` RX rings fed at a line rate, each with an
/// MSI-X vector, NAPI polling and its own moderation.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    pub name: String,
    /// Offered load on the wire, Gbit/s (spread evenly over the queues).
    pub gbps: f64,
    /// Link speed, Gbit/s (default: `gbps`).
    #[serde(default)]
    pub link_gbps: Option<f64>,
    #[serde(default = "one_u32")]
    pub queues: u32,
    /// CPUs (vCPU indices if `vm` is set); queue q goes to `cpus[q % len]`.
    pub cpus: Vec<u32>,
    /// Assign the queues to this VM (SR-IOV VF): interrupts take the injection path, NAPI runs in the guest.
    #[serde(default)]
    pub vm: Option<String>,
    /// The socket whose root complex (and interrupt fabric) the NIC hangs off.
    #[serde(default)]
    pub socket: u32,
    /// Packet sizes (L2 frame without FCS, bytes) and their shares; default 1514 only.
    #[serde(default)]
    pub packets: Vec<(u32, f64)>,
    /// RX descriptors per ring.
    #[serde(default = "d_ring")]
    pub ring: u32,
    /// NAPI budget per poll.
    #[serde(default = "d_budget")]
    pub budget: u32,
    /// Hardirq cost (`mlx5e_completion_event` → `napi_schedule`).
    #[serde(default)]
    pub handler: Time,
    /// Softirq cost per packet in the NAPI poll (driver + stack).
    #[serde(default)]
    pub per_packet: Time,
    /// Softirq cost per poll round.
    #[serde(default)]
    pub per_poll: Time,
    #[serde(default)]
    pub moderation: Moderation,
}

fn d_ring() -> u32 {
    1024
}
fn d_budget() -> u32 {
    64
}

/// M5's checks: ranges, placements and combinations the model does not support.
pub(super) fn check(s: &super::Scenario, hosted: &[Option<String>], vm_vcpus: &dyn Fn(&str) -> Option<u32>) -> super::validate::Check {
    use super::validate::{err, targets};
    let cpus = s.platform.cpus;
    if (s.fabric.dma_write.ps() > 0 || s.fabric.dma_per_kib.ps() > 0) && s.fabric.slots != 1 {
        return err("fabric.slots", "must be 1 when devices DMA through the fabric (one in-order posted-write path)");
    }
    if let Some(g) = &s.gsim {
        if g.update_ms == 0 {
            return err("gsim.update_ms", "must be at least 1");
        }
        if g.hardirq_percent > 100 {
            return err("gsim.hardirq_percent", format!("{}: expected 0 to 100", g.hardirq_percent));
        }
        if g.clock_every == 0 {
            return err("gsim.clock_every", "must be at least 1");
        }
        if g.scale == 0 {
            return err("gsim.scale", "must be at least 1");
        }
        let mut last = Time(0);
        for (i, c) in g.change.iter().enumerate() {
            if c.at >= s.duration || c.at < last {
                return err(format!("gsim.change[{i}].at"), "must be within the run and in time order");
            }
            if c.hardirq_percent.is_some_and(|h| h > 100) {
                return err(format!("gsim.change[{i}].hardirq_percent"), "expected 0 to 100");
            }
            last = c.at;
        }
    }
    let moderation = |p: &str, m: &Moderation| -> super::validate::Check {
        if m.kind == ModerationKind::Static && m.usecs.ps() == 0 && m.frames == 0 {
            return err(format!("{p}.moderation"), "static moderation needs usecs or frames above 0");
        }
        if m.kind != ModerationKind::Static && (m.usecs.ps() > 0 || m.frames > 0) {
            return err(format!("{p}.moderation"), "usecs and frames apply only to kind = \"static\"");
        }
        Ok(())
    };
    let mut names = std::collections::HashSet::new();
    for (i, n) in s.nvme.iter().enumerate() {
        let p = format!("nvme[{i}]");
        if !names.insert(n.name.as_str()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", n.name));
        }
        for (key, v, lo, hi) in
            [("count", n.count, 1, 64), ("queues", n.queues, 1, 128), ("channels", n.channels, 1, 65536), ("depth", n.depth, 1, 65535)]
        {
            if v < lo || v > hi {
                return err(format!("{p}.{key}"), format!("{v}: expected {lo} to {hi}"));
            }
        }
        if n.socket >= s.platform.sockets {
            return err(format!("{p}.socket"), format!("{}: expected 0 to platform.sockets - 1 ({})", n.socket, s.platform.sockets - 1));
        }
        if n.fio.jobs == 0 || n.fio.iodepth == 0 {
            return err(format!("{p}.fio"), "jobs and iodepth must be at least 1");
        }
        if n.iops.0 <= 0.0 {
            return err(format!("{p}.iops"), "must be above 0");
        }
        targets(&p, &n.cpus, None, cpus, vm_vcpus, hosted)?;
        if n.moderation.kind == ModerationKind::Polling || n.moderation.kind == ModerationKind::Dim {
            return err(format!("{p}.moderation.kind"), "NVMe queues take \"none\" or \"static\" (aggregation time and threshold)");
        }
        moderation(&p, &n.moderation)?;
    }
    for (i, n) in s.nic.iter().enumerate() {
        let p = format!("nic[{i}]");
        if !names.insert(n.name.as_str()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", n.name));
        }
        let link = n.link_gbps.unwrap_or(n.gbps);
        if !(n.gbps > 0.0 && n.gbps <= link && link <= 1600.0) {
            return err(
                format!("{p}.gbps"),
                format!("{}: expected above 0 and at most the link speed ({link} Gbit/s, at most 1600)", n.gbps),
            );
        }
        if n.socket >= s.platform.sockets {
            return err(format!("{p}.socket"), format!("{}: expected 0 to platform.sockets - 1 ({})", n.socket, s.platform.sockets - 1));
        }
        if n.queues == 0 || n.queues > 256 {
            return err(format!("{p}.queues"), format!("{}: expected 1 to 256", n.queues));
        }
        if n.ring == 0 || n.budget == 0 {
            return err(format!("{p}.ring"), "ring and budget must be at least 1");
        }
        for (j, (b, w)) in n.packets.iter().enumerate() {
            if !((60..=9216).contains(b) && *w > 0.0 && w.is_finite()) {
                return err(format!("{p}.packets[{j}]"), "expected [bytes from 60 to 9216, share above 0]");
            }
        }
        targets(&p, &n.cpus, n.vm.as_deref(), cpus, vm_vcpus, hosted)?;
        moderation(&p, &n.moderation)?;
    }
    Ok(())
}
