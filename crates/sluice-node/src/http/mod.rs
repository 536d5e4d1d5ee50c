//! `--http-port P`: the checks and the rules over HTTP, on the `--bind` address, served by
//! axum on its own thread (one current-thread runtime, as `/metrics`).
//!
//! # Routes
//! - `POST /v1/check`: one `RL.CHECK` (`{"key","limit","window",...}`) or one `RL.ALLOW`
//!   (`{"user","ip","key","tier","endpoint","cost"}`); `200` allowed, `429` denied, with the
//!   JSON body and the headers of [`sluice_http::verdict`].
//! - `GET /v1/auth`: `RL.ALLOW` for gateway subrequests (nginx `auth_request`, Traefik
//!   `forwardAuth`, Envoy `ext_authz`), subjects from headers or the query ([`check`]).
//! - `/rules` CRUD, history and rollback: `RL.RULE` underneath ([`rules`]).
//! - `GET /v1/dashboard`: the live page's JSON ([`dashboard`]); `GET /dashboard`: the page.
//! - `GET /healthz`, `GET /readyz`, `GET /openapi.json`.
//!
//! # How a request is served
//! `POST /v1/check`, the request this port exists for, is answered ahead of the router
//! ([`sluice_http::serve::Ahead`]): the same login and the same check, without the router's
//! matching, middleware and extractors; as a keep-alive client sends it, without hyper
//! ([`sluice_http::direct`]).
//!
//! Every request runs as the ACL user its credentials name ([`login`]), and every route as the
//! commands it stands for, through the command table in one session of this thread
//! ([`Front::exec_as`]): `POST /v1/check` and `GET /v1/auth` are `RL.CHECK` or `RL.ALLOW` on
//! their keys, `PUT /rules/{id}` is `RL.RULE SET`, `GET /rules` `RL.RULE LIST`, and so on. So the
//! same ACL (command and key permissions), parsing, validation, routing (`-MOVED`,
//! `-CROSSSLOT`), roles (`-READONLY`) and counters apply as over RESP. A check another cluster node owns (`-MOVED`) is
//! forwarded to it ([`forward`]). A RESP error becomes a JSON `{"error"}` whose
//! status says whose fault it is ([`sluice_http::reply::error_status`]).
//!
//! # Protection
//! Bodies over [`sluice_http::MAX_BODY`] are `413` before they are read whole; a body that does
//! not arrive within [`sluice_http::BODY_DEADLINE`] is `408`; JSON is parsed with unknown fields
//! refused by name.
//!
//! Every route but `/healthz` and `/dashboard` (a page without data) logs in as RESP's `AUTH` does ([`sluice_http::auth`]):
//! `Authorization: Bearer <password>` is the `default` user, `Basic base64(user:password)` a
//! named one. Without the header a request runs as `default` when that user is on and `nopass`
//! (no password anywhere, as a RESP connection is logged in), and is `401` otherwise (a
//! `--requirepass`, a password or `off` on `default` by ACL SETUSER or `--aclfile`). A user
//! who logs in but may not run the route's command on its keys gets `403` with Redis's
//! `NOPERM` text.

pub mod check;
pub mod dashboard;
pub mod forward;
pub mod rules;

use std::io;
use std::net::TcpListener as StdListener;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::BytesMut;
use parking_lot::Mutex;
use sluice_resp::Value;

use crate::acl::User;
use crate::cmd::{self, Ctx, Session};
use crate::shared::Shared;

/// The HTTP front's state: the server and this thread's command session.
pub struct Front {
    pub shared: Arc<Shared>,
    /// Checks and reads, on the runtime's thread.
    session: Mutex<Session>,
    /// Rule writes, on tokio's blocking pool: an etcd write waits for etcd, and must not hold
    /// the checks' session meanwhile. It shares the HTTP stats slot; writes are rare, so a
    /// count lost to a race between the two is too.
    admin: Mutex<Session>,
    /// Connections to the nodes that own the buckets this one does not.
    pub owners: forward::Owners,
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Front")
    }
}

impl Front {
    pub fn new(shared: Arc<Shared>) -> Front {
        let session = |name: &str| {
            let addr = shared.local_addr;
            let client = shared.clients.register(addr, addr);
            *client.name.lock() = Some(name.into());
            // Each command runs as the user its request logged in as (`exec_as`).
            let mut session = Session::new(client, shared.acl.default_user());
            session.authenticated = true;
            session.thread = shared.stats.http_slot();
            Mutex::new(session)
        };
        Front {
            session: session("http"),
            admin: session("http-admin"),
            owners: forward::Owners::default(),
            shared,
        }
    }

    /// Runs one command as a RESP client logged in as `user` would, and decodes its reply.
    pub fn exec_as<A: AsRef<[u8]>>(&self, user: &Arc<User>, args: &[A]) -> Value {
        self.exec_in(&self.session, true, user, args)
    }

    /// [`Front::exec_as`] in the rule writers' session.
    pub fn exec_admin_as<A: AsRef<[u8]>>(&self, user: &Arc<User>, args: &[A]) -> Value {
        self.exec_in(&self.admin, false, user, args)
    }

    /// `checks`: the session is the checks' one, which holds this front's batch flag in a
    /// cluster while its command runs, so a slot pause waits for a check that passed the slot
    /// check (the rule writers' session touches no bucket).
    fn exec_in<A: AsRef<[u8]>>(
        &self,
        session: &Mutex<Session>,
        checks: bool,
        user: &Arc<User>,
        args: &[A],
    ) -> Value {
        let request = sluice_resp::Request::from_args(args);
        let mut out = BytesMut::new();
        let mut session = session.lock();
        let _batch = (self.shared.cluster.as_ref())
            .filter(|_| checks)
            .map(|c| c.batch(session.thread));
        // The session is this thread's, shared by every request: it takes each request's user
        // for its one command.
        session.user = user.clone();
        let started = std::time::Instant::now();
        let mut ctx = Ctx {
            shared: &self.shared,
            session: &mut session,
            out: &mut out,
            now: self.shared.clock.now(),
            ahead: sluice_store::Ahead::NONE,
        };
        cmd::execute(request.view(), &mut ctx);
        let slot = self.shared.stats.slot(session.thread);
        session.batch.charge(slot, started.elapsed());
        if let Some(v) = int_array(&out) {
            return v;
        }
        match sluice_resp::value::decode(&mut out) {
            Ok(Some(v)) => v,
            _ => Value::Error("ERR the command gave no reply".into()),
        }
    }

    /// Unix milliseconds on the server's clock.
    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.shared.clock.now().0 / sluice_core::Nanos::PER_MS).unwrap_or(i64::MAX)
    }
}

/// A reply that is one array of integers and bulk strings (`RL.CHECK`'s and `RL.ALLOW`'s), read
/// straight off its bytes: the value the general decoder gives, without its scans and
/// conversions. `None` for anything else, which the general decoder reads.
fn int_array(reply: &[u8]) -> Option<Value> {
    /// The digits (with an optional leading `-`) up to `\r\n`, and the rest after it.
    fn number(bytes: &[u8]) -> Option<(i64, &[u8])> {
        let (negative, bytes) = match bytes.split_first()? {
            (b'-', rest) => (true, rest),
            _ => (false, bytes),
        };
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let rest = bytes[digits..].strip_prefix(b"\r\n")?;
        if digits == 0 || digits > 18 {
            return None;
        }
        let n = bytes[..digits]
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        Some((if negative { -n } else { n }, rest))
    }
    let (len, mut rest) = number(reply.strip_prefix(b"*")?)?;
    if !(0..=8).contains(&len) {
        return None;
    }
    let mut items = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let (kind, after) = rest.split_first()?;
        match kind {
            b':' => {
                let (n, after) = number(after)?;
                items.push(Value::Int(n));
                rest = after;
            }
            b'$' => {
                let (n, after) = number(after)?;
                let n = usize::try_from(n).ok()?;
                let text = after.get(..n)?;
                rest = after.get(n..)?.strip_prefix(b"\r\n")?;
                items.push(Value::Bulk(bytes::Bytes::copy_from_slice(text)));
            }
            _ => return None,
        }
    }
    rest.is_empty().then_some(Value::Array(items))
}

/// Starts the HTTP server on `listener` (already bound, so a taken port fails the start).
pub fn start(
    listener: StdListener,
    shared: Arc<Shared>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    crate::thread::runtime_thread("sluice-http", move || serve(listener, shared))
}

async fn serve(listener: StdListener, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return sluice_log::log(&format!("http: cannot register its listener: {e}")),
    };
    let mut shutdown = shared.shutdown_signal();
    let front = Arc::new(Front::new(shared));
    let app = router(front.clone());
    let listener = sluice_http::guard::Guarded::new(
        listener,
        sluice_http::guard::MAX_CONNECTIONS,
        sluice_http::guard::IDLE,
    );
    sluice_http::serve::serve_ahead(listener, app, Some(check_ahead(front)), async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    })
    .await;
}

/// `POST /v1/check`, answered before the router (the routed one answers the same to a
/// request that comes through no socket, as the fuzz target's).
fn check_ahead(front: Arc<Front>) -> sluice_http::serve::Ahead {
    sluice_http::serve::Ahead {
        method: axum::http::Method::POST,
        path: "/v1/check",
        handler: Arc::new({
            let front = front.clone();
            move |req| Box::pin(check::post_check_ahead(front.clone(), req))
        }),
        direct: Some(Arc::new(move |req| {
            Box::pin(check::post_check_direct(front.clone(), req))
        })),
    }
}

/// Every route, behind the login and the body limit.
pub fn router(front: Arc<Front>) -> Router {
    let guarded = Router::new()
        .route("/v1/check", post(check::post_check))
        .route("/v1/auth", get(check::get_auth))
        .route("/v1/auth/{*endpoint}", get(check::get_auth_prefixed))
        .route("/rules", get(rules::list))
        .route(
            "/rules/{id}",
            get(rules::get_one).put(rules::put).delete(rules::delete),
        )
        .route("/rules/{id}/history", get(rules::history))
        .route("/rules/{id}/rollback", post(rules::rollback))
        .route("/v1/dashboard", get(dashboard::get))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(sluice_http::openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            front.clone(),
            require_login,
        ));
    // The page holds no data: it logs in when it asks `/v1/dashboard`.
    sluice_http::routes(guarded)
        .route("/dashboard", get(sluice_http::dashboard::page))
        .with_state(front)
}

/// The user a request logs in as ([`login`]), put in its extensions for the handlers; `401`
/// when there is none.
async fn require_login(State(front): State<Arc<Front>>, mut req: Request, next: Next) -> Response {
    let value = req.headers().get(axum::http::header::AUTHORIZATION);
    match login(&front.shared, value.map(|v| v.as_bytes())) {
        Some(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        None => sluice_http::auth::unauthorized().into_response(),
    }
}

/// The user an `Authorization` value (HTTP's header, gRPC's metadata) logs in as, as `AUTH`
/// would: `Bearer` the `default` user, `Basic` a named one; without credentials, `default` when
/// it is on and `nopass` (a RESP connection is logged in as it then). `None`: no such user, a
/// wrong password, a disabled user, or a value that is not Bearer or Basic.
pub fn login(shared: &Shared, authorization: Option<&[u8]>) -> Option<Arc<User>> {
    match sluice_http::auth::parse(authorization).ok()? {
        Some(c) => shared.acl.authenticate(&c.user, &c.password),
        None => {
            let default = shared.acl.default_user();
            default.needs_no_password().then_some(default)
        }
    }
}

/// The user [`require_login`] logged a request in as.
pub type LoggedIn = Extension<Arc<User>>;

/// Ready: the rules are loaded (etcd connected when rules come from it), the cluster table
/// known in cluster mode, and a replica's link to its primary up.
async fn readyz(State(front): State<Arc<Front>>) -> Response {
    let shared = &front.shared;
    let mut waiting = Vec::new();
    if shared.rules.source == crate::rules::Source::Etcd && shared.rules_etcd.get().is_none() {
        waiting.push("rules etcd not connected");
    }
    if let Some(cluster) = &shared.cluster
        && cluster.view().is_none()
    {
        waiting.push("no cluster table");
    }
    {
        let inner = shared.repl.inner.lock();
        if inner.master.is_some() && inner.link_up_since.is_none() {
            waiting.push("replica link down");
        }
    }
    if waiting.is_empty() {
        (
            StatusCode::OK,
            axum::Json(serde_json::json!({"status": "ready"})),
        )
            .into_response()
    } else {
        let body = serde_json::json!({"status": "not ready", "waiting": waiting});
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_int_array_reads_as_the_decoder_reads_it() {
        for reply in [
            &b"*5\r\n:1\r\n:1000000\r\n:999999\r\n:-1\r\n:100000\r\n"[..],
            b"*6\r\n:0\r\n:2\r\n:0\r\n:19999\r\n:59999\r\n$6\r\napi-ip\r\n",
            b"*0\r\n",
            b"*1\r\n:-999999999999999999\r\n",
        ] {
            let mut buf = BytesMut::from(reply);
            let decoded = sluice_resp::value::decode(&mut buf).unwrap().unwrap();
            assert_eq!(int_array(reply), Some(decoded), "{reply:?}");
        }
        for other in [
            &b"-ERR limit must be a positive integer\r\n"[..],
            b"*2\r\n:1\r\n",
            b"*1\r\n:1\r\n:2\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n:9999999999999999999\r\n",
            b"*1\r\n:\r\n",
            b"*1\r\n+OK\r\n",
            b"*1\r\n$3\r\nab\r\n",
        ] {
            assert_eq!(int_array(other), None, "{other:?}");
        }
    }
}
