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
//! Every request carries its connection's [`Peer`] address, for the client-address rule of
//! `GET /v1/auth` ([`crate::trust`]).

use std::future::Future;
use std::time::Duration;

use axum::serve::Listener;
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use crate::guard::Guarded;
use crate::trust::Peer;

/// How long a request head may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request head (request line and headers), nginx's default bound
/// (`large_client_header_buffers 4 8k`): a gateway's subrequest is well under 4 KiB.
pub const MAX_HEAD: usize = 32 << 10;

/// Serves `app` on `listener` until `shutdown` completes (then stops accepting; connections
/// being served end with the runtime).
pub async fn serve(mut listener: Guarded, app: Router, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        let (conn, addr) = conn;
        let service = TowerToHyperService::new(app.clone().layer(Extension(Peer::of(addr))));
        tokio::spawn(async move {
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
