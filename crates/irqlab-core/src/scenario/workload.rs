//! What runs and what interrupts: interrupt sources (`[[source]]`) and task
//! loops (`[[task]]`).

use super::cpu::Masking;
use super::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn cpu0() -> Vec<u32> {
    vec![0]
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    #[default]
    Poisson,
    Periodic,
}

/// A device queue's interrupt (an MSI-X vector). `count` > 1 makes instances `name.0`, `name.1`, ...
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub name: String,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub count: u32,
    /// Interrupts per second, per instance.
    pub rate: Rate,
    #[serde(default)]
    pub arrival: Arrival,
    /// Target CPUs (vCPU indices if `vm` is set); instance i goes to `cpus[i % len]`.
    #[serde(default = "cpu0")]
    pub cpus: Vec<u32>,
    /// Assign the device to this VM: its interrupts take the injection path.
    #[serde(default)]
    pub vm: Option<String>,
    /// Hardirq handler body.
    pub handler: Time,
    /// Softirq work raised per interrupt (e.g. a NAPI poll), run on irq exit.
    #[serde(default)]
    pub softirq: Time,
    /// NMI priority: gets through PMR masking (pseudo-NMI), not DAIF.
    #[serde(default)]
    pub nmi: bool,
    /// No arrivals from this time on (lets a run drain).
    #[serde(default)]
    pub stop: Option<Time>,
    /// GSIM may moderate these vectors when `[gsim]` is on: the patch's switch
    /// per interrupt under `/proc/irq/NN/` (the M5 brief); `false` leaves them
    /// out, as a device's `moderation.gsim = false` does its queues.
    #[serde(default = "crate::scenario::units::yes")]
    pub gsim: bool,
    /// `irqlab replay`: take the arrivals from the recorded interrupt with this
    /// name or number instead of `rate` (a single instance).
    #[serde(default, deserialize_with = "irq_name_or_number")]
    #[schemars(with = "Option<IrqKey>")]
    pub replay: Option<String>,
}

// What the JSON Schema says `replay` takes; the field keeps it as text either way.
/// An interrupt's name or IRQ number.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum IrqKey {
    /// The interrupt's name as /proc/interrupts shows it ("nvme0q1").
    Name(String),
    /// Its IRQ number.
    Number(u32),
}

/// A recorded interrupt's name ("nvme0q1") or IRQ number, written as a string
/// or a bare number (`replay = 36`): kept as its text either way.
fn irq_name_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an interrupt's name or IRQ number")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            match u64::try_from(v) {
                Ok(n) => Ok(Some(n.to_string())),
                Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
            }
        }
    }
    d.deserialize_any(V)
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExceptionKind {
    /// Pure user-mode compute loop.
    #[default]
    None,
    Syscall,
    Pagefault,
    /// A `sched_yield()` syscall: the scheduler picks the next runnable task.
    Yield,
}

/// A task looping forever: `work` in user mode, then an exception with `body` of kernel work.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub name: String,
    #[serde(default = "crate::scenario::units::one_u32")]
    pub count: u32,
    /// CPUs (vCPU indices if `vm` is set); instance i runs on `cpus[i % len]`.
    #[serde(default = "cpu0")]
    pub cpus: Vec<u32>,
    /// `cpus` was left out, so every instance runs on CPU 0 (set by `load`,
    /// for the run's warning when several instances share it).
    #[serde(skip)]
    pub cpus_defaulted: bool,
    #[serde(default)]
    pub vm: Option<String>,
    pub work: Time,
    #[serde(default)]
    pub exception: ExceptionKind,
    /// Kernel work in the exception, interrupts enabled.
    #[serde(default)]
    pub body: Time,
    /// A critical section at the start of the body with interrupts masked
    /// (`local_irq_disable`): how long interrupts wait. Its PMR accesses under
    /// pseudo-NMI are not added: they are among `irq_pairs` (by default the
    /// kernel's own sections for the exception); raise `irq_pairs` for a section
    /// the kernel's path does not already have.
    #[serde(default)]
    pub irqs_off: Time,
    /// How that section masks: `cpu.masking` by default; `"daif"` is code that
    /// sets PSTATE.I itself (`local_daif_mask`), which pseudo-NMI cannot reach.
    #[serde(default)]
    pub irqs_off_with: Option<Masking>,
    /// A measured cost of one whole pass — user work, exception entry, body and
    /// exit, as a host loop times it (`irqlab measure`'s `ns_per_call`,
    /// `ns_per_op`, `ns_per_fault`). When given, the body is what remains after
    /// `work` and `cpu.exception_entry`/`exception_exit`, and `body` is ignored.
    #[serde(default)]
    pub per_op: Option<Time>,
    /// IRQs-off sections in C on one pass of the exception's kernel work, each
    /// counted as a `local_irq_disable/enable` pair. By default the kernel's own
    /// for the exception kind, as read from Linux 6.12 (docs/m1-exception-paths.md).
    #[serde(default)]
    pub irq_pairs: Option<u32>,
}

impl Task {
    /// The kernel work of one pass: what a measured `per_op` leaves after the
    /// user work and the modelled entry and exit (so that a measured whole call
    /// is not paid twice); else `body`; else, for a page fault, its parts.
    pub fn body_time(&self, cpu: &super::CpuCosts, fault: &PagefaultCosts) -> Time {
        match self.per_op {
            Some(p) => {
                Time(p.ps().saturating_sub(self.work.ps().saturating_add(cpu.exception_entry.ps()).saturating_add(cpu.exception_exit.ps())))
            }
            None if self.body.ps() == 0 && self.exception == ExceptionKind::Pagefault => fault.per_fault(),
            None => self.body,
        }
    }
}

/// The kernel work of one first-touch anonymous 4 KiB page fault, in the parts
/// Linux does it in (docs/m1-page-fault-parts.md, function by function), for
/// `exception = "pagefault"` tasks that give no `body`. Every cost is a
/// parameter: no published figure gives them; a host's `irqlab measure
/// pagefault` gives their sum (`--set-from …:ns_per_fault=task.N.body`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PagefaultCosts {
    /// `do_mem_abort` → `do_translation_fault` → `do_page_fault`: ESR decode and checks.
    #[serde(default)]
    pub decode: Time,
    /// `lock_vma_under_rcu`: the maple-tree walk and the per-VMA read lock.
    #[serde(default)]
    pub vma_lookup: Time,
    /// `alloc_anon_folio` → `rmqueue_pcplist`: a page off the per-CPU free list.
    #[serde(default)]
    pub alloc: Time,
    /// `post_alloc_hook` → `clear_page`: zeroing 4 KiB (`DC ZVA` on arm64).
    #[serde(default)]
    pub zero: Time,
    /// `__mem_cgroup_charge` → `consume_stock`, `commit_charge`.
    #[serde(default)]
    pub memcg_charge: Time,
    /// PTE lock, `folio_add_new_anon_rmap`, `folio_add_lru_vma`, `set_pte_at`, the counters.
    #[serde(default)]
    pub map: Time,
    /// `rmqueue_bulk` refilling the per-CPU list from the buddy allocator under
    /// the zone lock: once per 63 allocations (`zone_batchsize`).
    #[serde(default)]
    pub pcp_refill: Time,
    /// page_fault1's `munmap` per page: `zap_pte_range`, uncharge, freeing the folio.
    #[serde(default)]
    pub unmap: Time,
}

/// `zone_batchsize()` for a zone of about 688 MiB or more with 4 KiB pages (mm/page_alloc.c).
pub const PCP_BATCH: u64 = 63;

impl PagefaultCosts {
    pub fn per_fault(&self) -> Time {
        let each = [self.decode, self.vma_lookup, self.alloc, self.zero, self.memcg_charge, self.map, self.unmap];
        Time(each.iter().map(|t| t.ps()).sum::<u64>() + self.pcp_refill.ps() / PCP_BATCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_is_the_sum_of_its_parts_with_the_refill_spread_over_its_batch() {
        let ns = |n: u64| Time(n * 1000);
        let f = PagefaultCosts {
            decode: ns(1),
            vma_lookup: ns(2),
            alloc: ns(3),
            zero: ns(4),
            memcg_charge: ns(5),
            map: ns(6),
            pcp_refill: ns(63),
            unmap: ns(7),
        };
        assert_eq!(f.per_fault(), ns(1 + 2 + 3 + 4 + 5 + 6 + 1 + 7));
        assert_eq!(PagefaultCosts::default().per_fault(), Time(0));
    }

    /// The docs say NAME or NUMBER: `replay = 36` is IRQ 36, as `replay = "36"` is.
    #[test]
    fn a_replay_key_is_a_name_or_a_bare_number() {
        let base = "name = \"r\"\nduration = \"1ms\"\n[[source]]\nname = \"d\"\nrate = \"1/s\"\nhandler = \"1us\"\n";
        let key = |v: &str| crate::load(&format!("{base}replay = {v}\n"), "r.toml", &[]).map(|sc| sc.sources[0].replay.clone());
        assert_eq!(key("36").unwrap().as_deref(), Some("36"));
        assert_eq!(key("\"36\"").unwrap().as_deref(), Some("36"));
        assert_eq!(key("\"nvme0q1\"").unwrap().as_deref(), Some("nvme0q1"));
        for bad in ["-3", "true", "1.5"] {
            let e = key(bad).unwrap_err().to_string();
            assert!(e.contains("source[0].replay") && e.contains("an interrupt's name or IRQ number"), "{bad}: {e}");
        }
    }
}
