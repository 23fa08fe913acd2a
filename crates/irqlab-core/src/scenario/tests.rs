use super::*;

const BASE: &str = r#"
name = "t"
duration = "1ms"
[platform]
cpus = 2
[[source]]
name = "q"
rate = "1M/s"
handler = "300ns"
"#;

fn err_of(text: &str, sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load(text, "s.toml", &sets).unwrap_err().0
}

#[test]
fn a_valid_scenario_loads_with_defaults() {
    let s = load(BASE, "s.toml", &[]).unwrap();
    assert_eq!(s.duration.ps(), 1_000_000_000);
    assert_eq!(s.sources[0].rate.0, 1e6);
    assert_eq!(s.sources[0].cpus, vec![0]);
    assert_eq!(s.seed, 1);
}

#[test]
fn unknown_keys_name_their_path() {
    let e = err_of(&format!("{BASE}\n[cpu]\nmaskin = \"daif\"\n"), &[]);
    assert!(e.starts_with("s.toml: cpu.maskin: unknown field `maskin`, expected one of `masking`"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn bad_enum_values_say_what_was_expected() {
    let e = err_of(BASE, &["cpu.masking=pmrr"]);
    assert!(e.contains("cpu.masking") && e.contains("pmrr") && e.contains("daif") && e.contains("pmr"), "{e}");
}

#[test]
fn a_table_or_a_name_of_the_wrong_type_is_named_in_the_format_s_words() {
    // serde named Rust types: "expected struct Platform".
    let e = err_of(BASE, &["platform=3"]);
    assert!(e.ends_with("platform: invalid type: integer `3`, expected a table"), "{e}");
    // toml said "invalid type: unit variant, expected string only"; the names come from the schema.
    let e = err_of(BASE, &["source.0.arrival=3"]);
    assert!(e.ends_with("source[0].arrival: expected `poisson` or `periodic`"), "{e}");
    let e = err_of(BASE, &["cpu.masking=true"]);
    assert!(e.ends_with("cpu.masking: expected `daif` or `pmr`"), "{e}");
    let e = err_of(BASE, &["hypervisor.guest_idle=2"]);
    assert!(e.ends_with("hypervisor.guest_idle: expected `spin` or `hlt`"), "{e}");
    // In an optional section (the schema's anyOf with null), and an untagged enum.
    let spe = "[spe]\nwhere = \"host\"\nbuffer = \"4M\"\n[spe.task]\nrun = \"1ms\"\nswitches = 0\n";
    let e = err_of(&format!("{BASE}{spe}"), &["spe.kernel=3"]);
    assert!(e.ends_with("spe.kernel: expected `normal` or `debug`"), "{e}");
    let kvm = "[kvm]\norder = \"upstream-after\"\n";
    let e = err_of(&format!("{BASE}{kvm}"), &["kvm.order=3"]);
    assert!(e.contains("kvm.order") && !e.contains("untagged enum") && !e.contains("Order"), "{e}");
}

#[test]
fn wrong_types_and_negative_durations_are_rejected() {
    let e = err_of(BASE, &["platform.cpus=lots"]);
    assert!(e.starts_with("s.toml: --set platform.cpus=lots: platform.cpus: invalid type"), "{e}");
    assert!(e.ends_with("expected a whole number"), "{e}");
    // A type's limits, never a range the validator narrows ("from 0" for a count of at least 1).
    let e = err_of(BASE, &["platform.cpus=-3"]);
    assert!(e.ends_with("platform.cpus: invalid value: integer `-3`, expected a whole number, not negative"), "{e}");
    let e = err_of(BASE, &["platform.cpus=5000000000"]);
    assert!(e.ends_with("expected a whole number of at most 4,294,967,295"), "{e}");
    assert!(err_of(BASE, &["platform.cpus=0"]).ends_with("platform.cpus: 0: expected 1 to 4096"));
    let e = err_of(BASE, &["source.0.count=1.5"]);
    assert!(e.ends_with("source[0].count: invalid type: floating point `1.5`, expected a whole number"), "{e}");
    let e = err_of(BASE, &["duration=-1s"]);
    assert!(e.starts_with("s.toml: --set duration=-1s: duration:") && e.contains("non-negative"), "{e}");
    let e = err_of(BASE, &["source[0].handler=300"]);
    assert!(e.contains("source[0].handler") && e.contains("unit"), "{e}");
}

#[test]
fn malformed_toml_gives_line_and_column() {
    let e = err_of("name = \"x\"\nduration = \n", &[]);
    assert!(e.starts_with("s.toml:2:"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn overrides_reach_array_elements_and_report_bad_paths() {
    let s = load(BASE, "s.toml", &["source.0.rate=2k/s".into(), "source[0].cpus=[1]".into()]).unwrap();
    assert_eq!(s.sources[0].rate.0, 2000.0);
    assert_eq!(s.sources[0].cpus, vec![1]);
    assert!(err_of(BASE, &["nokey"]).contains("expected key.path=value"));
    assert!(err_of(BASE, &["source.5.rate=1"]).contains("no index 5"));
    // A list the scenario does not have at all (it said "nvme: invalid type: map, expected a sequence").
    assert!(err_of(BASE, &["nvme.5.queues=2"]).contains("nvme has 0 entries, no index 5"));
    // A misspelt list is an unknown key, with the names the scenario has (it read "sourc has 0 entries").
    let e = err_of(BASE, &["sourc.0.rate=1/s"]);
    assert!(e.contains("sourc: unknown field") && e.contains("source"), "{e}");
    assert!(err_of(BASE, &["name.x=1"]).contains("name is a string, not a table"));
    // A bad key or value from --set names the override, not only the file.
    assert!(err_of(BASE, &["nokey=1"]).starts_with("s.toml: --set nokey=1: nokey: unknown field"), "{}", err_of(BASE, &["nokey=1"]));
    let e = err_of(BASE, &["duration=1ms", "source[0].rate=fast"]);
    assert!(e.starts_with("s.toml: --set source[0].rate=fast: source[0].rate: "), "{e}");
}

#[test]
fn references_are_checked() {
    let e = err_of(BASE, &["source.0.cpus=[7]"]);
    assert_eq!(e, "s.toml: --set source.0.cpus=[7]: source[0].cpus[0]: cpu 7 does not exist (platform.cpus = 2)");
    let e = err_of(BASE, &["source.0.vm=vm9"]);
    assert!(e.contains("source[0].vm") && e.contains("vm9"), "{e}");
    let e = err_of(BASE, &["warmup=2ms"]);
    assert!(e.contains("warmup"), "{e}");
}

#[test]
fn vm_placement_is_validated() {
    let vm = format!("{BASE}\n[[vm]]\nname = \"g\"\nvcpus = 2\npcpus = [1]\n");
    assert!(err_of(&vm, &[]).contains("vm[0].pcpus: has 1 entry,"));
    let vm = format!("{BASE}\n[[vm]]\nname = \"g\"\nvcpus = 1\npcpus = [0]\n");
    assert!(err_of(&vm, &[]).contains("cpu 0 runs a vCPU of g"), "{}", err_of(&vm, &[]));
}

#[test]
fn the_schema_is_generated() {
    let s = json_schema();
    assert!(s.contains("\"duration\"") && s.contains("\"masking\""));
}

#[test]
fn control_characters_never_break_the_one_line_rule() {
    let e = err_of(BASE, &["a\nb=1"]);
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("a\\nb"), "{e}");
}

#[test]
fn traces_are_on_by_default_and_series_are_bounded() {
    let s = load(BASE, "s.toml", &[]).unwrap();
    assert_eq!(s.trace.max_events, 1_000_000);
    let e = err_of(BASE, &["stats.series_interval=1ns"]);
    assert!(e.starts_with("s.toml: --set stats.series_interval=1ns: stats.series_interval: too small"), "{e}");
}

#[test]
fn a_scenario_given_as_json_loads_like_its_toml() {
    let toml_value: toml::Value = BASE.parse::<toml::Table>().map(toml::Value::Table).unwrap();
    let json = serde_json::to_string(&toml_value).unwrap();
    let a = load(BASE, "s.toml", &["seed=5".into()]).unwrap();
    let b = super::load_json(&json, "s.json", &["seed=5".into()]).unwrap();
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
    // A null is a key not given: its default.
    let n = super::load_json(r#"{"name": "t", "duration": "1ms", "seed": null, "trace": {"end": null}}"#, "s.json", &[]).unwrap();
    assert_eq!(n.seed, 1);
    let e = super::load_json("[1, 2]", "s.json", &[]).unwrap_err().0;
    assert!(e.starts_with("s.json: a scenario is an object"), "{e}");
    let e = super::load_json("{\"name\": ", "s.json", &[]).unwrap_err().0;
    assert!(e.starts_with("s.json:1:") && e.contains("malformed scenario JSON") && !e.contains('\n'), "{e}");
}

#[test]
fn units_parse_like_scenario_values() {
    assert_eq!(super::parse_time("1.5us").unwrap(), 1_500_000);
    assert_eq!(super::parse_time("300ns").unwrap(), 300_000);
    assert!(super::parse_time("5 parsecs").unwrap_err().0.starts_with("\"5 parsecs\": "));
    assert_eq!(super::parse_rate("1M/s").unwrap(), 1e6);
    assert!(super::parse_rate("fast").is_err());
}

#[test]
fn pmhe_needs_a_dsb_cost_only_under_pseudo_nmi() {
    let e = err_of(BASE, &["cpu.masking=pmr", "cpu.pmr.pmhe=true"]);
    assert!(e.contains("cpu.pmr.dsb") && e.contains("pmhe = false"), "{e}");
    for sets in [&["cpu.masking=pmr", "cpu.pmr.pmhe=true", "cpu.pmr.dsb=20ns"][..], &["cpu.pmr.pmhe=true"]] {
        assert!(load(BASE, "s.toml", &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>()).is_ok(), "{sets:?}");
    }
}

/// Any u64 is a seed (results and sweeps print seeds up to 2^64-1), though a
/// TOML integer stops at 2^63-1: above it, as a string of digits.
#[test]
fn a_seed_takes_the_whole_u64_range() {
    let seed_of = |sets: &[&str]| load(BASE, "s.toml", &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap().seed;
    assert_eq!(seed_of(&["seed=9223372036854775808"]), 1 << 63);
    assert_eq!(seed_of(&["seed=18446744073709551615"]), u64::MAX);
    assert_eq!(seed_of(&["seed=\"42\""]), 42);
    assert_eq!(seed_of(&["seed=7"]), 7);
    let text = format!("seed = \"16860738450190168606\"\n{BASE}");
    assert_eq!(load(&text, "s.toml", &[]).unwrap().seed, 16860738450190168606);
    for bad in ["seed=18446744073709551616", "seed=-1", "seed=1.5", "seed=abc"] {
        let e = err_of(BASE, &[bad]);
        assert!(e.contains("seed") && e.ends_with("expected a whole number from 0 to 2^64-1 (above 2^63-1 as a string of digits)"), "{e}");
    }
}

/// The hypervisor component's pCPUs are refused to every host placement that
/// goes through `check::targets`, a device's queues too: an `[[nvme]]` on them
/// was accepted until 2026-11-29 (the refusal listed sources, tasks and VMs).
#[test]
fn host_placements_on_the_hypervisor_s_pcpus_are_refused_whatever_the_section() {
    let m3 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/figures/m3-xen-fio.toml")).unwrap();
    let m3 = m3.replace("[platform]\ncpus = 8\n", "[platform]\ncpus = 10\n");
    let nvme = "[[nvme]]\nname = \"d\"\nqueues = 1\ncpus = [9]\niops = \"1M\"\n[nvme.fio]\njobs = 1\niodepth = 1\n";
    let ok = load(&format!("{m3}\n{nvme}"), "s.toml", &[]);
    assert!(ok.is_ok(), "CPUs 8 and 9 are the host's: {ok:?}");
    let e = err_of(&format!("{m3}\n{nvme}"), &["nvme.0.cpus=[3]"]);
    assert!(e.contains("nvme[0].cpus[0]") && e.contains("one of the hypervisor's pCPUs (vcpu_sched.pcpus = 8)"), "{e}");
    let e = err_of(&format!("{m3}\n[[vm]]\nname = \"g\"\nvcpus = 1\npcpus = [2]\n"), &[]);
    assert!(e.contains("vm[0].pcpus[0]") && e.contains("hypervisor's pCPUs"), "{e}");
}

/// Each component's section adds what it schedules to the run's estimate
/// (its params' `estimate`, listed in `Scenario::estimate_components`): a
/// figure stretched to a day is refused, naming the component's own key.
#[test]
fn every_component_s_work_counts_in_the_run_s_estimate() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/figures/");
    for (file, key) in [
        ("m5-nvme-8ssd.toml", "nvme.0.iops"),
        ("m5-nic-100g.toml", "nic.0.gbps"),
        ("m4-kvm-cancels.toml", "kvm.rates"),
        ("m3-xen-fio.toml", "vblk.iops"),
    ] {
        let text = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
        let sc = load(&text, file, &["duration=\"1000000s\"".into()]).unwrap();
        let (k, msg) = super::budget::check(&sc, false, super::budget::MAX_EVENTS, f64::INFINITY).unwrap_err();
        assert_eq!(k, key, "{file}: {msg}");
    }
}

/// An array where the format has a table is refused, naming the key (serde's
/// structs read a sequence field by field: `platform = [8, 2]` ran as 8 CPUs
/// on 2 sockets); so are key paths with an empty segment.
#[test]
fn arrays_for_tables_and_empty_key_segments_are_refused() {
    for (sets, key, what) in [
        (vec!["platform=[8,2]"], "platform", "expected a table, got an array"),
        (vec!["trace=[]"], "trace", "expected a table, got an array"),
        (vec!["source.0=[\"a\", 2]"], "source[0]", "expected a table, got an array"),
        (vec![".duration=1ms"], ".duration", "empty segment"),
        (vec!["duration.=1ms"], "duration.", "empty segment"),
        (vec!["source..0.count=1"], "source..0.count", "empty segment"),
    ] {
        let e = load(BASE, "s.toml", &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .map(|_| "loaded".to_string())
            .unwrap_or_else(|e| e.0);
        assert!(e.contains(key) && e.contains(what), "{sets:?}: {e}");
    }
    let e = err_of(&BASE.replace("[platform]\ncpus = 2", "platform = [4]"), &[]);
    assert!(e.contains("platform: expected a table, got an array"), "{e}");
    // The forms that are right still load: brackets, a trailing index, a list of tables.
    let ok: Vec<String> = ["source[0].count=2", "source.0.count=3", "source[0].cpus=[1]"].iter().map(|s| s.to_string()).collect();
    let sc = load(BASE, "s.toml", &ok).unwrap();
    assert_eq!((sc.sources[0].count, sc.sources[0].cpus.clone()), (3, vec![1]));
}
