//! `[gic]`: the GICv3/v4 interrupt controller with its ITSs, as seen by a
//! guest's device interrupts (M3).

use crate::scenario::check::{err, Check};
use crate::scenario::units::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub enum GicVersion {
    /// GICv4.0: a doorbell is (un)masked with an ITS `INV` through a proxy device.
    #[serde(rename = "4.0")]
    V40,
    /// GICv4.1: the doorbell is requested in the `GICR_VPENDBASER` write at deschedule.
    #[serde(rename = "4.1")]
    V41,
}

/// `"4.1"` as written, and `4.1` unquoted too (`--set gic.version=4.1` is a
/// number to TOML: serde's derive said "invalid type: unit variant").
impl<'de> Deserialize<'de> for GicVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Version;
        impl serde::de::Visitor<'_> for Version {
            type Value = GicVersion;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"4.0\" or \"4.1\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GicVersion, E> {
                match v {
                    "4.0" | "4" => Ok(GicVersion::V40),
                    "4.1" => Ok(GicVersion::V41),
                    _ => Err(E::custom(format!("\"{v}\": expected \"4.0\" or \"4.1\""))),
                }
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<GicVersion, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<GicVersion, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<GicVersion, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(Version)
    }
}

/// When a non-resident vPE's doorbell is unmasked.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DoorbellWhen {
    /// Only while its vCPU is blocked (KVM: `vgic_v4_put`, asking for it while `IN_WFI`).
    Blocked,
    /// Whenever the vPE is not resident, blocked or preempted.
    Descheduled,
}

/// The interrupt controller's section.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gic {
    /// GICv4 direct injection of virtual LPIs; false: GICv3 trap-and-emulate.
    #[serde(default)]
    pub direct_lpi: bool,
    #[serde(default = "d_version")]
    pub version: GicVersion,
    /// ITSs on the platform; `VMOVP` is issued on each of them (the brief),
    /// unless `single_vmovp`. 0: no ITS (no LPIs).
    #[serde(default = "crate::scenario::units::one_u32")]
    pub its: u32,
    /// Every ITS has `GITS_TYPER.VMOVP`: one `VMOVP` moves a vPE for all of them,
    /// and Linux sends just one (`its_send_vmovp` with no ITS list, which
    /// `its_probe_one` fills only with ITSs lacking the bit).
    #[serde(default)]
    pub single_vmovp: bool,
    /// The pCPU every physical LPI for a guest targets. Xen maps each host LPI
    /// to CPU 0 (`gicv3_its_map_host_events`: "For now we map every host LPI to host CPU 0").
    #[serde(default)]
    pub lpi_target: u32,
    #[serde(default = "d_doorbell")]
    pub doorbell: DoorbellWhen,
    /// List registers per CPU interface (`ICH_VTR_EL2.ListRegs` + 1).
    #[serde(default = "d_lrs")]
    pub list_registers: u32,
    #[serde(default)]
    pub costs: GicCosts,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GicCosts {
    /// From the device's MSI write to the LPI (or vLPI) at the redistributor: ITS translation.
    #[serde(default)]
    pub lpi_delivery: Time,
    /// One ITS command (with its `SYNC`/`VSYNC`) until `GITS_CREADR` passes it; the issuer polls.
    #[serde(default)]
    pub its_cmd: Time,
    /// Writing `GICR_VPROPBASER` and `GICR_VPENDBASER` at a vPE's schedule-in or -out.
    #[serde(default)]
    pub vpendbaser: Time,
    /// Mean time until `GICR_VPENDBASER.Dirty` clears (exponential), polled every `dirty_poll`.
    #[serde(default)]
    pub dirty: Time,
    /// The poll step (Linux `its_wait_vpt_parse_complete` and the Xen RFC: 1 µs).
    #[serde(default = "d_poll")]
    pub dirty_poll: Time,
    /// The poll gives up after this long (500 µs).
    #[serde(default = "d_poll_max")]
    pub dirty_max: Time,
    /// The hypervisor's handler for a doorbell LPI (acknowledge, EOI, find the vPE).
    #[serde(default)]
    pub doorbell_handler: Time,
}

impl Default for GicCosts {
    fn default() -> Self {
        GicCosts {
            lpi_delivery: Time(0),
            its_cmd: Time(0),
            vpendbaser: Time(0),
            dirty: Time(0),
            dirty_poll: d_poll(),
            dirty_max: d_poll_max(),
            doorbell_handler: Time(0),
        }
    }
}

fn d_version() -> GicVersion {
    GicVersion::V41
}
fn d_doorbell() -> DoorbellWhen {
    DoorbellWhen::Blocked
}
fn d_lrs() -> u32 {
    4
}
fn d_poll() -> Time {
    Time(1_000_000)
}
fn d_poll_max() -> Time {
    Time(500_000_000)
}

impl Gic {
    /// `pcpus`: the hypervisor's pCPUs (`vcpu_sched.pcpus`), if it is configured.
    pub fn check(&self, pcpus: Option<u32>) -> Check {
        let p = "gic";
        let Some(pcpus) = pcpus else {
            return err(p, "needs a [vcpu_sched] section: guest interrupts are delivered to vCPUs");
        };
        if self.its == 0 {
            return err(format!("{p}.its"), "is 0: LPIs, and GICv4's direct injection, need at least one ITS");
        }
        if self.its > 64 {
            return err(format!("{p}.its"), "must be at most 64");
        }
        if self.lpi_target >= pcpus {
            return err(format!("{p}.lpi_target"), format!("pCPU {} does not exist (vcpu_sched.pcpus = {pcpus})", self.lpi_target));
        }
        if self.list_registers == 0 || self.list_registers > 16 {
            return err(format!("{p}.list_registers"), "must be between 1 and 16 (ICH_VTR_EL2.ListRegs)");
        }
        let c = &self.costs;
        if c.dirty_poll.ps() == 0 {
            return err(format!("{p}.costs.dirty_poll"), "must be above 0");
        }
        if c.dirty_max < c.dirty_poll || c.dirty_max.ps() > 1_000_000_000_000 {
            return err(format!("{p}.costs.dirty_max"), "must be at least dirty_poll and at most 1s");
        }
        for (k, t) in [
            ("lpi_delivery", c.lpi_delivery),
            ("its_cmd", c.its_cmd),
            ("vpendbaser", c.vpendbaser),
            ("dirty", c.dirty),
            ("doorbell_handler", c.doorbell_handler),
        ] {
            if t.ps() > 1_000_000_000_000 {
                return err(format!("{p}.costs.{k}"), "must be at most 1s");
            }
        }
        Ok(())
    }
}
