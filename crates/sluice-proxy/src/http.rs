//! `sluice proxy --http-port P`: the node's HTTP API on the sidecar (see `sluice_http`), with
//! each rule's fail mode when the node cannot answer.
//!
//! - `POST /v1/check` with a key body is `RL.CHECK` through the gateway library (blocked cache,
//!   `--fail-mode`); with a request body, and `GET /v1/auth`, it is `RL.ALLOW` forwarded to a
//!   node. When no node answers, the rules that apply to the request (as the sidecar last
//!   learned them, with their `SCOPE`, `TIER` and `ROUTE`) each give their fail mode, combined
//!   as the node combines them; a request no known rule applies to is allowed with no headers.
//! - `/rules` reads and writes are forwarded as `RL.RULE` to the node that owns the rule's name.
//! - `/healthz`: alive. `/readyz`: a node answers `PING`.
//! - `GET /v1/dashboard`: the live page's JSON (`sluice_http::dashboard`), `RL.RATES` and
//!   `RL.TOP` of every primary merged; `GET /dashboard`: the page, which holds no data.
//!
//! With `--requirepass`, every route but `/healthz` wants the sidecar's password, in the
//! node's credential scheme ([`sluice_http::auth`]): `Authorization: Bearer <password>` or
//! `Basic base64(default:<password>)`. The sidecar has no ACL users of its own: the password is
//! its only user, and what a request may then do is what the sidecar's own connection to the
//! node may (its `--upstream-user`/password's ACL on the node).
//!
//! In a cluster the request form's buckets may span slots: the library splits the check by
//! slot, dry first (see `sluice_client::allow` for the race that leaves).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use sluice_client::{AllowRequest, Decision};
use sluice_http::body::{
    Allow, SubjectHeaders, check_args, from_headers, json_object, key_window, parse_query,
    prefixed_endpoint, rollback_body, rule_words,
};
use sluice_http::reply::{error, resp_error, respond, verdict_of};
use sluice_http::rule::RuleJson;
use sluice_http::trust::Peer;
use sluice_http::{Refusal, Verdict};
use sluice_resp::Value;

use crate::Proxy;

/// The sidecar's HTTP state.
#[derive(Debug)]
pub(crate) struct Front {
    pub proxy: Arc<Proxy>,
    pub subjects: SubjectHeaders,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Serves the HTTP API on `listener` until the sidecar ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener, front: Arc<Front>) {
    let listener = sluice_http::guard::Guarded::new(
        listener,
        sluice_http::guard::MAX_CONNECTIONS,
        sluice_http::guard::IDLE,
    );
    sluice_http::serve::serve(listener, router(front), std::future::pending()).await;
}

fn router(front: Arc<Front>) -> Router {
    let guarded = Router::new()
        .route("/v1/check", post(post_check))
        .route("/v1/auth", get(get_auth))
        .route("/v1/auth/{*endpoint}", get(get_auth_prefixed))
        .route("/rules", get(list))
        .route("/rules/{id}", get(get_one).put(put).delete(delete))
        .route("/rules/{id}/history", get(history))
        .route("/rules/{id}/rollback", post(rollback))
        .route("/v1/dashboard", get(dashboard))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(sluice_http::openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            front.clone(),
            require_password,
        ));
    // The page holds no data: it gives the password when it asks `/v1/dashboard`.
    sluice_http::routes(guarded)
        .route("/dashboard", get(sluice_http::dashboard::page))
        .with_state(front)
}

async fn require_password(State(front): State<Arc<Front>>, req: Request, next: Next) -> Response {
    match sluice_http::authorized(req.headers(), front.proxy.requirepass.as_deref()) {
        Ok(()) => next.run(req).await,
        Err(r) => r.into_response(),
    }
}

async fn readyz(State(front): State<Arc<Front>>) -> Response {
    match front.proxy.client.command(b"", &[b"PING"]).await {
        Ok(Value::Simple(_)) => axum::Json(json!({"status": "ready"})).into_response(),
        _ => {
            let body = json!({"status": "not ready", "waiting": ["no node answers"]});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

async fn post_check(State(front): State<Arc<Front>>, headers: HeaderMap, body: Body) -> Response {
    let args = match json_object(&headers, body).await.and_then(check_args) {
        Ok(args) => args,
        Err(r) => return r.into_response(),
    };
    if args[0] == "RL.CHECK" {
        return key_check(&front, &args).await;
    }
    allow(&front, &args, None).await
}

/// One RL.CHECK through the library: its blocked cache and fail mode.
async fn key_check(front: &Front, args: &[String]) -> Response {
    let request = sluice_resp::Request::from_args(args);
    let (key, limit, cost, dry) = match crate::parse_rl_check(&request, front.proxy.default_mode) {
        Ok(p) => p,
        Err(e) => return resp_error(&e),
    };
    let window = key_window(args);
    let decided = if dry {
        let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        match front.proxy.client.command(&key, &words).await {
            Ok(reply) => verdict_of(&reply, now_ms()),
            Err(_) => Ok(verdict(
                &front.proxy.client.fail_mode(&key, &limit, 0, true),
                None,
            )),
        }
    } else {
        match front.proxy.client.check(&key, &limit, cost).await {
            Ok(d) => {
                front.proxy.count(&d);
                Ok(verdict(&d, None))
            }
            Err(e) => Err(resp_error(&e.0).into()),
        }
    };
    match decided {
        Ok(mut v) => {
            v.window_ms = window;
            respond(&v, None)
        }
        Err(r) => r.into_response(),
    }
}

fn verdict(d: &Decision, rule: Option<String>) -> Verdict {
    Verdict::from_fields(d.fields(), rule, now_ms())
}

/// `RL.ALLOW` through the library ([`sluice_client::Client::allow`]): each applying rule's
/// fail mode when no node can answer, the split by slot in a cluster.
async fn allow(front: &Front, args: &[String], deny: Option<StatusCode>) -> Response {
    let request = allow_of(args);
    let allowed = match front.proxy.client.allow(&front.proxy.rules, &request).await {
        Ok(a) => a,
        Err(e) => return resp_error(&e.0),
    };
    front.proxy.count(&allowed.decision);
    let rule = allowed
        .rule
        .map(|r| String::from_utf8_lossy(&r).into_owned());
    let mut v = verdict(&allowed.decision, rule);
    v.window_ms = v
        .rule
        .as_deref()
        .and_then(|r| front.proxy.rules.get(r.as_bytes()))
        .map(|r| u64::try_from(r.limit.period.as_millis()).unwrap_or(u64::MAX));
    respond(&v, deny)
}

/// The request an `RL.ALLOW USER .. IP ..` word list states.
fn allow_of(args: &[String]) -> AllowRequest {
    let mut a = AllowRequest::default();
    for pair in args[1..].chunks(2) {
        let [word, value] = pair else { continue };
        let bytes = Some(value.as_bytes().to_vec());
        match word.as_str() {
            "USER" => a.user = bytes,
            "IP" => a.ip = bytes,
            "KEY" => a.key = bytes,
            "TIER" => a.tier = bytes,
            "ENDPOINT" => a.endpoint = bytes,
            _ => a.cost = value.parse().ok(),
        }
    }
    a
}

async fn get_auth(
    State(front): State<Arc<Front>>,
    Peer(peer): Peer,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (mut a, deny) = match parse_query(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = from_headers(&mut a, &headers, peer, &front.subjects) {
        return r.into_response();
    }
    allow(&front, &a.args(), deny).await
}

async fn get_auth_prefixed(
    State(front): State<Arc<Front>>,
    Peer(peer): Peer,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let mut a = Allow::default();
    if let Err(r) = from_headers(&mut a, &headers, peer, &front.subjects) {
        return r.into_response();
    }
    if a.endpoint.is_none() {
        a.endpoint = Some(prefixed_endpoint(&uri));
    }
    allow(&front, &a.args(), None).await
}

/// `RL.RULE ...` on the node that owns `id`'s slot.
async fn rule_command(front: &Front, id: &str, words: &[&str]) -> Result<Value, Refusal> {
    let mut args: Vec<&[u8]> = vec![b"RL.RULE"];
    args.extend(words.iter().map(|w| w.as_bytes()));
    match front.proxy.client.command(id.as_bytes(), &args).await {
        Ok(Value::Error(e)) => Err(resp_error(&e).into()),
        Ok(v) => Ok(v),
        Err(e) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no node answered ({e:?})"),
        )
        .into()),
    }
}

/// `RL.RULE GET`'s reply as the node's rule JSON.
fn rule_json(v: &Value) -> Option<serde_json::Value> {
    serde_json::to_value(RuleJson::from_get(v)?).ok()
}

async fn list(State(front): State<Arc<Front>>) -> Response {
    let names = match rule_command(&front, "", &["LIST"]).await {
        Ok(Value::Array(names)) => names,
        Ok(_) => Vec::new(),
        Err(r) => return r.into_response(),
    };
    let mut rules = Vec::new();
    for n in names {
        let id = n.text();
        if let Ok(v) = rule_command(&front, &id, &["GET", &id]).await {
            rules.extend(rule_json(&v));
        }
    }
    axum::Json(json!({ "rules": rules })).into_response()
}

async fn get_one(State(front): State<Arc<Front>>, Path(id): Path<String>) -> Response {
    match rule_command(&front, &id, &["GET", &id]).await {
        Ok(v) => match rule_json(&v) {
            Some(j) => axum::Json(j).into_response(),
            None => error(StatusCode::NOT_FOUND, format!("no such rule '{id}'")),
        },
        Err(r) => r.into_response(),
    }
}

async fn history(State(front): State<Arc<Front>>, Path(id): Path<String>) -> Response {
    let Value::Array(versions) = (match rule_command(&front, &id, &["HISTORY", &id]).await {
        Ok(v) => v,
        Err(r) if r.status() == StatusCode::BAD_REQUEST => {
            return error(StatusCode::NOT_FOUND, format!("no such rule '{id}'"));
        }
        Err(r) => return r.into_response(),
    }) else {
        return error(StatusCode::BAD_GATEWAY, "unexpected reply");
    };
    let versions: Vec<serde_json::Value> = versions
        .iter()
        .filter_map(|v| match v {
            Value::Array(p) => Some(json!({"version": p.first()?.text().parse::<u64>().ok()?, "spec": p.get(1)?.text()})),
            _ => None,
        })
        .collect();
    axum::Json(json!({"id": id, "versions": versions})).into_response()
}

fn versioned(id: &str, reply: Result<Value, Refusal>) -> Response {
    match reply {
        Ok(Value::Int(v)) => axum::Json(json!({"id": id, "version": v})).into_response(),
        Ok(other) => error(
            StatusCode::BAD_GATEWAY,
            format!("unexpected reply {other:?}"),
        ),
        Err(r) => r.into_response(),
    }
}

async fn put(
    State(front): State<Arc<Front>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let words = match rule_words(&headers, body).await {
        Ok(w) => w,
        Err(r) => return r.into_response(),
    };
    let mut all = vec!["SET", id.as_str()];
    all.extend(words.iter().map(String::as_str));
    versioned(&id, rule_command(&front, &id, &all).await)
}

async fn delete(State(front): State<Arc<Front>>, Path(id): Path<String>) -> Response {
    match rule_command(&front, &id, &["DEL", &id]).await {
        Ok(Value::Int(1)) => axum::Json(json!({"id": id, "deleted": true})).into_response(),
        Ok(_) => error(StatusCode::NOT_FOUND, format!("no such rule '{id}'")),
        Err(r) => r.into_response(),
    }
}

async fn rollback(
    State(front): State<Arc<Front>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let target = match rollback_body(&headers, body).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    let version = target.version.map(|v| v.to_string());
    let mut words = vec!["ROLLBACK", id.as_str()];
    words.extend(version.as_deref());
    versioned(&id, rule_command(&front, &id, &words).await)
}

/// One command to `key`'s owner; an error reply or no answer as text.
async fn ask(front: &Front, key: &[u8], args: &[&[u8]]) -> Result<Value, String> {
    match front.proxy.client.command(key, args).await {
        Ok(Value::Error(e)) => Err(e),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("no node answered ({e:?})")),
    }
}

/// One key for each of `primaries` (addresses as the client routes to them): a key whose slot
/// that primary serves, so a call on it reaches that primary. Two-byte keys hash whole (no
/// room for a `{tag}`), and CRC16 maps the 65536 of them onto every 16-bit value, so every
/// slot has four of them: a primary with any slot is found.
fn key_on_each(front: &Front, primaries: &[String]) -> Vec<(String, Vec<u8>)> {
    let mut found: Vec<(String, Vec<u8>)> = Vec::new();
    for n in 0..=u16::MAX {
        if found.len() == primaries.len() {
            break;
        }
        let key = n.to_be_bytes().to_vec();
        let Some(owner) = front.proxy.client.owner(&key) else {
            continue;
        };
        if primaries.iter().any(|p| **p == *owner) && !found.iter().any(|(a, _)| **a == *owner) {
            found.push((owner.to_string(), key));
        }
    }
    found
}

/// `GET /v1/dashboard` (see `sluice_http::dashboard`): `RL.RATES` and both `RL.TOP` lists of
/// every primary, merged; the rules as `GET /rules` reads them; the nodes of `CLUSTER NODES`
/// with each primary's `INFO`. The sidecar reaches primaries only: a replica's offset and lag
/// are what its primary lists of it, and its memory is not shown.
async fn dashboard(State(front): State<Arc<Front>>) -> Response {
    use sluice_client::top;
    use sluice_http::dashboard::{
        Dashboard, INFO_ARGS, Rates, TOP_COUNT, TopKey, cluster_rows, fill, standalone_rows,
        top_args,
    };
    let mut d = Dashboard {
        now_ms: now_ms(),
        ..Dashboard::default()
    };
    let words = |args: &[&'static str]| -> Vec<&'static [u8]> {
        args.iter().map(|a| a.as_bytes()).collect()
    };
    let info_args = words(&INFO_ARGS);
    let cluster = ask(&front, b"", &[b"CLUSTER", b"NODES"]).await;
    let mut rows = match &cluster {
        Ok(v) => cluster_rows(&v.text()),
        Err(_) => Vec::new(),
    };
    let primaries: Vec<String> = match &cluster {
        Ok(_) => (rows.iter())
            .filter(|r| r.role == "primary" && !r.slots.is_empty())
            .map(|r| r.addr.clone())
            .collect(),
        Err(_) => front
            .proxy
            .client
            .owner(b"")
            .map(|a| a.to_string())
            .into_iter()
            .collect(),
    };
    let (mut rates, mut denied, mut allowed, mut infos) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        std::collections::HashMap::new(),
    );
    let (denied_args, allowed_args) = (words(&top_args("DENIED")), words(&top_args("ALLOWED")));
    let keys = key_on_each(&front, &primaries);
    for p in primaries
        .iter()
        .filter(|p| !keys.iter().any(|(a, _)| a == *p))
    {
        // A cluster behind one `--upstream` is routed to that node alone (Topology::Single).
        let why = "not routed to: give the sidecar two or more of the cluster's nodes";
        d.fail("nodes", format!("{why} ({p})"));
        infos.insert(p.clone(), Err(why.to_owned()));
    }
    for (addr, key) in keys {
        let (r, dn, al, info) = tokio::join!(
            ask(&front, &key, &[b"RL.RATES"]),
            ask(&front, &key, &denied_args),
            ask(&front, &key, &allowed_args),
            ask(&front, &key, &info_args),
        );
        match r.and_then(|v| top::parse_rates(&v)) {
            Ok(r) => rates.push(r),
            Err(e) => d.fail("rules_rates", format!("{e} ({addr})")),
        }
        match dn.and_then(|v| top::parse_top(&v)) {
            Ok(t) => denied.push(t),
            Err(e) => d.fail("top_denied", format!("{e} ({addr})")),
        }
        match al.and_then(|v| top::parse_top(&v)) {
            Ok(t) => allowed.push(t),
            Err(e) => d.fail("top_allowed", format!("{e} ({addr})")),
        }
        infos.insert(addr, info.map(|v| v.text()));
    }
    let merged = top::merge_rates(&rates);
    d.rules_rates = Rates::from(merged);
    d.top_denied = TopKey::list(&top::merge_top(&denied, TOP_COUNT));
    d.top_allowed = TopKey::list(&top::merge_top(&allowed, TOP_COUNT));
    dashboard_rules(&front, &mut d).await;
    // The nodes.
    if cluster.is_ok() {
        fill(&mut rows, &infos);
        for r in &mut rows {
            // The node that answered CLUSTER NODES is not the sidecar.
            r.myself = false;
            if r.role == "replica" {
                r.error = None;
            }
        }
        d.nodes = rows;
        d.notes.push(
            "The sidecar reaches primaries only: a replica's offset and lag are as its primary \
             lists them, and its memory is not shown."
                .into(),
        );
    } else {
        match primaries.first().and_then(|a| Some((a, infos.remove(a)?))) {
            Some((addr, Ok(info))) => d.nodes = standalone_rows(addr, &info),
            Some((_, Err(e))) => d.fail("nodes", e),
            None => d.fail("nodes", "no node answered"),
        }
    }
    if d.all_refused() {
        let first = d.errors.values().next().cloned().unwrap_or_default();
        return resp_error(&first);
    }
    axum::Json(d).into_response()
}

/// The dashboard's rules as `GET /rules` reads them, with GLOBAL rules' shares.
async fn dashboard_rules(front: &Front, d: &mut sluice_http::dashboard::Dashboard) {
    use sluice_http::dashboard::{Rule, globals, regions_off};
    let shares = match ask(front, b"", &[b"RL.REGION", b"INFO"]).await {
        Ok(v) => globals(&v),
        Err(e) if regions_off(&e) => Default::default(),
        Err(e) => {
            d.fail("regions", e);
            Default::default()
        }
    };
    match ask(front, b"", &[b"RL.RULE", b"LIST"]).await {
        Ok(Value::Array(names)) => {
            for n in names {
                let id = n.text();
                let get: [&[u8]; 3] = [b"RL.RULE", b"GET", id.as_bytes()];
                match ask(front, id.as_bytes(), &get).await {
                    Ok(v) => d.rules.extend(RuleJson::from_get(&v).map(|rule| Rule {
                        global: shares.get(&rule.id).cloned(),
                        rule,
                    })),
                    Err(e) => d.fail("rules", e),
                }
            }
        }
        Ok(_) => {}
        Err(e) => d.fail("rules", e),
    }
}
