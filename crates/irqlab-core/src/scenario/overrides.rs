//! `--set key.path=value`: edits the parsed TOML before it is deserialized, so
//! an override is checked exactly like the file. Array elements are addressed
//! by index: `source.0.rate` or `source[0].rate`.

pub fn apply(root: &mut toml::Value, spec: &str) -> Result<(), String> {
    let (path, raw) = spec.split_once('=').ok_or("expected key.path=value")?;
    // `source[0].rate` is `source.0.rate`; any other empty segment is a typo
    // (`.duration`, `source..0.count` had been applied as if it were not there).
    let path = path.trim();
    let dotted = path.replace("][", ".").replace("].", ".").replace(['[', ']'], ".");
    let path = if path.ends_with(']') { dotted.strip_suffix('.').unwrap_or(&dotted) } else { &dotted };
    if path.is_empty() {
        return Err("expected key.path=value, the key path is empty".into());
    }
    let keys: Vec<&str> = path.split('.').collect();
    if keys.iter().any(|k| k.is_empty()) {
        return Err(format!("empty segment in the key path \"{path}\": expected names and indexes joined by single dots"));
    }
    let value = parse_value(raw.trim());
    let mut cur = root;
    for (i, k) in keys.iter().enumerate() {
        let last = i + 1 == keys.len();
        let here = keys[..i].join(".");
        cur = match cur {
            toml::Value::Table(t) => {
                if last {
                    t.insert(k.to_string(), value);
                    return Ok(());
                }
                // An index into a list the file does not have: say so, not what
                // serde would make of the table this would create ("expected a
                // sequence"). Not for a top-level key the scenario does not know
                // (`sourc.0.rate`): that goes on to serde's "unknown field", with
                // the names it expects (it read "sourc has 0 entries").
                let known = i > 0 || top_level_keys().iter().any(|x| x == k);
                if let Some(n) = keys.get(i + 1).and_then(|n| n.parse::<usize>().ok()).filter(|_| known && !t.contains_key(*k)) {
                    let list = keys[..=i].join(".");
                    return Err(format!("{list} has 0 entries, no index {n} (the scenario has no [[{list}]])"));
                }
                t.entry(k.to_string()).or_insert_with(|| toml::Value::Table(Default::default()))
            }
            toml::Value::Array(a) => {
                let idx: usize = k.parse().map_err(|_| format!("{here} is a list, expected an index instead of \"{k}\""))?;
                let len = a.len();
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| format!("{here} has {len} {}, no index {idx}", if len == 1 { "entry" } else { "entries" }))?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            other => return Err(format!("{here} is a {}, not a table", other.type_str())),
        };
    }
    unreachable!("the loop returns at the last key")
}

/// The scenario's top-level keys (the properties of its schema).
fn top_level_keys() -> &'static [String] {
    static KEYS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let root = schemars::schema_for!(super::Scenario);
        root.schema.object.map(|o| o.properties.keys().cloned().collect()).unwrap_or_default()
    })
}

/// A TOML value if the text is one (`3`, `true`, `"x"`, `[0, 1]`), else a bare string
/// (`300ns`, `pmr`), so users need not quote on the command line.
fn parse_value(raw: &str) -> toml::Value {
    format!("v = {raw}").parse::<toml::Table>().ok().and_then(|mut t| t.remove("v")).unwrap_or_else(|| toml::Value::String(raw.to_string()))
}
