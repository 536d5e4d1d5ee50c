//! `GET /v1/dashboard`: the JSON the live page polls ([`sluice_http::dashboard`]), each part
//! the commands it stands for, run as the request's user ([`Front::exec_as`]):
//! `rules_rates` is `RL.RATES`, `top_denied` and `top_allowed` `RL.TOP ... COUNT 10 WINDOW
//! 1m`, `rules` `RL.RULE LIST` and `GET` (with `RL.REGION INFO` for GLOBAL rules' shares),
//! `nodes` `INFO` (and `CLUSTER NODES` in a cluster). A part the user may not read is empty,
//! its `NOPERM` in `errors`; when every part is refused the answer is `403`.
//!
//! In a cluster the page shows the whole cluster: every other node is asked for its own `INFO`
//! (memory, replication), and every other primary for the `RL.RATES` and `RL.TOP` parts the
//! user could read here, merged with this node's as `sluice top` merges them
//! ([`sluice_client::top`]). They are asked over RESP as the cluster's peer user, as
//! [`super::forward`] forwards a check: the request's user was checked here first, on the same
//! commands. All nodes at once, each within [`ASK_DEADLINE`]; one that does not answer in time
//! shows why, and the merged parts name it under `errors`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use sluice_client::top::{self, TopEntry};
use sluice_http::dashboard::{
    Dashboard, INFO_ARGS, NodeRow, Rates, Rule, TOP_COUNT, TopKey, cluster_rows, fill, globals,
    regions_off, standalone_rows, top_args,
};
use sluice_http::reply::resp_error;
use sluice_http::rule::RuleJson;
use sluice_resp::Value;

use super::{Front, LoggedIn};
use crate::acl::User;
use crate::shared::Shared;

/// How long another node may take to answer: the page asks every second.
pub const ASK_DEADLINE: Duration = Duration::from_millis(800);

/// The parts read from every primary, one list per part: this node's first, then each other
/// primary's that answered. `None`: the user may not read that part.
#[derive(Debug, Default)]
struct Merged {
    rates: Option<Vec<top::Rates>>,
    denied: Option<Vec<Vec<TopEntry>>>,
    allowed: Option<Vec<Vec<TopEntry>>>,
}

pub async fn get(State(front): State<Arc<Front>>, Extension(user): LoggedIn) -> Response {
    let mut d = Dashboard {
        now_ms: front.now_ms(),
        ..Dashboard::default()
    };
    let mut merged = Merged::default();
    match exec(&front, &user, &["RL.RATES"]).and_then(|v| top::parse_rates(&v)) {
        Ok(r) => merged.rates = Some(vec![r]),
        Err(e) => d.fail("rules_rates", e),
    }
    match exec(&front, &user, &top_args("DENIED")).and_then(|v| top::parse_top(&v)) {
        Ok(t) => merged.denied = Some(vec![t]),
        Err(e) => d.fail("top_denied", e),
    }
    match exec(&front, &user, &top_args("ALLOWED")).and_then(|v| top::parse_top(&v)) {
        Ok(t) => merged.allowed = Some(vec![t]),
        Err(e) => d.fail("top_allowed", e),
    }
    rules(&front, &user, &mut d);
    nodes(&front, &user, &mut d, &mut merged).await;
    if let Some(rates) = &merged.rates {
        d.rules_rates = Rates::from(top::merge_rates(rates));
    }
    if let Some(denied) = &merged.denied {
        d.top_denied = TopKey::list(&top::merge_top(denied, TOP_COUNT));
    }
    if let Some(allowed) = &merged.allowed {
        d.top_allowed = TopKey::list(&top::merge_top(allowed, TOP_COUNT));
    }
    if d.all_refused() {
        let first = d.errors.values().next().cloned().unwrap_or_default();
        return resp_error(&first);
    }
    axum::Json(d).into_response()
}

/// One command as `user`; an error reply as `Err`.
fn exec(front: &Front, user: &Arc<User>, args: &[&str]) -> Result<Value, String> {
    match front.exec_as(user, args) {
        Value::Error(e) => Err(e),
        v => Ok(v),
    }
}

/// Every rule as `GET /rules/{id}` shows it, and GLOBAL rules' shares.
fn rules(front: &Front, user: &Arc<User>, d: &mut Dashboard) {
    let names = match exec(front, user, &["RL.RULE", "LIST"]) {
        Ok(Value::Array(names)) => names,
        Ok(_) => Vec::new(),
        Err(e) => return d.fail("rules", e),
    };
    let shares = match exec(front, user, &["RL.REGION", "INFO"]) {
        Ok(v) => globals(&v),
        Err(e) if regions_off(&e) => HashMap::new(),
        Err(e) => {
            d.fail("regions", e);
            HashMap::new()
        }
    };
    for name in names {
        let id = name.text();
        match exec(front, user, &["RL.RULE", "GET", &id]) {
            // Deleted since the list: gone from the page too.
            Ok(v) => d.rules.extend(RuleJson::from_get(&v).map(|rule| Rule {
                global: shares.get(&rule.id).cloned(),
                rule,
            })),
            Err(e) => d.fail("rules", e),
        }
    }
}

/// This node, or every node of the cluster with each one's own figures, and the other
/// primaries' parts into `merged`.
async fn nodes(front: &Front, user: &Arc<User>, d: &mut Dashboard, merged: &mut Merged) {
    let info = match exec(front, user, &INFO_ARGS) {
        Ok(v) => v.text(),
        Err(e) => return d.fail("nodes", e),
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
    let mut rows: Vec<NodeRow> = match exec(front, user, &["CLUSTER", "NODES"]) {
        Ok(v) => cluster_rows(&v.text()),
        Err(e) => return d.fail("nodes", e),
    };
    let wants = Wants {
        rates: merged.rates.is_some(),
        denied: merged.denied.is_some(),
        allowed: merged.allowed.is_some(),
    };
    let mut infos = HashMap::new();
    let mut asks = tokio::task::JoinSet::new();
    for row in &rows {
        if row.myself {
            infos.insert(row.addr.clone(), Ok(info.clone()));
            continue;
        }
        // Checks run on primaries only.
        let wants = if row.role == "primary" && !row.slots.is_empty() {
            wants
        } else {
            Wants::default()
        };
        let (shared, addr) = (front.shared.clone(), row.addr.clone());
        asks.spawn(async move {
            let answer = tokio::time::timeout(ASK_DEADLINE, ask(&shared, &addr, wants))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {ASK_DEADLINE:?}")));
            (addr, answer)
        });
    }
    let mut primaries = 1;
    while let Some(asked) = asks.join_next().await {
        let Ok((addr, answer)) = asked else { continue };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                for part in wants.parts() {
                    d.fail(part, format!("{e} ({addr})"));
                }
                infos.insert(addr, Err(e));
                continue;
            }
        };
        let asked = [
            answer.rates.is_some(),
            answer.denied.is_some(),
            answer.allowed.is_some(),
        ];
        primaries += usize::from(asked.contains(&true));
        let took = [
            ("rules_rates", answer.rates.map(|r| merged.push_rates(r))),
            (
                "top_denied",
                answer.denied.map(|t| merged.push_top(t, true)),
            ),
            (
                "top_allowed",
                answer.allowed.map(|t| merged.push_top(t, false)),
            ),
        ];
        for (part, pushed) in took {
            if let Some(Err(e)) = pushed {
                d.fail(part, format!("{e} ({addr})"));
            }
        }
        infos.insert(addr, Ok(answer.info));
    }
    fill(&mut rows, &infos);
    d.nodes = rows;
    if wants.parts().next().is_some() {
        d.notes.push(format!(
            "Rates and top keys: {primaries} primaries' RL.RATES and RL.TOP, merged."
        ));
    }
}

/// Which of the merged parts to ask another primary for.
#[derive(Debug, Default, Clone, Copy)]
struct Wants {
    rates: bool,
    denied: bool,
    allowed: bool,
}

impl Wants {
    fn parts(self) -> impl Iterator<Item = &'static str> {
        [
            ("rules_rates", self.rates),
            ("top_denied", self.denied),
            ("top_allowed", self.allowed),
        ]
        .into_iter()
        .filter_map(|(part, wanted)| wanted.then_some(part))
    }
}

/// What another node answered: its `INFO`, and the parts asked of it.
#[derive(Debug)]
struct Answer {
    info: String,
    rates: Option<Result<top::Rates, String>>,
    denied: Option<Result<Vec<TopEntry>, String>>,
    allowed: Option<Result<Vec<TopEntry>, String>>,
}

impl Merged {
    fn push_rates(&mut self, r: Result<top::Rates, String>) -> Result<(), String> {
        self.rates.get_or_insert_with(Vec::new).push(r?);
        Ok(())
    }

    fn push_top(&mut self, t: Result<Vec<TopEntry>, String>, denied: bool) -> Result<(), String> {
        let into = if denied {
            &mut self.denied
        } else {
            &mut self.allowed
        };
        into.get_or_insert_with(Vec::new).push(t?);
        Ok(())
    }
}

/// `INFO` of the node at `addr`, and the parts `wants` names, asked as the cluster's peer user
/// on one connection.
async fn ask(shared: &Shared, addr: &str, wants: Wants) -> Result<Answer, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok().filter(|p| *p != 0)?)))
        .ok_or_else(|| format!("no address ({addr})"))?;
    let mut peer = crate::cluster::adopt::connect_peer(shared, host, port).await?;
    let mut call = async |args: &[&str]| -> Result<Value, String> {
        let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        match peer.call(&words).await? {
            Value::Error(e) => Err(e),
            v => Ok(v),
        }
    };
    let info = call(&INFO_ARGS).await?.text();
    let mut answer = Answer {
        info,
        rates: None,
        denied: None,
        allowed: None,
    };
    if wants.rates {
        answer.rates = Some(call(&["RL.RATES"]).await.and_then(|v| top::parse_rates(&v)));
    }
    if wants.denied {
        let t = call(&top_args("DENIED")).await;
        answer.denied = Some(t.and_then(|v| top::parse_top(&v)));
    }
    if wants.allowed {
        let t = call(&top_args("ALLOWED")).await;
        answer.allowed = Some(t.and_then(|v| top::parse_top(&v)));
    }
    Ok(answer)
}
