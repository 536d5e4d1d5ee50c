//! `POST /v1/check` and `GET /v1/auth`: a check over HTTP, answered `200` or `429` (or the
//! deny status a gateway asks for) with [`Verdict`]'s body and headers.
//!
//! # Bodies of `POST /v1/check`
//! - A key check (the body has `limit` or `period`): `{"key", "limit", "period", "burst"?,
//!   "cost"?, "algo"?, "dry"?}` → `RL.CHECK key limit period ...`; `period` is a number of
//!   seconds or a duration text (`"1m"`).
//! - A request check (otherwise): `{"user"?, "ip"?, "key"?, "tier"?, "endpoint"?, "cost"?}` →
//!   `RL.ALLOW`.
//!
//! # Subjects of `GET /v1/auth`
//! Query parameters `user`, `ip`, `key`, `tier`, `endpoint`, `cost` win; else `ip` is the first
//! address of `X-Forwarded-For` or `X-Real-IP`, `endpoint` is `X-Forwarded-Uri` or
//! `X-Original-URI`, and user, key and tier come from the headers `--http-user-header`,
//! `--http-key-header` and `--http-tier-header` name. `deny_status` (400-599) replaces 429
//! (nginx's `auth_request` passes on only 401 and 403).
//!
//! `GET /v1/auth/<path>` is Envoy's `ext_authz` in HTTP mode (`path_prefix: /v1/auth`): the
//! original request's path and query follow the prefix. They are the endpoint (unless
//! `X-Forwarded-Uri`/`X-Original-URI` says otherwise), and the query is the request's, not
//! Sluice's; the subjects come from the headers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sluice_resp::Value;

use super::verdict::Verdict;
use super::{BODY_DEADLINE, Front, MAX_BODY, error, is_json, resp_error};

/// A body of one `RL.CHECK`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyCheck {
    key: String,
    limit: u64,
    period: serde_json::Value,
    burst: Option<u64>,
    cost: Option<u64>,
    algo: Option<String>,
    dry: Option<bool>,
}

/// A body of one `RL.ALLOW`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    pub user: Option<String>,
    pub ip: Option<String>,
    pub key: Option<String>,
    pub tier: Option<String>,
    pub endpoint: Option<String>,
    pub cost: Option<u64>,
}

impl Allow {
    /// `RL.ALLOW USER .. IP .. ...`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["RL.ALLOW".to_string()];
        for (word, v) in [
            ("USER", &self.user),
            ("IP", &self.ip),
            ("KEY", &self.key),
            ("TIER", &self.tier),
            ("ENDPOINT", &self.endpoint),
        ] {
            if let Some(v) = v {
                args.push(word.into());
                args.push(v.clone());
            }
        }
        if let Some(c) = self.cost {
            args.push("COST".into());
            args.push(c.to_string());
        }
        args
    }
}

impl KeyCheck {
    fn args(&self) -> Result<Vec<String>, String> {
        let period = match &self.period {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) if n.is_u64() => n.to_string(),
            _ => {
                return Err(
                    "period must be a number of seconds or a duration such as \"1m\"".into(),
                );
            }
        };
        let mut args = vec![
            "RL.CHECK".to_string(),
            self.key.clone(),
            self.limit.to_string(),
            period,
        ];
        if let Some(b) = self.burst {
            args.extend(["BURST".into(), b.to_string()]);
        }
        if let Some(c) = self.cost {
            args.extend(["COST".into(), c.to_string()]);
        }
        if let Some(a) = &self.algo {
            args.extend(["ALGO".into(), a.clone()]);
        }
        if self.dry == Some(true) {
            args.push("DRY".into());
        }
        Ok(args)
    }
}

/// Reads a body of at most [`MAX_BODY`] bytes within [`BODY_DEADLINE`].
pub async fn read_body(body: Body) -> Result<bytes::Bytes, Response> {
    match tokio::time::timeout(BODY_DEADLINE, axum::body::to_bytes(body, MAX_BODY)).await {
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
        Ok(Err(_)) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY} bytes"),
        )),
        Ok(Ok(b)) => Ok(b),
    }
}

/// A JSON object body, or the response that refuses it.
pub async fn json_object(
    headers: &HeaderMap,
    body: Body,
) -> Result<serde_json::Map<String, serde_json::Value>, Response> {
    if !is_json(headers) {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    let bytes = read_body(body).await?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("bad JSON: {e}"))),
    }
}

/// `T` from a JSON object, unknown or mistyped fields refused by name.
pub fn fields<T: serde::de::DeserializeOwned>(
    map: serde_json::Map<String, serde_json::Value>,
) -> Result<T, Response> {
    serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))
}

pub async fn post_check(
    State(front): State<Arc<Front>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let map = match json_object(&headers, body).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let args = if map.contains_key("limit") || map.contains_key("period") {
        match fields::<KeyCheck>(map).map(|k| k.args()) {
            Ok(Ok(args)) => args,
            Ok(Err(why)) => return error(StatusCode::BAD_REQUEST, why),
            Err(r) => return r,
        }
    } else {
        match fields::<Allow>(map) {
            Ok(a) => a.args(),
            Err(r) => return r,
        }
    };
    let window = key_window(&args);
    match decide(&front, &args, window) {
        Ok(v) => respond(&v, None),
        Err(r) => r,
    }
}

/// The period of a key check, in milliseconds, for `RateLimit-Policy`'s window.
fn key_window(args: &[String]) -> Option<u64> {
    if args[0] != "RL.CHECK" {
        return None;
    }
    sluice_core::spec::parse_period(args[3].as_bytes())
        .ok()
        .map(|p| p.as_millis_ceil())
}

/// Runs the check in `args` and reads its reply as a [`Verdict`].
pub fn decide(front: &Front, args: &[String], window_ms: Option<u64>) -> Result<Verdict, Response> {
    let reply = front.exec(args);
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

/// An `RL.CHECK` or `RL.ALLOW` reply as a [`Verdict`], or its error as a response.
pub fn verdict_of(reply: &Value, now_ms: i64) -> Result<Verdict, Response> {
    let items = match reply {
        Value::Error(e) => return Err(resp_error(e)),
        Value::Array(items) if items.len() == 5 || items.len() == 6 => items,
        other => {
            return Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("unexpected reply {other:?}"),
            ));
        }
    };
    let mut fields = [0i64; 5];
    for (f, item) in fields.iter_mut().zip(items) {
        *f = match item {
            Value::Int(n) => *n,
            _ => return Err(error(StatusCode::INTERNAL_SERVER_ERROR, "unexpected reply")),
        };
    }
    let rule = match items.get(5) {
        Some(Value::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    Ok(Verdict::from_fields(fields, rule, now_ms))
}

/// The response for `v`: its status (or `deny` for a denial), JSON body and headers.
pub fn respond(v: &Verdict, deny: Option<StatusCode>) -> Response {
    let status = if v.allowed {
        StatusCode::OK
    } else {
        deny.unwrap_or(StatusCode::TOO_MANY_REQUESTS)
    };
    let mut r = (status, axum::Json(v)).into_response();
    for (name, value) in v.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            r.headers_mut()
                .insert(HeaderName::from_static(lower(name)), value);
        }
    }
    r
}

/// The header names of [`Verdict::headers`], lower-case as `HeaderName::from_static` wants.
fn lower(name: &'static str) -> &'static str {
    match name {
        "RateLimit-Limit" => "ratelimit-limit",
        "RateLimit-Remaining" => "ratelimit-remaining",
        "RateLimit-Reset" => "ratelimit-reset",
        "RateLimit-Policy" => "ratelimit-policy",
        "RateLimit" => "ratelimit",
        _ => "retry-after",
    }
}

/// The names of the headers `GET /v1/auth` reads subjects from.
#[derive(Clone, Debug)]
pub struct SubjectHeaders {
    pub user: String,
    pub key: String,
    pub tier: String,
}

/// The query of `GET /v1/auth`: subjects and `deny_status`.
fn parse_query(query: &str) -> Result<(Allow, Option<StatusCode>), Response> {
    let mut allow = Allow::default();
    let mut deny = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = v.into_owned();
        match &*k {
            "user" => allow.user = Some(v),
            "ip" => allow.ip = Some(v),
            "key" => allow.key = Some(v),
            "tier" => allow.tier = Some(v),
            "endpoint" => allow.endpoint = Some(v),
            "cost" => {
                allow.cost = Some(v.parse().map_err(|_| {
                    error(
                        StatusCode::BAD_REQUEST,
                        "cost must be a non-negative integer",
                    )
                })?)
            }
            "deny_status" => {
                let s = v
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (400..=599).contains(s))
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .ok_or_else(|| {
                        error(
                            StatusCode::BAD_REQUEST,
                            "deny_status must be a status from 400 to 599",
                        )
                    })?;
                deny = Some(s);
            }
            other => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown query parameter '{other}'"),
                ));
            }
        }
    }
    Ok((allow, deny))
}

/// Fills what the query left out from the request's headers.
fn from_headers(allow: &mut Allow, headers: &HeaderMap, names: &SubjectHeaders) {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let first_forwarded =
        || text("x-forwarded-for").and_then(|v| v.split(',').next().map(|s| s.trim().to_string()));
    allow.ip = allow
        .ip
        .take()
        .or_else(first_forwarded)
        .or_else(|| text("x-real-ip"));
    allow.endpoint = allow
        .endpoint
        .take()
        .or_else(|| text("x-forwarded-uri"))
        .or_else(|| text("x-original-uri"));
    allow.user = allow.user.take().or_else(|| text(&names.user));
    allow.key = allow.key.take().or_else(|| text(&names.key));
    allow.tier = allow.tier.take().or_else(|| text(&names.tier));
}

pub async fn get_auth(
    State(front): State<Arc<Front>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (mut allow, deny) = match parse_query(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(r) => return r,
    };
    from_headers(&mut allow, &headers, &subject_headers(&front));
    match decide(&front, &allow.args(), None) {
        Ok(v) => respond(&v, deny),
        Err(r) => r,
    }
}

/// The subject headers' names, from the flags.
fn subject_headers(front: &Front) -> SubjectHeaders {
    let config = &front.shared.config;
    SubjectHeaders {
        user: config.http_user_header.to_ascii_lowercase(),
        key: config.http_key_header.to_ascii_lowercase(),
        tier: config.http_tier_header.to_ascii_lowercase(),
    }
}

pub async fn get_auth_prefixed(
    State(front): State<Arc<Front>>,
    axum::extract::Path(endpoint): axum::extract::Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let mut allow = Allow::default();
    from_headers(&mut allow, &headers, &subject_headers(&front));
    if allow.endpoint.is_none() {
        let mut e = format!("/{endpoint}");
        if let Some(q) = query {
            e.push('?');
            e.push_str(&q);
        }
        allow.endpoint = Some(e);
    }
    match decide(&front, &allow.args(), None) {
        Ok(v) => respond(&v, None),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_subjects_come_from_the_query_then_the_headers() {
        let (mut a, deny) = parse_query("endpoint=%2Fapi%2Fx&deny_status=403").unwrap();
        assert_eq!(deny, Some(StatusCode::FORBIDDEN));
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("10.1.1.1, 10.0.0.2"),
        );
        h.insert("x-real-ip", HeaderValue::from_static("10.9.9.9"));
        h.insert("x-forwarded-uri", HeaderValue::from_static("/ignored"));
        h.insert("x-user-id", HeaderValue::from_static("alice"));
        let names = SubjectHeaders {
            user: "x-user-id".into(),
            key: "x-api-key".into(),
            tier: "x-tier".into(),
        };
        from_headers(&mut a, &h, &names);
        assert_eq!(a.ip.as_deref(), Some("10.1.1.1"));
        assert_eq!(a.endpoint.as_deref(), Some("/api/x"));
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(a.key, None);
        assert_eq!(
            a.args(),
            [
                "RL.ALLOW", "USER", "alice", "IP", "10.1.1.1", "ENDPOINT", "/api/x"
            ]
        );
        assert!(parse_query("deny_status=200").is_err());
        assert!(parse_query("colour=red").is_err());
        assert!(parse_query("cost=-1").is_err());
    }
}
