//! Checks that serde's types cannot express: ranges, references between
//! sections, and combinations the model does not support (yet), each reported
//! with its key path.

use super::Scenario;
use std::collections::HashSet;

pub(super) type Check = Result<(), (String, String)>;

pub(super) fn err<T>(path: impl Into<String>, msg: impl Into<String>) -> Result<T, (String, String)> {
    Err((path.into(), msg.into()))
}

const MAX_CPUS: u32 = 4096;
/// Keeps a run's JSON to a sensible size.
const MAX_SERIES_POINTS: u64 = 100_000;

pub fn check(s: &Scenario) -> Check {
    if s.duration.ps() == 0 {
        return err("duration", "must be greater than 0");
    }
    if s.warmup >= s.duration {
        return err("warmup", format!("must be shorter than duration ({:?} ps >= {:?} ps)", s.warmup.ps(), s.duration.ps()));
    }
    let cpus = s.platform.cpus;
    if cpus == 0 || cpus > MAX_CPUS {
        return err("platform.cpus", format!("{cpus}: expected 1 to {MAX_CPUS}"));
    }
    if s.platform.sockets == 0 || s.platform.sockets > cpus {
        return err("platform.sockets", format!("{}: expected 1 to platform.cpus ({cpus})", s.platform.sockets));
    }
    if s.fabric.slots == 0 {
        return err("fabric.slots", "must be at least 1");
    }
    if let Some(i) = s.stats.series_interval {
        if i.ps() == 0 {
            return err("stats.series_interval", "must be greater than 0");
        }
        let points = (s.duration.ps() - s.warmup.ps()) / i.ps();
        if points > MAX_SERIES_POINTS {
            return err(
                "stats.series_interval",
                format!("too small: {points} samples per series, at most {MAX_SERIES_POINTS} (choose a longer interval)"),
            );
        }
    }

    // VMs: vCPUs pinned 1:1, one vCPU per pCPU.
    let mut hosted: Vec<Option<String>> = vec![None; cpus as usize];
    let mut names = HashSet::new();
    for (i, vm) in s.vms.iter().enumerate() {
        let p = format!("vm[{i}]");
        if !names.insert(vm.name.as_str()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", vm.name));
        }
        if vm.vcpus == 0 {
            return err(format!("{p}.vcpus"), "must be at least 1");
        }
        if vm.pcpus.len() != vm.vcpus as usize {
            return err(
                format!("{p}.pcpus"),
                format!("has {} entries, expected one pCPU per vCPU ({}): vCPUs are pinned 1:1", vm.pcpus.len(), vm.vcpus),
            );
        }
        for (j, &c) in vm.pcpus.iter().enumerate() {
            if c >= cpus {
                return err(format!("{p}.pcpus[{j}]"), format!("cpu {c} does not exist (platform.cpus = {cpus})"));
            }
            if let Some(other) = &hosted[c as usize] {
                return err(format!("{p}.pcpus[{j}]"), format!("cpu {c} already hosts a vCPU of {other}"));
            }
            hosted[c as usize] = Some(vm.name.clone());
        }
    }
    let vm_vcpus = |name: &str| s.vms.iter().find(|v| v.name == name).map(|v| v.vcpus);

    let mut names = HashSet::new();
    for (i, src) in s.sources.iter().enumerate() {
        let p = format!("source[{i}]");
        instances(&p, &src.name, src.count, &mut names)?;
        targets(&p, &src.cpus, src.vm.as_deref(), cpus, &vm_vcpus, &hosted)?;
        if src.replay.is_some() && src.count != 1 {
            return err(format!("{p}.count"), "a replayed source is one interrupt: count must be 1");
        }
        if src.arrival == super::Arrival::Periodic && src.rate.0 == 0.0 {
            return err(format!("{p}.rate"), "a periodic source needs a rate above 0");
        }
    }
    cpu_costs(s)?;
    crosscalls(s, &hosted)?;
    super::m5::check(s, &hosted, &vm_vcpus)?;
    super::kvm::check(s)?;
    let mut names = HashSet::new();
    for (i, t) in s.tasks.iter().enumerate() {
        let p = format!("task[{i}]");
        instances(&p, &t.name, t.count, &mut names)?;
        targets(&p, &t.cpus, t.vm.as_deref(), cpus, &vm_vcpus, &hosted)?;
        if t.exception == super::ExceptionKind::None && t.work.ps() == 0 {
            return err(format!("{p}.work"), "a task with no exception needs work above 0 (it would loop in zero time)");
        }
        if t.irqs_off > t.body {
            return err(format!("{p}.irqs_off"), "is part of the body, so it cannot be longer than body");
        }
        if t.irqs_off_with == Some(super::Masking::Pmr) && s.cpu.masking != super::Masking::Pmr {
            return err(format!("{p}.irqs_off_with"), "\"pmr\" needs pseudo-NMI: set cpu.masking = \"pmr\"");
        }
    }
    for (i, e) in s.expect.iter().enumerate() {
        if !(e.tolerance > 0.0 && e.tolerance.is_finite()) {
            return err(format!("expect[{i}].tolerance"), format!("{}: expected a relative tolerance above 0, like 0.05", e.tolerance));
        }
        if e.published == 0.0 || !e.published.is_finite() {
            return err(format!("expect[{i}].published"), "expected a finite, non-zero published value (errors are relative to it)");
        }
        if e.metric.is_empty() {
            return err(format!("expect[{i}].metric"), "must name a metric of the run");
        }
    }
    let (start, end) = (s.trace.start.map(|t| t.ps()), s.trace.end.map(|t| t.ps()));
    if let (Some(a), Some(b)) = (start, end) {
        if b <= a {
            return err("trace.end", "must be after trace.start");
        }
    }
    Ok(())
}

/// A source's or task's name is unique in its list, and it has at least one instance.
fn instances<'a>(p: &str, name: &'a str, count: u32, names: &mut HashSet<&'a str>) -> Check {
    if !names.insert(name) {
        return err(format!("{p}.name"), format!("\"{name}\" is used twice"));
    }
    if count == 0 {
        return err(format!("{p}.count"), "must be at least 1");
    }
    Ok(())
}

/// A source's or task's placement: pCPUs on the host, vCPU indices in a VM.
pub(super) fn targets(
    p: &str,
    list: &[u32],
    vm: Option<&str>,
    cpus: u32,
    vm_vcpus: &dyn Fn(&str) -> Option<u32>,
    hosted: &[Option<String>],
) -> Check {
    if list.is_empty() {
        return err(format!("{p}.cpus"), "must list at least one CPU");
    }
    match vm {
        Some(name) => {
            let Some(n) = vm_vcpus(name) else {
                return err(format!("{p}.vm"), format!("no VM named \"{name}\" (declare it in a [[vm]] table)"));
            };
            for (j, &c) in list.iter().enumerate() {
                if c >= n {
                    return err(format!("{p}.cpus[{j}]"), format!("vCPU {c} does not exist ({name} has {n})"));
                }
            }
        }
        None => {
            for (j, &c) in list.iter().enumerate() {
                if c >= cpus {
                    return err(format!("{p}.cpus[{j}]"), format!("cpu {c} does not exist (platform.cpus = {cpus})"));
                }
                if let Some(owner) = &hosted[c as usize] {
                    // The host side of a pCPU that runs a pinned vCPU is not modelled yet.
                    return err(
                        format!("{p}.cpus[{j}]"),
                        format!("cpu {c} runs a vCPU of {owner}; host tasks and host interrupts cannot target it"),
                    );
                }
            }
        }
    }
    Ok(())
}

fn cpu_costs(s: &Scenario) -> Check {
    if let Some(g) = s.cpu.ghz {
        if !(g.is_finite() && g > 0.0) {
            return err("cpu.ghz", format!("{g}: expected a clock above 0 GHz, like 3.4"));
        }
    }
    for (key, c) in [("cpu.pmr.access", s.cpu.pmr.access), ("cpu.pmr.dsb", s.cpu.pmr.dsb)] {
        if c.ps(s.cpu.ghz).is_none() {
            return err(key, "is given in cycles, so cpu.ghz must be set to convert it");
        }
    }
    Ok(())
}

fn crosscalls(s: &Scenario, hosted: &[Option<String>]) -> Check {
    let cpus = s.platform.cpus;
    let mut names = HashSet::new();
    for (i, x) in s.crosscalls.iter().enumerate() {
        let p = format!("crosscall[{i}]");
        if !names.insert(x.name.as_str()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", x.name));
        }
        if x.at < s.warmup || x.at >= s.duration {
            return err(format!("{p}.at"), "must be within the measured span: at or after warmup, before duration");
        }
        if x.from >= cpus {
            return err(format!("{p}.from"), format!("cpu {} does not exist (platform.cpus = {cpus})", x.from));
        }
        let targets: Vec<u32> = match &x.targets {
            Some(t) => t.clone(),
            None => (0..cpus).filter(|&c| c != x.from).collect(),
        };
        if targets.is_empty() {
            return err(format!("{p}.targets"), "no target CPU (a one-CPU platform has no other CPU to call)");
        }
        let mut seen = HashSet::new();
        for (j, &c) in targets.iter().enumerate() {
            if c >= cpus {
                return err(format!("{p}.targets[{j}]"), format!("cpu {c} does not exist (platform.cpus = {cpus})"));
            }
            if !seen.insert(c) {
                return err(format!("{p}.targets[{j}]"), format!("cpu {c} is listed twice"));
            }
            if let Some(owner) = &hosted[c as usize] {
                return err(format!("{p}.targets[{j}]"), format!("cpu {c} runs a vCPU of {owner}; cross-calls target host CPUs"));
            }
        }
        if x.mechanisms.is_empty() {
            return err(format!("{p}.mechanisms"), "must list at least one of \"ipi\", \"pseudo-nmi\", \"sdei\", \"nmi\"");
        }
        let mut seen = HashSet::new();
        for (j, m) in x.mechanisms.iter().enumerate() {
            if !seen.insert(m.name()) {
                return err(format!("{p}.mechanisms[{j}]"), format!("\"{}\" is listed twice", m.name()));
            }
            if *m == super::Mechanism::PseudoNmi && s.cpu.masking != super::Masking::Pmr {
                return err(format!("{p}.mechanisms[{j}]"), "\"pseudo-nmi\" needs cpu.masking = \"pmr\" (irqchip.gicv3_pseudo_nmi=1)");
            }
        }
        if x.signals == 0 {
            return err(format!("{p}.signals"), "must be at least 1");
        }
        if x.signals > 1 && x.signal_interval.ps() == 0 {
            return err(format!("{p}.signal_interval"), "must be above 0 when signals > 1");
        }
        match x.timeout {
            None if x.mechanisms.len() > 1 => {
                return err(format!("{p}.timeout"), "is needed to escalate from one mechanism to the next");
            }
            Some(t) if t.ps() == 0 || (x.signals as u64 - 1) * x.signal_interval.ps() >= t.ps() => {
                return err(
                    format!("{p}.timeout"),
                    "must be above 0 and longer than the repeated signals ((signals - 1) x signal_interval)",
                );
            }
            _ => {}
        }
    }
    Ok(())
}
