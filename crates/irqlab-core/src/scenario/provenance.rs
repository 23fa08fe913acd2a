//! Which costs a scenario leaves at zero that its results depend on. A cost
//! of zero is a claim ("this takes no time"); when it is only the default,
//! nobody made it, and the metrics it feeds are flagged in the result.
//! Only the parts a scenario uses count: SDEI costs do not matter without an
//! SDEI cross-call, nor KVM's without `[kvm]`.

use super::units::{CpuTime, Time};
use super::{ExceptionKind, Masking, Mechanism, Scenario};

/// A cost at zero, and the metrics (shell-style globs) it feeds.
pub type ZeroCost = (String, Vec<&'static str>);

const IRQ_METRICS: &[&str] = &["irq_latency", "virq_latency", "*hardirq_share", "busy_share", "idle_share", "*.latency"];
const TASK_METRICS: &[&str] = &["ops_per_s", "task.*.ns_per_op", "task.*.ops_per_s*", "op_latency", "*kernel_share", "*user_share"];

/// The zero costs of `sc` that its results depend on (whether written or default:
/// the caller knows which keys the scenario wrote).
pub fn zero_costs(sc: &Scenario) -> Vec<ZeroCost> {
    let mut out = Vec::new();
    let mut t = |key: String, v: Time, metrics: &[&'static str]| {
        if v.ps() == 0 {
            out.push((key, metrics.to_vec()));
        }
    };
    let t = &mut t;
    if let Some(k) = &sc.kvm {
        let c = &k.costs;
        let lost = &["guest_time_lost_ns_per_s", "pmi_latency", "*guest_share"][..];
        for (name, v) in [("exit", c.exit), ("service", c.service), ("inject", c.inject), ("entry", c.entry)] {
            t(format!("kvm.costs.{name}"), v, &["pmi_latency", "*guest_share", "*vm_enters_per_s", "*exits_per_s"]);
        }
        t(
            "kvm.costs.irqs_off".into(),
            k.costs.irqs_off,
            &["cancels*", "*cancels_per_s", "guest_time_lost_ns_per_s", "cancel_share_of_enters"],
        );
        t("kvm.costs.cancel".into(), k.costs.cancel, lost);
        if k.rates.other_exits.0 > 0.0 || k.rates.pmu_emulated_overflow.0 > 0.0 {
            t("kvm.costs.other_exit".into(), k.costs.other_exit, &["*guest_share"]);
        }
        if k.rates.nmi.0 > 0.0 || k.rates.pmu_overflow.0 > 0.0 {
            t("kvm.costs.guest_nmi_handler".into(), k.costs.guest_nmi_handler, &["nmis_dropped", "nmis_delivered"]);
        }
        if k.rates.host_resched.0 > 0.0 {
            t("kvm.costs.host_resched".into(), k.costs.host_resched, &["*guest_share", "pmi_latency"]);
        }
    } else {
        machine(sc, t);
    }
    out
}

/// The machine model's zero costs (everything but `[kvm]`).
fn machine(sc: &Scenario, t: &mut impl FnMut(String, Time, &[&'static str])) {
    let c = &sc.cpu;
    let interrupts = !sc.sources.is_empty() || !sc.nvme.is_empty() || !sc.nic.is_empty() || !sc.crosscalls.is_empty();
    if interrupts {
        t("cpu.irq_entry".into(), c.irq_entry, IRQ_METRICS);
        t("cpu.irq_exit".into(), c.irq_exit, IRQ_METRICS);
        t("fabric.msi_write".into(), sc.fabric.msi_write, &["irq_latency", "fabric.*", "fabric_wait"]);
    }
    if sc.gsim.is_some() {
        // Every source GSIM holds that fires again is masked by its CPU.
        // (It delays the interrupts behind it, and through GSIM's hardirq
        // criterion moves the devices' throughput.)
        t("cpu.msix_mask".into(), c.msix_mask, &["irq_latency", "*hardirq_share", "busy_share", "idle_share", "gsim.*", "nvme.*", "nic.*"]);
    }
    if sc.tasks.iter().any(|x| x.exception != ExceptionKind::None) {
        t("cpu.exception_entry".into(), c.exception_entry, TASK_METRICS);
        t("cpu.exception_exit".into(), c.exception_exit, TASK_METRICS);
    }
    let faults = |x: &super::Task| x.exception == ExceptionKind::Pagefault && x.body.ps() == 0 && x.per_op.is_none();
    if sc.tasks.iter().any(faults) {
        let f = &sc.pagefault;
        let parts = [
            ("decode", f.decode),
            ("vma_lookup", f.vma_lookup),
            ("alloc", f.alloc),
            ("zero", f.zero),
            ("memcg_charge", f.memcg_charge),
            ("map", f.map),
            ("pcp_refill", f.pcp_refill),
            ("unmap", f.unmap),
        ];
        for (name, v) in parts {
            t(format!("pagefault.{name}"), v, TASK_METRICS);
        }
    }
    if sc.tasks.len() > sc.platform.cpus as usize {
        t("cpu.context_switch".into(), c.context_switch, &["context_switches_per_s", "ops_per_s", "task.*"]);
    }
    // Cycles without a clock are rejected by validation; as a time, only zero matters here.
    let cpu_time = |v: CpuTime| Time(v.ps(c.ghz).unwrap_or(1));
    if c.masking == Masking::Pmr {
        t("cpu.pmr.access".into(), cpu_time(c.pmr.access), &["task.*.pmr_tax_ns_per_op", "ops_per_s", "task.*.ns_per_op", "irq_latency"]);
        if c.pmr.pmhe {
            t("cpu.pmr.dsb".into(), cpu_time(c.pmr.dsb), &["task.*.pmr_tax_ns_per_op", "ops_per_s", "task.*.ns_per_op"]);
        }
    }
    let mechs = |m: Mechanism| sc.crosscalls.iter().any(|x| x.mechanisms.contains(&m));
    if mechs(Mechanism::Sdei) {
        let cc = &["crosscall.*.time_to_all_ns", "crosscall.*.latency", "crosscall.*.requester_smc_ns"][..];
        t("cpu.sdei.signal".into(), c.sdei.signal, cc);
        t("cpu.sdei.dispatch".into(), c.sdei.dispatch, cc);
    }
    if mechs(Mechanism::Ipi) || mechs(Mechanism::PseudoNmi) || mechs(Mechanism::Nmi) {
        t("cpu.sgi_latency".into(), c.sgi_latency, &["crosscall.*.time_to_all_ns", "crosscall.*.latency"]);
    }
    if !sc.vms.is_empty() {
        let h = &sc.hypervisor;
        for (name, v) in [("exit", h.exit), ("handler", h.handler), ("inject", h.inject), ("entry", h.entry)] {
            t(format!("hypervisor.{name}"), v, &["virq_latency", "*hyp_share", "vm_exits*"]);
        }
    }
    for (i, s) in sc.sources.iter().enumerate() {
        t(format!("source.{i}.handler"), s.handler, IRQ_METRICS);
    }
    for (i, d) in sc.nvme.iter().enumerate() {
        t(format!("nvme.{i}.handler"), d.handler, &["nvme.*.latency", "nvme.*.iops", "irq_latency", "*hardirq_share"]);
        t(format!("nvme.{i}.per_cqe"), d.per_cqe, &["nvme.*.latency", "nvme.*.iops", "*hardirq_share"]);
    }
    for (i, n) in sc.nic.iter().enumerate() {
        t(format!("nic.{i}.per_packet"), n.per_packet, &["nic.*", "*softirq_share"]);
    }
}
