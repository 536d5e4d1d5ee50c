//! The server loop both HTTP fronts run: connections accepted through [`Guarded`] (the cap and
//! the idle deadline), each served by hyper's HTTP/1 server with a header-read timeout.
//!
//! A request head (request line and headers) must arrive whole within [`HEAD_TIMEOUT`] of the
//! server starting to read it — on a new connection, or on a kept-alive one after the previous
//! response — else the connection is closed. A client that trickles a head a byte at a time
//! (which keeps [`Guarded`]'s idle deadline from ever passing) is cut off all the same.
//!
//! A head is at most [`MAX_HEAD`] bytes (and hyper's 100 header lines): a larger one is
//! answered `431` and the connection closed, so a connection buffers about that much of a
//! head (plus one read), not hyper's default 408 KiB.
//!
//! Every request the router serves carries its connection's [`Peer`] address, for the
//! client-address rule of `GET /v1/auth` ([`crate::trust`]).
//!
//! A front may answer one route [`Ahead`] of its router: the node's `POST /v1/check`, the
//! request its HTTP port exists for. That request skips the router's matching, its middleware
//! (a boxed future and a cloned service each), its extractors (a cloned header map) and the
//! peer's extension; the handler answers exactly what the routed one would. Its requests that
//! come as a keep-alive client sends them are answered before hyper reads the connection at
//! all ([`crate::direct`]); the rest of such a connection goes to hyper when one does not.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use axum::serve::Listener;
use axum::{Extension, Router};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::{TowerToHyperService, TowerToHyperServiceFuture};

use crate::direct;
use crate::guard::Guarded;
use crate::trust::Peer;
use crate::{HEAD_TIMEOUT, MAX_HEAD};

/// A handler's answer, boxed: one allocation per request.
pub type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

/// One route served ahead of the router: requests with exactly this method and path (the
/// query is not part of the path; a trailing slash or an escape goes to the router, as does
/// anything it does not route) go to `handler`, or to `direct` when [`crate::direct`] serves
/// them off the socket (`method` is then `POST`). Both answer what the routed handler would.
#[derive(Clone)]
pub struct Ahead {
    pub method: Method,
    pub path: &'static str,
    pub handler: Arc<dyn Fn(Request) -> Answer + Send + Sync>,
    pub direct: Option<crate::direct::Handler>,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ahead({} {})", self.method, self.path)
    }
}

/// Serves `app` on `listener` until `shutdown` completes (then stops accepting; connections
/// being served end with the runtime).
pub async fn serve(listener: Guarded, app: Router, shutdown: impl Future<Output = ()>) {
    serve_ahead(listener, app, None, shutdown).await;
}

/// [`serve`], with `ahead`'s route answered before the router.
pub async fn serve_ahead(
    mut listener: Guarded,
    app: Router,
    ahead: Option<Ahead>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        let (conn, addr) = conn;
        let service = Connection {
            ahead: ahead.clone(),
            router: TowerToHyperService::new(app.clone().layer(Extension(Peer::of(addr)))),
        };
        tokio::spawn(async move {
            let direct = (service.ahead.as_ref())
                .filter(|a| a.method == Method::POST)
                .and_then(|a| Some((a.path, a.direct.clone()?)));
            let conn = match direct {
                Some((path, handler)) => match direct::serve(conn, path, &handler).await {
                    direct::Ended::Closed => return,
                    direct::Ended::Handover(conn) => conn,
                },
                None => direct::Prefixed::new(conn),
            };
            // A connection's errors (a reset, a bad head, the head timeout) end it alone.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_header_size(MAX_HEAD)
                .serve_connection(TokioIo::new(conn), service)
                .await;
        });
    }
}

/// One connection's service: [`Ahead`]'s route, else the router (with the peer's address).
struct Connection {
    ahead: Option<Ahead>,
    router: TowerToHyperService<Router>,
}

impl Service<hyper::Request<Incoming>> for Connection {
    type Response = Response;
    type Error = Infallible;
    type Future = Served;

    fn call(&self, req: hyper::Request<Incoming>) -> Served {
        if let Some(ahead) = &self.ahead
            && req.method() == ahead.method
            && req.uri().path() == ahead.path
        {
            return Served::Ahead((ahead.handler)(req.map(axum::body::Body::new)));
        }
        Served::Router(Box::pin(self.router.call(req)))
    }
}

/// The future of [`Connection`]'s answer.
enum Served {
    Ahead(Answer),
    Router(Pin<Box<TowerToHyperServiceFuture<Router, hyper::Request<Incoming>>>>),
}

impl Future for Served {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Served::Ahead(answer) => answer.as_mut().poll(cx).map(Ok),
            Served::Router(routed) => routed.as_mut().poll(cx),
        }
    }
}
