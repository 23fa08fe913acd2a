//! Scenario fuzzing (issue 11): the bundled scenarios, mutated — a value
//! replaced by a hostile one, a key dropped, an array entry doubled, the text
//! cut or a byte flipped — then parsed, validated, budgeted and, when they
//! pass, run with a small event ceiling. Nothing may panic, hang or break the
//! run's invariants; a good share of cases must stay valid, or the fuzzer
//! would only test the parser. `make test` runs a short search;
//! `make test-long` (IRQLAB_FUZZ_CASES) the long one, whose counts it prints.

use irqlab_core::scenario::budget;
use irqlab_core::{load, run, RunOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};
use toml::Value;

const SEEDS: &[(&str, &str)] = &[
    ("small", include_str!("../../../tests/data/small.toml")),
    ("virt", include_str!("../../../tests/data/virt.toml")),
    ("idle", include_str!("../../../tests/data/idle.toml")),
    ("md1", include_str!("../../../python/irqlab/scenarios/examples/md1-queue.toml")),
    ("gettid", include_str!("../../../python/irqlab/scenarios/figures/m1-gettid.toml")),
    ("backtrace", include_str!("../../../python/irqlab/scenarios/examples/m1-backtrace.toml")),
    ("kvm", include_str!("../../../python/irqlab/scenarios/figures/m4-kvm-cancels.toml")),
    ("nvme", include_str!("../../../python/irqlab/scenarios/examples/m5-nvme-lowload.toml")),
    ("nic", include_str!("../../../python/irqlab/scenarios/examples/m5-nic-vms.toml")),
    ("pagefault", include_str!("../../../python/irqlab/scenarios/examples/wis-page-fault1.toml")),
];

/// Values a hostile or careless user writes: type confusion, extremes, units.
fn hostile(k: u64) -> Value {
    let s = |x: &str| Value::String(x.into());
    match k % 24 {
        0 => Value::Integer(0),
        1 => Value::Integer(1),
        2 => Value::Integer(-1),
        3 => Value::Integer(i32::MAX as i64),
        4 => Value::Integer(u32::MAX as i64),
        5 => Value::Integer(i64::MAX),
        6 => Value::Float(f64::NAN),
        7 => Value::Float(f64::INFINITY),
        8 => Value::Float(1e12),
        9 => Value::Float(0.5),
        10 => s("0ns"),
        11 => s("1us"),
        12 => s("3ms"),
        13 => s("1e12/s"),
        14 => s("100k/s"),
        15 => s("abc"),
        16 => s(""),
        17 => Value::Boolean(true),
        18 => Value::Array(vec![]),
        19 => Value::Array(vec![Value::Integer(0), Value::Integer(1)]),
        20 => Value::Table(Default::default()),
        21 => s("pmr"),
        22 => s("18446744073709551616ps"),
        _ => Value::Integer(2),
    }
}

/// A plausible neighbour of `v`: a number scaled, a time or rate with another
/// number before its unit; so that many mutated scenarios still validate.
fn nearby(v: &Value, g: &mut Gen) -> Value {
    let factor = [0.0, 0.5, 2.0, 10.0, 0.1][g.below(5)];
    match v {
        Value::Integer(i) => Value::Integer(((*i as f64) * factor).round() as i64),
        Value::Float(x) => Value::Float(x * factor),
        Value::String(t) => {
            let cut = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
            match t[..cut].parse::<f64>() {
                Ok(x) if cut > 0 => Value::String(format!("{}{}", x * factor, &t[cut..])),
                _ => v.clone(),
            }
        }
        _ => v.clone(),
    }
}

/// A small deterministic generator (splitmix64): the case number is the seed.
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Paths to every value in a TOML document (tables by key, arrays by index).
fn paths(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Table(t) => {
            for (k, x) in t {
                prefix.push(k.clone());
                out.push(prefix.clone());
                paths(x, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                prefix.push(i.to_string());
                out.push(prefix.clone());
                paths(x, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, p| match v {
        Value::Table(t) => t.get_mut(p),
        Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// One mutated scenario text for case `n`.
fn case(n: u64) -> String {
    let mut g = Gen(n);
    let (_, text) = SEEDS[g.below(SEEDS.len())];
    let mut doc: Value = text.parse::<toml::Table>().map(Value::Table).expect("the seeds parse");
    // Short runs: the point is the inputs, not long simulations.
    if let Value::Table(t) = &mut doc {
        t.insert("duration".into(), Value::String("2ms".into()));
        t.insert("warmup".into(), Value::String("200us".into()));
    }
    for _ in 0..1 + g.below(2) {
        let mut all = Vec::new();
        paths(&doc, &mut Vec::new(), &mut all);
        let path = all[g.below(all.len())].clone();
        match g.below(10) {
            // Most often a value replaced, so that many cases still validate.
            0..=6 => {
                if let Some(slot) = at(&mut doc, &path) {
                    // Values only: replacing a section would mostly test "missing field".
                    let section = slot.is_table() || slot.as_array().is_some_and(|a| a.iter().any(|x| x.is_table()));
                    if !section {
                        *slot = if g.below(2) == 0 { nearby(slot, &mut g) } else { hostile(g.next()) };
                    }
                }
            }
            7 => {
                let (last, parent) = path.split_last().expect("non-empty");
                if let Some(Value::Table(t)) = at(&mut doc, parent) {
                    t.remove(last);
                }
            }
            _ => {
                if let Some(Value::Array(a)) = at(&mut doc, &path[..path.len() - 1]) {
                    if let Some(x) = a.first().cloned() {
                        a.push(x);
                    }
                }
            }
        }
    }
    let mut out = toml::to_string(&doc).unwrap_or_else(|_| text.to_string());
    match g.below(20) {
        0 => out.truncate(g.below(out.len())),
        1 => {
            let i = g.below(out.len());
            let mut bytes = out.into_bytes();
            bytes[i] = (g.next() % 128) as u8;
            out = String::from_utf8_lossy(&bytes).into_owned();
        }
        _ => {}
    }
    out
}

#[derive(Default, Debug)]
struct Counts {
    cases: u64,
    valid: u64,
    refused_by_budget: u64,
    ran: u64,
}

fn fuzz(cases: u64, max_events: f64) -> Counts {
    let mut c = Counts::default();
    for n in 0..cases {
        let text = case(n);
        c.cases += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(sc) = load(&text, "fuzz.toml", &[]) else { return (false, false, false) };
            if budget::check(&sc, false, max_events, 2e9).is_err() {
                return (true, true, false);
            }
            let out = run(&sc, RunOptions { audit: true, ..Default::default() });
            assert_eq!(out.audit.time_reversals, 0, "time went backwards");
            assert_eq!(out.audit.double_deliveries, 0, "an interrupt was handled twice");
            (true, false, true)
        }));
        match outcome {
            Ok((valid, refused, ran)) => {
                c.valid += valid as u64;
                c.refused_by_budget += refused as u64;
                c.ran += ran as u64;
            }
            Err(_) => panic!("case {n} panicked; its scenario:\n{text}"),
        }
    }
    c
}

#[test]
fn mutated_scenarios_never_panic_and_many_still_run() {
    let cases = std::env::var("IRQLAB_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let c = fuzz(cases, 2e5);
    eprintln!("scenario fuzz: {c:?}");
    assert_eq!(c.cases, cases);
    // The mutations keep a good share valid and running (issue 11 asks for 30 %).
    assert!(c.ran as f64 >= 0.3 * c.cases as f64, "{c:?}");
}

/// Found by this fuzzer: an interrupt pended while a phase ended started the
/// new top, and the run loop armed a second timer for it; the first then ended
/// a later frame's phase early, until an idle vCPU was told its phase was over.
#[test]
fn a_nested_run_of_the_top_arms_one_timer() {
    let text = include_str!("../../../python/irqlab/scenarios/examples/m5-nic-vms.toml");
    // As the example was when the fuzzer found it: DIM with EQE profiles on three VFs, none on the fourth.
    let mut sets: Vec<String> = [
        "duration=2ms",
        "warmup=200us",
        "fabric.msi_write=0ns",
        "fabric.dma_per_kib=0ns",
        "fabric.latency=0ns",
        "nic.3.moderation={kind=\"none\"}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    sets.extend((0..3).map(|i| format!("nic.{i}.moderation={{kind=\"dim\"}}")));
    let sc = load(text, "m5-nic-vms.toml", &sets).expect("valid");
    let out = run(&sc, RunOptions { audit: true, ..Default::default() });
    assert_eq!(out.audit.time_reversals, 0);
    assert!(out.report.metrics["interrupts"] > 1000.0);
}
