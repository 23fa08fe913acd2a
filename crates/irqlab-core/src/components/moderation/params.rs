//! `[gsim]` (global software interrupt moderation, with `[[gsim.change]]`) and
//! a device queue's own `moderation` table (static coalescing, DIM, polling).

use crate::scenario::check::{err, Check, Ctx};
use crate::scenario::units::{Rate, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn d_delay_us() -> u32 {
    100
}
fn d_update_ms() -> u32 {
    1
}
fn d_scale() -> u32 {
    150
}
fn d_min_sleep() -> Time {
    Time(10 * crate::engine::time::PS_PER_US)
}
fn d_hrtimer() -> Time {
    Time(500 * crate::engine::time::PS_PER_NS)
}
fn d_every() -> u32 {
    16
}
fn yes() -> bool {
    true
}

/// Global software interrupt moderation (the GSIM genirq patch). Names follow
/// the patch's module parameters; both targets 0 is fixed mode (`mod_ns = delay_ns`).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gsim {
    /// Maximum moderation delay (`delay_us`).
    #[serde(default = "d_delay_us")]
    pub delay_us: u32,
    /// Target total interrupt rate, interrupts/s (0: no rate target).
    #[serde(default)]
    pub target_intr_rate: Rate,
    /// Maximum share of a CPU's time in hardirq, percent (0: no hardirq target).
    #[serde(default)]
    pub hardirq_percent: u32,
    /// Control period (`update_ms`).
    #[serde(default = "d_update_ms")]
    pub update_ms: u32,
    /// The `local_high` scale (150 in the patch; 200 in an earlier version).
    #[serde(default = "d_scale")]
    pub scale: u32,
    /// Below this accumulated `sleep_ns` the hook does not moderate.
    #[serde(default = "d_min_sleep")]
    pub min_sleep: Time,
    /// The hook reads the clock every this many interrupts.
    #[serde(default = "d_every")]
    pub clock_every: u32,
    /// The moderation timer's own handler cost on its CPU (`hrtimer_interrupt`,
    /// the callback's loop, reprogramming the clock event), besides IRQ entry/exit
    /// and the pending handlers the callback runs.
    #[serde(default = "d_hrtimer")]
    pub hrtimer: Time,
    /// Run-time changes (procfs writes); each resets `mod_ns` to `delay_ns`.
    #[serde(default)]
    pub change: Vec<GsimChange>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GsimChange {
    pub at: Time,
    #[serde(default)]
    pub delay_us: Option<u32>,
    #[serde(default)]
    pub target_intr_rate: Option<Rate>,
    #[serde(default)]
    pub hardirq_percent: Option<u32>,
}

/// A queue's own (per-source) moderation.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModerationKind {
    /// An interrupt as soon as the queue has work and the vector is armed.
    #[default]
    None,
    /// Time and frame thresholds (`ethtool -C rx-usecs/rx-frames`; NVMe aggregation time/threshold).
    Static,
    /// Linux DIM (`lib/dim`, `net_dim`): per-queue adaptive profiles.
    Dim,
    /// No interrupts: the queue is busy-polled (the upper bound of throughput).
    Polling,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Moderation {
    #[serde(default)]
    pub kind: ModerationKind,
    /// Static: interrupt at most this long after the first unsignalled completion.
    #[serde(default)]
    pub usecs: Time,
    /// Static: or as soon as this many completions are waiting (0: no count threshold).
    #[serde(default)]
    pub frames: u32,
    /// Timer reset mode ("CQE mode": ethtool's `use_cqe_mode_rx`, mlx5's
    /// `rx_cqe_moder`): every completion restarts the time threshold, so the
    /// timer fires when the queue goes idle and a busy queue signals at its
    /// count threshold. Off: on a NIC queue the time runs from the queue's
    /// last interrupt (mlx5's `MLX5_CQ_PERIOD_MODE_START_FROM_EQE`), on an NVMe
    /// CQ from the first unsignalled completion (aggregation time)
    /// (Documentation/networking/ethtool-netlink.rst, "Timer reset mode").
    /// With DIM it also selects DIM's CQE profiles (lib/dim/net_dim.c).
    /// Static with `frames = 0` then signals a busy queue only when it pauses
    /// for `usecs` (or its ring fills): as ethtool documents, not a bug.
    #[serde(default)]
    pub cqe_mode: bool,
    /// Whether GSIM may moderate this queue's vector (when `[gsim]` is present).
    #[serde(default = "yes")]
    pub gsim: bool,
}

// By hand: a derived Default would say gsim = false for queues without a moderation table.
impl Default for Moderation {
    fn default() -> Self {
        Moderation { kind: ModerationKind::None, usecs: Time(0), frames: 0, cqe_mode: false, gsim: true }
    }
}

/// A queue's `moderation`: the table, or its kind alone (`moderation = "dim"`
/// for `{ kind = "dim" }`: serde said "expected struct Moderation" to a
/// newcomer who wrote that). A table keeps its own errors (an unknown field).
pub fn table_or_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Moderation, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Moderation;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a kind (\"none\", \"static\", \"dim\", \"polling\") or a table such as { kind = \"static\", usecs = \"8us\", frames = 32 }")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Moderation, E> {
            use serde::de::IntoDeserializer;
            let kind = ModerationKind::deserialize(v.into_deserializer())?;
            Ok(Moderation { kind, ..Moderation::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Moderation, A::Error> {
            Moderation::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V)
}

// What the JSON Schema says a queue's `moderation` takes; `table_or_kind` reads it.
/// A queue's moderation: its kind alone (`"dim"`), or a table.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum ModerationSpec {
    Kind(ModerationKind),
    Table(Moderation),
}

impl Gsim {
    /// Ranges of the module parameters and changes in time order within the run.
    pub fn check(&self, ctx: &Ctx) -> Check {
        let g = self;
        if g.update_ms == 0 {
            return err("gsim.update_ms", "must be at least 1");
        }
        if g.hardirq_percent > 100 {
            return err("gsim.hardirq_percent", format!("{}: expected 0 to 100", g.hardirq_percent));
        }
        if g.clock_every == 0 {
            return err("gsim.clock_every", "must be at least 1");
        }
        if g.scale == 0 {
            return err("gsim.scale", "must be at least 1");
        }
        let mut last = Time(0);
        for (i, c) in g.change.iter().enumerate() {
            if c.at >= ctx.duration || c.at < last {
                return err(format!("gsim.change[{i}].at"), "must be within the run and in time order");
            }
            if c.hardirq_percent.is_some_and(|h| h > 100) {
                return err(format!("gsim.change[{i}].hardirq_percent"), "expected 0 to 100");
            }
            last = c.at;
        }
        Ok(())
    }
}

impl Moderation {
    /// `usecs`/`frames` go with static moderation only, and static needs a
    /// time: with none the timer signals at once and `frames` never waits
    /// (mlx5's `cq_period` 0 and NVMe's aggregation time 0 are both "no
    /// delay"), so a count alone would silently be no moderation.
    pub fn check(&self, p: &str) -> Check {
        let m = self;
        if m.kind == ModerationKind::Static && m.usecs.ps() == 0 {
            let what = if m.frames > 0 { format!("frames = {} without usecs", m.frames) } else { "no usecs".into() };
            return err(
                format!("{p}.moderation.usecs"),
                format!("static moderation with {what}: expected usecs above 0 (a 0 us timer signals at once, so frames alone would not moderate)"),
            );
        }
        if m.kind != ModerationKind::Static && (m.usecs.ps() > 0 || m.frames > 0) {
            return err(format!("{p}.moderation"), "usecs and frames apply only to kind = \"static\"");
        }
        if m.cqe_mode && !matches!(m.kind, ModerationKind::Static | ModerationKind::Dim) {
            let kind = format!("{:?}", m.kind).to_lowercase();
            return err(
                format!("{p}.moderation.cqe_mode"),
                format!("with kind = \"{kind}\": expected kind = \"static\" or \"dim\" (it has no timer to reset)"),
            );
        }
        Ok(())
    }
}
