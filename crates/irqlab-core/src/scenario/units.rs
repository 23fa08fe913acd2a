//! Scenario value types with units: times (`"300ns"`) and rates (`"1M/s"`).
//! They parse once at load time into picoseconds and events per second.

use crate::engine::time::{parse_duration, parse_rate, Ps, PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US};
use schemars::gen::SchemaGenerator;
use schemars::schema::{InstanceType, Schema, SchemaObject, SubschemaValidation};
use schemars::JsonSchema;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// Serde default for counts that default to one (`count`, `cpus`, `queues`...).
pub fn one_u32() -> u32 {
    1
}

/// Serde default for switches that are on unless a scenario turns them off.
pub fn yes() -> bool {
    true
}

/// A time or duration, written with a unit: `"300ns"`, `"10us"`, `"0.5s"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub Ps);

impl Time {
    pub fn ps(self) -> Ps {
        self.0
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Time;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a time with a unit, like \"300ns\", \"10us\" or \"0.5s\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Time, E> {
                parse_duration(s).map(Time).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Time, E> {
                if v == 0 {
                    Ok(Time(0))
                } else {
                    Err(E::custom(format!("{v}: a time needs a unit, like \"{v}ns\"")))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Time, E> {
                self.visit_i64(v as i64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Time, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v}: expected a finite time with a unit, like \"300ns\"")));
                }
                Err(E::custom(format!("{v:?}: a time needs a unit, like \"{v:?}us\"")))
            }
        }
        d.deserialize_any(V)
    }
}

/// As a scenario writes it, in the largest unit that divides it exactly: `"178400ps"`, `"80ns"`.
impl std::fmt::Display for Time {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.0;
        if t == 0 {
            return f.write_str("0s");
        }
        let (u, n) = [(PS_PER_S, "s"), (PS_PER_MS, "ms"), (PS_PER_US, "us"), (PS_PER_NS, "ns"), (1, "ps")]
            .into_iter()
            .find(|(u, _)| t.is_multiple_of(*u))
            .expect("1ps divides everything");
        write!(f, "{}{n}", t / u)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl JsonSchema for Time {
    fn schema_name() -> String {
        "Time".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let pattern = format!(r"^\s*(0|{NUMBER}\s*(ps|ns|us|µs|ms|s))\s*$");
        with_zero(time_string(pattern, "A time with a unit: \"300ns\", \"10us\", \"1ms\", \"0.5s\" (or 0)"))
    }
}

/// A rate in events per second: a number, or `"1M/s"`, `"250k/s"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Rate(pub f64);

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a rate, like \"1M/s\", \"250k/s\" or a number per second")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                parse_rate(s).map(Rate).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                if v.is_finite() && v >= 0.0 {
                    crate::engine::time::check_rate(v).map(Rate).map_err(E::custom)
                } else {
                    Err(E::custom(format!("{v:?}: expected a finite non-negative rate per second")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl JsonSchema for Rate {
    fn schema_name() -> String {
        "Rate".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut num = SchemaObject { instance_type: Some(InstanceType::Number.into()), ..Default::default() };
        num.number().minimum = Some(0.0);
        let mut st = SchemaObject { instance_type: Some(InstanceType::String.into()), ..Default::default() };
        st.string().pattern = Some(format!(r"^\s*{NUMBER}\s*[kKMG]?\s*(/s)?\s*$"));
        let mut o = SchemaObject {
            subschemas: Some(Box::new(SubschemaValidation { one_of: Some(vec![num.into(), st.into()]), ..Default::default() })),
            ..Default::default()
        };
        o.metadata().description = Some("Events per second: a number, or \"1M/s\", \"250k/s\"".into());
        o.into()
    }
}

/// A CPU cost written as a time (`"14ns"`) or in core cycles (`"46cycles"`,
/// converted with `cpu.ghz`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum CpuTime {
    #[default]
    Zero,
    Time(Ps),
    Cycles(f64),
}

impl CpuTime {
    /// In ps; `None` for cycles without a clock.
    pub fn ps(self, ghz: Option<f64>) -> Option<Ps> {
        match self {
            CpuTime::Zero => Some(0),
            CpuTime::Time(p) => Some(p),
            CpuTime::Cycles(c) => ghz.map(|g| (c / g * PS_PER_NS as f64).round() as Ps),
        }
    }
}

impl<'de> Deserialize<'de> for CpuTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = CpuTime;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a time with a unit (\"14ns\") or cycles (\"46cycles\")")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<CpuTime, E> {
                let t = s.trim();
                if let Some(n) = t.strip_suffix("cycles") {
                    return match n.trim().parse::<f64>() {
                        Ok(c) if c.is_finite() && c >= 0.0 => Ok(CpuTime::Cycles(c)),
                        _ => Err(E::custom(format!("\"{s}\": expected a non-negative number of cycles, like \"46cycles\""))),
                    };
                }
                parse_duration(s).map(CpuTime::Time).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CpuTime, E> {
                if v == 0 {
                    Ok(CpuTime::Zero)
                } else {
                    Err(E::custom(format!("{v}: a cost needs a unit, like \"{v}ns\" or \"{v}cycles\"")))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CpuTime, E> {
                self.visit_i64(v as i64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<CpuTime, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v}: expected a finite cost with a unit, like \"300ns\" or \"46cycles\"")));
                }
                Err(E::custom(format!("{v:?}: a cost needs a unit, like \"{v:?}ns\" or \"{v:?}cycles\"")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for CpuTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            CpuTime::Zero => Time(0).serialize(s),
            CpuTime::Time(p) => Time(p).serialize(s),
            CpuTime::Cycles(c) => s.serialize_str(&format!("{c}cycles")),
        }
    }
}

impl JsonSchema for CpuTime {
    fn schema_name() -> String {
        "CpuTime".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let pattern = format!(r"^\s*(0|{NUMBER}\s*(ps|ns|us|µs|ms|s|cycles))\s*$");
        with_zero(time_string(pattern, "A time with a unit (\"14ns\") or core cycles (\"46cycles\", needs cpu.ghz), or 0"))
    }
}

/// A non-negative number as Rust's `f64` parser (the time and rate parsers')
/// reads one: `5`, `+5`, `1.`, `.5`, `1.5e4`.
const NUMBER: &str = r"\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?";

fn time_string(pattern: String, description: &str) -> SchemaObject {
    let mut o = SchemaObject { instance_type: Some(InstanceType::String.into()), ..Default::default() };
    o.string().pattern = Some(pattern);
    o.metadata().description = Some(description.into());
    o
}

/// A time's schema, or the integer 0, which the core takes for no time at all.
fn with_zero(time: SchemaObject) -> Schema {
    let description = time.metadata.as_ref().and_then(|m| m.description.clone());
    let mut zero = SchemaObject { instance_type: Some(InstanceType::Integer.into()), ..Default::default() };
    zero.const_value = Some(serde_json::json!(0));
    any_of(vec![time, zero], description)
}

/// Either of `schemas`, described by `description`.
fn any_of(schemas: Vec<SchemaObject>, description: Option<String>) -> Schema {
    let any_of = Some(schemas.into_iter().map(Schema::from).collect());
    let mut o = SchemaObject { subschemas: Some(Box::new(SubschemaValidation { any_of, ..Default::default() })), ..Default::default() };
    o.metadata().description = description;
    o.into()
}

/// A run's seed: any `u64`. TOML integers stop at 2^63-1, so a larger seed
/// (a sweep's replication seeds reach 2^64-1, and results print them) is
/// written as a string of digits: `seed = "16860738450190168606"`, or
/// `--set seed=16860738450190168606`.
pub fn seed<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number from 0 to 2^64-1 (above 2^63-1 as a string of digits)")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            let t = v.trim();
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(n) = t.parse() {
                    return Ok(n);
                }
            }
            Err(E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }
    d.deserialize_any(V)
}

/// The JSON Schema of [`seed`]: an integer, or a string of digits.
pub fn seed_schema(_: &mut SchemaGenerator) -> Schema {
    let mut int = SchemaObject { instance_type: Some(InstanceType::Integer.into()), ..Default::default() };
    int.number().minimum = Some(0.0);
    let mut digits = SchemaObject { instance_type: Some(InstanceType::String.into()), ..Default::default() };
    digits.string().pattern = Some(r"^\s*[0-9]+\s*$".into());
    any_of(vec![int, digits], Some("A seed from 0 to 2^64-1; above 2^63-1 as a string of digits".into()))
}
