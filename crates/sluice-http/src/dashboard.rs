//! `/dashboard`: the operator's live page, and the pieces of the JSON it polls
//! (`GET /v1/dashboard`) that the node and the sidecar assemble alike.
//!
//! The page ([`PAGE`], `dashboard.html`) is one file with its CSS and JS inline: no CDN, no
//! build step, usable with no internet. It holds no data, so it is served without a login;
//! it asks `/v1/dashboard` every second with the password it is given (a form field or the
//! URL fragment, `#password=...`, sent as `Authorization: Bearer`; `#user=..&password=..`
//! as Basic), and that route logs in as every other route does.
//!
//! # The JSON ([`Dashboard`])
//! - `rules_rates`: `RL.RATES` (per rule, allowed, denied and shadow-denied checks in each
//!   10 s step of the last 15 minutes, oldest first).
//! - `top_denied`, `top_allowed`: `RL.TOP DENIED|ALLOWED COUNT 10 WINDOW 1m`.
//! - `rules`: each rule as `GET /rules` shows it, with, for a GLOBAL rule, each region's
//!   share (`RL.REGION INFO`).
//! - `nodes`: in a cluster every node of `CLUSTER NODES` with its memory and replication
//!   figures from its `INFO`; out of a cluster the node itself (and its replicas as its
//!   `INFO replication` lists them).
//! - `errors`: a part that could not be read, by part name, with the reason (a `NOPERM`,
//!   a node that did not answer); the part is then empty. `notes`: what a figure means.
//!
//! The node runs each part as the logged-in user through its command table (and, in a
//! cluster, asks the other nodes and merges); the sidecar asks every primary over its upstream
//! connection and merges. Both read the replies with the functions here, which do no I/O.

use std::collections::{BTreeMap, HashMap};

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluice_resp::Value;

use crate::rule::RuleJson;

/// The page: HTML with its CSS and JS inline.
pub const PAGE: &str = include_str!("dashboard.html");

/// How many keys each top list shows.
pub const TOP_COUNT: usize = 10;

/// The `RL.TOP` words of a top list of the last minute.
pub fn top_args(outcome: &'static str) -> [&'static str; 6] {
    ["RL.TOP", outcome, "COUNT", "10", "WINDOW", "1m"]
}

/// The `INFO` sections a node row is filled from.
pub const INFO_ARGS: [&str; 4] = ["INFO", "server", "memory", "replication"];

/// `GET /dashboard`. The page may only talk to its own origin (`connect-src 'self'`) and
/// load nothing else: a key shown on it is text, never markup.
pub async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
        .into_response()
}

/// The body of `GET /v1/dashboard`.
#[derive(Debug, Default, Serialize)]
pub struct Dashboard {
    /// Unix ms on the answering server's clock, when the parts were read.
    pub now_ms: i64,
    pub rules_rates: Rates,
    pub top_denied: Vec<TopKey>,
    pub top_allowed: Vec<TopKey>,
    pub rules: Vec<Rule>,
    pub nodes: Vec<NodeRow>,
    /// A part that could not be read (`rules_rates`, `top_denied`, `top_allowed`, `rules`,
    /// `regions`, `nodes`, or a node's address), and why.
    pub errors: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

impl Dashboard {
    /// Records that `part` could not be read.
    pub fn fail(&mut self, part: &str, why: impl Into<String>) {
        self.errors.insert(part.to_owned(), why.into());
    }

    /// Whether every part was refused by the ACL: the request gets `403` then, not an empty
    /// page that looks like a quiet server.
    pub fn all_refused(&self) -> bool {
        let parts = ["rules_rates", "top_denied", "top_allowed", "rules", "nodes"];
        parts
            .iter()
            .all(|p| self.errors.get(*p).is_some_and(|e| e.starts_with("NOPERM")))
    }
}

/// `RL.RATES`: checks per 10 s step, oldest first; the newest step is the one in progress.
#[derive(Debug, Default, Serialize)]
pub struct Rates {
    pub step_ms: u64,
    /// Unix ms of the end of the newest step.
    pub end_ms: u64,
    pub rules: Vec<RuleRates>,
}

/// One rule's steps (`""`: checks under no rule).
#[derive(Debug, Default, Serialize)]
pub struct RuleRates {
    pub rule: String,
    pub allowed: Vec<u64>,
    pub denied: Vec<u64>,
    pub shadow_denied: Vec<u64>,
}

/// One key of a top list.
#[derive(Debug, Default, Serialize)]
pub struct TopKey {
    /// The key as text (bytes that are not UTF-8 replaced); keys over 128 bytes end in `...`.
    pub key: String,
    pub rule: String,
    /// Estimated checks of that outcome in the last minute: the true count is within
    /// `[count - error, count]` (denials; allowed checks are sampled, so that bound is
    /// approximate).
    pub count: u64,
    pub error: u64,
    pub last_seen_ms: u64,
}

impl TopKey {
    pub fn new(key: &[u8], rule: &str, count: u64, error: u64, last_seen_ms: u64) -> TopKey {
        TopKey {
            key: String::from_utf8_lossy(key).into_owned(),
            rule: rule.to_owned(),
            count,
            error,
            last_seen_ms,
        }
    }

    /// A top list (`RL.TOP`'s, or one merged over nodes) as the page's JSON.
    pub fn list(keys: &[sluice_client::top::TopEntry]) -> Vec<TopKey> {
        keys.iter()
            .map(|k| TopKey::new(&k.key, &k.rule, k.count, k.error, k.last_seen_ms))
            .collect()
    }
}

impl From<sluice_client::top::Rates> for Rates {
    /// `RL.RATES` (one node's, or merged over nodes) as the page's JSON.
    fn from(r: sluice_client::top::Rates) -> Rates {
        Rates {
            step_ms: r.step_ms,
            end_ms: r.end_ms,
            rules: (r.rules.into_iter())
                .map(|r| RuleRates {
                    rule: r.name,
                    allowed: r.allowed,
                    denied: r.denied,
                    shadow_denied: r.shadow,
                })
                .collect(),
        }
    }
}

/// A rule as `GET /rules` shows it, and its regions' shares when it is GLOBAL.
#[derive(Debug, Serialize)]
pub struct Rule {
    pub rule: RuleJson,
    pub global: Option<Global>,
}

/// A GLOBAL rule as `RL.REGION INFO` shows it on the answering node's region.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Global {
    /// The answering node's region.
    pub region: String,
    /// The share of the limit enforced in that region now (0 to 1).
    pub share: f64,
    /// The regional limit enforced now.
    pub limit: u64,
    /// That region's requests per second, smoothed.
    pub demand: f64,
    /// Every region that publishes its share.
    pub regions: Vec<RegionShare>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RegionShare {
    pub region: String,
    pub share: f64,
    pub demand: f64,
}

/// The field/value pairs of a RESP3 map or a RESP2 flat array.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?.text(), p.get(1)?)))
            .collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (k.text(), v)).collect(),
        _ => Vec::new(),
    }
}

fn field<'v>(pairs: &[(String, &'v Value)], name: &str) -> Option<&'v Value> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

fn number(v: Option<&Value>) -> f64 {
    v.and_then(|v| match v {
        Value::Int(n) => Some(*n as f64),
        v => v.text().parse().ok(),
    })
    .unwrap_or(0.0)
}

/// The GLOBAL rules of an `RL.REGION INFO` reply, by name.
pub fn globals(reply: &Value) -> HashMap<String, Global> {
    let top = pairs(reply);
    let region = field(&top, "region").map(Value::text).unwrap_or_default();
    let Some(Value::Array(rules)) = field(&top, "rules") else {
        return HashMap::new();
    };
    rules
        .iter()
        .filter_map(|r| {
            let r = pairs(r);
            let name = field(&r, "rule")?.text();
            let regions = match field(&r, "regions") {
                Some(Value::Array(rs)) => rs
                    .iter()
                    .map(|p| {
                        let p = pairs(p);
                        RegionShare {
                            region: field(&p, "region").map(Value::text).unwrap_or_default(),
                            share: number(field(&p, "share")),
                            demand: number(field(&p, "demand")),
                        }
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let global = Global {
                region: region.clone(),
                share: number(field(&r, "share")),
                limit: number(field(&r, "limit")) as u64,
                demand: number(field(&r, "demand")),
                regions,
            };
            Some((name, global))
        })
        .collect()
}

/// Whether an `RL.REGION INFO` error only says the node runs without regions.
pub fn regions_off(error: &str) -> bool {
    error.contains("regions are off")
}

/// One node of the nodes table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeRow {
    /// The cluster node id (out of a cluster, the server's `run_id`; empty for a replica
    /// known only from its primary's `INFO`).
    pub id: String,
    /// `host:port`.
    pub addr: String,
    /// `primary` or `replica`.
    pub role: String,
    /// A replica's primary's id (in a cluster) or address.
    pub primary: Option<String>,
    /// The slot ranges served (`0-5460 5462`); empty for a replica or out of a cluster.
    pub slots: String,
    /// The node that answered this request.
    pub myself: bool,
    /// `used_memory` from the node's own `INFO`.
    pub used_memory: Option<u64>,
    /// The replication offset: a primary's `master_repl_offset`, a replica's
    /// `slave_repl_offset` (or the last its primary heard of).
    pub repl_offset: Option<u64>,
    /// How far a replica is behind its primary's stream, in bytes.
    pub lag_bytes: Option<u64>,
    /// Seconds since a replica's primary last heard from it (or, from the replica's side,
    /// since it last heard from its primary).
    pub lag_s: Option<u64>,
    /// A replica's link to its primary: `up` or `down`.
    pub link: Option<String>,
    /// Why this node's figures are missing.
    pub error: Option<String>,
}

/// `INFO`'s `field:value` lines.
pub fn info_fields(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

fn int_field(info: &HashMap<&str, &str>, name: &str) -> Option<u64> {
    info.get(name)?.parse().ok()
}

/// A replica as its primary's `INFO replication` lists it
/// (`slaveN:ip=..,port=..,state=..,offset=..,lag=..`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    addr: String,
    offset: Option<u64>,
    lag_s: Option<u64>,
}

fn listed_replicas(info: &HashMap<&str, &str>) -> Vec<Listed> {
    let mut out: Vec<(u64, Listed)> = info
        .iter()
        .filter_map(|(k, v)| {
            let n: u64 = k.strip_prefix("slave")?.parse().ok()?;
            let kv: HashMap<&str, &str> = v.split(',').filter_map(|p| p.split_once('=')).collect();
            let listed = Listed {
                addr: format!("{}:{}", kv.get("ip")?, kv.get("port")?),
                offset: kv.get("offset").and_then(|o| o.parse().ok()),
                lag_s: kv.get("lag").and_then(|o| o.parse().ok()),
            };
            Some((n, listed))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out.into_iter().map(|(_, l)| l).collect()
}

/// The rows of a `CLUSTER NODES` text, their figures not yet filled ([`fill`]).
pub fn cluster_rows(text: &str) -> Vec<NodeRow> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split(' ');
            let id = w.next()?.to_owned();
            let addr = w.next()?.split('@').next()?.to_owned();
            let flags = w.next()?;
            let primary = w.next()?;
            let slots: Vec<&str> = w.skip(4).collect();
            let replica = flags.split(',').any(|f| f == "slave" || f == "replica");
            Some(NodeRow {
                id,
                // A node that serves no slots yet shows `:0`.
                addr,
                role: if replica { "replica" } else { "primary" }.into(),
                primary: (replica && primary != "-").then(|| primary.to_owned()),
                slots: slots.join(" "),
                myself: flags.split(',').any(|f| f == "myself"),
                ..NodeRow::default()
            })
        })
        .collect()
}

/// Fills each row's figures from its node's `INFO` (`infos`, by address; an `Err` says why
/// there is none). A replica without an `INFO` of its own gets what its primary lists of it.
pub fn fill(rows: &mut [NodeRow], infos: &HashMap<String, Result<String, String>>) {
    let parsed: HashMap<&str, HashMap<&str, &str>> = infos
        .iter()
        .filter_map(|(a, i)| Some((a.as_str(), info_fields(i.as_ref().ok()?))))
        .collect();
    for row in rows.iter_mut() {
        match infos.get(&row.addr) {
            Some(Err(e)) => row.error = Some(e.clone()),
            None if !row.myself => row.error = Some("not asked".into()),
            _ => {}
        }
        let Some(info) = parsed.get(row.addr.as_str()) else {
            continue;
        };
        row.used_memory = int_field(info, "used_memory");
        if row.role == "replica" {
            row.repl_offset = int_field(info, "slave_repl_offset");
            row.link = info.get("master_link_status").map(|s| (*s).to_owned());
            // -1 while the link is down: no "last heard" then.
            row.lag_s = int_field(info, "master_last_io_seconds_ago");
        } else {
            row.repl_offset = int_field(info, "master_repl_offset");
        }
    }
    // A replica's lag against its primary's offset, and what the primary lists of it.
    let primaries: Vec<(String, String, Option<u64>)> = rows
        .iter()
        .filter(|r| r.role == "primary")
        .map(|r| (r.id.clone(), r.addr.clone(), r.repl_offset))
        .collect();
    for row in rows.iter_mut().filter(|r| r.role == "replica") {
        let Some((_, addr, offset)) = primaries
            .iter()
            .find(|(id, addr, _)| row.primary.as_deref().is_some_and(|p| p == id || p == addr))
        else {
            continue;
        };
        let listed = parsed
            .get(addr.as_str())
            .map(listed_replicas)
            .unwrap_or_default()
            .into_iter()
            .find(|l| l.addr == row.addr);
        if let Some(l) = listed {
            row.repl_offset = row.repl_offset.or(l.offset);
            row.lag_s = l.lag_s.or(row.lag_s);
        }
        if let (Some(p), Some(r)) = (offset, row.repl_offset) {
            row.lag_bytes = Some(p.saturating_sub(r));
        }
    }
}

/// Out of a cluster: the node at `addr` from its `INFO`, and the replicas it lists.
pub fn standalone_rows(addr: &str, info: &str) -> Vec<NodeRow> {
    let fields = info_fields(info);
    let replica = fields.get("role") == Some(&"slave");
    let primary = replica.then(|| {
        format!(
            "{}:{}",
            fields.get("master_host").unwrap_or(&""),
            fields.get("master_port").unwrap_or(&"")
        )
    });
    let mut rows = vec![NodeRow {
        id: fields
            .get("run_id")
            .map(|s| (*s).to_owned())
            .unwrap_or_default(),
        addr: addr.to_owned(),
        role: if replica { "replica" } else { "primary" }.into(),
        primary,
        myself: true,
        ..NodeRow::default()
    }];
    rows.extend(listed_replicas(&fields).into_iter().map(|l| NodeRow {
        addr: l.addr,
        role: "replica".into(),
        primary: Some(addr.to_owned()),
        ..NodeRow::default()
    }));
    let infos = HashMap::from([(addr.to_owned(), Ok(info.to_owned()))]);
    fill(&mut rows, &infos);
    for r in rows.iter_mut().filter(|r| !r.myself) {
        // Known from its primary's INFO only: its memory is its own to tell.
        r.error = None;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
    }

    const NODES: &str = "\
aaa 127.0.0.1:7001@17001 myself,master - 0 0 3 connected 0-8191
bbb 127.0.0.1:7002@17002 master - 0 0 3 connected 8192-16383
ccc 127.0.0.1:7003@17003 slave aaa 0 0 3 connected
";

    #[test]
    fn cluster_nodes_become_rows_with_their_slots_and_roles() {
        let rows = cluster_rows(NODES);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].id.as_str(), rows[0].addr.as_str(), rows[0].myself),
            ("aaa", "127.0.0.1:7001", true)
        );
        assert_eq!(
            (rows[1].slots.as_str(), rows[1].role.as_str()),
            ("8192-16383", "primary")
        );
        assert_eq!(
            (rows[2].role.as_str(), rows[2].primary.as_deref()),
            ("replica", Some("aaa"))
        );
    }

    #[test]
    fn a_replica_lags_by_its_primary_offset_less_its_own() {
        let mut rows = cluster_rows(NODES);
        let infos = HashMap::from([
            (
                "127.0.0.1:7001".to_owned(),
                Ok("# Memory\r\nused_memory:1000\r\n# Replication\r\nrole:master\r\nslave0:ip=127.0.0.1,port=7003,state=online,offset=900,lag=1\r\nmaster_repl_offset:1500\r\n".to_owned()),
            ),
            ("127.0.0.1:7002".to_owned(), Err("timed out".to_owned())),
            (
                "127.0.0.1:7003".to_owned(),
                Ok("used_memory:700\r\nrole:slave\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:0\r\nslave_repl_offset:1400\r\n".to_owned()),
            ),
        ]);
        fill(&mut rows, &infos);
        assert_eq!(
            (rows[0].used_memory, rows[0].repl_offset),
            (Some(1000), Some(1500))
        );
        assert_eq!(rows[1].error.as_deref(), Some("timed out"));
        let r = &rows[2];
        assert_eq!((r.used_memory, r.repl_offset), (Some(700), Some(1400)));
        // Its own offset first; the ack age its primary saw.
        assert_eq!((r.lag_bytes, r.lag_s), (Some(100), Some(1)));
        assert_eq!(r.link.as_deref(), Some("up"));
        // Unreachable itself: what its primary lists.
        let mut rows = cluster_rows(NODES);
        let mut infos = infos;
        infos.insert("127.0.0.1:7003".into(), Err("refused".into()));
        fill(&mut rows, &infos);
        assert_eq!(
            (rows[2].repl_offset, rows[2].lag_bytes, rows[2].used_memory),
            (Some(900), Some(600), None)
        );
    }

    #[test]
    fn out_of_a_cluster_the_node_and_the_replicas_it_lists() {
        let info = "run_id:abc\r\nused_memory:5\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=10.0.0.2,port=6380,state=online,offset=40,lag=0\r\nmaster_repl_offset:50\r\n";
        let rows = standalone_rows("127.0.0.1:6379", info);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].id.as_str(), rows[0].used_memory, rows[0].myself),
            ("abc", Some(5), true)
        );
        assert_eq!(
            (
                rows[1].addr.as_str(),
                rows[1].lag_bytes,
                rows[1].error.as_deref()
            ),
            ("10.0.0.2:6380", Some(10), None)
        );
    }

    #[test]
    fn global_rules_carry_each_regions_share() {
        let reply = Value::Array(vec![
            bulk("region"),
            bulk("eu"),
            bulk("rules"),
            Value::Array(vec![Value::Array(vec![
                bulk("rule"),
                bulk("api"),
                bulk("share"),
                bulk("0.250000"),
                bulk("limit"),
                Value::Int(25),
                bulk("demand"),
                bulk("3.500"),
                bulk("regions"),
                Value::Array(vec![Value::Array(vec![
                    bulk("region"),
                    bulk("us"),
                    bulk("share"),
                    bulk("0.750000"),
                    bulk("demand"),
                    bulk("10.000"),
                ])]),
            ])]),
        ]);
        let g = &globals(&reply)["api"];
        assert_eq!((g.region.as_str(), g.share, g.limit), ("eu", 0.25, 25));
        assert_eq!(g.regions[0].region, "us");
        assert_eq!(g.regions[0].share, 0.75);
        assert!(globals(&Value::Error("ERR regions are off".into())).is_empty());
    }

    #[test]
    fn every_part_refused_is_a_refusal() {
        let mut d = Dashboard::default();
        for p in ["rules_rates", "top_denied", "top_allowed", "rules"] {
            d.fail(p, "NOPERM no");
        }
        assert!(!d.all_refused());
        d.fail("nodes", "NOPERM no");
        assert!(d.all_refused());
    }
}
