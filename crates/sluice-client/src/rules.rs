//! Named rules as a gateway knows them: learned from the nodes (`RL.RULE LIST`, then
//! `RL.RULE GET` of each) at start and every [`REFRESH`], so that `RL.HIT` and `RL.HITS` get
//! each rule's own fail mode when the node cannot answer.
//!
//! # Invariants
//! - The book only ever holds what a node said; a node that cannot be asked leaves the last
//!   known rules in place (a node that is down is exactly when they are needed).
//! - A rule the sidecar has never heard of has no fail mode: its check answers `-TRYAGAIN`
//!   when the node cannot, rather than inventing a limit.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::{Client, Decision, FailMode, Limit, Source};
use parking_lot::RwLock;
use sluice_core::Algo;
use sluice_core::scope::{Scope, Selector};
use sluice_resp::value::Value;

/// How often the rules are asked for again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// One rule's gateway-side facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub limit: Limit,
    pub shadow: bool,
    /// `SCOPE`, `TIER`, `ROUTE`: which requests `RL.ALLOW` counts under it.
    pub selector: Selector,
}

#[derive(Debug, Default)]
pub struct RuleBook {
    rules: RwLock<HashMap<Vec<u8>, Rule>>,
}

impl RuleBook {
    pub fn get(&self, name: &[u8]) -> Option<Rule> {
        self.rules.read().get(name).cloned()
    }

    /// The checks `request` makes under the rules that apply to it (`RL.ALLOW` when the node
    /// cannot answer), sorted by rule name as the node sorts them.
    pub fn allow_checks(&self, request: &sluice_core::scope::Request<'_>) -> Vec<Check> {
        let rules = self.rules.read();
        let mut checks: Vec<Check> = rules
            .iter()
            .filter_map(|(name, rule)| {
                let subject = rule.selector.subject(request)?;
                Some((
                    bucket_key(name, subject),
                    name.clone(),
                    rule.limit,
                    rule.shadow,
                ))
            })
            .collect();
        checks.sort_by(|a, b| a.1.cmp(&b.1));
        checks
    }

    pub fn len(&self) -> usize {
        self.rules.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.read().is_empty()
    }

    /// Asks a node for every rule; keeps the old book if it cannot.
    pub async fn refresh(&self, client: &Client) {
        let Ok(Value::Array(names)) = client.command(b"", &[b"RL.RULE", b"LIST"]).await else {
            return;
        };
        let mut fresh = HashMap::new();
        for name in names {
            let Value::Bulk(name) = name else { continue };
            let got = client.command(&name, &[b"RL.RULE", b"GET", &name]).await;
            match got.ok().as_ref().and_then(rule_from) {
                Some(rule) => {
                    fresh.insert(name.to_vec(), rule);
                }
                // Asked and not answered: keep what was known of it.
                None => {
                    if let Some(old) = self.get(&name) {
                        fresh.insert(name.to_vec(), old);
                    }
                }
            }
        }
        *self.rules.write() = fresh;
    }
}

/// Keeps `book` current until the sidecar ends (its last strong handle goes).
pub async fn keep_learning(book: Weak<RuleBook>, client: Client) {
    loop {
        let Some(b) = book.upgrade() else { return };
        b.refresh(&client).await;
        drop(b);
        tokio::time::sleep(REFRESH).await;
    }
}

/// `RL.RULE GET`'s flat array of field/value pairs (RESP2) as a rule.
fn rule_from(v: &Value) -> Option<Rule> {
    let Value::Array(items) = v else { return None };
    let mut fields: HashMap<&[u8], &Value> = HashMap::new();
    for pair in items.chunks(2) {
        if let [Value::Bulk(k), v] = pair {
            fields.insert(k, v);
        }
    }
    let int = |k: &str| match fields.get(k.as_bytes()) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        Some(Value::Bulk(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    };
    let text = |k: &str| match fields.get(k.as_bytes()) {
        Some(Value::Bulk(b)) => Some(b.to_vec()),
        Some(Value::Simple(s)) => Some(s.as_bytes().to_vec()),
        _ => None,
    };
    let mut limit = Limit::new(
        int("limit")?,
        Duration::from_millis(int("period_ms")?.max(1)),
    );
    limit.burst = int("burst").filter(|&b| b > 0);
    limit.algo = text("algo")
        .and_then(|a| Algo::parse(&a))
        .unwrap_or(Algo::Token);
    limit.fail_mode = text("failmode")
        .and_then(|m| FailMode::parse(&m).ok())
        .unwrap_or_default();
    let shadow = int("shadow").is_some_and(|s| s != 0);
    let selector = text("spec").map(|t| selector_of(&t)).unwrap_or_default();
    Some(Rule {
        limit,
        shadow,
        selector,
    })
}

/// The `SCOPE`, `TIER` and `ROUTE` words of a rule's spec text.
fn selector_of(spec: &[u8]) -> Selector {
    let mut selector = Selector::default();
    let mut words = spec.split(|c| *c == b' ').filter(|w| !w.is_empty());
    while let Some(w) = words.next() {
        let text = |v: Option<&[u8]>| v.map(|v| String::from_utf8_lossy(v).into_owned());
        if w.eq_ignore_ascii_case(b"SCOPE") {
            selector.scope = words.next().and_then(Scope::parse);
        } else if w.eq_ignore_ascii_case(b"TIER") {
            selector.tier = text(words.next());
        } else if w.eq_ignore_ascii_case(b"ROUTE") {
            selector.route = text(words.next());
        }
    }
    selector
}

/// One check of a plan: bucket key, label in the reply, limit, shadow.
pub type Check = (Vec<u8>, Vec<u8>, Limit, bool);

/// The checks of one `RL.HIT` / `RL.HITS`, for when the node cannot answer.
#[derive(Debug)]
pub struct HitPlan {
    pub checks: Vec<Check>,
    pub cost: u64,
    /// `RL.HITS`: six fields, the sixth the label of the deciding check.
    pub multi: bool,
}

impl HitPlan {
    /// Each check's fail mode, combined as the node combines them: allowed only if every
    /// enforced check allows; the reply is the denial with the longest retry, else the allowed
    /// answer with the fewest remaining. (Fail mode `local` takes from each local bucket on its
    /// own: not all or nothing, as the node is.)
    pub fn fail(&self, client: &Client, unavailable: bool) -> (Decision, Vec<u8>) {
        let mut best: Option<(Decision, &[u8])> = None;
        for (key, label, limit, shadow) in &self.checks {
            let mut d = client.fail_mode(key, limit, self.cost, unavailable);
            if *shadow {
                d.allowed = true;
                d.retry_after_ms = -1;
            }
            if best.as_ref().is_none_or(|(b, _)| more_restrictive(&d, b)) {
                best = Some((d, label));
            }
        }
        match best {
            Some((d, label)) => (d, label.to_vec()),
            None => (
                Decision {
                    allowed: true,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: -1,
                    reset_after_ms: 0,
                    source: Source::FailOpen,
                },
                Vec::new(),
            ),
        }
    }
}

/// Whether `d` decides over `best` as the node picks among its buckets: a denial over an
/// allowance, the longer wait among denials, the fewest left among allowances.
pub fn more_restrictive(d: &Decision, best: &Decision) -> bool {
    match (best.allowed, d.allowed) {
        (true, false) => true,
        (false, false) => d.retry_after_ms > best.retry_after_ms,
        (true, true) => d.remaining < best.remaining,
        (false, true) => false,
    }
}

/// `name:subject`, the bucket a rule keeps for a subject.
pub fn bucket_key(name: &[u8], subject: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 1 + subject.len());
    key.extend_from_slice(name);
    key.push(b':');
    key.extend_from_slice(subject);
    key
}

/// Shares the book for a background task.
pub fn start(client: &Client) -> Arc<RuleBook> {
    let book = Arc::new(RuleBook::default());
    tokio::spawn(keep_learning(Arc::downgrade(&book), client.clone()));
    book
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_rule_is_read_from_rl_rule_get() {
        let b = |s: &str| Value::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        let v = Value::Array(vec![
            b("name"),
            b("api"),
            b("version"),
            Value::Int(3),
            b("limit"),
            Value::Int(5),
            b("period_ms"),
            Value::Int(60000),
            b("burst"),
            Value::Int(8),
            b("algo"),
            b("GCRA"),
            b("failmode"),
            b("closed"),
            b("shadow"),
            Value::Int(1),
            b("spec"),
            b(
                "LIMIT 5 PERIOD 1m BURST 8 ALGO GCRA FAILMODE closed SHADOW SCOPE ip TIER free ROUTE /api",
            ),
        ]);
        let r = rule_from(&v).unwrap();
        assert_eq!(r.limit.limit, 5);
        assert_eq!(r.limit.period, Duration::from_secs(60));
        assert_eq!(r.limit.burst, Some(8));
        assert_eq!(r.limit.algo, Algo::Gcra);
        assert_eq!(r.limit.fail_mode, FailMode::Closed);
        assert!(r.shadow);
        assert_eq!(r.selector.scope, Some(Scope::Ip));
        assert_eq!(r.selector.tier.as_deref(), Some("free"));
        assert_eq!(r.selector.route.as_deref(), Some("/api"));
        assert_eq!(rule_from(&Value::Nil), None);
    }
}
