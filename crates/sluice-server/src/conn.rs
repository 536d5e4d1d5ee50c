//! One connection: read, decode every complete request, execute each, write once.
//!
//! The loop reads into a `BytesMut`, hands the parser the whole buffer, and executes every
//! complete request in it (pipelining) before writing all their replies with one `write_all`.
//! Requests borrow their arguments from the read buffer (zero-copy); the clock is read once per
//! batch. A framing error gets Redis's `-ERR Protocol error: ...` and closes this connection
//! only; a bad argument is an error reply and the connection goes on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::BytesMut;
use sluice_resp::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cmd::{self, Ctx, Session};
use crate::server::Shared;

/// Read buffer growth step; a pipelined batch of small commands fits in one.
const READ_CHUNK: usize = 16 * 1024;

pub async fn serve(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, thread: usize) {
    let _ = stream.set_nodelay(true);
    shared.stats.connections_received.fetch_add(1, Relaxed);
    let laddr = stream.local_addr().unwrap_or(shared.local_addr);
    let client = shared.clients.register(peer, laddr);
    let mut session = Session {
        client: client.clone(),
        proto: Default::default(),
        authenticated: shared.requirepass.read().is_none(),
        close: false,
    };
    let mut shutdown = shared.shutdown_signal();
    let mut parser = Parser::new(shared.limits);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::with_capacity(READ_CHUNK);

    loop {
        if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
            rbuf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            _ = client.kill.notified() => break,
            _ = shutdown.wait_for(|stop| *stop) => break,
            read = stream.read_buf(&mut rbuf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
        }

        let now = shared.clock.now();
        let mut executed = 0u64;
        let mut protocol_error = false;
        loop {
            match parser.parse(&mut rbuf) {
                Ok(Some(request)) => {
                    executed += 1;
                    let mut ctx = Ctx {
                        shared: &shared,
                        session: &mut session,
                        out: &mut out,
                        now,
                    };
                    cmd::execute(&request, &mut ctx);
                    if session.close {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    e.write_reply(&mut out);
                    protocol_error = true;
                    break;
                }
            }
        }
        shared.stats.add_commands(thread, executed);
        if executed > 0 {
            client
                .last_active_ms
                .store(client.created.elapsed().as_millis() as u64, Relaxed);
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        if protocol_error || session.close {
            break;
        }
    }
    let _ = stream.shutdown().await;
    shared.clients.unregister(client.id);
}
