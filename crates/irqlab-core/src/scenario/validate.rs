//! Checks that serde's types cannot express: ranges, references between
//! sections, and combinations the model does not support (yet), each reported
//! with its key path.

use super::check::{err, targets, Check, Ctx};
use super::units::Time;
use super::{ExceptionKind, ExpectKind, Masking, Scenario};
use std::collections::HashSet;

const MAX_CPUS: u32 = 4096;
/// Remapping units per socket: a server socket has a handful of IIO stacks; 64 is far beyond any.
const MAX_IOMMUS_PER_SOCKET: u32 = 64;
/// Keeps a run's JSON to a sensible size.
const MAX_SERIES_POINTS: u64 = 100_000;

pub fn check(s: &Scenario) -> Check {
    if s.duration.ps() == 0 {
        return err("duration", "must be greater than 0");
    }
    if s.warmup >= s.duration {
        return err("warmup", format!("{} must be shorter than duration ({})", s.warmup, s.duration));
    }
    let cpus = s.platform.cpus;
    if cpus == 0 || cpus > MAX_CPUS {
        return err("platform.cpus", format!("{cpus}: expected 1 to {MAX_CPUS}"));
    }
    if s.platform.sockets == 0 || s.platform.sockets > cpus {
        return err("platform.sockets", format!("{}: expected 1 to platform.cpus ({cpus})", s.platform.sockets));
    }
    if s.platform.iommus_per_socket == 0 || s.platform.iommus_per_socket > MAX_IOMMUS_PER_SOCKET {
        return err("platform.iommus_per_socket", format!("{}: expected 1 to {MAX_IOMMUS_PER_SOCKET}", s.platform.iommus_per_socket));
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
                format!(
                    "has {} {}, expected one pCPU per vCPU ({}): vCPUs are pinned 1:1",
                    vm.pcpus.len(),
                    if vm.pcpus.len() == 1 { "entry" } else { "entries" },
                    vm.vcpus
                ),
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
    if s.hypervisor.guest_idle == super::GuestIdle::Hlt {
        if s.vms.is_empty() {
            return err("hypervisor.guest_idle", "\"hlt\" halts the vCPUs of [[vm]] sections, and this scenario has none");
        }
        if s.hypervisor.halt_poll_grow_start.ps() == 0 && s.hypervisor.halt_poll.ps() > 0 {
            return err("hypervisor.halt_poll_grow_start", "must be greater than 0 when halt_poll is (a window grows from 0 to it first)");
        }
    }
    // Where host tasks run (instance i on cpus[i % len]), for the sections
    // whose work runs only when the CPU would idle.
    let mut task_on: Vec<Option<String>> = vec![None; cpus as usize];
    for t in s.tasks.iter().filter(|t| t.vm.is_none()) {
        for &c in t.cpus.iter().take(t.count.max(1) as usize) {
            if let Some(slot) = task_on.get_mut(c as usize) {
                slot.get_or_insert_with(|| t.name.clone());
            }
        }
    }
    let ctx = Ctx {
        task_on,
        cpus,
        sockets: s.platform.sockets,
        iommus_per_socket: s.platform.iommus_per_socket,
        warmup: s.warmup,
        duration: s.duration,
        pmr: s.cpu.masking == Masking::Pmr,
        hosted,
        vms: s.vms.iter().map(|v| (v.name.clone(), v.vcpus)).collect(),
        hyp_pcpus: s.vcpu_sched.as_ref().map_or(0, |v| v.pcpus),
    };

    let mut names = HashSet::new();
    for (i, src) in s.sources.iter().enumerate() {
        let p = format!("source[{i}]");
        instances(&p, &src.name, src.count, &mut names)?;
        targets(&p, &src.cpus, src.vm.as_deref(), &ctx)?;
        if src.replay.is_some() && src.count != 1 {
            return err(format!("{p}.count"), "a replayed source is one interrupt: count must be 1");
        }
        if src.arrival == super::Arrival::Periodic && src.rate.0 == 0.0 {
            return err(format!("{p}.rate"), "a periodic source needs a rate above 0");
        }
        // request_nmi() fails unless the GIC driver masks by priority (gic_supports_nmi).
        if src.nmi && s.cpu.masking != super::Masking::Pmr {
            return err(format!("{p}.nmi"), "an NMI needs pseudo-NMI: set cpu.masking = \"pmr\" (request_nmi fails without it)");
        }
        // raise_softirq is not allowed between nmi_enter and nmi_exit.
        if src.nmi && src.softirq.ps() > 0 {
            return err(
                format!("{p}.softirq"),
                "an NMI handler raises no softirq (raise_softirq is not NMI-safe; perf hands its work to irq_work, a normal interrupt): give the work to a normal source",
            );
        }
    }
    s.cpu.check()?;
    if (s.fabric.dma_write.ps() > 0 || s.fabric.dma_per_kib.ps() > 0) && s.fabric.slots != 1 {
        return err("fabric.slots", "must be 1 when devices DMA through the fabric (one in-order posted-write path)");
    }
    s.check_components(&ctx)?;
    let mut names = HashSet::new();
    for (i, t) in s.tasks.iter().enumerate() {
        let p = format!("task[{i}]");
        instances(&p, &t.name, t.count, &mut names)?;
        targets(&p, &t.cpus, t.vm.as_deref(), &ctx)?;
        if t.exception == ExceptionKind::None && t.work.ps() == 0 {
            return err(format!("{p}.work"), "a task with no exception needs work above 0 (it would loop in zero time)");
        }
        // Any other pass that takes no time loops at one instant for ever, and
        // `--force` (which lifts the budget that would catch it) let it hang
        // past Ctrl-C (an audit). A yield may take its time in the switch to
        // another task, so the budget judges that one.
        let around =
            if t.exception == ExceptionKind::None { 0 } else { s.cpu.exception_entry.ps().saturating_add(s.cpu.exception_exit.ps()) };
        let pass = t.work.ps().saturating_add(t.body_time(&s.cpu, &s.pagefault).ps()).saturating_add(around);
        if pass == 0 && !(t.exception == ExceptionKind::Yield && s.cpu.context_switch.ps() > 0) {
            return err(
                format!("{p}.work"),
                "one pass of the task's loop takes no time (work, its exception's body and cpu.exception_entry/exit are all 0): give any of them a cost above 0",
            );
        }
        if let Some(per_op) = t.per_op {
            let around = t.work.ps().saturating_add(s.cpu.exception_entry.ps()).saturating_add(s.cpu.exception_exit.ps());
            if t.exception == ExceptionKind::None {
                return err(format!("{p}.per_op"), "needs an exception: per_op is a whole pass through the kernel");
            }
            if per_op.ps() < around {
                return err(
                    format!("{p}.per_op"),
                    format!(
                        "{per_op} is less than work + cpu.exception_entry + cpu.exception_exit ({}): nothing is left for the body",
                        crate::scenario::Time(around)
                    ),
                );
            }
        }
        if t.irqs_off > t.body_time(&s.cpu, &s.pagefault) {
            return err(format!("{p}.irqs_off"), "is part of the body, so it cannot be longer than body");
        }
        if t.irqs_off_with == Some(Masking::Pmr) && s.cpu.masking != Masking::Pmr {
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
        match (e.kind, e.fitted.is_empty()) {
            (ExpectKind::Fit, true) => {
                return err(format!("expect[{i}].fitted"), "a fit names the parameters fitted on it, like [\"fabric.msi_write\"]");
            }
            (ExpectKind::Prediction, false) => {
                return err(
                    format!("expect[{i}].fitted"),
                    "a prediction has nothing fitted on it: make it kind = \"fit\" or remove fitted",
                );
            }
            _ => {}
        }
        if e.relative_to.as_ref().is_some_and(|r| *r == e.set) {
            return err(format!("expect[{i}].relative_to"), "names the figure's own variant: expected the other variant's overrides");
        }
    }
    if let Some(v) = &s.variants {
        if v.metrics.is_empty() || v.metrics.iter().any(|m| m.is_empty()) {
            return err("variants.metrics", "must name at least one metric of the run, like [\"vblk.clat.p99.9\"]");
        }
        if v.runs.is_empty() {
            return err("variants.run", "must list at least one [[variants.run]] with a name and its overrides");
        }
        if let Some(pl) = &v.plot {
            for (k, m) in [("x", &pl.x), ("y", &pl.y)] {
                if !v.metrics.contains(m) {
                    return err(format!("variants.plot.{k}"), format!("\"{m}\" is not one of variants.metrics"));
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, r) in v.runs.iter().enumerate() {
            if r.name.is_empty() || !names.insert(r.name.as_str()) {
                return err(format!("variants.run[{i}].name"), format!("\"{}\" is empty or used twice", r.name));
            }
        }
    }
    let (start, end) = (s.trace.start.map(|t| t.ps()), s.trace.end.map(|t| t.ps()));
    if let (Some(a), Some(b)) = (start, end) {
        if b <= a {
            return err("trace.end", "must be after trace.start");
        }
    }
    // A window that starts after the run has nothing in it: an empty trace that looks written.
    if let Some(a) = start.filter(|&a| a >= s.duration.ps()) {
        return err("trace.start", format!("{}: must be before the run ends (duration {})", Time(a), s.duration));
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

/// Every `fitted` parameter of the figures, and every key `cite` names, is a
/// key of the scenario (as loaded, defaults included), like `fabric.msi_write`
/// or `task.0.body`.
pub fn check_fitted(s: &Scenario) -> Check {
    let doc = serde_json::to_value(s).expect("scenarios serialize");
    for (i, e) in s.expect.iter().enumerate() {
        for (j, path) in e.fitted.iter().enumerate() {
            check_param(&doc, path, format!("expect[{i}].fitted[{j}]"))?;
        }
    }
    for path in s.cite.keys() {
        check_param(&doc, path, format!("cite.\"{path}\""))?;
    }
    Ok(())
}

/// `path` names one parameter (not a section) of the loaded scenario `doc`.
fn check_param(doc: &serde_json::Value, path: &str, at_key: String) -> Check {
    let mut at = doc;
    for part in path.split('.') {
        let next = match at {
            serde_json::Value::Object(m) => m.get(part),
            serde_json::Value::Array(a) => part.parse::<usize>().ok().and_then(|k| a.get(k)),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return err(at_key, format!("\"{path}\" is not a parameter of this scenario")),
        }
    }
    // A list of values (`cpus`, `kvm.order`) is one parameter; a table or a list of tables is not.
    let section = at.is_object() || at.as_array().is_some_and(|a| a.iter().any(|v| v.is_object() || v.is_array()));
    if section {
        return err(at_key, format!("\"{path}\" is a section, expected one parameter in it"));
    }
    Ok(())
}
