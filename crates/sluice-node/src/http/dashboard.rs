//! `GET /v1/dashboard`: the JSON the live page polls ([`sluice_http::dashboard`]), each part
//! the commands it stands for, run as the request's user ([`Front::exec_as`]):
//! `rules_rates` is `RL.RATES`, `top_denied` and `top_allowed` `RL.TOP ... COUNT 10 WINDOW
//! 1m`, `rules` `RL.RULE LIST` and `GET` (with `RL.REGION INFO` for GLOBAL rules' shares),
//! `nodes` `INFO` (and `CLUSTER NODES` in a cluster). A part the user may not read is empty,
//! its `NOPERM` in `errors`; when every part is refused the answer is `403`.
//!
//! In a cluster each other node's `used_memory` and replication figures come from that node's
//! own `INFO`, asked over RESP as the cluster's peer user (as [`super::forward`] forwards a
//! check), all at once, each within [`ASK_DEADLINE`]; a node that does not answer in time
//! shows why. The request's user was checked here first: it ran `INFO` and `CLUSTER NODES`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use sluice_client::top::{self, TopEntry};
use sluice_http::dashboard::{
    Dashboard, INFO_ARGS, NodeRow, Rates, Rule, RuleRates, TopKey, cluster_rows, fill, globals,
    regions_off, standalone_rows, top_args,
};
use sluice_http::reply::resp_error;
use sluice_http::rule::RuleJson;
use sluice_resp::Value;

use super::{Front, LoggedIn};
use crate::acl::User;
use crate::shared::Shared;

/// How long another node's `INFO` may take: the page asks every second.
pub const ASK_DEADLINE: Duration = Duration::from_millis(800);

pub async fn get(State(front): State<Arc<Front>>, Extension(user): LoggedIn) -> Response {
    let mut d = Dashboard {
        now_ms: front.now_ms(),
        ..Dashboard::default()
    };
    match front.exec_as(&user, &["RL.RATES"]) {
        Value::Error(e) => d.fail("rules_rates", e),
        v => match top::parse_rates(&v) {
            Ok(r) => d.rules_rates = rates_json(r),
            Err(e) => d.fail("rules_rates", e),
        },
    }
    for (part, outcome) in [("top_denied", "DENIED"), ("top_allowed", "ALLOWED")] {
        let keys = match front.exec_as(&user, &top_args(outcome)) {
            Value::Error(e) => Err(e),
            v => top::parse_top(&v),
        };
        match keys {
            Ok(keys) if part == "top_denied" => d.top_denied = top_json(&keys),
            Ok(keys) => d.top_allowed = top_json(&keys),
            Err(e) => d.fail(part, e),
        }
    }
    rules(&front, &user, &mut d);
    nodes(&front, &user, &mut d).await;
    if d.all_refused() {
        let first = d.errors.values().next().cloned().unwrap_or_default();
        return resp_error(&first);
    }
    axum::Json(d).into_response()
}

/// `RL.RATES` as the page's JSON.
pub fn rates_json(r: top::Rates) -> Rates {
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

/// A top list as the page's JSON.
pub fn top_json(keys: &[TopEntry]) -> Vec<TopKey> {
    keys.iter()
        .map(|k| TopKey::new(&k.key, &k.rule, k.count, k.error, k.last_seen_ms))
        .collect()
}

/// Every rule as `GET /rules/{id}` shows it, and GLOBAL rules' shares.
fn rules(front: &Front, user: &Arc<User>, d: &mut Dashboard) {
    let names = match front.exec_as(user, &["RL.RULE", "LIST"]) {
        Value::Array(names) => names,
        Value::Error(e) => return d.fail("rules", e),
        _ => Vec::new(),
    };
    let shares = match front.exec_as(user, &["RL.REGION", "INFO"]) {
        Value::Error(e) if regions_off(&e) => HashMap::new(),
        Value::Error(e) => {
            d.fail("regions", e);
            HashMap::new()
        }
        v => globals(&v),
    };
    for name in names {
        let id = name.text();
        match front.exec_as(user, &["RL.RULE", "GET", &id]) {
            Value::Error(e) => d.fail("rules", e),
            // Deleted since the list: gone from the page too.
            v => d.rules.extend(RuleJson::from_get(&v).map(|rule| Rule {
                global: shares.get(&rule.id).cloned(),
                rule,
            })),
        }
    }
}

/// This node, or every node of the cluster with each one's own figures.
async fn nodes(front: &Front, user: &Arc<User>, d: &mut Dashboard) {
    let info = match front.exec_as(user, &INFO_ARGS) {
        Value::Error(e) => return d.fail("nodes", e),
        v => v.text(),
    };
    if front.shared.cluster.is_none() {
        d.nodes = standalone_rows(&front.shared.local_addr.to_string(), &info);
        d.notes.push(
            "Out of a cluster: this node, and the replicas its INFO lists (their memory is \
             not asked)."
                .into(),
        );
        return;
    }
    let mut rows: Vec<NodeRow> = match front.exec_as(user, &["CLUSTER", "NODES"]) {
        Value::Error(e) => return d.fail("nodes", e),
        v => cluster_rows(&v.text()),
    };
    let mut infos = HashMap::new();
    let mut asks = tokio::task::JoinSet::new();
    for row in &rows {
        if row.myself {
            infos.insert(row.addr.clone(), Ok(info.clone()));
        } else {
            let (shared, addr) = (front.shared.clone(), row.addr.clone());
            asks.spawn(async move {
                let answer = tokio::time::timeout(ASK_DEADLINE, ask_info(&shared, &addr))
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {ASK_DEADLINE:?}")));
                (addr, answer)
            });
        }
    }
    while let Some(asked) = asks.join_next().await {
        if let Ok((addr, answer)) = asked {
            infos.insert(addr, answer);
        }
    }
    fill(&mut rows, &infos);
    d.nodes = rows;
}

/// `INFO server memory replication` of the node at `addr`, asked as the cluster's peer user.
async fn ask_info(shared: &Shared, addr: &str) -> Result<String, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok().filter(|p| *p != 0)?)))
        .ok_or_else(|| format!("no address ({addr})"))?;
    let mut peer = crate::cluster::adopt::connect_peer(shared, host, port).await?;
    let args: Vec<&[u8]> = INFO_ARGS.iter().map(|a| a.as_bytes()).collect();
    match peer.call(&args).await? {
        Value::Error(e) => Err(e),
        v => Ok(v.text()),
    }
}
