//! `[spe]`: a task profiled with the Statistical Profiling Extension, on the
//! host or in a guest whose SPE buffer KVM pins under one of five policies (M2).

use crate::scenario::check::{err, Check, Ctx};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, written with a binary unit: `"4K"`, `"256M"`, `"1G"` (or a number of bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Size(pub u64);

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].trim_end_matches(['B', 'b']).trim_end_matches("i");
            let mul: u64 = match unit {
                "" => 1,
                "K" | "k" => 1 << 10,
                "M" | "m" => 1 << 20,
                "G" | "g" => 1 << 30,
                "T" | "t" => 1 << 40,
                _ => return Err(format!("\"{s}\": unknown size unit, expected K, M, G or T (binary), like \"256M\"")),
            };
            (t[..i].trim(), mul)
        }
        None => (t, 1),
    };
    let v: f64 = num.parse().map_err(|_| format!("\"{s}\": expected a size like \"4K\", \"256M\" or \"1G\""))?;
    let b = v * mul as f64;
    if !(b.is_finite() && (0.0..1.8e19).contains(&b)) {
        return Err(format!("\"{s}\": out of range"));
    }
    Ok(b.round() as u64)
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size like \"256M\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Size, E> {
                parse_size(s).map(Size).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v).map(Size).map_err(|_| E::custom(format!("{v}: a size cannot be negative")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}K", self.0 as f64 / 1024.0))
    }
}

impl JsonSchema for Size {
    fn schema_name() -> String {
        "Size".into()
    }
    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        <String as JsonSchema>::json_schema(g)
    }
}

/// How KVM keeps the guest's profiling buffer mapped at stage 2.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// 1. Pin at every enable, unpin at every disable (the RFC as posted).
    PinPerEnable,
    /// 2. Keep the buffer pinned while disabled; unpin only when a buffer that does
    ///    not intersect it is enabled. The stage-1 walk is paid at every enable.
    KeepPinned,
    /// 3. Policy 2, plus a timer that unpins pinned memory left unused for `unpin_age`.
    KeepPinnedTimer,
    /// 4. No pinning: stage-2 faults on unmapped buffer pages, each a blackout.
    NoPin,
    /// 5. Policy 1 with the buffer capped by the VMM to `cap`.
    Cap,
}

/// The perf SPE driver's mode.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SpeMode {
    /// The default: the buffer is disabled at every switch-out of the task, enabled at switch-in.
    PerTask,
    /// `perf record -a` / `-C`: the buffer stays enabled across context switches.
    PerCpu,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Where {
    Host,
    Guest,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KernelProfile {
    Normal,
    /// Lockdep and kmemleak: the kernel's per-page work costs `debug_factor` times more.
    Debug,
}

/// The profiled command: its own CPU time, and how often it is switched out.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfiledTask {
    /// CPU time of the command itself (for `true`: fork, exec, exit under perf).
    pub run: Time,
    /// Context switches (out and back in) over its life.
    pub switches: u32,
    /// How long another task runs at each switch-out.
    #[serde(default)]
    pub off: Time,
    /// How long the VM runs on after perf exits, before it is torn down: what a
    /// policy leaves pinned meanwhile (policy 2 keeps it; policy 3's timer frees it).
    #[serde(default)]
    pub after: Time,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeCosts {
    /// Pinning one page (`pin_user_pages` and the stage-2 mapping kept).
    #[serde(default)]
    pub pin_page: Time,
    /// Unpinning one page (`unpin_user_pages`); default: as `pin_page`.
    #[serde(default)]
    pub unpin_page: Option<Time>,
    /// Walking the guest's stage-1 tables for one page of the buffer, at each enable.
    #[serde(default)]
    pub walk_page: Time,
    /// perf allocating one page of the AUX buffer (host or guest kernel).
    #[serde(default)]
    pub alloc_page: Time,
    /// perf's own start and stop, besides the buffer.
    #[serde(default)]
    pub perf_startup: Time,
    /// A guest context switch (the scheduler, SPE's `pmu::del`/`add` register writes).
    #[serde(default)]
    pub switch: Time,
    /// PMBIRQ from the profiling unit's fault to its handler.
    #[serde(default)]
    pub pmbirq_latency: Time,
    /// KVM resolving one stage-2 fault on a buffer page (map it), after the exit.
    #[serde(default)]
    pub map_fault: Time,
}

/// How perf runs the command.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Perf {
    /// `perf record -e arm_spe//`: SPE writes into the AUX buffer.
    Record,
    /// `perf stat`: counters only, no SPE buffer (no enable, no pinning).
    Stat,
}

/// The `[spe]` section.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spe {
    #[serde(default = "d_perf")]
    pub perf: Perf,
    #[serde(rename = "where")]
    pub place: Where,
    /// The guest's vCPU the task runs on (with `where = "guest"`).
    #[serde(default)]
    pub vcpu: u32,
    #[serde(default = "d_mode")]
    pub mode: SpeMode,
    /// perf `-m,SIZE`: the AUX (profiling) buffer, which perf rounds up to a
    /// power of two pages (as the model does, with a warning).
    pub buffer: Size,
    /// Bytes of records written per second while profiling runs; 0: a filter that records nothing.
    #[serde(default)]
    pub record_rate: Rate,
    /// One record's size: the unit writes its records one at a time, and a
    /// write into a page unmapped at stage 2 faults.
    #[serde(default = "d_record")]
    pub record_size: Size,
    /// The kernel's page size, host and guest (`CONFIG_ARM64_4K_PAGES`,
    /// `_16K_`, `_64K_`): what perf's buffer, pins, walks and faults count in.
    #[serde(default = "d_page")]
    pub page_size: Size,
    /// Snapshot mode: the buffer wraps, keeping the newest records.
    #[serde(default)]
    pub snapshot: bool,
    #[serde(default = "d_policy")]
    pub policy: Policy,
    /// The VMM's cap on the buffer size (policy `cap`).
    #[serde(default)]
    pub cap: Option<Size>,
    /// The guest moves its buffer to other IPAs every this many enables (0: never),
    /// so that a newly enabled buffer does not intersect the pinned one.
    #[serde(default)]
    pub remap_every: u32,
    /// Policy 3's timer period, and how long pinned memory must be unused to be unpinned.
    #[serde(default)]
    pub unpin_timer: Option<Time>,
    #[serde(default)]
    pub unpin_age: Time,
    /// Host reclaim and aging: buffer pages per second unmapped at stage 2 (unpinned ones only),
    /// for the whole buffer whatever its size.
    #[serde(default)]
    pub reclaim_rate: Rate,
    /// Or per page: a mapped, unpinned buffer page is unmapped after this long on
    /// average (host aging sees pages, not buffers: a larger buffer loses more per second).
    #[serde(default)]
    pub page_age: Option<Time>,
    /// Guest memory: the buffer must fit.
    #[serde(default = "d_mem")]
    pub guest_memory: Size,
    #[serde(default = "d_kernel")]
    pub kernel: KernelProfile,
    /// What lockdep and kmemleak multiply the kernel's per-page costs by.
    #[serde(default = "d_factor")]
    pub debug_factor: f64,
    /// The CPU's clock, for the task's effective clock.
    #[serde(default = "d_ghz")]
    pub clock_ghz: f64,
    pub task: ProfiledTask,
    #[serde(default)]
    pub costs: SpeCosts,
}

fn d_record() -> Size {
    Size(64)
}
fn d_page() -> Size {
    Size(4096)
}
fn d_perf() -> Perf {
    Perf::Record
}
fn d_mode() -> SpeMode {
    SpeMode::PerTask
}
fn d_policy() -> Policy {
    Policy::PinPerEnable
}
fn d_mem() -> Size {
    Size(16 << 30)
}
fn d_kernel() -> KernelProfile {
    KernelProfile::Normal
}
fn d_factor() -> f64 {
    1.0
}
fn d_ghz() -> f64 {
    2.5
}

/// arm64's largest buddy allocation per page size (`ARCH_FORCE_MAX_ORDER`,
/// arch/arm64/Kconfig: 10 for 4K pages, 11 for 16K, 13 for 64K).
fn max_page_order(page: u64) -> u32 {
    match page {
        65536 => 13,
        16384 => 11,
        _ => 10,
    }
}

impl Spe {
    pub fn page(&self) -> u64 {
        self.page_size.0
    }

    /// The AUX buffer perf maps: `-m,SIZE` rounded up to a power of two pages
    /// (tools/perf/util/evlist.c, `parse_pages_arg`: "rounding mmap pages size").
    pub fn aux_bytes(&self) -> u64 {
        let page = self.page();
        self.buffer.0.div_ceil(page).next_power_of_two().saturating_mul(page)
    }

    /// The largest AUX buffer the kernel maps: `rb_alloc_aux` refuses one
    /// whose page-pointer array would need more than `PAGE_SIZE <<
    /// MAX_PAGE_ORDER` (kernel/events/ring_buffer.c): 2 GiB with 4K pages.
    pub fn max_aux_bytes(&self) -> u64 {
        let page = self.page();
        ((page << max_page_order(page)) / 8).saturating_mul(page)
    }

    /// The buffer the guest gets under policy `cap`: the VMM's cap, a power of
    /// two pages as perf's buffers are.
    pub fn cap_bytes(&self) -> Option<u64> {
        let page = self.page();
        self.cap.map(|c| c.0.div_ceil(page).next_power_of_two() * page)
    }

    /// `vcpus`: the guest's vCPUs if `[vcpu_sched]` is configured.
    pub fn check(&self, vcpus: Option<u32>, ctx: &Ctx) -> Check {
        let p = "spe";
        if ctx.warmup.ps() > 0 {
            return err("warmup", "must be 0 with [spe]: the profiled command runs once, from time 0");
        }
        if self.place == Where::Guest {
            let Some(n) = vcpus else {
                return err(format!("{p}.where"), "\"guest\" needs a [vcpu_sched] section (the guest's vCPUs)");
            };
            if self.vcpu >= n {
                return err(format!("{p}.vcpu"), format!("vCPU {} does not exist (vcpu_sched.vcpus = {n})", self.vcpu));
            }
        }
        let page = self.page();
        if ![4096, 16384, 65536].contains(&page) {
            return err(format!("{p}.page_size"), "expected \"4K\", \"16K\" or \"64K\" (arm64's page sizes)");
        }
        if self.record_size.0 < 16 || self.record_size.0 > 2048 || !self.record_size.0.is_power_of_two() {
            // arm_spe_pmu_dev_init: PMSIDR_EL1.MaxSize, refused outside 16 bytes to 2K.
            return err(format!("{p}.record_size"), "expected a power of two from 16 to 2048 bytes (PMSIDR_EL1.MaxSize)");
        }
        // arm_spe_pmu_setup_aux: "We need at least two pages for this to work".
        if self.buffer.0 < 2 * page {
            return err(format!("{p}.buffer"), format!("must be at least two pages ({} bytes, arm_spe_pmu_setup_aux)", 2 * page));
        }
        if self.aux_bytes() > self.max_aux_bytes() {
            return err(
                format!("{p}.buffer"),
                format!(
                    "{} bytes: perf's mmap would fail (ENOMEM): the kernel maps an AUX buffer of at most {} GiB with {} KiB pages \
                     (rb_alloc_aux, MAX_PAGE_ORDER)",
                    self.buffer.0,
                    self.max_aux_bytes() >> 30,
                    page >> 10
                ),
            );
        }
        // perf maps a buffer per CPU: in a guest, one per vCPU, all in its memory.
        let buffers = if self.place == Where::Guest { vcpus.unwrap_or(1) as u64 } else { 1 };
        if self.aux_bytes().saturating_mul(buffers) > self.guest_memory.0 {
            return err(
                format!("{p}.buffer"),
                format!(
                    "{} bytes ({} as perf maps it, a power of two pages{}) do not fit in guest_memory ({} bytes)",
                    self.buffer.0,
                    self.aux_bytes(),
                    if buffers > 1 { format!(", once per vCPU: {buffers} buffers") } else { String::new() },
                    self.guest_memory.0
                ),
            );
        }
        match (self.policy, self.cap) {
            (Policy::Cap, None) => return err(format!("{p}.cap"), "policy \"cap\" needs a cap, like \"4M\""),
            (Policy::Cap, Some(c)) if c.0 < 2 * page => {
                return err(format!("{p}.cap"), format!("must be at least two pages ({} bytes, arm_spe_pmu_setup_aux)", 2 * page))
            }
            (Policy::Cap, Some(_)) => {}
            (_, Some(_)) => return err(format!("{p}.cap"), "is only read by policy = \"cap\""),
            _ => {}
        }
        match (self.policy, self.unpin_timer) {
            (Policy::KeepPinnedTimer, None) => return err(format!("{p}.unpin_timer"), "policy \"keep-pinned-timer\" needs a timer period"),
            (Policy::KeepPinnedTimer, Some(t)) if t.ps() == 0 => return err(format!("{p}.unpin_timer"), "must be above 0"),
            (Policy::KeepPinnedTimer, Some(_)) => {}
            (_, Some(_)) => return err(format!("{p}.unpin_timer"), "is only read by policy = \"keep-pinned-timer\""),
            _ => {}
        }
        if !(self.record_rate.0.is_finite() && self.record_rate.0 >= 0.0 && self.record_rate.0 <= 1e12) {
            return err(format!("{p}.record_rate"), "must be between 0 and 1T bytes/s");
        }
        if !(self.reclaim_rate.0.is_finite() && self.reclaim_rate.0 >= 0.0 && self.reclaim_rate.0 <= 1e9) {
            return err(format!("{p}.reclaim_rate"), "must be between 0 and 1G pages/s");
        }
        if let Some(age) = self.page_age {
            if self.reclaim_rate.0 > 0.0 {
                return err(format!("{p}.page_age"), "give page_age or reclaim_rate, not both");
            }
            if age.ps() == 0 {
                return err(format!("{p}.page_age"), "must be above 0 (a page's mean life at stage 2)");
            }
        }
        if !(self.debug_factor.is_finite() && (1.0..=1000.0).contains(&self.debug_factor)) {
            return err(format!("{p}.debug_factor"), format!("{} is out of range, expected 1 to 1000", self.debug_factor));
        }
        if !(self.clock_ghz.is_finite() && self.clock_ghz > 0.0 && self.clock_ghz <= 100.0) {
            return err(format!("{p}.clock_ghz"), "must be above 0 and at most 100");
        }
        if self.task.switches > 10_000_000 {
            return err(format!("{p}.task.switches"), "must be at most 10M");
        }
        Ok(())
    }
}
