//! envoyproxy/ratelimit's config files, read unchanged, and its descriptor matching.
//!
//! # Format
//! One YAML document per file: a `domain` and a tree of `descriptors`, each with a `key`, an
//! optional `value`, an optional `rate_limit` (`unit` + `requests_per_unit`, or
//! `unlimited: true`; `name` and `replaces` for replacement), `shadow_mode`, `quota_mode`,
//! nested `descriptors`, and the metric-only keys (`detailed_metric`, `value_to_metric`,
//! `share_threshold`, `metadata`). Unknown keys are an error, as in the reference.
//!
//! One extension, Sluice's own: `rate_limit.algorithm` (`fixed` by default, or `token`,
//! `gcra`, `sliding`, `log`, `leaky`) picks the RL.CHECK algorithm of that limit. The reference
//! rejects the key, so a file that uses it is for Sluice only.
//!
//! # Matching (as the reference's `GetLimit`)
//! For each entry of a request descriptor, at the current level: `key_value` first, then the
//! level's wildcard values (`*` matches any run of characters) in file order, then the key
//! alone (a default for any value). No match ends the walk with no limit. A limit applies only
//! if it sits on the node matched by the descriptor's *last* entry; otherwise the walk goes on
//! into the matched node's nested descriptors while it has some.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sluice_core::Algo;

/// A rate limit's unit of time, as the reference names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Case-insensitive, as the reference (`SECOND`, `second`, ...).
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// From the protobuf enum value (`RateLimitUnit` and `RateLimit.Unit` share numbers).
    pub fn from_proto(v: i32) -> Option<Unit> {
        Some(match v {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    pub fn to_proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The window length; a month is 30 days and a year 365, as in the reference.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }
}

/// One configured limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The reference's stats key (`domain.key_value.key`): the `rule` label of the metrics.
    pub full_key: String,
    pub requests_per_unit: u32,
    /// `None` for an unlimited limit.
    pub unit: Option<Unit>,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    /// `rate_limit.name`, what `replaces` refers to ("" when unnamed).
    pub name: String,
    pub replaces: Vec<String>,
    /// The RL.CHECK algorithm (`rate_limit.algorithm`, FIXED by default).
    pub algo: Algo,
}

/// A level of the descriptor tree.
#[derive(Debug, Default)]
struct Node {
    /// Children by `key_value` or `key`.
    children: HashMap<String, Node>,
    /// Children whose `key_value` holds a `*`, in file order, split on `*`.
    wildcards: Vec<(String, Vec<String>)>,
    limit: Option<Arc<Limit>>,
    share_threshold: bool,
}

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
}

/// A config that does not load: which file and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.reason)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    // Metric naming only: accepted, no effect on decisions.
    #[serde(default)]
    #[allow(dead_code)]
    detailed_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
    /// Sluice's extension: the RL.CHECK algorithm.
    algorithm: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    #[serde(default)]
    name: String,
}

/// `*` matches any run of characters (none included); `parts` is the pattern split on `*`.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if value.len() < first.len() + last.len()
        || !value.starts_with(first.as_str())
        || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

impl Node {
    fn load(
        &mut self,
        file: &str,
        parent_key: &str,
        descriptors: Vec<YamlDescriptor>,
    ) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            file: file.to_string(),
            reason,
        };
        for d in descriptors {
            if d.key.is_empty() {
                return Err(err("descriptor has empty key".into()));
            }
            let final_key = if d.value.is_empty() {
                d.key.clone()
            } else {
                format!("{}_{}", d.key, d.value)
            };
            let full_key = format!("{parent_key}{final_key}");
            if self.children.contains_key(&final_key) {
                return Err(err(format!(
                    "duplicate descriptor composite key '{full_key}'"
                )));
            }
            let limit = match d.rate_limit {
                None => None,
                Some(rl) => {
                    let unit = match (rl.unlimited, Unit::parse(&rl.unit)) {
                        (true, Some(_)) => {
                            return Err(err(
                                "should not specify rate limit unit when unlimited".into()
                            ));
                        }
                        (true, None) => None,
                        (false, Some(u)) => Some(u),
                        (false, None) => {
                            return Err(err(format!("invalid rate limit unit '{}'", rl.unit)));
                        }
                    };
                    let algo = match &rl.algorithm {
                        None => Algo::Fixed,
                        Some(a) => sluice_core::spec::parse_algo(a.as_bytes()).map_err(|_| {
                            err(format!(
                                "unknown algorithm '{a}' (fixed, token, gcra, sliding, log or leaky)"
                            ))
                        })?,
                    };
                    // A limit RL.CHECK would refuse is refused here, at load, in its words
                    // (0 requests per unit denies everything, as in envoyproxy/ratelimit).
                    if let Some(u) = unit
                        && rl.requests_per_unit > 0
                    {
                        let period = sluice_core::Nanos::from_secs(u.seconds());
                        sluice_core::spec::validate(
                            algo,
                            u64::from(rl.requests_per_unit),
                            period,
                            None,
                            1,
                        )
                        .map_err(|e| err(e.to_string()))?;
                    }
                    let mut replaces = Vec::with_capacity(rl.replaces.len());
                    for r in rl.replaces {
                        if r.name.is_empty() {
                            return Err(err("should not have an empty replaces entry".into()));
                        }
                        if r.name == rl.name {
                            return Err(err(
                                "replaces should not contain name of same descriptor".into()
                            ));
                        }
                        replaces.push(r.name);
                    }
                    Some(Arc::new(Limit {
                        full_key: full_key.clone(),
                        requests_per_unit: rl.requests_per_unit,
                        unit,
                        unlimited: rl.unlimited,
                        shadow_mode: d.shadow_mode,
                        quota_mode: d.quota_mode,
                        name: rl.name,
                        replaces,
                        algo,
                    }))
                }
            };
            if d.share_threshold && !final_key.contains('*') {
                return Err(err(format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
                )));
            }
            if final_key.contains('*') {
                let parts = final_key.split('*').map(str::to_string).collect();
                self.wildcards.push((final_key.clone(), parts));
            }
            let mut node = Node {
                limit,
                share_threshold: d.share_threshold,
                ..Node::default()
            };
            node.load(file, &format!("{full_key}."), d.descriptors)?;
            self.children.insert(final_key, node);
        }
        Ok(())
    }
}

/// What a descriptor matched: the limit, and the value each entry counts under (its own, or
/// the wildcard pattern's for a `share_threshold` match).
#[derive(Debug, Clone, PartialEq)]
pub struct Match<'c> {
    pub limit: &'c Arc<Limit>,
    pub shared_values: Vec<Option<&'c str>>,
}

impl Config {
    /// Loads config files given as `(name, text)`; a domain may appear in one file only.
    pub fn from_files<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, text) in files {
            let root: YamlRoot = serde_yaml_ng::from_str(text).map_err(|e| ConfigError {
                file: name.to_string(),
                reason: format!("error loading config file: {e}"),
            })?;
            if root.domain.is_empty() {
                return Err(ConfigError {
                    file: name.to_string(),
                    reason: "config file cannot have empty domain".into(),
                });
            }
            if config.domains.contains_key(&root.domain) {
                return Err(ConfigError {
                    file: name.to_string(),
                    reason: format!("duplicate domain '{}' in config file", root.domain),
                });
            }
            let mut node = Node::default();
            node.load(name, &format!("{}.", root.domain), root.descriptors)?;
            config.domains.insert(root.domain, node);
        }
        Ok(config)
    }

    /// The config files of `dir`: every `*.yaml` and `*.yml`, in name order.
    pub fn files_of(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        let mut files: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Loads every config file of `dir`.
    pub fn load_dir(dir: &Path) -> Result<Config, ConfigError> {
        let io_err = |file: &Path, e: std::io::Error| ConfigError {
            file: file.display().to_string(),
            reason: e.to_string(),
        };
        let files = Config::files_of(dir).map_err(|e| io_err(dir, e))?;
        let mut texts = Vec::with_capacity(files.len());
        for f in &files {
            texts.push((
                f.display().to_string(),
                std::fs::read_to_string(f).map_err(|e| io_err(f, e))?,
            ));
        }
        Config::from_files(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())))
    }

    pub fn domains(&self) -> usize {
        self.domains.len()
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every rule name a call under this config may count under (the metrics' `rule` label):
    /// each limit's `full_key`, and each domain's override rule.
    pub fn rule_names(&self) -> std::collections::HashSet<String> {
        fn walk(node: &Node, out: &mut std::collections::HashSet<String>) {
            if let Some(l) = &node.limit {
                out.insert(l.full_key.clone());
            }
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = std::collections::HashSet::new();
        for (domain, node) in &self.domains {
            out.insert(override_rule(domain));
            walk(node, &mut out);
        }
        out
    }

    /// The limit a descriptor's entries (`(key, value)`) match in `domain`, if any.
    pub fn get_limit<'c>(&'c self, domain: &str, entries: &[(&str, &str)]) -> Option<Match<'c>> {
        let mut level = self.domains.get(domain)?;
        let mut shared_values = Vec::with_capacity(entries.len());
        for (i, (key, value)) in entries.iter().enumerate() {
            let key_value = format!("{key}_{value}");
            let mut shared = None;
            let mut next = level.children.get(&key_value);
            if next.is_none() {
                for (pattern, parts) in &level.wildcards {
                    if wildcard_match(parts, &key_value) {
                        next = level.children.get(pattern);
                        if next.is_some_and(|n| n.share_threshold) {
                            shared = pattern.strip_prefix(key).and_then(|p| p.strip_prefix('_'));
                        }
                        break;
                    }
                }
            }
            let next = next.or_else(|| level.children.get(*key))?;
            shared_values.push(shared);
            if i == entries.len() - 1 {
                return next.limit.as_ref().map(|limit| Match {
                    limit,
                    shared_values,
                });
            }
            if next.children.is_empty() {
                return None;
            }
            level = next;
        }
        None
    }
}

/// The rule an override (a request's own `limit`) in `domain` counts under.
pub fn override_rule(domain: &str) -> String {
    format!("{domain}.override")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit_of(c: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, String)> {
        c.get_limit(domain, entries)
            .map(|m| (m.limit.requests_per_unit, m.limit.full_key.clone()))
    }

    #[test]
    fn wildcards_match_any_run() {
        let split = |p: &str| p.split('*').map(str::to_string).collect::<Vec<_>>();
        assert!(wildcard_match(&split("k_value*"), "k_value1"));
        assert!(wildcard_match(&split("k_value*"), "k_value"));
        assert!(!wildcard_match(&split("k_value*"), "k_valu"));
        assert!(wildcard_match(
            &split("p_/api/*/action"),
            "p_/api/123/action"
        ));
        assert!(!wildcard_match(
            &split("p_/api/*/action"),
            "p_/api/123/other"
        ));
        assert!(wildcard_match(
            &split("r_/api/*/resource/*/action"),
            "r_/api/v1/resource/9/action"
        ));
        assert!(!wildcard_match(&split("r_a*b*a"), "r_a"));
        assert!(wildcard_match(&split("exact"), "exact"));
    }

    #[test]
    fn nested_defaults_and_depth() {
        let c = Config::from_files([(
            "m.yaml",
            "domain: messaging\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit:\n          unit: day\n          requests_per_unit: 5\n  - key: to_number\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
        )])
        .unwrap();
        assert_eq!(
            limit_of(
                &c,
                "messaging",
                &[("message_type", "marketing"), ("to_number", "1")]
            ),
            Some((5, "messaging.message_type_marketing.to_number".into()))
        );
        assert_eq!(
            limit_of(&c, "messaging", &[("to_number", "1")]),
            Some((100, "messaging.to_number".into()))
        );
        // The placeholder level has no limit of its own.
        assert_eq!(
            limit_of(&c, "messaging", &[("message_type", "marketing")]),
            None
        );
        // Deeper than the config: no limit.
        assert_eq!(
            limit_of(&c, "messaging", &[("to_number", "1"), ("x", "y")]),
            None
        );
        assert_eq!(limit_of(&c, "other", &[("to_number", "1")]), None);
    }

    #[test]
    fn bad_configs_say_why() {
        for (text, why) in [
            ("descriptors: []", "empty domain"),
            ("domain: d\ndescriptors:\n  - value: v", "empty key"),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1",
                "invalid rate limit unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second",
                "unlimited",
            ),
            ("domain: d\nbogus: 1", "unknown field"),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k",
                "duplicate descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: fastest",
                "unknown algorithm",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 20000\n      algorithm: log",
                "limit for ALGO LOG must be at most 10000",
            ),
        ] {
            let e = Config::from_files([("f.yaml", text)]).unwrap_err();
            assert!(e.reason.contains(why), "{text}: {e}");
        }
        let two = Config::from_files([("a.yaml", "domain: d"), ("b.yaml", "domain: d")]);
        assert!(two.unwrap_err().reason.contains("duplicate domain"));
    }

    #[test]
    fn the_algorithm_extension_picks_rl_check_s_algorithm() {
        let c = Config::from_files([(
            "a.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3, algorithm: token}\n  - key: b\n    rate_limit: {unit: Minute, requests_per_unit: 3}\n",
        )])
        .unwrap();
        let algo = |k| c.get_limit("d", &[(k, "x")]).unwrap().limit.algo;
        assert_eq!(algo("a"), Algo::Token);
        assert_eq!(algo("b"), Algo::Fixed);
    }
}
