//! KVM's per-vCPU request bits (`KVM_REQ_*`) that matter for the VM-enter
//! path, the order `vcpu_enter_guest()` checks them in, and what servicing
//! one raises (`kvm_make_request` from inside a handler).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The request order: a preset, or the list of request names in service order.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum Order {
    /// `"upstream-before"` (SMI, NMI, PMU, PMI), `"upstream-after"` (the patch as
    /// the M4 brief gives it: SMI, PMU, PMI, NMI) or `"linux-6.12"` (PMU, PMI, SMI, NMI).
    Preset(String),
    List(Vec<String>),
}

impl Default for Order {
    fn default() -> Self {
        Order::Preset("upstream-before".into())
    }
}

/// How the emulated local APIC's LVTPC delivers the guest's PMI.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Lvtpc {
    /// As perf programs it: an NMI (`kvm_inject_nmi` → KVM_REQ_NMI).
    #[default]
    Nmi,
    /// A fixed vector: an APIC interrupt (KVM_REQ_EVENT).
    Fixed,
}

/// A request bit. `Event` (KVM_REQ_EVENT) is not in the ordered list: it is
/// checked by event injection, after the list. `Resched` is not a request bit:
/// it stands for TIF_NEED_RESCHED or a pending signal, which the final check
/// (`kvm_vcpu_exit_request` → `xfer_to_guest_mode_work_pending`) also honours.
/// `Unblock` (KVM_REQ_UNBLOCK, which the LAPIC timer's hrtimer raises) is in
/// no list either: any pending request cancels at the final check, and
/// `vcpu_run` clears it when `vcpu_enter_guest` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Req {
    StealUpdate = 0,
    Smi,
    Nmi,
    Pmu,
    Pmi,
    IoapicEoiExit,
    ScanIoapic,
    LoadEoiExitmap,
    ApicPageReload,
    Event,
    Resched,
    Unblock,
}

pub const ORDERED: [Req; 9] = [
    Req::StealUpdate,
    Req::Smi,
    Req::Nmi,
    Req::Pmu,
    Req::Pmi,
    Req::IoapicEoiExit,
    Req::ScanIoapic,
    Req::LoadEoiExitmap,
    Req::ApicPageReload,
];
pub const NREQ: usize = 12;

impl Req {
    pub fn name(self) -> &'static str {
        match self {
            Req::StealUpdate => "STEAL_UPDATE",
            Req::Smi => "SMI",
            Req::Nmi => "NMI",
            Req::Pmu => "PMU",
            Req::Pmi => "PMI",
            Req::IoapicEoiExit => "IOAPIC_EOI_EXIT",
            Req::ScanIoapic => "SCAN_IOAPIC",
            Req::LoadEoiExitmap => "LOAD_EOI_EXITMAP",
            Req::ApicPageReload => "APIC_PAGE_RELOAD",
            Req::Event => "EVENT",
            Req::Resched => "RESCHED",
            Req::Unblock => "UNBLOCK",
        }
    }

    pub fn bit(self) -> u16 {
        1 << self as u8
    }

    /// The request whose bit is `i`: `ORDERED` lists the ordered ones by their
    /// bit, EVENT, RESCHED and UNBLOCK come after them.
    pub fn from_bit_index(i: usize) -> Req {
        match i {
            _ if i < ORDERED.len() => ORDERED[i],
            9 => Req::Event,
            10 => Req::Resched,
            _ => Req::Unblock,
        }
    }

    /// What servicing this request always raises: `kvm_pmu_deliver_pmi` goes
    /// through the LVTPC (an NMI: `kvm_inject_nmi`; or a fixed-vector interrupt:
    /// EVENT, or nothing when APICv posts it); `process_nmi` and `process_smi`
    /// raise EVENT so that injection runs. PMU is not here: a hardware
    /// overflow raises PMI itself from the perf callback (`kvm_perf_overflow`),
    /// and `kvm_pmu_handle_event` raises PMI only when an *emulated* counter
    /// increment overflows ([`EMULATED_EDGE`]).
    pub fn raises(self, lvtpc: Lvtpc, apicv: bool) -> Option<Req> {
        match self {
            Req::Pmi => match (lvtpc, apicv) {
                (Lvtpc::Nmi, _) => Some(Req::Nmi),
                (Lvtpc::Fixed, false) => Some(Req::Event),
                (Lvtpc::Fixed, true) => None,
            },
            Req::Nmi | Req::Smi => Some(Req::Event),
            _ => None,
        }
    }
}

/// The conditional edge: servicing PMU (`kvm_pmu_handle_event` → `reprogram_counter`)
/// raises PMI when an emulated counter increment (`kvm_pmu_incr_counter`) overflowed.
pub const EMULATED_EDGE: (Req, Req) = (Req::Pmu, Req::Pmi);

/// Upstream's order before the change: SMI and NMI are serviced before PMU and PMI.
pub const UPSTREAM_BEFORE: [Req; 9] = ORDERED;
/// After "KVM: x86: Service NMI requests after PMI requests in VM-Enter path", as
/// the M4 brief gives it: only the NMI block moves, SMI stays before PMU.
pub const UPSTREAM_AFTER: [Req; 9] = [
    Req::StealUpdate,
    Req::Smi,
    Req::Pmu,
    Req::Pmi,
    Req::Nmi,
    Req::IoapicEoiExit,
    Req::ScanIoapic,
    Req::LoadEoiExitmap,
    Req::ApicPageReload,
];
/// What Debian's linux-source-6.12 has in `vcpu_enter_guest()`
/// (arch/x86/kvm/x86.c): PMU and PMI above SMI and NMI. SMI's place differs
/// from the brief's; servicing SMI raises only EVENT, so it changes no cancel.
pub const LINUX_6_12: [Req; 9] = [
    Req::StealUpdate,
    Req::Pmu,
    Req::Pmi,
    Req::Smi,
    Req::Nmi,
    Req::IoapicEoiExit,
    Req::ScanIoapic,
    Req::LoadEoiExitmap,
    Req::ApicPageReload,
];

pub fn by_name(n: &str) -> Option<Req> {
    ORDERED.iter().copied().find(|r| r.name().eq_ignore_ascii_case(n.trim()))
}

/// The scenario's order as request bits; a list must name every ordered request exactly once.
pub fn resolve(o: &Order) -> Result<Vec<Req>, (String, String)> {
    match o {
        Order::Preset(p) => match p.as_str() {
            "upstream-before" => Ok(UPSTREAM_BEFORE.to_vec()),
            "upstream-after" => Ok(UPSTREAM_AFTER.to_vec()),
            "linux-6.12" => Ok(LINUX_6_12.to_vec()),
            other => Err((
                String::new(),
                format!("unknown preset \"{other}\", expected \"upstream-before\", \"upstream-after\", \"linux-6.12\" or a list of request names"),
            )),
        },
        Order::List(names) => {
            let mut out = Vec::new();
            for (i, n) in names.iter().enumerate() {
                let Some(r) = by_name(n) else {
                    let known: Vec<&str> = ORDERED.iter().map(|r| r.name()).collect();
                    return Err((format!("[{i}]"), format!("unknown request \"{n}\", expected one of {}", known.join(", "))));
                };
                if out.contains(&r) {
                    return Err((format!("[{i}]"), format!("\"{}\" is listed twice", r.name())));
                }
                out.push(r);
            }
            if out.len() != ORDERED.len() {
                let missing: Vec<&str> = ORDERED.iter().filter(|r| !out.contains(r)).map(|r| r.name()).collect();
                return Err((String::new(), format!("missing {}: list every request once", missing.join(", "))));
            }
            Ok(out)
        }
    }
}

/// Request names, presets, and edges (from, to, condition: empty when always).
pub type Table = (Vec<&'static str>, Vec<(&'static str, Vec<&'static str>)>, Vec<(&'static str, &'static str, &'static str)>);

/// The request list, the presets and the "servicing X raises Y" edges (LVTPC in
/// NMI mode; the emulated-overflow edge last), for front ends that search orders.
pub fn table() -> Table {
    let names = |o: &[Req]| o.iter().map(|r| r.name()).collect::<Vec<_>>();
    let mut edges: Vec<_> = ORDERED.iter().filter_map(|r| r.raises(Lvtpc::Nmi, true).map(|x| (r.name(), x.name(), ""))).collect();
    edges.push((EMULATED_EDGE.0.name(), EMULATED_EDGE.1.name(), "when an emulated counter increment overflowed"));
    let presets =
        vec![("upstream-before", names(&UPSTREAM_BEFORE)), ("upstream-after", names(&UPSTREAM_AFTER)), ("linux-6.12", names(&LINUX_6_12))];
    (names(&ORDERED), presets, edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_after_is_the_patch_order_the_nmi_block_moves_alone() {
        let before = resolve(&Order::Preset("upstream-before".into())).unwrap();
        let after = resolve(&Order::Preset("upstream-after".into())).unwrap();
        let names = |o: &[Req]| o.iter().map(|r| r.name()).collect::<Vec<_>>().join(" ");
        assert_eq!(names(&before), "STEAL_UPDATE SMI NMI PMU PMI IOAPIC_EOI_EXIT SCAN_IOAPIC LOAD_EOI_EXITMAP APIC_PAGE_RELOAD");
        // The brief: service NMI after PMI; SMI stays where it was, before PMU.
        assert_eq!(names(&after), "STEAL_UPDATE SMI PMU PMI NMI IOAPIC_EOI_EXIT SCAN_IOAPIC LOAD_EOI_EXITMAP APIC_PAGE_RELOAD");
        // Removing NMI from both leaves the same list: nothing else moved.
        let without = |o: &[Req]| o.iter().copied().filter(|&r| r != Req::Nmi).collect::<Vec<_>>();
        assert_eq!(without(&before), without(&after));
        let l612 = resolve(&Order::Preset("linux-6.12".into())).unwrap();
        assert_eq!(names(&l612), "STEAL_UPDATE PMU PMI SMI NMI IOAPIC_EOI_EXIT SCAN_IOAPIC LOAD_EOI_EXITMAP APIC_PAGE_RELOAD");
    }

    #[test]
    fn every_bit_index_names_its_request() {
        for i in 0..NREQ {
            assert_eq!(Req::from_bit_index(i) as usize, i);
        }
    }

    #[test]
    fn lists_are_checked() {
        let l = |v: &[&str]| Order::List(v.iter().map(|s| s.to_string()).collect());
        assert!(resolve(&l(&["PMU"])).unwrap_err().1.contains("missing"));
        assert!(resolve(&l(&["PMU", "pmu"])).unwrap_err().1.contains("twice"));
        assert!(resolve(&l(&["NMII"])).unwrap_err().1.contains("unknown request"));
        let names: Vec<&str> = UPSTREAM_AFTER.iter().map(|r| r.name()).collect();
        assert_eq!(resolve(&l(&names)).unwrap(), UPSTREAM_AFTER.to_vec());
    }

    #[test]
    fn the_pmi_chain() {
        // A hardware overflow raises PMI from the perf callback; PMU servicing raises nothing by itself.
        assert_eq!(Req::Pmu.raises(Lvtpc::Nmi, true), None);
        assert_eq!(Req::Pmi.raises(Lvtpc::Nmi, true), Some(Req::Nmi));
        assert_eq!(Req::Pmi.raises(Lvtpc::Nmi, false), Some(Req::Nmi));
        assert_eq!(Req::Pmi.raises(Lvtpc::Fixed, false), Some(Req::Event));
        assert_eq!(Req::Pmi.raises(Lvtpc::Fixed, true), None, "APICv posts a fixed-vector PMI");
        assert_eq!(Req::Nmi.raises(Lvtpc::Nmi, true), Some(Req::Event));
        assert_eq!(Req::ScanIoapic.raises(Lvtpc::Nmi, true), None);
        assert!(table().2.iter().any(|&(a, b, when)| (a, b) == ("PMU", "PMI") && when.contains("emulated")));
    }
}
