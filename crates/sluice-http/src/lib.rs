//! # sluice-http — the HTTP API's shared pieces, for the node (`--http-port`) and the sidecar
//! (`sluice proxy --http-port`): request bodies and gateway subjects as command words
//! ([`body`]), a command's reply as a status, JSON body and rate limit headers ([`reply`],
//! [`verdict`]), Bearer authentication, the listener that bounds connections and idle time
//! ([`guard`]), the server loop with its header-read timeout ([`serve`]) and the one route it
//! answers off the socket ([`direct`]), what a gateway's
//! subrequest is believed about the client ([`trust`]), the OpenAPI document both serve, and
//! the live page `/dashboard` with the pieces of its JSON ([`dashboard`]).
//!
//! Each program keeps its own handlers: the node runs the words through its command table,
//! the sidecar through the gateway library with each rule's fail mode.

pub mod auth;
pub mod body;
pub mod dashboard;
pub mod digits;
pub mod direct;
pub mod guard;
pub mod reply;
pub mod rule;
pub mod serve;
pub mod trust;
pub mod verdict;

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

pub use reply::Refusal;
pub use verdict::Verdict;

/// The largest request body read: a check is a few hundred bytes, a rule less.
pub const MAX_BODY: usize = 64 << 10;

/// How long a body may take to arrive once its headers have.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// How long a request head may take to arrive ([`serve`], [`direct`]).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request head (request line and headers), nginx's default bound
/// (`large_client_header_buffers 4 8k`): a gateway's subrequest is well under 4 KiB.
pub const MAX_HEAD: usize = 32 << 10;

/// The OpenAPI 3.1 document of the routes.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Whether `headers` carry the one password `want` (`Bearer <want>`, or Basic with the user
/// `default`), always when no password is set; else the `401` to answer. For a front without
/// ACL users (the sidecar); the node asks its users ([`auth`]).
pub fn authorized(headers: &HeaderMap, want: Option<&str>) -> Result<(), Refusal> {
    let Some(want) = want else { return Ok(()) };
    match auth::from_headers(headers) {
        Ok(Some(c))
            if c.user == auth::DEFAULT_USER
                && auth::constant_time_eq(&c.password, want.as_bytes()) =>
        {
            Ok(())
        }
        _ => Err(auth::unauthorized()),
    }
}

/// `GET /healthz`: alive.
pub async fn healthz() -> Response {
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"status": "ok"})),
    )
        .into_response()
}

/// `GET /openapi.json`.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The whole router around a program's `guarded` routes (those behind its Bearer check):
/// `GET /healthz` open to all, a JSON `404` for any other path, bodies bounded by
/// [`MAX_BODY`].
pub fn routes<S: Clone + Send + Sync + 'static>(guarded: Router<S>) -> Router<S> {
    Router::new()
        .route("/healthz", get(healthz))
        .merge(guarded)
        .fallback(|| async { reply::error(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
}
