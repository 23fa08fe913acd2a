//! `[[nic]]`: a NIC's receive side, its RX queues, packet sizes and moderation.

use crate::components::moderation::params::{Moderation, ModerationKind};
use crate::scenario::check::{beside_task, err, iommu, targets, Check, Ctx, Estimate, BYTES_PER_DESCRIPTOR, BYTES_PER_SOURCE};
use crate::scenario::units::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

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
    /// The physical NIC this entry is a function of (its PF, or an SR-IOV VF
    /// of it): entries that name the same device share its PCIe link, its
    /// on-chip buffer and its posted credits. Default: a device of its own.
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub queues: u32,
    /// CPUs (vCPU indices if `vm` is set); queue q goes to `cpus[q % len]`.
    pub cpus: Vec<u32>,
    /// Assign the queues to this VM (SR-IOV VF): its interrupts reach the guest as
    /// `vf_irqs` says (an exit and injection by default), NAPI runs in the guest.
    #[serde(default)]
    pub vm: Option<String>,
    /// The socket whose root complex (and interrupt fabric) the NIC hangs off.
    #[serde(default)]
    pub socket: u32,
    /// The socket's remapping unit the NIC hangs off (`platform.iommus_per_socket`).
    #[serde(default)]
    pub iommu: u32,
    /// Packet sizes (L2 frame without FCS, bytes) and their shares; default 1514 only.
    #[serde(default)]
    pub packets: Vec<(u32, f64)>,
    /// Frames per train on a queue. 1 (default): each queue's frames are a
    /// Poisson stream. N > 1: trains of N back-to-back frames at the link's
    /// wire spacing (a TSO/GSO segment of a TCP flow, which RSS steers to one
    /// queue: 64 KiB is ~44 frames of 1514 B), trains a Poisson stream with
    /// the same mean load. An assumption either way: the brief does not say.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub train: u32,
    /// RX descriptors per ring.
    #[serde(default = "d_ring")]
    pub ring: u32,
    /// NAPI budget per poll.
    #[serde(default = "d_budget")]
    pub budget: u32,
    /// The NIC's on-chip receive buffer, KiB: packets wait there for the
    /// PCIe link; one that finds it full is dropped (`rx_discards_phy`).
    #[serde(default = "d_buffer")]
    pub buffer_kib: u32,
    /// PCIe flow control: posted-write TLPs (a frame's data in max-payload
    /// TLPs of 256 B, plus its CQE) the NIC may have queued in the root
    /// complex; the rest of what it received waits in its buffer, behind
    /// nothing its interrupts must follow.
    #[serde(default = "d_credits")]
    pub posted_credits: u32,
    /// PCIe Relaxed Ordering on the device's data writes: queued data may pass
    /// an MSI waiting ahead of it on the link (never the reverse). Off by
    /// default: the M5 figures' collapses need strict order (an assumption,
    /// docs/m5-global-interrupt-moderation.md, "Relaxed ordering").
    #[serde(default)]
    pub relaxed_ordering: bool,
    /// Hardirq cost (`mlx5e_completion_event` → `napi_schedule`).
    #[serde(default)]
    pub handler: Time,
    /// Softirq cost per packet in the NAPI poll (driver + stack).
    #[serde(default)]
    pub per_packet: Time,
    /// Softirq cost per poll round.
    #[serde(default)]
    pub per_poll: Time,
    #[serde(default, deserialize_with = "crate::components::moderation::params::table_or_kind")]
    #[schemars(with = "crate::components::moderation::params::ModerationSpec")]
    pub moderation: Moderation,
    /// How a VF's interrupts reach its VM (with `vm`): `exit` (the physical
    /// interrupt exits the vCPU's pCPU and the hypervisor injects it), `remapped`
    /// (a host vector on `host_cpus`: `vfio_msihandler` → eventfd → KVM's irqfd
    /// posts it to the vCPU; GSIM can moderate it) or `posted` (VT-d posted
    /// interrupts: straight to the vCPU, no host handler; GSIM cannot see it).
    #[serde(default)]
    pub vf_irqs: VfIrqs,
    /// Host CPUs that take a remapped VF's vectors (queue q on `host_cpus[q % len]`).
    #[serde(default)]
    pub host_cpus: Vec<u32>,
    /// The host handler of a remapped VF interrupt: `vfio_msihandler`,
    /// `eventfd_signal`, `irqfd_wakeup` → `kvm_arch_set_irq_inatomic` (irq_comm.c) →
    /// `kvm_irq_delivery_to_apic_fast` (lapic.c) → the posted-interrupt notification.
    #[serde(default = "d_vfio")]
    pub vfio_handler: Time,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum VfIrqs {
    #[default]
    Exit,
    Remapped,
    Posted,
}

fn d_vfio() -> Time {
    Time(1000 * crate::engine::time::PS_PER_NS)
}

/// TLPs of a received frame in the root complex: its data in 256-byte
/// max-payload TLPs and its completion entry.
#[inline]
pub fn tlps(bytes: u32) -> u32 {
    bytes.div_ceil(256) + 1
}

fn d_buffer() -> u32 {
    256
}
fn d_credits() -> u32 {
    128
}

fn d_ring() -> u32 {
    1024
}
fn d_budget() -> u32 {
    64
}

/// Names unique among devices, rates within the link, queues, rings and
/// packet sizes in range, vectors on CPUs of the platform or of the VM.
/// Events one received frame costs the engine, rounded up.
const EVENTS_PER_PACKET: f64 = 3.0;

/// What the NICs cost a run of `secs` (`budget.rs`): frames at line rate.
pub fn estimate(list: &[Nic], secs: f64, e: &mut Estimate) {
    for (i, n) in list.iter().enumerate() {
        let (bytes, share) = n.packets.iter().fold((0.0, 0.0), |(b, w), &(size, s)| (b + size as f64 * s, w + s));
        let mean = if share > 0.0 { bytes / share } else { 1514.0 };
        let packets = n.gbps * 1e9 / 8.0 / mean.max(1.0);
        let memory = n.queues as f64 * (n.ring as f64 * BYTES_PER_DESCRIPTOR + BYTES_PER_SOURCE);
        e.add(&format!("nic.{i}.gbps"), packets * secs * EVENTS_PER_PACKET, &format!("nic.{i}.ring"), memory);
    }
}

pub fn check(list: &[Nic], ctx: &Ctx, names: &mut HashSet<String>) -> Check {
    for (i, n) in list.iter().enumerate() {
        let p = format!("nic[{i}]");
        if !names.insert(n.name.clone()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", n.name));
        }
        // The link first, under its own key: a bad offered rate read as the link
        // speed in the message when no link_gbps was given (an audit).
        if let Some(link) = n.link_gbps.filter(|l| !(*l > 0.0 && *l <= 1600.0)) {
            return err(format!("{p}.link_gbps"), format!("{link}: expected above 0 and at most 1600 (Gbit/s)"));
        }
        let link = n.link_gbps.unwrap_or(1600.0);
        if !(n.gbps > 0.0 && n.gbps <= link) {
            let limit = match n.link_gbps {
                Some(l) => format!("at most the link speed, link_gbps = {l}"),
                None => "at most 1600".to_string(),
            };
            return err(format!("{p}.gbps"), format!("{}: expected above 0 (Gbit/s) and {limit}", n.gbps));
        }
        if n.socket >= ctx.sockets {
            return err(format!("{p}.socket"), format!("{}: expected 0 to platform.sockets - 1 ({})", n.socket, ctx.sockets - 1));
        }
        iommu(format!("{p}.iommu"), n.iommu, ctx)?;
        if n.queues == 0 || n.queues > 256 {
            return err(format!("{p}.queues"), format!("{}: expected 1 to 256", n.queues));
        }
        if n.train == 0 || n.train > 4096 {
            return err(format!("{p}.train"), format!("{}: expected 1 (Poisson frames) to 4096 frames per train", n.train));
        }
        if n.ring == 0 {
            return err(format!("{p}.ring"), "0: expected at least 1 descriptor");
        }
        if n.budget == 0 {
            return err(format!("{p}.budget"), "0: expected at least 1 packet a poll");
        }
        for (j, (b, w)) in n.packets.iter().enumerate() {
            if !((60..=9216).contains(b) && *w > 0.0 && w.is_finite()) {
                return err(format!("{p}.packets[{j}]"), "expected [bytes from 60 to 9216, share above 0]");
            }
        }
        // The largest frame must fit in the buffer, and its TLPs in the credits,
        // or it could never be written up the link.
        let largest = n.packets.iter().map(|x| x.0).max().unwrap_or(1514);
        let (kib, tlps) = (largest.div_ceil(1024), tlps(largest));
        for (key, v, lo, hi, why) in [
            ("buffer_kib", n.buffer_kib, kib, 1 << 20, "KiB: the largest frame"),
            ("posted_credits", n.posted_credits, tlps, 65536, "TLPs: the largest frame and its CQE"),
        ] {
            if v < lo || v > hi {
                return err(format!("{p}.{key}"), format!("{v}: expected {lo} ({why}) to {hi}"));
            }
        }
        targets(&p, &n.cpus, n.vm.as_deref(), ctx)?;
        if n.vm.is_none() {
            // Under overload NAPI hands its work to ksoftirqd, which the model
            // runs only where the CPU would idle: beside a task the queue
            // stopped for good (0 packets/s, an audit).
            beside_task(&p, &n.cpus, "NAPI's ksoftirqd", ctx)?;
        }
        match (n.vf_irqs, &n.vm) {
            (VfIrqs::Exit, _) => {}
            (_, None) => return err(format!("{p}.vf_irqs"), "applies only to a VF (a [[nic]] with vm = ...)"),
            (VfIrqs::Posted, Some(_)) => {}
            (VfIrqs::Remapped, Some(_)) => {
                if n.host_cpus.is_empty() {
                    return err(format!("{p}.host_cpus"), "a remapped VF needs host CPUs for its host vectors");
                }
                for (j, &c) in n.host_cpus.iter().enumerate() {
                    if c >= ctx.cpus || ctx.hosted.get(c as usize).is_some_and(|h| h.is_some()) {
                        return err(
                            format!("{p}.host_cpus[{j}]"),
                            format!("{c}: expected a host CPU (under platform.cpus, not a VM's pCPU)"),
                        );
                    }
                }
            }
        }
        n.moderation.check(&p)?;
        if let (Some(vm), ModerationKind::Polling) = (&n.vm, n.moderation.kind) {
            // The guest's NAPI busy polling would run in its vCPU, which the
            // model does not run as a poll loop: its pCPU spun and nothing was
            // ever reaped (a review: 100 % of the VF's frames dropped).
            return err(
                format!("{p}.moderation.kind"),
                format!(
                    "polling on a VF (vm = \"{vm}\") is not modelled (a guest's busy polling): expected \"none\", \"static\" or \"dim\""
                ),
            );
        }
        // Functions of one device agree on what they share. A `device` that
        // names another entry must name that entry's device, or the two would
        // silently be different NICs.
        let dev = n.device_name();
        if let Some((j, f)) = list.iter().enumerate().find(|(j, f)| *j != i && f.name == dev && f.device_name() != dev) {
            return err(
                format!("{p}.device"),
                format!("\"{dev}\" is nic[{j}], a function of device \"{}\": expected \"{}\"", f.device_name(), f.device_name()),
            );
        }
        if let Some((j, first)) = list[..i].iter().enumerate().find(|(_, f)| f.device_name() == dev) {
            let first_link = first.link_gbps.unwrap_or(first.gbps);
            for (key, mine, theirs) in [
                ("socket", n.socket as f64, first.socket as f64),
                ("iommu", n.iommu as f64, first.iommu as f64),
                ("link_gbps", link, first_link),
                ("buffer_kib", n.buffer_kib as f64, first.buffer_kib as f64),
                ("posted_credits", n.posted_credits as f64, first.posted_credits as f64),
            ] {
                if mine != theirs {
                    return err(format!("{p}.{key}"), format!("{mine}: expected {theirs}, as nic[{j}], which shares device \"{dev}\""));
                }
            }
            if n.relaxed_ordering != first.relaxed_ordering {
                return err(
                    format!("{p}.relaxed_ordering"),
                    format!("{}: expected {}, as nic[{j}], which shares device \"{dev}\"", n.relaxed_ordering, first.relaxed_ordering),
                );
            }
            let offered: f64 = list[..=i].iter().filter(|f| f.device_name() == dev).map(|f| f.gbps).sum();
            if offered > link * (1.0 + 1e-9) {
                return err(
                    format!("{p}.gbps"),
                    format!("the functions of \"{dev}\" offer {offered:.3} Gbit/s in all: expected at most its link, {link} Gbit/s"),
                );
            }
        }
    }
    Ok(())
}

impl Nic {
    /// The physical device this entry belongs to (its own name by default).
    pub fn device_name(&self) -> &str {
        self.device.as_deref().unwrap_or(&self.name)
    }
}
