//! Statistics: time-weighted gauges, HDR latency histograms, fixed-interval
//! series, and the [`Report`] every run produces. Plain counters are just `u64`
//! fields in the models. Every collector has `reset(now)`, which the runner calls
//! at the end of warm-up so that no metric includes it.

use super::time::{ps_to_ns, ps_to_s, Ps};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// A quantity that holds a value over time (busy/idle, a queue depth); reports
/// its time-weighted mean and its maximum.
#[derive(Clone, Debug, Default)]
pub struct Gauge {
    value: f64,
    since: Ps,
    start: Ps,
    area: f64,
    max: f64,
}

impl Gauge {
    #[inline]
    pub fn set(&mut self, now: Ps, v: f64) {
        self.area += self.value * (now - self.since) as f64;
        self.since = now;
        self.value = v;
        if v > self.max {
            self.max = v;
        }
    }
    #[inline]
    pub fn add(&mut self, now: Ps, dv: f64) {
        let v = self.value + dv;
        self.set(now, v)
    }
    pub fn value(&self) -> f64 {
        self.value
    }
    pub fn reset(&mut self, now: Ps) {
        self.area = 0.0;
        self.since = now;
        self.start = now;
        self.max = self.value;
    }
    pub fn mean(&self, now: Ps) -> f64 {
        let span = now.saturating_sub(self.start);
        if span == 0 {
            return self.value;
        }
        (self.area + self.value * (now - self.since) as f64) / span as f64
    }
    pub fn max(&self) -> f64 {
        self.max
    }
}

/// Latencies, recorded in picoseconds, reported in nanoseconds.
///
/// The counts are kept in hdrhistogram's own layout at 3 significant figures
/// (`Histogram::new(3)`: 2,048 sub-buckets, a unit of 1 ps), indexed here with
/// the layout's constants. hdrhistogram's `record` reads its geometry from the
/// struct and checks for a resize and the minimum and maximum on every record,
/// some fifty instructions and an out-of-line call: 5 to 10 % of the M5
/// figures' instructions. Here a record is an index and an add. The histogram
/// is built when read, each bucket's count recorded at the bucket's lowest
/// value; its percentiles, mean, minimum and maximum depend only on the
/// buckets, so every summary is the one it gives when it takes each record
/// (below `u64::MAX` ps, which hdrhistogram takes for "no minimum yet"; a
/// latency is a difference of two times under 2^63 ps).
#[derive(Clone, Default)]
pub struct Latency {
    counts: Vec<u64>,
    /// Records of no latency (an interrupt taken the instant it was raised,
    /// the common case on a CPU with nothing running; 70 % of the reference
    /// model's), counted apart: an add, where indexing costs some ten
    /// instructions more. They join the histogram at its floor, 1 ps.
    at_floor: u64,
}

/// hdrhistogram's layout at 3 significant figures and a lowest value of 1:
/// `sub_bucket_half_count_magnitude` 10, `sub_bucket_mask` 2047 and
/// `leading_zero_count_base` 64 − 0 − 11 (its `index_for` and `value_for`).
const HALF_MAGNITUDE: u32 = 10;
const SUB_BUCKET_MASK: u64 = (1 << (HALF_MAGNITUDE + 1)) - 1;
const LEADING_ZERO_BASE: u32 = 64 - (HALF_MAGNITUDE + 1);

/// The count's index of a value: `Histogram::index_for`.
#[inline]
fn index_of(v: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (v | SUB_BUCKET_MASK).leading_zeros();
    ((((bucket + 1) as u64) << HALF_MAGNITUDE) + (v >> bucket) - (1 << HALF_MAGNITUDE)) as usize
}

/// The lowest value an index holds: `Histogram::value_for`.
fn lowest_of(index: usize) -> u64 {
    let sub = (index & ((1 << HALF_MAGNITUDE) - 1)) as u64;
    match (index >> HALF_MAGNITUDE).checked_sub(1) {
        None => sub, // the lower half of the first bucket
        Some(bucket) => (sub + (1 << HALF_MAGNITUDE)) << bucket,
    }
}

impl Latency {
    /// A zero goes to the floor, 1 ps: the histogram's first unit (see `summary`).
    #[inline]
    pub fn record(&mut self, d: Ps) {
        if d <= 1 {
            self.at_floor += 1;
            return;
        }
        let i = index_of(d);
        match self.counts.get_mut(i) {
            Some(c) => *c += 1,
            None => self.grow_and_count(i),
        }
    }
    /// To the end of the value's bucket, as hdrhistogram's auto-resize.
    #[cold]
    fn grow_and_count(&mut self, i: usize) {
        let end = ((i >> HALF_MAGNITUDE) + 1) << HALF_MAGNITUDE;
        self.counts.resize(end, 0);
        self.counts[i] += 1;
    }
    pub fn reset(&mut self) {
        self.counts.fill(0);
        self.at_floor = 0;
    }
    /// Adds `other`'s records to these (the same layout: no loss).
    pub fn merge(&mut self, other: &Latency) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        self.counts.iter_mut().zip(&other.counts).for_each(|(c, o)| *c += o);
        self.at_floor += other.at_floor;
    }
    /// Read for reports only: summed, not kept on the record path.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.at_floor
    }
    fn histogram(&self) -> Histogram<u64> {
        let mut h = Histogram::new(3).expect("3 significant figures is valid");
        if self.at_floor > 0 {
            // A record of no count would still set the minimum.
            let _ = h.record_n(1, self.at_floor);
        }
        for (i, &c) in self.counts.iter().enumerate().filter(|(_, &c)| c > 0) {
            // Auto-resizing: fails only if a count would overflow u64.
            let _ = h.record_n(lowest_of(i), c);
        }
        h
    }
    /// A zero was recorded at the floor, 1 ps; here a value at the floor
    /// reads as the 0 it was (no latency in this engine is 1 ps), and the
    /// mean leaves those records' 1 ps out.
    pub fn summary(&self) -> Summary {
        summarize(&self.histogram())
    }
}

fn summarize(h: &Histogram<u64>) -> Summary {
    let at_floor = |v: u64| if v <= 1 { 0.0 } else { ps_to_ns(v) };
    let q = |p: f64| at_floor(h.value_at_quantile(p));
    let empty = h.is_empty();
    let n = h.len() as f64;
    let floor = h.count_at(1) as f64;
    Summary {
        count: h.len(),
        mean: if empty { 0.0 } else { (h.mean() * n - floor) / n / 1e3 },
        min: if empty { 0.0 } else { at_floor(h.min()) },
        max: at_floor(h.max()),
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        p99_9: q(0.999),
        p99_99: q(0.9999),
        unit: "ns",
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    #[serde(rename = "p99.99")]
    pub p99_99: f64,
    pub unit: &'static str,
}

/// Values sampled at a fixed simulated interval, for plots.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Series {
    pub t: Vec<f64>,
    pub v: Vec<f64>,
}

impl Series {
    pub fn push(&mut self, now: Ps, v: f64) {
        self.t.push(ps_to_s(now));
        self.v.push(v);
    }
}

/// A table cell: a name, a number, or nothing (JSON null).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Cell {
    Text(String),
    Num(f64),
    None,
}

impl From<&str> for Cell {
    fn from(s: &str) -> Self {
        Cell::Text(s.to_string())
    }
}
impl From<String> for Cell {
    fn from(s: String) -> Self {
        Cell::Text(s)
    }
}
impl From<f64> for Cell {
    fn from(v: f64) -> Self {
        Cell::Num(v)
    }
}

/// Structured results (per CPU, per cancel cause, per target...): named columns
/// and rows, so a front end reads fields instead of splitting metric names.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(columns: &[&str]) -> Self {
        Table { columns: columns.iter().map(|c| c.to_string()).collect(), rows: Vec::new() }
    }
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "a row has one cell per column");
        self.rows.push(cells);
    }
}

/// What a run reports: the `metrics`, `histograms`, `series` and `tables` of the
/// JSON output. BTreeMaps keep the key order, and so the bytes, deterministic.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub metrics: BTreeMap<String, f64>,
    pub histograms: BTreeMap<String, Summary>,
    pub series: BTreeMap<String, Series>,
    pub tables: BTreeMap<String, Table>,
    /// What the run could do but a user would not expect (the CLI prints each on stderr).
    pub warnings: Vec<String>,
    /// The same report over the first half of the measured window (`Half`).
    pub first_half: Option<Box<Half>>,
}

/// A run's metrics and histograms over the first half of its measured window,
/// against which the whole window's tell whether it had settled: a rate whose
/// halves differ, or a tail still growing, was read on a transient (the front
/// end warns). Per-CPU metrics (`cpuN.`) are left out: the whole window's
/// table has them, and a 2,048-CPU run would double its output.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Half {
    pub metrics: BTreeMap<String, f64>,
    pub histograms: BTreeMap<String, Summary>,
}

impl Half {
    pub fn of(r: Report) -> Half {
        let per_cpu = |k: &str| k.strip_prefix("cpu").is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()));
        Half { metrics: r.metrics.into_iter().filter(|(k, _)| !per_cpu(k)).collect(), histograms: r.histograms }
    }
}

impl Report {
    pub fn warn(&mut self, w: impl Into<String>) {
        self.warnings.push(w.into());
    }
    pub fn metric(&mut self, name: impl Into<String>, v: f64) {
        self.metrics.insert(name.into(), v);
    }
    pub fn histogram(&mut self, name: impl Into<String>, l: &Latency) {
        self.histograms.insert(name.into(), l.summary());
    }
    pub fn table(&mut self, name: impl Into<String>, t: Table) {
        self.tables.insert(name.into(), t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauge_is_time_weighted_and_resets() {
        let mut g = Gauge::default();
        g.set(0, 1.0);
        g.set(10, 3.0);
        assert_eq!(g.mean(20), 2.0);
        assert_eq!(g.max(), 3.0);
        g.reset(20);
        g.set(30, 0.0);
        assert_eq!(g.mean(40), 1.5);
        assert_eq!(g.max(), 3.0);
    }

    #[test]
    fn latency_percentiles() {
        let mut l = Latency::default();
        for i in 1..=1000u64 {
            l.record(i * 1000); // 1..1000 ns
        }
        let s = l.summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50 - 500.0).abs() < 1.0, "{}", s.p50);
        assert!((s.p99 - 990.0).abs() < 1.5, "{}", s.p99);
        assert!((s.mean - 500.5).abs() < 0.5);
    }

    proptest::proptest! {
        /// The counts are indexed as hdrhistogram's `Histogram::new(3)` indexes
        /// them: a value's index holds from its lowest equivalent value, and
        /// the next value that is not equivalent has the next index.
        #[test]
        fn the_index_is_hdrhistograms(v in proptest::prop_oneof![0u64..5_000, 0u64..(1 << 40), 0u64..u64::MAX]) {
            let h = Histogram::<u64>::new(3).unwrap();
            proptest::prop_assert_eq!(lowest_of(index_of(v)), h.lowest_equivalent(v));
            if v < 1 << 63 {
                // (Above, the next bucket's value is past u64 and saturates.)
                proptest::prop_assert_eq!(index_of(h.next_non_equivalent(v)), index_of(v) + 1);
            }
        }

        /// Through records, merges and resets, the summary is the one of a
        /// histogram that took every record itself (a zero at the floor).
        #[test]
        fn a_summary_is_the_histograms(
            a in proptest::collection::vec(any_latency(), 0..200),
            b in proptest::collection::vec(any_latency(), 0..200),
            c in proptest::collection::vec(any_latency(), 0..20),
            reset_a in proptest::bool::ANY,
        ) {
            let plain = |vs: &[u64]| {
                let mut h = Histogram::<u64>::new(3).unwrap();
                for &v in vs {
                    h.record(v.max(1)).unwrap();
                }
                h
            };
            let (mut la, mut lb) = (Latency::default(), Latency::default());
            a.iter().for_each(|&v| la.record(v));
            b.iter().for_each(|&v| lb.record(v));
            let mut want = plain(&a);
            if reset_a {
                la.reset();
                want = plain(&[]);
            }
            la.merge(&lb);
            want.add(plain(&b)).unwrap();
            c.iter().for_each(|&v| la.record(v)); // records after a merge
            want.add(plain(&c)).unwrap();
            proptest::prop_assert_eq!(la.count(), want.len());
            proptest::prop_assert_eq!(la.summary(), summarize(&want));
        }
    }

    /// Zeros, short and long latencies, up to the largest below `u64::MAX`
    /// (hdrhistogram's "no minimum yet").
    fn any_latency() -> impl proptest::strategy::Strategy<Value = u64> {
        proptest::prop_oneof![0u64..3, 0u64..10_000_000, 0u64..(1 << 50), 0u64..u64::MAX]
    }

    #[test]
    fn a_zero_latency_reads_as_zero_not_the_floor() {
        let mut l = Latency::default();
        for _ in 0..3 {
            l.record(0);
        }
        l.record(4_000); // 4 ns
        let s = l.summary();
        assert_eq!((s.count, s.min, s.p50), (4, 0.0, 0.0));
        assert!((s.max - 4.0).abs() < 0.01, "{}", s.max); // the bucket's top at 3 significant figures
        assert!((s.mean - 1.0).abs() < 0.001, "{}", s.mean); // (0 + 0 + 0 + 4) / 4, within a bucket
    }
}
