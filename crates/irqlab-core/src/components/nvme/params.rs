//! `[[nvme]]`: SSDs, their queues and vectors, and the fio jobs that drive them.

use crate::components::moderation::params::{Moderation, ModerationKind};
use crate::scenario::check::{beside_task, err, iommu, targets, Check, Ctx, Estimate, BYTES_PER_PENDING, BYTES_PER_SOURCE};
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
    /// From reaping a completion to the resubmitted I/O reaching the submission
    /// queue, when the disk's `submit` CPU cost is 0 (a delay, no CPU time).
    #[serde(default)]
    pub resubmit: Time,
}

/// How a disk's `channels` (flash dies) take the commands it has fetched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ServiceOrder {
    /// Each command goes to the die that holds its block, uniformly at random
    /// for random reads over a striped FTL, and waits there in order: a die
    /// reads one page at a time (NAND), so dies may sit idle while others have
    /// a queue, and latency rises with load well under the ceiling. (As
    /// MQSim's back end: a read queue per flash chip served from its front,
    /// `TSU_Base::issue_command_to_chip`.)
    #[default]
    Die,
    /// Any free channel takes a random queued command (work-conserving: no
    /// channel idles while a command waits; service out of order).
    Random,
    /// Any free channel takes the oldest queued command (in order).
    Fifo,
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
    /// The socket's remapping units the disks hang off (`platform.iommus_per_socket`):
    /// disk k writes through `iommus[k % len]`. Default `[0]`.
    #[serde(default)]
    pub iommus: Vec<u32>,
    /// Device ceiling per disk, I/Os per second (a datasheet's random-read IOPS).
    pub iops: Rate,
    /// A command's mean service time inside the device when it is alone (a
    /// datasheet's queue-depth-1 read latency, less the host's part). With it,
    /// the disk serves `round(iops × latency)` commands in parallel; give it or
    /// `channels`, not both.
    #[serde(default)]
    pub latency: Option<Time>,
    /// Commands served in parallel per disk (flash dies and planes); each takes
    /// `channels / iops` on average. Default 1 (when `latency` is not given).
    #[serde(default)]
    pub channels: Option<u32>,
    /// The shortest a command takes in the device, under the mean service
    /// time: the flash array's page read (NAND tR) and the controller's fixed
    /// path, which no read escapes. Only the rest varies (`service_cv`).
    /// Default 0: all of it varies.
    #[serde(default)]
    pub service_min: Time,
    /// Coefficient of variation of a command's service time above
    /// `service_min`: 0 fixed, 1 exponential, in between an Erlang-k with
    /// k = round(1/cv²) (0.25 to 1).
    #[serde(default)]
    pub service_cv: f64,
    /// Which queued command a free flash unit serves next (see `ServiceOrder`).
    #[serde(default)]
    pub service_order: ServiceOrder,
    /// Hardirq cost per interrupt (`nvme_irq` entry, CQ doorbell).
    #[serde(default)]
    pub handler: Time,
    /// A polled queue: one pass of the job's poll loop that finds entries
    /// (`blk_hctx_poll` → `nvme_poll`, CQ doorbell), in the job's thread.
    #[serde(default = "d_poll")]
    pub poll: Time,
    /// A polled queue: each request `io_do_iopoll` polls that finds the CQ
    /// empty (`bio_poll` → `blk_mq_poll` → `nvme_poll`'s `nvme_cqe_pending`),
    /// on its walk to the requests that completed out of order.
    #[serde(default = "d_poll_walk")]
    pub poll_walk: Time,
    /// Polled queues: the polling jobs on one CPU take turns of this length.
    /// A job polls in `io_uring_enter` (`io_iopoll_check`, `blk_hctx_poll`),
    /// which returns once it has its events or `need_resched()`, and goes
    /// straight back to submitting and polling: it keeps its CPU until the
    /// scheduler preempts it at its slice's end. So one job at a time polls
    /// and resubmits on its CPU, and another job's completed I/Os wait for its
    /// turn. Default: EEVDF's slice, `sysctl_sched_base_slice` 0.7 ms × (1 + ilog2(min(CPUs, 8)))
    /// (kernel/sched/fair.c, `get_update_sysctl_factor`), 2.8 ms from 8 CPUs
    /// on. `"0s"`: no turns, every job served at once (the model until 2026-11-28).
    #[serde(default)]
    pub poll_slice: Option<Time>,
    /// Hardirq cost per completion entry reaped (`nvme_handle_cqe`,
    /// `nvme_try_complete_req` → `blk_mq_complete_request_remote`, the batch's
    /// `nvme_pci_complete_batch`, waking the job); in the job's thread when polled.
    #[serde(default)]
    pub per_cqe: Time,
    /// The part of `per_cqe` spent in `nvme_poll_cq`'s loop, before the CQ
    /// head doorbell: `nvme_handle_cqe` (the entry's read, the tag lookup,
    /// `blk_mq_add_to_batch`). The rest (`nvme_pci_complete_batch`: unmap,
    /// `blk_mq_end_request_batch`, the bio and aio completions, the wake-ups)
    /// runs after the doorbell (drivers/nvme/host/pci.c, `nvme_irq`), so an
    /// entry landing then signals anew. Default: 100 ns, or `per_cqe` if less
    /// (an assumption).
    #[serde(default)]
    pub handle_cqe: Option<Time>,
    /// CPU time per I/O in the job's thread, on the CPU that reaped it: the
    /// completion's return to user space and the next submission (`io_submit` /
    /// `io_uring_enter` → `blk_mq_submit_bio` → `nvme_queue_rq` → SQ doorbell).
    /// 0: not CPU-modelled (resubmitted after `fio.resubmit`).
    #[serde(default)]
    pub submit: Time,
    /// CPU time for a job's thread that slept in `io_getevents` (or
    /// `io_uring_enter`) to get its CPU back once `nvme_irq` has woken it
    /// (`per_cqe` has the wake-up itself): `schedule()` and the context switch,
    /// once per job woken, on the CPU that reaped. A thread still busy with an
    /// earlier batch is not woken again. Needs `submit`; 0: not modelled. (The
    /// model knows a queue's jobs and its batches, not which job an I/O is:
    /// it counts the reaped I/Os beyond those in hand as jobs woken, at most
    /// the queue's jobs, which is exact at iodepth 1 and for one job a queue.)
    #[serde(default)]
    pub wake: Time,
    /// PCIe flow control: finished I/Os (4 KiB of data and a CQE each) a disk
    /// may have queued in the root complex; beyond them the data waits in the
    /// device, holding its flash channel, instead of queueing without bound.
    #[serde(default = "d_credits")]
    pub dma_credits: u32,
    /// PCIe Relaxed Ordering on the device's data writes: queued data may pass
    /// an MSI waiting ahead of it on the link (never the reverse). Off by
    /// default: the M5 figures' collapses need strict order (an assumption,
    /// docs/m5-global-interrupt-moderation.md, "Relaxed ordering").
    #[serde(default)]
    pub relaxed_ordering: bool,
    /// Finished reads the controller's buffer holds while the disk has no
    /// PCIe credit, each freeing its die at once; beyond them a finished read
    /// stays in its die's page register and the die stays busy. Default 0: a
    /// die holds its read until the read's DMA leaves (an assumption; the
    /// buffer's size is not public).
    #[serde(default)]
    pub read_buffer: u32,
    /// Commands the controller holds at once (fetched from its submission
    /// queues and not yet completed: queued at a die, read, or waiting for a
    /// PCIe credit); the rest wait in their submission queues, fetched in the
    /// order they were submitted, and that wait is in their latency. Only with
    /// `service_order = "die"`. Default: no limit (an assumption; controllers'
    /// internal command slots are not public), so every submitted command
    /// waits at its die.
    #[serde(default)]
    pub fetch_slots: Option<u32>,
    /// Queue depth of each CQ; at most this many I/Os per queue are outstanding.
    #[serde(default = "d_depth")]
    pub depth: u32,
    pub fio: Fio,
    #[serde(default, deserialize_with = "crate::components::moderation::params::table_or_kind")]
    #[schemars(with = "crate::components::moderation::params::ModerationSpec")]
    pub moderation: Moderation,
}

impl Nvme {
    /// The remapping unit disk `k` of this group writes through.
    pub fn iommu_of(&self, k: u32) -> u32 {
        if self.iommus.is_empty() {
            0
        } else {
            self.iommus[k as usize % self.iommus.len()]
        }
    }
}

fn d_credits() -> u32 {
    8
}

impl Nvme {
    /// The polling jobs' turn on a CPU (`poll_slice`, or EEVDF's slice on `cpus` CPUs).
    pub fn poll_slice(&self, cpus: u32) -> crate::engine::time::Ps {
        match self.poll_slice {
            Some(t) => t.ps(),
            None => 700 * crate::engine::time::PS_PER_US * (1 + cpus.clamp(1, 8).ilog2() as u64),
        }
    }

    /// The turn of a polled group's jobs, `None` if they take none (not polled, or `poll_slice` 0).
    pub fn turns(&self, cpus: u32) -> Option<crate::engine::time::Ps> {
        let slice = self.poll_slice(cpus);
        (self.moderation.kind == ModerationKind::Polling && slice > 0).then_some(slice)
    }
}

/// `handle_cqe`'s default (an assumption): the loop's part of `per_cqe`.
pub const HANDLE_CQE: crate::engine::time::Ps = 100 * crate::engine::time::PS_PER_NS;

fn d_poll() -> Time {
    Time(100 * crate::engine::time::PS_PER_NS)
}
fn d_poll_walk() -> Time {
    Time(30 * crate::engine::time::PS_PER_NS)
}

fn d_depth() -> u32 {
    1023
}

/// Names unique among devices, sizes in range, vectors on host CPUs of the
/// platform, and a moderation NVMe supports.
/// Events one I/O costs the engine (service, DMA, MSI, handler, submit and
/// reap): counted from the model's event kinds, rounded up.
const EVENTS_PER_IO: f64 = 8.0;

/// What the disks cost a run of `secs` on `cpus` CPUs (`budget.rs`).
pub fn estimate(list: &[Nvme], cpus: u32, secs: f64, e: &mut Estimate) {
    for (i, d) in list.iter().enumerate() {
        let disks = d.count as f64;
        // Every job's I/Os have state from the start, whether or not the queues admit them.
        let inflight = d.fio.jobs as f64 * d.fio.iodepth as f64;
        // Polling jobs that take turns have a queue (and vector) each.
        let turns = d.turns(cpus);
        let queues = if turns.is_some() { d.fio.jobs } else { d.queues } as f64;
        let memory = disks * (inflight * BYTES_PER_PENDING + queues * BYTES_PER_SOURCE);
        e.add(&format!("nvme.{i}.iops"), disks * d.iops.0 * secs * EVENTS_PER_IO, &format!("nvme.{i}.fio"), memory);
        if let Some(slice) = turns {
            // A turn, its switch and its poll on each CPU with polling jobs.
            let busy = (d.cpus.len() as f64).min(disks * d.fio.jobs as f64);
            e.add(&format!("nvme.{i}.poll_slice"), busy * secs * 1e12 / slice as f64 * 3.0, "", 0.0);
        }
    }
}

pub fn check(list: &[Nvme], ctx: &Ctx, names: &mut HashSet<String>) -> Check {
    for (i, n) in list.iter().enumerate() {
        let p = format!("nvme[{i}]");
        if !names.insert(n.name.clone()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", n.name));
        }
        for (key, v, lo, hi) in [
            ("count", n.count, 1, 64),
            ("queues", n.queues, 1, 128),
            ("channels", n.channels.unwrap_or(1), 1, 65536),
            ("depth", n.depth, 1, 65535),
            ("dma_credits", n.dma_credits, 1, 4096),
            ("read_buffer", n.read_buffer, 0, 1 << 20),
            ("fetch_slots", n.fetch_slots.unwrap_or(1), 1, 1 << 20),
            ("fio.jobs", n.fio.jobs, 1, 4096),
            ("fio.iodepth", n.fio.iodepth, 1, 65535),
        ] {
            if v < lo || v > hi {
                return err(format!("{p}.{key}"), format!("{v}: expected {lo} to {hi}"));
            }
        }
        if n.socket >= ctx.sockets {
            return err(format!("{p}.socket"), format!("{}: expected 0 to platform.sockets - 1 ({})", n.socket, ctx.sockets - 1));
        }
        for (k, &unit) in n.iommus.iter().enumerate() {
            iommu(format!("{p}.iommus[{k}]"), unit, ctx)?;
        }
        if n.iops.0 <= 0.0 {
            return err(format!("{p}.iops"), "must be above 0");
        }
        // A turn is an event on each CPU: a slice of a few ns would flood the run.
        if let Some(t) = n.poll_slice {
            use crate::engine::time::{PS_PER_MS, PS_PER_US};
            if t.ps() != 0 && !(10 * PS_PER_US..=100 * PS_PER_MS).contains(&t.ps()) {
                return err(
                    format!("{p}.poll_slice"),
                    format!("{t}: expected \"0s\" (no turns) or 10us to 100ms (the kernel clamps a task's slice to 0.1-100 ms)"),
                );
            }
        }
        if let Some(l) = n.latency {
            if n.channels.is_some() {
                return err(
                    format!("{p}.latency"),
                    "give latency (the disk's parallelism follows from iops x latency) or channels, not both",
                );
            }
            let ch = n.iops.0 * l.ps() as f64 * 1e-12;
            if !(0.5..=65536.0).contains(&ch) {
                return err(format!("{p}.latency"), format!("iops x latency = {ch:.3} commands in parallel: expected 1 to 65536"));
            }
        }
        let mean = match (n.latency, n.channels) {
            (Some(l), _) => l.ps() as f64,
            (None, ch) => ch.unwrap_or(1) as f64 / n.iops.0 * 1e12,
        };
        if n.service_min.ps() as f64 >= mean {
            return err(
                format!("{p}.service_min"),
                format!(
                    "{}: expected under the mean service time ({}: latency, or channels / iops)",
                    n.service_min,
                    crate::scenario::units::Time(mean as u64)
                ),
            );
        }
        if n.fetch_slots.is_some() && n.service_order != ServiceOrder::Die {
            return err(
                format!("{p}.fetch_slots"),
                "is only read with service_order = \"die\" (the other orders let any free channel take any submitted command)",
            );
        }
        let cv = n.service_cv;
        if !(cv == 0.0 || (0.25..=1.0).contains(&cv)) {
            return err(format!("{p}.service_cv"), format!("{cv:?}: expected 0 (fixed), or 0.25 to 1 (1: exponential)"));
        }
        targets(&p, &n.cpus, None, ctx)?;
        // fio's threads run only where the CPU would idle, not beside a task
        // under the scheduler (0 I/Os beside a busy loop, an audit).
        beside_task(&p, &n.cpus, "fio's jobs", ctx)?;
        // Every queue's rules first (static needs a time), then feature 08h's.
        n.moderation.check(&p)?;
        if n.moderation.kind == ModerationKind::Dim {
            return err(
                format!("{p}.moderation.kind"),
                "NVMe queues take \"none\", \"static\" (aggregation time and threshold) or \"polling\" (poll queues)",
            );
        }
        if n.moderation.cqe_mode {
            // NVMe feature 08h: the aggregation time runs from the first entry.
            return err(format!("{p}.moderation.cqe_mode"), "NVMe aggregation has no timer reset mode: expected false");
        }
        // Feature 08h (Interrupt Coalescing): TIME is 8 bits in 100 µs units,
        // THR 8 bits, zero-based (1 to 256 entries).
        if n.moderation.kind == ModerationKind::Static {
            let (t, unit) = (n.moderation.usecs.ps(), 100 * crate::engine::time::PS_PER_US);
            if t % unit != 0 || t > 255 * unit {
                return err(
                    format!("{p}.moderation.usecs"),
                    format!(
                        "{}: expected a multiple of 100us up to 25500us (NVMe feature 08h's aggregation time: 8 bits in 100 us units)",
                        n.moderation.usecs
                    ),
                );
            }
            // (No threshold is not among them: 0 in the field is 1 entry. Taken
            // as "time only", 0 had delayed every I/O by the whole time.)
            if n.moderation.frames == 0 || n.moderation.frames > 256 {
                return err(
                    format!("{p}.moderation.frames"),
                    format!(
                        "{}: expected 1 to 256 entries (feature 08h's aggregation threshold: 8 bits, zero-based, so 256 or fewer; it has no time-only setting)",
                        n.moderation.frames
                    ),
                );
            }
        }
        if let Some(h) = n.handle_cqe {
            if h.ps() > n.per_cqe.ps() {
                return err(
                    format!("{p}.handle_cqe"),
                    format!("{h}: expected at most per_cqe ({}), of which it is the part before the CQ doorbell", n.per_cqe),
                );
            }
        }
        if n.wake.ps() > 0 && n.submit.ps() == 0 {
            return err(format!("{p}.wake"), "is only read with submit above 0 (the job's thread modelled as CPU work)");
        }
    }
    Ok(())
}
