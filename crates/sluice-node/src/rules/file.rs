//! Rules from a file (`--rules FILE`): TOML, or YAML when the name ends in `.yaml`/`.yml`.
//!
//! # Format
//! One table (TOML) or mapping (YAML) per rule, named by the rule; its fields are the words
//! of `RL.RULE SET`, lower-case: `limit`, `window` (`"1m"`, or integer seconds; `period` is its
//! alias), and optionally `burst`, `algo`, `failmode`, `shadow` (boolean), `floor`, `rollout`,
//! `global` (boolean: the limit is shared by every region).
//!
//! ```toml
//! [user]
//! limit = 100
//! window = "1m"
//!
//! [route-search]
//! limit = 5000
//! window = "1s"
//! shadow = true
//! floor = 1000
//! ```
//!
//! The file is read at start (a broken file stops the start) and checked for changes every
//! [`POLL_EVERY`]; a changed file replaces the rules as a whole (a changed rule gets a new
//! version, a rule no longer listed is deleted). A broken file changes nothing: the last good
//! rules stay, and the log says what is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{RuleSpec, check_name, parse_spec};
use crate::shared::Shared;

/// How often the file is checked for changes.
pub const POLL_EVERY: Duration = Duration::from_millis(200);

/// One field's value, as either format gives it.
enum Scalar {
    Text(String),
    Bool(bool),
}

/// Whether `field` is a boolean field (a word of the spec with no value).
fn is_flag(field: &str) -> bool {
    field.eq_ignore_ascii_case("shadow") || field.eq_ignore_ascii_case("global")
}

/// Validates one version of the whole file, its bytes as read from `path` (whose name tells
/// TOML from YAML): every rule or an error naming the first problem.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, RuleSpec>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("cannot read it: {e}"))?;
    let yaml = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    let raw = if yaml {
        from_yaml(text)?
    } else {
        from_toml(text)?
    };
    let mut rules = BTreeMap::new();
    for (name, fields) in raw {
        check_name(name.as_bytes()).map_err(|e| e.text().to_string())?;
        let mut words: Vec<String> = Vec::new();
        for (field, value) in fields {
            match value {
                Scalar::Bool(true) if is_flag(&field) => words.push(field.to_ascii_uppercase()),
                Scalar::Bool(false) if is_flag(&field) => {}
                Scalar::Bool(_) => {
                    return Err(format!("rule '{name}': {field} is not a boolean field"));
                }
                Scalar::Text(v) => {
                    if is_flag(&field) {
                        return Err(format!("rule '{name}': {field} must be true or false"));
                    }
                    words.push(field.to_ascii_uppercase());
                    words.push(v);
                }
            }
        }
        let spec = parse_spec(words.iter().map(|w| w.as_bytes()))
            .map_err(|e| format!("rule '{name}': {}", e.text()))?;
        rules.insert(name, spec);
    }
    Ok(rules)
}

type Raw = BTreeMap<String, Vec<(String, Scalar)>>;

fn from_toml(text: &str) -> Result<Raw, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
    let mut raw = Raw::new();
    for (name, rule) in table {
        let toml::Value::Table(fields) = rule else {
            return Err(format!("'{name}' is not a table of rule fields"));
        };
        let mut out = Vec::new();
        for (k, v) in fields {
            out.push((
                k.clone(),
                match v {
                    toml::Value::String(s) => Scalar::Text(s),
                    toml::Value::Integer(i) => Scalar::Text(i.to_string()),
                    toml::Value::Boolean(b) => Scalar::Bool(b),
                    other => {
                        return Err(format!(
                            "rule '{name}': {k} = {other} is not a string, integer or boolean"
                        ));
                    }
                },
            ));
        }
        raw.insert(name, out);
    }
    Ok(raw)
}

fn from_yaml(text: &str) -> Result<Raw, String> {
    use serde_yaml_ng::Value;
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
    let mut raw = Raw::new();
    let map = match doc {
        Value::Mapping(m) => m,
        Value::Null => return Ok(raw),
        _ => return Err("the top level is not a mapping of rule names".into()),
    };
    for (name, rule) in map {
        let Value::String(name) = name else {
            return Err("a rule name is not a string".into());
        };
        let Value::Mapping(fields) = rule else {
            return Err(format!("'{name}' is not a mapping of rule fields"));
        };
        let mut out = Vec::new();
        for (k, v) in fields {
            let Value::String(k) = k else {
                return Err(format!("rule '{name}': a field name is not a string"));
            };
            let v = match v {
                Value::String(s) => Scalar::Text(s),
                Value::Number(n) => Scalar::Text(n.to_string()),
                Value::Bool(b) => Scalar::Bool(b),
                _ => {
                    return Err(format!(
                        "rule '{name}': {k} is not a string, number or boolean"
                    ));
                }
            };
            out.push((k, v));
        }
        raw.insert(name, out);
    }
    Ok(raw)
}

/// The version of the file the rules in force came from: the watcher compares against it.
#[derive(Debug)]
pub struct Seen {
    stamp: Option<(std::time::SystemTime, u64)>,
    content: Vec<u8>,
}

/// Loads the file at start; an error stops the start. The version it returns is the one to
/// watch from, so a change written between this load and the watcher's first look (the
/// node already serves by then) is still a change.
pub fn load(shared: &Shared, path: &Path) -> Result<(usize, Seen), String> {
    let fail = |e: String| format!("rules file {}: {e}", path.display());
    // The stamp first: a write after it changes the stamp again, so it is never missed.
    let stamp = stamp(path);
    let content = std::fs::read(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let rules = parse(path, &content).map_err(fail)?;
    let n = rules.len();
    shared
        .rules
        .replace_all(rules)
        .map_err(|e| fail(e.text().to_string()))?;
    Ok((n, Seen { stamp, content }))
}

/// What identifies a version of the file without reading it.
fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Watches the file until shutdown, from the version `load` read, reloading it when it
/// changes (by its modification time and size, then by its content: an editor's save that
/// changes nothing is not a reload).
pub fn start_watcher(
    shared: Arc<Shared>,
    path: PathBuf,
    seen: Seen,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sluice-rules-file".into())
        .spawn(move || {
            let stop = shared.shutdown_signal();
            let Seen {
                stamp: mut seen,
                mut content,
            } = seen;
            while !*stop.borrow() {
                std::thread::sleep(POLL_EVERY);
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                let result = match std::fs::read(&path) {
                    Ok(bytes) if bytes == content => continue,
                    Ok(bytes) => {
                        let parsed = parse(&path, &bytes);
                        content = bytes;
                        parsed.and_then(|rules| {
                            shared
                                .rules
                                .replace_all(rules)
                                .map_err(|e| e.text().to_string())
                        })
                    }
                    Err(e) => Err(format!("cannot read it: {e}")),
                };
                match result {
                    Ok(changed) => sluice_log::log(&format!(
                        "rules file {} reloaded: {changed} rules changed",
                        path.display()
                    )),
                    Err(e) => sluice_log::log(&format!(
                        "rules file {} not reloaded, keeping the last good rules: {e}",
                        path.display()
                    )),
                }
            }
        })
}
