//! `/rules`: `PUT /rules/{id}` and the rest of `RL.RULE` over HTTP.
//!
//! # Routes
//! - `PUT /rules/{id}` with `{"scope", "limit", "window", "tier"?, "route"?, "burst"?,
//!   "algo"?, "failmode"?, "shadow"?, "floor"?, "rollout"?}` (`period` is an alias of
//!   `window`) → `RL.RULE SET id SCOPE .. LIMIT .. PERIOD window ...`; `200 {"id", "version"}`.
//! - `GET /rules` → `{"rules": [rule, ...]}`; `GET /rules/{id}` → the rule, or `404`.
//! - `DELETE /rules/{id}` → `200 {"id", "deleted": true}`, or `404`.
//! - `GET /rules/{id}/history` → `{"id", "versions": [{"version", "spec"}, ...]}`.
//! - `POST /rules/{id}/rollback` with an optional `{"version": n}` → `200 {"id", "version"}`.
//!
//! Validation and floors are `RL.RULE`'s (a refusal is `400 {"error"}`); with a rules file
//! every write is `409`; with etcd, writes go through etcd (run off this thread: they wait for
//! etcd's answer).
//!
//! Each route is the `RL.RULE` subcommand it stands for, run as the request's user: writes run
//! it, reads run it too (a read's answer is built from the rules themselves, but a user the
//! ACL refuses `RL.RULE LIST`, `GET` or `HISTORY` gets its `403`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};
use sluice_resp::Value;

use sluice_http::body::{rollback_body, rule_words};
use sluice_http::reply::{error, resp_error, rule_error};
use sluice_http::rule::RuleJson;

use super::{Front, LoggedIn};
use crate::acl::User;
use crate::rules::{Live, Source, check_name, period_text};

/// A rule as JSON: the shape the sidecar serves too.
fn rule_json(live: &Live) -> Json {
    use std::sync::atomic::Ordering::Relaxed;
    let s = &live.current.spec;
    let rule = RuleJson {
        id: live.name.to_string(),
        version: live.current.version,
        scope: s.selector.scope.map(|s| s.name().to_owned()),
        tier: s.selector.tier.clone(),
        route: s.selector.route.clone(),
        limit: s.limit,
        window: period_text(s.period),
        burst: s.burst.unwrap_or(s.limit),
        algo: s.algo.name().to_owned(),
        failmode: s.failmode.name().to_owned(),
        shadow: s.shadow,
        floor: s.floor,
        rollout: u64::from(s.rollout),
        spec: s.to_text(),
        denied: live.counters.denied.load(Relaxed),
        shadow_denied: live.counters.shadow_denied.load(Relaxed),
    };
    serde_json::to_value(rule).unwrap_or_default()
}

fn bad_id(id: &str) -> Option<Response> {
    check_name(id.as_bytes())
        .err()
        .map(|e| error(StatusCode::BAD_REQUEST, e.text()))
}

fn no_rule(id: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("no such rule '{id}'"))
}

/// The `403` (or other refusal) when `user` may not run the read `args` stands for.
fn refused_read(front: &Front, user: &Arc<User>, args: &[&str]) -> Option<Response> {
    match front.exec_as(user, args) {
        Value::Error(e) if e.starts_with("NOPERM") || e.starts_with("NOAUTH") => {
            Some(resp_error(&e))
        }
        _ => None,
    }
}

pub async fn list(State(front): State<Arc<Front>>, Extension(user): LoggedIn) -> Response {
    if let Some(r) = refused_read(&front, &user, &["RL.RULE", "LIST"]) {
        return r;
    }
    let rules = &front.shared.rules;
    let all: Vec<Json> = rules
        .names()
        .iter()
        .filter_map(|n| rules.get(n))
        .map(|l| rule_json(&l))
        .collect();
    axum::Json(json!({ "rules": all })).into_response()
}

pub async fn get_one(
    State(front): State<Arc<Front>>,
    Extension(user): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = bad_id(&id).or_else(|| refused_read(&front, &user, &["RL.RULE", "GET", &id])) {
        return r;
    }
    match front.shared.rules.get(&id) {
        Some(live) => axum::Json(rule_json(&live)).into_response(),
        None => no_rule(&id),
    }
}

pub async fn history(
    State(front): State<Arc<Front>>,
    Extension(user): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) =
        bad_id(&id).or_else(|| refused_read(&front, &user, &["RL.RULE", "HISTORY", &id]))
    {
        return r;
    }
    let Some(versions) = front.shared.rules.history(&id) else {
        return no_rule(&id);
    };
    let versions: Vec<Json> = versions
        .iter()
        .map(|v| json!({"version": v.version, "spec": v.spec.to_text()}))
        .collect();
    axum::Json(json!({"id": id, "versions": versions})).into_response()
}

/// `409` when a rules file is the source.
fn refuse_write(front: &Front) -> Option<Response> {
    match &front.shared.rules.source {
        Source::File(path) => Some(error(
            StatusCode::CONFLICT,
            format!(
                "rules come from {}: edit that file (it is reloaded when it changes)",
                path.display()
            ),
        )),
        _ => None,
    }
}

/// Runs an `RL.RULE` write as `user` off the runtime's thread (an etcd write waits for etcd).
async fn write(front: Arc<Front>, user: Arc<User>, args: Vec<String>) -> Value {
    tokio::task::spawn_blocking(move || front.exec_admin_as(&user, &args))
        .await
        .unwrap_or_else(|_| Value::Error("ERR the rule write did not finish".into()))
}

/// A `500` for a reply the rule commands never give.
fn unexpected(reply: &Value) -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("unexpected reply {reply:?}"),
    )
}

/// `{"id", "version"}` from `RL.RULE SET|ROLLBACK`'s reply.
fn versioned(id: &str, reply: &Value) -> Response {
    match reply {
        Value::Int(v) => axum::Json(json!({"id": id, "version": v})).into_response(),
        Value::Error(e) => rule_error(e),
        other => unexpected(other),
    }
}

pub async fn put(
    State(front): State<Arc<Front>>,
    Extension(user): LoggedIn,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(r) = bad_id(&id).or_else(|| refuse_write(&front)) {
        return r;
    }
    let words = match rule_words(&headers, body).await {
        Ok(w) => w,
        Err(r) => return r.into_response(),
    };
    let mut args = vec!["RL.RULE".to_string(), "SET".into(), id.clone()];
    args.extend(words);
    versioned(&id, &write(front, user, args).await)
}

pub async fn delete(
    State(front): State<Arc<Front>>,
    Extension(user): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = bad_id(&id).or_else(|| refuse_write(&front)) {
        return r;
    }
    let args = vec!["RL.RULE".to_string(), "DEL".into(), id.clone()];
    match write(front, user, args).await {
        Value::Int(1) => axum::Json(json!({"id": id, "deleted": true})).into_response(),
        Value::Int(_) => no_rule(&id),
        Value::Error(e) => resp_error(&e),
        other => unexpected(&other),
    }
}

pub async fn rollback(
    State(front): State<Arc<Front>>,
    Extension(user): LoggedIn,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(r) = bad_id(&id).or_else(|| refuse_write(&front)) {
        return r;
    }
    let target = match rollback_body(&headers, body).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    if front.shared.rules.history(&id).is_none() {
        return no_rule(&id);
    }
    let mut args = vec!["RL.RULE".to_string(), "ROLLBACK".into(), id.clone()];
    if let Some(v) = target.version {
        args.push(v.to_string());
    }
    versioned(&id, &write(front, user, args).await)
}
