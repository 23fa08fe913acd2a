//! Loading a scenario: TOML, then `--set` overrides, then serde's types, then
//! the checks serde cannot express (`validate`), each error one line.

use super::{overrides, validate, Scenario, ScenarioError};

/// Parses, overrides (`key.path=value`), deserializes and validates a scenario.
/// `origin` names the file in messages.
pub fn load(text: &str, origin: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    let value: toml::Value = text.parse::<toml::Table>().map(toml::Value::Table).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
        ScenarioError(format!("{origin}:{line}:{col}: malformed TOML: {}", one_line(e.message())))
    })?;
    load_value(value, origin, overrides)
}

/// Like [`load`], for a scenario given as a JSON object with the same keys (a
/// front end that builds scenarios as data rather than as TOML text).
pub fn load_json(text: &str, origin: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    let mut json: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        ScenarioError(format!("{origin}:{}:{}: malformed scenario JSON: {}", e.line(), e.column(), one_line(&e.to_string())))
    })?;
    // TOML has no null: a key given as null is a key not given (its default).
    drop_nulls(&mut json);
    let value: toml::Value =
        serde_json::from_value(json).map_err(|e| ScenarioError(format!("{origin}: not a scenario: {}", one_line(&e.to_string()))))?;
    if !value.is_table() {
        return Err(ScenarioError(format!("{origin}: a scenario is an object of sections, like {{\"name\": ..., \"duration\": ...}}")));
    }
    load_value(value, origin, overrides)
}

fn drop_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn load_value(mut value: toml::Value, origin: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    for o in overrides {
        overrides::apply(&mut value, o).map_err(|m| ScenarioError(format!("--set {}: {}", escaped(o), one_line(&m))))?;
    }
    if let Some(path) = array_for_table(&value) {
        let path = escaped(&path);
        return Err(ScenarioError(format!("{origin}: {}{path}: expected a table, got an array", from_override(overrides, &path))));
    }
    // Checked once the types are: a key of the wrong type is the more precise error.
    let unread = unread_beside_kvm(&value);
    let tasks_without_cpus: Vec<bool> = match value.get("task") {
        Some(toml::Value::Array(tasks)) => tasks.iter().map(|t| t.get("cpus").is_none()).collect(),
        _ => Vec::new(),
    };
    let mut sc: Scenario = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = escaped(&e.path().to_string());
        // toml appends "\nin `key`", which the path already says.
        let inner = e.inner().to_string();
        let msg = plain_shapes(&plain_types(&one_line(inner.split("\nin `").next().unwrap_or(&inner))), &e.path().to_string());
        if path == "." {
            ScenarioError(format!("{origin}: {msg}"))
        } else {
            ScenarioError(format!("{origin}: {}{path}: {msg}", from_override(overrides, &path)))
        }
    })?;
    unread.map_err(|path| {
        ScenarioError(format!(
            "{origin}: {}{path}: [kvm] runs as a model of its own (pinned vCPUs, host side not modelled) and reads no [{}]: remove it",
            from_override(overrides, &path),
            path.split(['.', '[']).next().unwrap_or(&path)
        ))
    })?;
    validate::check(&sc)
        .and_then(|_| validate::check_fitted(&sc))
        .map_err(|(path, msg)| ScenarioError(format!("{origin}: {}{path}: {msg}", from_override(overrides, &path))))?;
    for (t, defaulted) in sc.tasks.iter_mut().zip(tasks_without_cpus) {
        t.cpus_defaulted = defaulted;
    }
    for e in &mut sc.expect {
        if e.name.is_empty() {
            e.name = sc.name.clone();
        }
    }
    Ok(sc)
}

/// With `[kvm]`, the first key the KVM model does not read, down to its first
/// leaf (`cpu.idle_state`, `source`): an allow-list, so that a section added
/// later is refused beside `[kvm]` without being listed here.
fn unread_beside_kvm(value: &toml::Value) -> Result<(), String> {
    use crate::components::kvm_x86::params::SECTIONS_READ;
    let Some(t) = value.as_table().filter(|t| t.contains_key("kvm")) else { return Ok(()) };
    let Some((key, mut v)) = t.iter().find(|(k, _)| !SECTIONS_READ.contains(&k.as_str())) else { return Ok(()) };
    let mut path = key.clone();
    while let Some((k, inner)) = v.as_table().and_then(|t| t.iter().next()) {
        path = format!("{path}.{k}");
        v = inner;
    }
    Err(path)
}

/// serde's Rust type names in "expected u32" say what a user must write instead.
/// An unsigned type's message says only what the value broke: a whole number
/// (for `1.5` or `"lots"`), a non-negative one (for `-3`), or the type's
/// largest (for `5e9`), never "from 0 to …": a key the validator holds to a
/// narrower range (a count of at least 1, up to 4,096 CPUs) would then be
/// given two ranges, one of them wrong (a review).
fn plain_types(msg: &str) -> String {
    // The type, and its largest value for an unsigned one ("" for the others).
    const NAMES: [(&str, &str); 8] = [
        ("expected u8", "255"),
        ("expected u16", "65,535"),
        ("expected u32", "4,294,967,295"),
        ("expected u64", "2^64-1"),
        ("expected i32", ""),
        ("expected i64", ""),
        ("expected f32", ""),
        ("expected f64", ""),
    ];
    let mut out = msg.to_string();
    for (rust, max) in NAMES {
        // Only the whole word: "expected u32" must not match inside "expected u320".
        let Some(i) = out.find(rust) else { continue };
        let end = i + rust.len();
        if out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
            continue;
        }
        let plain = match (rust.as_bytes()[9], max) {
            (b'f', _) => "expected a number".to_string(),
            (b'u', _) if msg.starts_with("invalid value: integer `-") => "expected a whole number, not negative".to_string(),
            (b'u', max) if msg.starts_with("invalid value: integer") => format!("expected a whole number of at most {max}"),
            _ => "expected a whole number".to_string(),
        };
        out.replace_range(i..end, &plain);
    }
    out
}

/// serde's words for a table and a name: "expected struct Platform" named a
/// Rust type, and toml's "invalid type: unit variant, expected string only",
/// for a number where a name goes, named neither the value nor the names
/// (a review). The names come from the scenario's schema, by the key's path.
fn plain_shapes(msg: &str, path: &str) -> String {
    // serde's untagged enums (`kvm.order`: a name or a list) name their Rust type.
    if msg.contains("did not match any variant of untagged enum") {
        return "expected one of the forms this key takes (irqlab schema shows them)".to_string();
    }
    if let Some(i) = msg.find("expected struct ") {
        let rest = &msg[i + "expected struct ".len()..];
        let end = rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '_').unwrap_or(rest.len());
        return format!("{}expected a table{}", &msg[..i], &rest[end..]);
    }
    if msg.contains("unit variant, expected string only") {
        return match enum_names(path).as_deref() {
            Some([a, b]) => format!("expected `{a}` or `{b}`"),
            Some(names) if !names.is_empty() => {
                format!("expected one of {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
            }
            _ => "expected a name, in quotes (irqlab schema lists them)".to_string(),
        };
    }
    msg.to_string()
}

/// The names a key of the scenario takes (`source[0].arrival` → poisson,
/// periodic), from its JSON Schema; `None` if the key is not a plain enum.
fn enum_names(path: &str) -> Option<Vec<String>> {
    let mut node = resolve(schema_root())?;
    for seg in path.split(['.', '[', ']']).filter(|s| !s.is_empty()) {
        node = if seg.bytes().all(|b| b.is_ascii_digit()) { node.get("items")? } else { node.get("properties")?.get(seg)? };
        node = resolve(node)?;
    }
    // A documented enum is a `oneOf` of one-name enums.
    let parts: Vec<&serde_json::Value> = match node.get("oneOf").and_then(|o| o.as_array()) {
        Some(variants) => variants.iter().filter_map(resolve).collect(),
        None => vec![node],
    };
    let mut names = vec![];
    for p in parts {
        names.extend(p.get("enum")?.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect::<Option<Vec<_>>>()?);
    }
    (!names.is_empty()).then_some(names)
}

/// The scenario's JSON Schema, as a value.
fn schema_root() -> &'static serde_json::Value {
    static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::to_value(schemars::schema_for!(Scenario)).unwrap_or_default())
}

/// Follows `$ref`, a lone `allOf` (how schemars wraps a field with a default)
/// and an `anyOf` of a schema and null (an optional section or key).
fn resolve(mut v: &'static serde_json::Value) -> Option<&'static serde_json::Value> {
    let root = schema_root();
    for _ in 0..8 {
        let any_of = v.get("anyOf").and_then(|a| a.as_array()).map(|a| a.as_slice());
        let is_null = |x: &serde_json::Value| x.get("type").and_then(|t| t.as_str()) == Some("null");
        if let Some(r) = v.get("$ref").and_then(|r| r.as_str()) {
            v = root.pointer(r.strip_prefix('#')?)?;
        } else if let Some([one]) = v.get("allOf").and_then(|a| a.as_array()).map(|a| a.as_slice()) {
            v = one;
        } else if let Some([a, b]) = any_of.filter(|a| a.iter().any(is_null)) {
            v = if is_null(a) { b } else { a };
        } else {
            break;
        }
    }
    Some(v)
}

/// The first key (`platform`, `source[0]`) whose schema is a table but whose
/// value is an array. serde's derived structs also read a sequence, field by
/// field in order, so `platform = [8, 2]` had run as 8 CPUs on 2 sockets and
/// `trace = []` had passed (an audit): such a key is refused before serde.
fn array_for_table(value: &toml::Value) -> Option<String> {
    fn walk(v: &toml::Value, node: &'static serde_json::Value, path: &str) -> Option<String> {
        let node = resolve(node)?;
        match v {
            toml::Value::Array(_) if node.get("properties").is_some() => Some(path.to_string()),
            toml::Value::Array(items) => {
                let each = node.get("items")?;
                items.iter().enumerate().find_map(|(i, x)| walk(x, each, &format!("{path}[{i}]")))
            }
            toml::Value::Table(t) => {
                let props = node.get("properties")?;
                t.iter().find_map(|(k, x)| {
                    let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(x, props.get(k)?, &at)
                })
            }
            _ => None,
        }
    }
    walk(value, schema_root(), "")
}

/// `--set SPEC: ` when the key at fault (`source[0].rate`) is one an override
/// set, or lies in or around it (the last such override), so that the message
/// names what the user typed instead of blaming the file; else nothing.
fn from_override(overrides: &[String], path: &str) -> String {
    let dotted = |p: &str| p.replace('[', ".").replace(']', "").trim_matches('.').to_string();
    let at = dotted(path);
    let hit = overrides.iter().rev().find(|o| {
        let key = dotted(o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim());
        !key.is_empty() && (at == key || at.starts_with(&format!("{key}.")) || key.starts_with(&format!("{at}.")))
    });
    hit.map(|o| format!("--set {}: ", escaped(o))).unwrap_or_default()
}

/// The JSON Schema of the scenario format, generated from the types above.
pub fn json_schema() -> String {
    serde_json::to_string_pretty(&schemars::schema_for!(Scenario)).expect("schema serializes")
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// Messages are one line: white space, newlines included, folds to one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the user typed (a key path, a --set), with control characters escaped
/// so that it stays on one line and shows exactly what was given.
fn escaped(s: &str) -> String {
    s.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}

/// A time as scenarios write it (`"300ns"`, `"1.5us"`, `0`), in picoseconds.
pub fn parse_time(text: &str) -> Result<crate::engine::Ps, ScenarioError> {
    crate::engine::time::parse_duration(text.trim()).map_err(|e| ScenarioError(format!("{text:?}: {}", one_line(&e))))
}

/// A rate as scenarios write it (`"1M/s"`, `"200k"`, `5000`), per second.
pub fn parse_rate(text: &str) -> Result<f64, ScenarioError> {
    crate::engine::time::parse_rate(text.trim()).map_err(|e| ScenarioError(format!("{text:?}: {}", one_line(&e))))
}
