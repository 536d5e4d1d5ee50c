//! Fuzzes the node's HTTP API in-process: whole requests (method, path, query, headers, body)
//! through the same axum router `--http-port` serves, on a server state of its own.
//!
//! # Input
//! A structured script (`arbitrary`): steps of one request each, sent to one of two fronts:
//! - **open**: no password anywhere, so every request runs as the `default` user;
//! - **locked**: `default` is off, and one ACL user `gw` (password `gw-secret`) may only check
//!   keys under `gw:*`; the credentials a step sends are right, wrong, malformed or absent.
//!
//! Each request comes from a peer that is a trusted proxy (loopback) or is not, so the
//! `X-Forwarded-For` walk runs both ways. A request's path is a route of the API (every route, with ids and endpoints drawn from a small
//! alphabet) or random bytes, with repeated slashes, dot segments and percent escapes; headers are
//! drawn from those the API reads (credentials, content type, the gateway headers) with values
//! biased toward what their parsers branch on; a body is either JSON built from the API's field
//! names with values of every JSON type (numbers at the edges of `i64`/`u64`, durations almost
//! right, nested values where scalars belong), or raw bytes.
//!
//! # Invariants
//! - No request panics the server, and every request gets an answer.
//! - No `5xx` but `503` (`/readyz`, or a check the node cannot make): a `500` is a bug.
//! - Every `400` (and every `401`, `403`, `409`, `413`, `415`) from a route of the API has a
//!   JSON body `{"error": "..."}` with a non-empty text.
//! - On the locked front, a request without `gw`'s right password is answered `401` (or `404`
//!   and `405` for a path that is no route), whatever else it carries: nothing runs. `/healthz`
//!   is the one route open to all.
//! - On the locked front, `gw` never creates, changes or deletes a rule (it has no
//!   `RL.RULE SET`), and never touches a key outside `gw:*`: the rules table is as it started
//!   after every step.

#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use sluice_node::http::{Front, router};
use sluice_node::{Config, Executor};
use tower::ServiceExt;

#[path = "common/locked.rs"]
mod locked;

/// Field names of every body the API reads, and a few it does not.
const FIELDS: &[&str] = &[
    "key", "limit", "period", "burst", "cost", "algo", "dry", "user", "ip", "tier", "endpoint",
    "scope", "window", "route", "failmode", "shadow", "floor", "rollout", "version", "id",
    "unknown", "",
];

/// Strings the parsers branch on.
const WORDS: &[&str] = &[
    "k",
    "gw:a",
    "gw:",
    "other:k",
    "1m",
    "1s",
    "0s",
    "60",
    "1.5",
    "-1",
    "1y",
    "99999999999999999999",
    "TOKEN",
    "GCRA",
    "SLIDING",
    "FIXED",
    "LEAKY",
    "token",
    "user",
    "ip",
    "global",
    "key",
    "open",
    "closed",
    "local",
    "10.0.0.1",
    "::1",
    "1.2.3.4, 5.6.7.8",
    "/api",
    "/api/x",
    "",
    " ",
    "\u{0}",
    "a\r\nb",
    "%61pi",
    "free",
    "pro",
];

/// Numbers at the edges.
const NUMBERS: &[i128] = &[
    0,
    1,
    -1,
    2,
    10,
    60,
    1000,
    65535,
    4294967296,
    i64::MAX as i128,
    i64::MIN as i128,
    u64::MAX as i128,
    2147483647,
    2147483648,
];

/// Rule ids and endpoints in paths.
const IDS: &[&str] = &[
    "r",
    "api",
    "gw",
    "a.b",
    "x y",
    "..",
    "%2e",
    "r%00",
    "-",
    "very-long-id",
];

/// Headers the API reads.
const HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "x-original-uri",
    "x-original-method",
    "x-forwarded-uri",
    "x-forwarded-for",
    "x-real-ip",
    "x-user-id",
    "x-api-key",
    "x-tier",
    "host",
    "content-length",
];

#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Number(u8),
    Float(f64),
    Word(u8),
    Raw(String),
    Array(Vec<Json>),
    Object(Vec<(u8, Json)>),
}

impl Json {
    fn value(&self, depth: usize) -> serde_json::Value {
        use serde_json::Value as V;
        match self {
            Json::Null => V::Null,
            Json::Bool(b) => V::Bool(*b),
            Json::Number(i) => {
                let n = NUMBERS[usize::from(*i) % NUMBERS.len()];
                if let Ok(n) = i64::try_from(n) {
                    V::from(n)
                } else if let Ok(n) = u64::try_from(n) {
                    V::from(n)
                } else {
                    V::Null
                }
            }
            Json::Float(f) => serde_json::Number::from_f64(*f).map_or(V::Null, V::Number),
            Json::Word(i) => V::from(WORDS[usize::from(*i) % WORDS.len()]),
            Json::Raw(s) => V::from(s.as_str()),
            Json::Array(items) if depth < 3 => {
                V::Array(items.iter().take(8).map(|j| j.value(depth + 1)).collect())
            }
            Json::Object(fields) if depth < 3 => V::Object(
                fields
                    .iter()
                    .take(12)
                    .map(|(f, j)| {
                        (
                            FIELDS[usize::from(*f) % FIELDS.len()].to_owned(),
                            j.value(depth + 1),
                        )
                    })
                    .collect(),
            ),
            _ => V::Null,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Path {
    Check,
    Auth,
    AuthPrefixed(u8, u8),
    Rules,
    Rule(u8),
    History(u8),
    Rollback(u8),
    Healthz,
    Readyz,
    OpenApi,
    /// A route with extra slashes, dot segments or escapes around it.
    Mangled(u8, u8),
    Raw(String),
}

impl Path {
    fn text(&self) -> String {
        let id = |i: &u8| IDS[usize::from(*i) % IDS.len()];
        match self {
            Path::Check => "/v1/check".into(),
            Path::Auth => "/v1/auth".into(),
            Path::AuthPrefixed(a, b) => format!("/v1/auth/{}/{}", id(a), id(b)),
            Path::Rules => "/rules".into(),
            Path::Rule(i) => format!("/rules/{}", id(i)),
            Path::History(i) => format!("/rules/{}/history", id(i)),
            Path::Rollback(i) => format!("/rules/{}/rollback", id(i)),
            Path::Healthz => "/healthz".into(),
            Path::Readyz => "/readyz".into(),
            Path::OpenApi => "/openapi.json".into(),
            Path::Mangled(how, i) => {
                let base = ["/v1/check", "/rules/r", "/v1/auth", "/healthz"][usize::from(*i) % 4];
                match how % 4 {
                    0 => format!("/{base}"),
                    1 => format!("{base}/../rules"),
                    2 => base.replacen('v', "%76", 1),
                    _ => format!("{base}/"),
                }
            }
            Path::Raw(s) => format!("/{s}"),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Credentials {
    None,
    /// `gw`'s right password, as Basic.
    Right,
    /// `gw` with a wrong password.
    Wrong,
    /// `Bearer` with the right password of `gw` (it names no user: `default`, which is off).
    Bearer,
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum BodyInput {
    Empty,
    Json(Json),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Step {
    locked: bool,
    /// The peer the request came from: a trusted proxy (loopback) or not.
    from_proxy: bool,
    method: u8,
    path: Path,
    query: Option<Vec<(u8, u8)>>,
    credentials: Credentials,
    headers: Vec<(u8, u8, Option<String>)>,
    json_type: bool,
    body: BodyInput,
}

struct Fronts {
    runtime: tokio::runtime::Runtime,
    open: Arc<Front>,
    locked: Arc<Front>,
    /// The locked node's executor, to read its rules back.
    locked_exec: std::sync::Mutex<Executor>,
}

fn fronts() -> &'static Fronts {
    static FRONTS: OnceLock<Fronts> = OnceLock::new();
    FRONTS.get_or_init(|| {
        let open = Executor::new(Config::default_for_tests());
        let locked = locked::locked_node(
            &["~gw:*", "+@ratelimit", "+@connection"],
            &[&["RL.RULE", "SET", "r", "LIMIT", "5", "PERIOD", "1m"]],
        );
        Fronts {
            runtime: locked::runtime(),
            open: Arc::new(Front::new(open.shared.clone())),
            locked: Arc::new(Front::new(locked.shared.clone())),
            locked_exec: std::sync::Mutex::new(locked),
        }
    })
}

fn basic(user: &str, pass: &str) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{pass}");
    let bytes = input.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

fn request(step: &Step) -> Option<Request<Body>> {
    let method = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
    ][usize::from(step.method) % 6]
        .clone();
    let mut uri = step.path.text();
    if let Some(query) = &step.query {
        let pairs: Vec<String> = query
            .iter()
            .take(8)
            .map(|(f, w)| {
                format!(
                    "{}={}",
                    FIELDS[usize::from(*f) % FIELDS.len()],
                    WORDS[usize::from(*w) % WORDS.len()]
                )
            })
            .collect();
        uri = format!("{uri}?{}", pairs.join("&"));
    }
    let mut builder = Request::builder().method(method).uri(uri);
    let auth = match &step.credentials {
        Credentials::None => None,
        Credentials::Right => Some(basic("gw", "gw-secret")),
        Credentials::Wrong => Some(basic("gw", "nope")),
        Credentials::Bearer => Some("Bearer gw-secret".into()),
        Credentials::Raw(s) => Some(s.clone()),
    };
    if let Some(a) = auth {
        builder = builder.header("authorization", a);
    }
    if step.json_type {
        builder = builder.header("content-type", "application/json");
    }
    for (name, word, raw) in step.headers.iter().take(8) {
        let name = HEADERS[usize::from(*name) % HEADERS.len()];
        let value = raw
            .clone()
            .unwrap_or_else(|| WORDS[usize::from(*word) % WORDS.len()].to_owned());
        builder = builder.header(name, value);
    }
    let body = match &step.body {
        BodyInput::Empty => Body::empty(),
        BodyInput::Json(j) => Body::from(j.value(0).to_string()),
        BodyInput::Raw(b) => Body::from(b.clone()),
    };
    let mut req = builder.body(body).ok()?;
    let peer: std::net::IpAddr = if step.from_proxy {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv4Addr::new(192, 0, 2, 7).into()
    };
    req.extensions_mut().insert(sluice_http::trust::Peer(peer));
    Some(req)
}

/// Whether `path` (without its query) is one of the API's routes, as axum matches them.
fn is_route(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(
        parts.as_slice(),
        ["", "v1", "check"]
            | ["", "v1", "auth"]
            | ["", "rules"]
            | ["", "rules", _]
            | ["", "rules", _, "history" | "rollback"]
            | ["", "healthz" | "readyz" | "openapi.json"]
    ) || (path.starts_with("/v1/auth/") && path.len() > "/v1/auth/".len())
}

fn rules_of(exec: &std::sync::Mutex<Executor>) -> Vec<u8> {
    let mut exec = exec.lock().expect("executor");
    exec.exec(&[b"RL.RULE", b"LIST"]).to_vec()
}

fuzz_target!(|steps: Vec<Step>| {
    let fronts = fronts();
    let rules_before = rules_of(&fronts.locked_exec);
    for step in steps.iter().take(16) {
        let Some(req) = request(step) else { continue };
        let path = req.uri().path().to_owned();
        let head = req.method() == Method::HEAD;
        let front = if step.locked {
            &fronts.locked
        } else {
            &fronts.open
        };
        let app = router(front.clone());
        let (status, body) = fronts.runtime.block_on(async move {
            let response = app.oneshot(req).await.expect("the router is infallible");
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 24)
                .await
                .expect("a body the server wrote is readable");
            (status, body)
        });
        let route = is_route(&path);
        assert!(
            !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "{status} for {step:?}: {body:?}"
        );
        // A HEAD answer has no body, whatever its status.
        let must_be_json = !head && [400u16, 401, 403, 409, 413, 415].contains(&status.as_u16());
        if route && must_be_json {
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
                panic!("{status} body is not JSON ({e}): {body:?} for {step:?}")
            });
            let text = json
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or_default();
            assert!(
                !text.is_empty(),
                "{status} without an error text: {json} for {step:?}"
            );
        }
        if step.locked && path != "/healthz" && !matches!(step.credentials, Credentials::Right) {
            let raw_right =
                matches!(&step.credentials, Credentials::Raw(s) if s == &basic("gw", "gw-secret"));
            if !raw_right {
                assert!(
                    [401, 404, 405].contains(&status.as_u16()),
                    "{status} without credentials on the locked front: {body:?} for {step:?}"
                );
            }
        }
    }
    assert_eq!(
        rules_before,
        rules_of(&fronts.locked_exec),
        "the locked front's rules changed: {steps:?}"
    );
});
