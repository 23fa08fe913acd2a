//! KVM's per-vCPU request bits (`KVM_REQ_*`) that matter for the VM-enter
//! path, the order `vcpu_enter_guest()` checks them in, and what servicing
//! one raises (`kvm_make_request` from inside a handler).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The request order: a preset, or the list of request names in service order.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum Order {
    /// `"upstream-before"` (SMI, NMI before PMU, PMI) or `"upstream-after"` (NMI, SMI after PMI).
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
/// checked by event injection, after the list.
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
pub const NREQ: usize = 10;

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
        }
    }

    pub fn bit(self) -> u16 {
        1 << self as u8
    }

    /// What servicing this request raises: `kvm_pmu_handle_event` raises PMI
    /// for an overflowed counter; `kvm_pmu_deliver_pmi` goes through the LVTPC
    /// (an NMI, or a fixed-vector interrupt: EVENT); `process_nmi` and
    /// `process_smi` raise EVENT so that injection runs.
    pub fn raises(self, lvtpc: Lvtpc) -> Option<Req> {
        match self {
            Req::Pmu => Some(Req::Pmi),
            Req::Pmi => Some(match lvtpc {
                Lvtpc::Nmi => Req::Nmi,
                Lvtpc::Fixed => Req::Event,
            }),
            Req::Nmi | Req::Smi => Some(Req::Event),
            _ => None,
        }
    }
}

/// Upstream's order before the change: SMI and NMI are serviced before PMU and PMI.
pub const UPSTREAM_BEFORE: [Req; 9] = ORDERED;
/// After "KVM: x86: Service NMI requests after PMI requests in VM-Enter path".
pub const UPSTREAM_AFTER: [Req; 9] = [
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
            other => Err((
                String::new(),
                format!("unknown preset \"{other}\", expected \"upstream-before\", \"upstream-after\" or a list of request names"),
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

pub type Table = (Vec<&'static str>, Vec<(&'static str, Vec<&'static str>)>, Vec<(&'static str, &'static str)>);

/// The request list, the presets and the "servicing X raises Y" edges (LVTPC in
/// NMI mode), for front ends that search orders.
pub fn table() -> Table {
    let names = |o: &[Req]| o.iter().map(|r| r.name()).collect::<Vec<_>>();
    let edges = ORDERED.iter().filter_map(|r| r.raises(Lvtpc::Nmi).map(|x| (r.name(), x.name()))).collect();
    (names(&ORDERED), vec![("upstream-before", names(&UPSTREAM_BEFORE)), ("upstream-after", names(&UPSTREAM_AFTER))], edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_differ_only_in_where_smi_and_nmi_go() {
        let before = resolve(&Order::Preset("upstream-before".into())).unwrap();
        let after = resolve(&Order::Preset("upstream-after".into())).unwrap();
        let pos = |o: &[Req], r| o.iter().position(|&x| x == r).unwrap();
        assert!(pos(&before, Req::Nmi) < pos(&before, Req::Pmi));
        assert!(pos(&after, Req::Nmi) > pos(&after, Req::Pmi));
        assert!(pos(&after, Req::Smi) > pos(&after, Req::Pmi));
        assert_eq!(pos(&before, Req::Pmu), pos(&before, Req::Pmi) - 1);
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
        assert_eq!(Req::Pmu.raises(Lvtpc::Nmi), Some(Req::Pmi));
        assert_eq!(Req::Pmi.raises(Lvtpc::Nmi), Some(Req::Nmi));
        assert_eq!(Req::Pmi.raises(Lvtpc::Fixed), Some(Req::Event));
        assert_eq!(Req::Nmi.raises(Lvtpc::Nmi), Some(Req::Event));
        assert_eq!(Req::ScanIoapic.raises(Lvtpc::Nmi), None);
    }
}
