//! What a `[kvm]` run reports: counts and rates per vCPU, per VM and in total,
//! the cancels by cause (metrics and a table), and the PMI latency.

use super::{Cause, KvmModel, Phase, SRC_NAMES};
use crate::engine::stats::{Report, Table};
use crate::engine::time::{ps_to_s, Ps};
use std::collections::BTreeMap;

impl KvmModel {
    pub fn reset_stats(&mut self, now: Ps) {
        for vc in &mut self.vcpus {
            if vc.phase == Phase::Guest {
                vc.guest_time += now - vc.guest_since;
                vc.guest_since = now;
            }
            (vc.enters, vc.cancels, vc.exits, vc.lost, vc.guest_time) = (0, 0, 0, 0, 0);
            vc.nmi.delivered = 0;
            vc.nmi.dropped = 0;
            vc.virqs = 0;
            vc.coalesced = 0;
            vc.posted = 0;
            vc.reschedules = 0;
            vc.pmis_masked = 0;
            vc.fastpath_reentries = 0;
        }
        self.attributed.clear();
        self.pmi_latency.reset();
        self.nmi_latency.reset();
    }

    pub fn report(&mut self, now: Ps, warmup: Ps, events: u64) -> Report {
        let span = now - warmup;
        let secs = ps_to_s(span).max(f64::MIN_POSITIVE);
        let mut r = Report::default();
        let mut tot = [0f64; 12];
        let mut per_vm: BTreeMap<u32, [f64; 3]> = BTreeMap::new();
        for (i, vc) in self.vcpus.iter_mut().enumerate() {
            if vc.phase == Phase::Guest {
                vc.guest_time += now - vc.guest_since;
                vc.guest_since = now;
            }
            let row = [
                vc.enters as f64,
                vc.cancels as f64,
                vc.exits as f64,
                vc.lost as f64,
                vc.nmi.delivered as f64,
                vc.nmi.dropped as f64,
                vc.virqs as f64,
                vc.posted as f64,
                vc.reschedules as f64,
                vc.pmis_masked as f64,
                vc.coalesced as f64,
                vc.fastpath_reentries as f64,
            ];
            for (t, x) in tot.iter_mut().zip(row) {
                *t += x;
            }
            let p = format!("vcpu{i}");
            r.metric(format!("{p}.vm_enters_per_s"), row[0] / secs);
            r.metric(format!("{p}.cancels_per_s"), row[1] / secs);
            r.metric(format!("{p}.exits_per_s"), row[2] / secs);
            r.metric(format!("{p}.guest_share"), vc.guest_time as f64 / span.max(1) as f64);
            let e = per_vm.entry(vc.vm).or_default();
            for k in 0..3 {
                e[k] += row[k];
            }
        }
        for (vm, e) in per_vm {
            r.metric(format!("vm{vm}.vm_enters_per_s"), e[0] / secs);
            r.metric(format!("vm{vm}.cancels_per_s"), e[1] / secs);
            r.metric(format!("vm{vm}.exits_per_s"), e[2] / secs);
        }
        r.metric("sim_s", secs);
        r.metric("events", events as f64);
        r.metric("vm_enters", tot[0]);
        r.metric("vm_enters_per_s", tot[0] / secs);
        r.metric("cancels", tot[1]);
        r.metric("cancels_per_s", tot[1] / secs);
        r.metric("cancels_per_10s", tot[1] / secs * 10.0);
        r.metric("exits", tot[2]);
        r.metric("exits_per_s", tot[2] / secs);
        // Exits handled in the fastpath and re-entered with no request pass.
        r.metric("fastpath_reentries_per_s", tot[11] / secs);
        r.metric("cancel_share_of_enters", if tot[0] + tot[1] > 0.0 { tot[1] / (tot[0] + tot[1]) } else { 0.0 });
        // Host time a cancel costs: the wasted IRQs-off phase, the unwind and the
        // pass through the request list it forces, per vCPU-second.
        r.metric("guest_time_lost_ns_per_s", tot[3] / 1e3 / secs / self.vcpus.len() as f64);
        r.metric("nmis_delivered", tot[4]);
        r.metric("nmis_dropped", tot[5]);
        // PMIs raised while the LVTPC was still masked from the one before: no NMI.
        r.metric("pmis_masked", tot[9]);
        // What the guest received through its APIC (injected or posted: fixed
        // vectors, not NMIs), and what merged into a vector already pending
        // there. `interrupts` adds the NMIs. No device writes MSIs here.
        r.metric("virqs_delivered", tot[6]);
        r.metric("virqs_coalesced", tot[10]);
        r.metric("interrupts", tot[6] + tot[4]);
        r.metric("interrupts_per_s", (tot[6] + tot[4]) / secs);
        r.metric("msi_writes", 0.0);
        r.metric("posted_interrupts", tot[7]);
        r.metric("host_reschedules", tot[8]);
        // Each cause as a metric (`cancels.REQ.raised_by.REQ2` / `cancels.REQ.source.SRC`)
        // and as a table row, so front ends need not split the names.
        let mut causes = Table::new(&["request", "kind", "cause", "cancels", "cancels_per_s"]);
        let mut keyed: Vec<(String, &'static str, &'static str, &'static str, u64)> = self
            .attributed
            .iter()
            .map(|(&(req, cause), &n)| {
                let (kind, what) = match cause {
                    Cause::Req(by) => ("raised_by", by.name()),
                    Cause::Src(src) => ("source", SRC_NAMES[src as usize]),
                };
                (format!("cancels.{}.{kind}.{what}", req.name()), req.name(), kind, what, n)
            })
            .collect();
        keyed.sort();
        for (key, req, kind, what, n) in keyed {
            r.metric(key, n as f64);
            causes.row(vec![req.into(), kind.into(), what.into(), (n as f64).into(), (n as f64 / secs).into()]);
        }
        r.table("cancel_causes", causes);
        r.histogram("pmi_latency", &self.pmi_latency);
        if self.nmi_latency.count() > 0 {
            r.histogram("nmi_latency", &self.nmi_latency);
        }
        r
    }
}
