//! Request bodies and subjects: what a JSON body or a gateway's subrequest asks, as the words
//! of the command that answers it (`RL.CHECK`, `RL.ALLOW`, `RL.RULE SET`). Unknown or mistyped
//! fields are refused by name; the command itself checks the values.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::reply::{Refusal, refuse};
use crate::{BODY_DEADLINE, MAX_BODY};

/// A body of one `RL.CHECK`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyCheck {
    pub key: String,
    pub limit: u64,
    pub period: Json,
    pub burst: Option<u64>,
    pub cost: Option<u64>,
    pub algo: Option<String>,
    pub dry: Option<bool>,
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
    /// `RL.CHECK key limit period ...`, or why `period` is not one.
    pub fn args(&self) -> Result<Vec<String>, String> {
        let period = match &self.period {
            Json::String(s) => s.clone(),
            Json::Number(n) if n.is_u64() => n.to_string(),
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

/// Which form a `POST /v1/check` body is: a key check when it has `limit` or `period`.
pub fn check_args(map: serde_json::Map<String, Json>) -> Result<Vec<String>, Refusal> {
    if map.contains_key("limit") || map.contains_key("period") {
        fields::<KeyCheck>(map)?
            .args()
            .map_err(|why| refuse(StatusCode::BAD_REQUEST, why))
    } else {
        Ok(fields::<Allow>(map)?.args())
    }
}

/// The period of a key check, in milliseconds, for `RateLimit-Policy`'s window.
pub fn key_window(args: &[String]) -> Option<u64> {
    if args[0] != "RL.CHECK" {
        return None;
    }
    period_ms(&args[3])
}

/// A period's milliseconds: integer seconds or a number with `ms`, `s`, `m`, `h` or `d`
/// (only for the policy header: the command has already checked it).
fn period_ms(text: &str) -> Option<u64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].to_ascii_lowercase().as_str() {
        "" | "s" => 1000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// Reads a body of at most [`MAX_BODY`] bytes within [`BODY_DEADLINE`].
pub async fn read_body(body: Body) -> Result<bytes::Bytes, Refusal> {
    match tokio::time::timeout(BODY_DEADLINE, axum::body::to_bytes(body, MAX_BODY)).await {
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
        Ok(Err(_)) => Err(refuse(
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
) -> Result<serde_json::Map<String, Json>, Refusal> {
    if !is_json(headers) {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    let bytes = read_body(body).await?;
    match serde_json::from_slice::<Json>(&bytes) {
        Ok(Json::Object(m)) => Ok(m),
        Ok(_) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(refuse(StatusCode::BAD_REQUEST, format!("bad JSON: {e}"))),
    }
}

/// `T` from a JSON object, unknown or mistyped fields refused by name.
pub fn fields<T: serde::de::DeserializeOwned>(
    map: serde_json::Map<String, Json>,
) -> Result<T, Refusal> {
    serde_json::from_value(Json::Object(map))
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, e.to_string()))
}

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// The names of the headers `GET /v1/auth` reads subjects from.
#[derive(Clone, Debug)]
pub struct SubjectHeaders {
    pub user: String,
    pub key: String,
    pub tier: String,
}

/// The flags naming those headers, the node's and the sidecar's alike.
#[derive(clap::Args, Debug, Clone)]
pub struct SubjectHeaderArgs {
    /// The request header `GET /v1/auth` reads the user id from.
    #[arg(long = "http-user-header", default_value = "X-User-Id")]
    pub http_user_header: String,
    /// The request header `GET /v1/auth` reads the API key from.
    #[arg(long = "http-key-header", default_value = "X-Api-Key")]
    pub http_key_header: String,
    /// The request header `GET /v1/auth` reads the tier from.
    #[arg(long = "http-tier-header", default_value = "X-Tier")]
    pub http_tier_header: String,
}

impl SubjectHeaderArgs {
    /// The names as looked up (header names are lower case).
    pub fn headers(&self) -> SubjectHeaders {
        SubjectHeaders {
            user: self.http_user_header.to_ascii_lowercase(),
            key: self.http_key_header.to_ascii_lowercase(),
            tier: self.http_tier_header.to_ascii_lowercase(),
        }
    }
}

/// The query of `GET /v1/auth`: subjects and `deny_status`.
pub fn parse_query(query: &str) -> Result<(Allow, Option<StatusCode>), Refusal> {
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
                    refuse(
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
                        refuse(
                            StatusCode::BAD_REQUEST,
                            "deny_status must be a status from 400 to 599",
                        )
                    })?;
                deny = Some(s);
            }
            other => {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    format!("unknown query parameter '{other}'"),
                ));
            }
        }
    }
    Ok((allow, deny))
}

/// Fills what the query left out from the request's headers.
pub fn from_headers(allow: &mut Allow, headers: &HeaderMap, names: &SubjectHeaders) {
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

/// The body of `PUT /rules/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    scope: String,
    limit: u64,
    window: Json,
    tier: Option<String>,
    route: Option<String>,
    burst: Option<u64>,
    algo: Option<String>,
    failmode: Option<String>,
    shadow: Option<bool>,
    floor: Option<u64>,
    rollout: Option<u64>,
}

impl RuleBody {
    /// `SCOPE s LIMIT n PERIOD w ...`: the words of `RL.RULE SET id`.
    pub fn words(&self) -> Result<Vec<String>, String> {
        let window = match &self.window {
            Json::String(s) => s.clone(),
            Json::Number(n) if n.is_u64() => n.to_string(),
            _ => {
                return Err(
                    "window must be a number of seconds or a duration such as \"1m\"".into(),
                );
            }
        };
        let mut w = vec![
            "SCOPE".to_string(),
            self.scope.clone(),
            "LIMIT".into(),
            self.limit.to_string(),
            "PERIOD".into(),
            window,
        ];
        let texts = [
            ("TIER", &self.tier),
            ("ROUTE", &self.route),
            ("ALGO", &self.algo),
            ("FAILMODE", &self.failmode),
        ];
        for (word, v) in texts {
            if let Some(v) = v {
                w.extend([word.to_string(), v.clone()]);
            }
        }
        for (word, v) in [
            ("BURST", self.burst),
            ("FLOOR", self.floor),
            ("ROLLOUT", self.rollout),
        ] {
            if let Some(v) = v {
                w.extend([word.to_string(), v.to_string()]);
            }
        }
        if self.shadow == Some(true) {
            w.push("SHADOW".into());
        }
        Ok(w)
    }
}

/// The body of `POST /rules/{id}/rollback`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    pub version: Option<u64>,
}

/// `PUT /rules/{id}`'s body as the words of `RL.RULE SET id` after the name.
pub async fn rule_words(headers: &HeaderMap, body: Body) -> Result<Vec<String>, Refusal> {
    let rule: RuleBody = fields(json_object(headers, body).await?)?;
    rule.words()
        .map_err(|why| refuse(StatusCode::BAD_REQUEST, why))
}

/// `POST /rules/{id}/rollback`'s optional body (none without a `Content-Type`).
pub async fn rollback_body(headers: &HeaderMap, body: Body) -> Result<RollbackBody, Refusal> {
    if !headers.contains_key(header::CONTENT_TYPE) {
        return Ok(RollbackBody::default());
    }
    fields(json_object(headers, body).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
