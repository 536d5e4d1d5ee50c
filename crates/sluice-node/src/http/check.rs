//! `POST /v1/check` and `GET /v1/auth`: a check over HTTP, answered `200` or `429` (or the
//! deny status a gateway asks for) with [`Verdict`]'s body and headers.
//!
//! # Bodies of `POST /v1/check`
//! - A key check (the body has `limit` or a window): `{"key", "limit", "window", "burst"?,
//!   "cost"?, "algo"?, "dry"?}` → `RL.CHECK key limit window ...`; `window` (or its alias
//!   `period`) is a number of seconds or a duration text (`"1m"`).
//! - A request check (otherwise): `{"user"?, "ip"?, "key"?, "tier"?, "endpoint"?, "cost"?}` →
//!   `RL.ALLOW`.
//!
//! # Subjects of `GET /v1/auth`
//! Query parameters `user`, `ip`, `key`, `tier`, `endpoint`, `cost` win (the gateway's
//! configuration writes them). Else only what the deployment trusts
//! (`--http-trusted-headers`, `--http-trusted-proxies`, see [`sluice_http::trust`]): `ip` is
//! the rightmost `X-Forwarded-For` entry no trusted proxy wrote (the peer itself when it is no
//! trusted proxy), `endpoint` is `X-Original-URI` or `X-Forwarded-Uri`, and user, key and tier
//! come from the headers `--http-user-header`, `--http-key-header` and `--http-tier-header`
//! name, each read only when trusted. The endpoint is matched against `ROUTE`s as the gateway
//! routes it (escapes decoded, dot segments resolved, slashes merged, no query).
//! `deny_status` (400-599) replaces 429 (nginx's `auth_request` passes on only 401 and 403).
//!
//! `GET /v1/auth/<path>` is Envoy's `ext_authz` in HTTP mode (`path_prefix: /v1/auth`): the
//! original request's raw path follows the prefix. It is the endpoint (unless a trusted
//! endpoint header says otherwise); its query is the request's, not Sluice's, and is not read.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, RawQuery, Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use sluice_http::body::{
    Allow, KeyCheckIn, SubjectHeaders, check_args, from_headers, is_json_type, json_body,
    key_window, not_json, object_of, parse_query, prefixed_endpoint,
};
use sluice_http::reply::{respond, verdict_of};
use sluice_http::trust::Peer;
use sluice_http::{Refusal, Verdict};

use super::Front;

pub async fn post_check(
    State(front): State<Arc<Front>>,
    Extension(user): super::LoggedIn,
    headers: HeaderMap,
    body: Body,
) -> Response {
    check(&front, &user, &headers, body).await
}

/// `POST /v1/check` ahead of the router ([`sluice_http::serve::Ahead`]): the login the
/// router's middleware would make, then the same [`check`].
pub async fn post_check_ahead(front: Arc<Front>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let authorization = parts.headers.get(header::AUTHORIZATION);
    let Some(user) = super::login(&front.shared, authorization.map(|v| v.as_bytes())) else {
        return sluice_http::auth::unauthorized().into_response();
    };
    check(&front, &user, &parts.headers, body).await
}

/// `POST /v1/check` off the socket ([`sluice_http::direct`]): the login, the content type and
/// the check of [`post_check_ahead`], on a body read whole with its head.
pub async fn post_check_direct(
    front: Arc<Front>,
    req: sluice_http::direct::Request,
) -> Result<Verdict, Refusal> {
    let authorization = req.authorization.as_deref();
    let Some(user) = super::login(&front.shared, authorization) else {
        return Err(sluice_http::auth::unauthorized());
    };
    if !is_json_type(req.content_type.as_deref()) {
        return Err(not_json());
    }
    check_body(&front, &user, &req.body).await
}

/// A check's body as its command, run, and answered.
async fn check(
    front: &Front,
    user: &Arc<crate::acl::User>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let bytes = match json_body(headers, body).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    match check_body(front, user, &bytes).await {
        Ok(v) => respond(&v, None),
        Err(r) => r.into_response(),
    }
}

/// A check's JSON body as its command, run. A key check is read in place ([`KeyCheckIn`]); any
/// other body through the JSON tree, which names what is wrong with it.
async fn check_body(
    front: &Front,
    user: &Arc<crate::acl::User>,
    bytes: &[u8],
) -> Result<Verdict, Refusal> {
    match KeyCheckIn::parse(bytes) {
        Some(key_check) => {
            let words = key_check.words();
            decide(front, user, words.as_slice(), key_check.window_ms()).await
        }
        None => {
            let args = object_of(bytes).and_then(check_args)?;
            decide(front, user, &args, key_window(&args)).await
        }
    }
}

/// Runs the check in `args` (on the node that owns its bucket, see [`super::forward`]) and
/// reads its reply as a [`Verdict`].
pub async fn decide<A: AsRef<[u8]>>(
    front: &Front,
    user: &Arc<crate::acl::User>,
    args: &[A],
    window_ms: Option<u64>,
) -> Result<Verdict, Refusal> {
    let reply = front.exec_as(user, args);
    let reply = front.owners.follow(&front.shared, args, reply).await;
    let mut v = verdict_of(&reply, front.now_ms())?;
    v.window_ms = window_ms.or_else(|| {
        let rule = v.rule.as_deref()?;
        front
            .shared
            .rules
            .get(rule)
            .map(|l| l.current.spec.period.as_millis_ceil())
    });
    Ok(v)
}

pub async fn get_auth(
    State(front): State<Arc<Front>>,
    Extension(user): super::LoggedIn,
    Peer(peer): Peer,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (mut allow, deny) = match parse_query(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = from_headers(&mut allow, &headers, peer, &subject_headers(&front)) {
        return r.into_response();
    }
    match decide(&front, &user, &allow.args(), None).await {
        Ok(v) => respond(&v, deny),
        Err(r) => r.into_response(),
    }
}

/// The subject headers' names, from the flags.
fn subject_headers(front: &Front) -> SubjectHeaders {
    front.shared.config.subject_headers.headers()
}

pub async fn get_auth_prefixed(
    State(front): State<Arc<Front>>,
    Extension(user): super::LoggedIn,
    Peer(peer): Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let mut allow = Allow::default();
    if let Err(r) = from_headers(&mut allow, &headers, peer, &subject_headers(&front)) {
        return r.into_response();
    }
    if allow.endpoint.is_none() {
        allow.endpoint = Some(prefixed_endpoint(&uri));
    }
    match decide(&front, &user, &allow.args(), None).await {
        Ok(v) => respond(&v, None),
        Err(r) => r.into_response(),
    }
}
