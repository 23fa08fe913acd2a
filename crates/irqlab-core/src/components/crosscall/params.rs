//! `[[crosscall]]`: who asks whom to run a handler, by which mechanisms, and
//! when to escalate.

use crate::scenario::check::{err, Check, Ctx, Estimate};
use crate::scenario::units::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// How a cross-call reaches its target CPUs.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// An ordinary SGI: held back by any IRQ mask.
    Ipi,
    /// An NMI-priority SGI: gets through PMR masking, not DAIF (needs `cpu.masking = "pmr"`).
    PseudoNmi,
    /// SDEI software-signalled event 0, dispatched by EL3 firmware whatever DAIF says.
    Sdei,
    /// FEAT_NMI (Armv8.8): a superpriority SGI that gets through DAIF.I.
    Nmi,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Ipi => "ipi",
            Mechanism::PseudoNmi => "pseudo-nmi",
            Mechanism::Sdei => "sdei",
            Mechanism::Nmi => "nmi",
        }
    }
}

/// One CPU asks others to run a handler (`arch_trigger_cpumask_backtrace`,
/// `smp_send_stop`): it signals with the first mechanism, and after `timeout`
/// signals the CPUs that have not answered with the next one.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrossCall {
    pub name: String,
    /// When the request is made (at or after warm-up).
    pub at: Time,
    /// The requesting CPU.
    #[serde(default)]
    pub from: u32,
    /// Target CPUs; default every CPU but `from`.
    #[serde(default)]
    pub targets: Option<Vec<u32>>,
    /// Mechanisms in escalation order, e.g. `["ipi", "sdei"]`.
    pub mechanisms: Vec<Mechanism>,
    /// How long to wait for every target before escalating (needed with more than one mechanism).
    #[serde(default)]
    pub timeout: Option<Time>,
    /// Instead of `timeout`: the requester's wait after each mechanism, one per
    /// mechanism, the last one its final wait (arm64 `smp_send_stop`: 1 s for
    /// IPI_CPU_STOP, then 10 ms for IPI_CPU_STOP_NMI; `nmi_trigger_cpumask_backtrace`:
    /// 10 s). A target whose handler starts after the last wait is not reached:
    /// the requester gave up (`reached_late` counts it).
    #[serde(default)]
    pub waits: Option<Vec<Time>>,
    /// Signals sent per mechanism (a retrying requester); edge-triggered delivery may merge them.
    #[serde(default = "crate::scenario::units::one_u32")]
    pub signals: u32,
    /// Gap between repeated signals.
    #[serde(default)]
    pub signal_interval: Time,
    /// The handler on the target (e.g. dumping a backtrace).
    pub handler: Time,
    /// The handler on a target the call finds in its idle loop, if not
    /// `handler`: `nmi_cpu_backtrace` prints one line there ("skipped: idling
    /// at …") instead of the registers and stack, unless the `backtrace_idle`
    /// module parameter is set (lib/nmi_backtrace.c, `cpu_in_idle`).
    #[serde(default)]
    pub idle_handler: Option<Time>,
    /// The targets print one at a time: `nmi_cpu_backtrace` holds
    /// `printk_cpu_sync_get_irqsave`, a lock of the whole machine, while it
    /// prints, and clears its CPU from the requester's mask only after
    /// (lib/nmi_backtrace.c). A target that finds another printing spins in
    /// its handler until that one is done, and it has answered when its own
    /// print ends. Set it for a backtrace; a stop (`local_cpu_stop`) takes no lock.
    #[serde(default)]
    pub serial: bool,
    /// The requester spins for the answers in hardirq with IRQs masked, its
    /// CPU's time: `nmi_trigger_cpumask_backtrace` (lib/nmi_backtrace.c) loops
    /// on `mdelay(1)` for up to 10 s, and arm64's `smp_send_stop` on
    /// `udelay(1)`, both with IRQs off where the kernel asks for them (the
    /// buddy detector's hrtimer callback, panic, sysrq from a keyboard or a
    /// serial break). `false` leaves the requester's CPU running as if it had
    /// not asked (a request from outside, or the reported-only model before
    /// 2026-11-28).
    #[serde(default = "crate::scenario::units::yes")]
    pub requester_spins: bool,
    /// How often the spinning requester looks at the answers: 1 ms for a
    /// backtrace (`mdelay(1)`), 1 µs for a stop (`udelay(1)`). It sees the
    /// last answer at its next look.
    #[serde(default = "default_requester_poll")]
    pub requester_poll: Time,
    /// The request's mask includes the requester's own CPU, as
    /// `trigger_all_cpu_backtrace` (sysrq-l) and the buddy detector's
    /// `trigger_allbutcpu_cpu_backtrace` have it: `nmi_trigger_cpumask_backtrace`
    /// then dumps the requester's stack inline (`nmi_cpu_backtrace(NULL)`, a
    /// `handler` under the print lock) before it signals anyone
    /// (lib/nmi_backtrace.c). A backtrace's only: it needs `serial` and
    /// `requester_spins`; `targets` still lists the CPUs it signals. The
    /// dump costs `handler`, an upper bound: without registers the kernel
    /// prints a header and the stack (`dump_stack`), not `show_regs`.
    #[serde(default)]
    pub requester_dumps: bool,
}

/// How long a spinning requester waits when the call gives no `waits`:
/// `nmi_trigger_cpumask_backtrace`'s 10,000 × `mdelay(1)` (lib/nmi_backtrace.c).
/// The run budget counts the spin's looks over it too.
pub const REQUESTER_GIVE_UP: crate::engine::time::Ps = 10 * crate::engine::time::PS_PER_S;

fn default_requester_poll() -> Time {
    Time(crate::engine::time::PS_PER_MS)
}

/// Names unique, the call within the measured span, targets that exist and run
/// the host, mechanisms the masking mode supports, escalation that can happen.
/// What the calls cost a run of `secs` (`budget.rs`): a spinning requester
/// looks once per poll until its last wait (10 s without `waits`), so a 1 ps
/// poll over 10 s would be 10^13 events.
pub fn estimate(calls: &[CrossCall], secs: f64, e: &mut Estimate) {
    for (i, x) in calls.iter().enumerate() {
        if x.requester_spins && x.requester_poll.ps() > 0 {
            let wait = x.waits.as_ref().map_or(REQUESTER_GIVE_UP, |w| w.iter().map(|t| t.ps()).sum::<u64>());
            let span = (wait as f64).min(secs * 1e12);
            e.add(&format!("crosscall[{i}].requester_poll"), span / x.requester_poll.ps() as f64, "crosscall", 0.0);
        }
    }
}

pub fn check(calls: &[CrossCall], ctx: &Ctx) -> Check {
    let cpus = ctx.cpus;
    let mut names = HashSet::new();
    for (i, x) in calls.iter().enumerate() {
        let p = format!("crosscall[{i}]");
        if !names.insert(x.name.as_str()) {
            return err(format!("{p}.name"), format!("\"{}\" is used twice", x.name));
        }
        if x.at < ctx.warmup || x.at >= ctx.duration {
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
            let why = if x.targets.is_some() {
                format!("an empty list: expected at least one CPU other than `from` (0 to {})", cpus - 1)
            } else {
                "no target CPU (a one-CPU platform has no other CPU to call)".to_string()
            };
            return err(format!("{p}.targets"), why);
        }
        let mut seen = HashSet::new();
        for (j, &c) in targets.iter().enumerate() {
            if c >= cpus {
                return err(format!("{p}.targets[{j}]"), format!("cpu {c} does not exist (platform.cpus = {cpus})"));
            }
            if !seen.insert(c) {
                return err(format!("{p}.targets[{j}]"), format!("cpu {c} is listed twice"));
            }
            if c == x.from {
                return err(
                    format!("{p}.targets[{j}]"),
                    format!("cpu {c} is the requester (from), not a target: a backtrace's requester dumps its own stack inline, before it signals (for a backtrace, set requester_dumps = true), and smp_send_stop leaves its own CPU out"),
                );
            }
            if let Some(owner) = &ctx.hosted[c as usize] {
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
            if *m == Mechanism::PseudoNmi && !ctx.pmr {
                return err(format!("{p}.mechanisms[{j}]"), "\"pseudo-nmi\" needs cpu.masking = \"pmr\" (irqchip.gicv3_pseudo_nmi=1)");
            }
        }
        if x.requester_spins {
            if let Some(owner) = &ctx.hosted[x.from as usize] {
                return err(
                    format!("{p}.from"),
                    format!(
                        "cpu {} runs a vCPU of {owner}; a spinning requester runs on a host CPU (or set requester_spins = false)",
                        x.from
                    ),
                );
            }
        }
        if x.idle_handler.is_some() && !x.serial {
            return err(format!("{p}.idle_handler"), "is a backtrace's one-line print for an idle CPU: it needs serial = true");
        }
        if x.requester_dumps && !(x.serial && x.requester_spins) {
            return err(
                format!("{p}.requester_dumps"),
                "is a backtrace requester's own dump (nmi_cpu_backtrace(NULL)): it needs serial = true and requester_spins = true",
            );
        }
        if x.requester_spins && x.requester_poll.ps() == 0 {
            return err(format!("{p}.requester_poll"), "must be above 0 (mdelay(1) is 1ms, udelay(1) 1us)");
        }
        if x.signals == 0 {
            return err(format!("{p}.signals"), "must be at least 1");
        }
        if x.signals > 1 && x.signal_interval.ps() == 0 {
            return err(format!("{p}.signal_interval"), "must be above 0 when signals > 1");
        }
        if let Some(w) = &x.waits {
            if x.timeout.is_some() {
                return err(format!("{p}.waits"), "replaces timeout: give one or the other");
            }
            if w.len() != x.mechanisms.len() {
                return err(format!("{p}.waits"), format!("lists {} waits, expected one per mechanism ({})", w.len(), x.mechanisms.len()));
            }
            let repeats = (x.signals as u64 - 1).checked_mul(x.signal_interval.ps());
            for (j, t) in w.iter().enumerate() {
                if t.ps() == 0 || repeats.is_none_or(|d| d >= t.ps()) {
                    return err(
                        format!("{p}.waits[{j}]"),
                        "must be above 0 and longer than the repeated signals ((signals - 1) x signal_interval)",
                    );
                }
            }
            continue;
        }
        match x.timeout {
            None if x.mechanisms.len() > 1 => {
                return err(format!("{p}.timeout"), "is needed to escalate from one mechanism to the next");
            }
            // Checked: a wrapped product would let a huge repeat pass (issue 11).
            Some(t) if t.ps() == 0 || (x.signals as u64 - 1).checked_mul(x.signal_interval.ps()).is_none_or(|d| d >= t.ps()) => {
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
