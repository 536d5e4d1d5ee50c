//! One connection: read, decode every complete request, execute each, write once.
//!
//! The loop reads into a `BytesMut`, hands the parser the whole buffer, and executes every
//! complete request in it (pipelining) before writing all their replies with one write.
//! Requests borrow their arguments from the read buffer (zero-copy); the clock is read once per
//! batch for the commands' `now`, and once more at its end for the command statistics. A framing error gets Redis's `-ERR Protocol error: ...` and closes this connection
//! only; a bad argument is an error reply and the connection goes on.
//!
//! Reading and writing are independent: replies that the socket cannot take yet stay in the
//! output buffer while the loop keeps reading, as Redis does. So the two memory bounds are
//! enforced where they grow: unparsed input past `client-query-buffer-limit`, or unsent output
//! past `client-output-buffer-limit` (a client that never reads), closes that client alone.

use std::io::ErrorKind::WouldBlock;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use sluice_resp::{Parser, Request};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::cmd::{self, Ctx, Session};
use crate::repl::{Handoff, Job};
use crate::shared::Shared;

/// Read buffer growth step; a pipelined batch of small commands fits in one.
const READ_CHUNK: usize = 16 * 1024;

/// Why a connection ended, for the log lines that matter to an operator.
#[derive(Debug, PartialEq, Eq)]
enum Close {
    Quietly,
    QueryBufferLimit,
    OutputBufferLimit,
    Idle,
    /// PSYNC: the socket goes on, on the replication thread.
    HandOff,
}

pub async fn serve(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, thread: usize) {
    let _ = stream.set_nodelay(true);
    let keepalive = shared.config.tcp_keepalive;
    if keepalive > 0 {
        let ka = socket2::TcpKeepalive::new().with_time(Duration::from_secs(keepalive));
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&ka);
    }
    shared.stats.connections_received.fetch_add(1, Relaxed);
    let laddr = stream.local_addr().unwrap_or(shared.local_addr);
    let client = shared.clients.register(peer, laddr);
    let mut session = Session::new(client.clone(), shared.requirepass.read().is_none());
    session.thread = thread;
    let why = serve_session(&stream, &shared, &mut session, thread).await;
    cmd::pubsub::clear(&shared, &mut session.subs, client.id);
    if why == Close::HandOff
        && let Some(request) = session.handoff.take()
    {
        client.set_kind(crate::clients::ClientKind::Replica);
        match stream.into_std() {
            Ok(stream) => shared.repl.submit(Job::Feed(Handoff { stream, request })),
            Err(e) => {
                sluice_log::log(&format!("cannot hand replica {peer} over: {e}"));
                shared.clients.unregister(client.id);
            }
        }
        return;
    }
    // FIN after the last reply, so the client reads it before seeing the close.
    let _ = socket2::SockRef::from(&stream).shutdown(std::net::Shutdown::Write);
    match why {
        Close::Quietly => {}
        Close::QueryBufferLimit => sluice_log::log(&format!(
            "closing client {peer} (id={}) that reached the query buffer limit",
            client.id
        )),
        Close::OutputBufferLimit => sluice_log::log(&format!(
            "closing client {peer} (id={}) that reached the output buffer limit (it does not read its replies)",
            client.id
        )),
        Close::Idle | Close::HandOff => {}
    }
    shared.clients.unregister(client.id);
}

async fn serve_session(
    stream: &TcpStream,
    shared: &Arc<Shared>,
    session: &mut Session,
    thread: usize,
) -> Close {
    let client = session.client.clone();
    let mut shutdown = shared.shutdown_signal();
    let mut parser = Parser::new(shared.config.limits());
    // Reused for every request: parsing fills it in place.
    let mut request = Request::default();
    let query_limit =
        usize::try_from(shared.config.client_query_buffer_limit).unwrap_or(usize::MAX);
    let output_limit =
        usize::try_from(shared.config.client_output_buffer_limit).unwrap_or(usize::MAX);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::with_capacity(READ_CHUNK);
    // Once set, read nothing more: flush what is owed, then close.
    let mut closing = false;
    let mut last_active = Instant::now();
    let mut acks = shared.repl.acks();
    // Requests in `rbuf` wait while the connection is blocked (WAIT) and run when it wakes.
    let mut pending = false;

    loop {
        if pending && session.blocked.is_none() && !closing {
            pending = false;
            // One clock read per batch serves the idle timer, the client's `idle=` and the
            // commands' `now`.
            let read_at = std::time::Instant::now();
            last_active = Instant::from_std(read_at);
            let now = shared.clock.at(read_at);
            let mut executed = 0u64;
            let batch = shared.cluster.as_ref().map(|c| c.batch(thread));
            loop {
                match parser.parse_into(&mut rbuf, &mut request) {
                    Ok(true) => {
                        executed += 1;
                        let mut ctx = Ctx {
                            shared,
                            session: &mut *session,
                            out: &mut out,
                            now,
                        };
                        cmd::execute(&request, &mut ctx);
                        // As Redis, the hard output limit is checked reply by reply: a
                        // pipeline of large replies is cut where it crosses it.
                        if out.len() > output_limit {
                            return Close::OutputBufferLimit;
                        }
                        if session.close {
                            closing = true;
                            break;
                        }
                        if session.handoff.is_some() {
                            // Nothing may follow PSYNC on this socket but what the
                            // replication thread writes; replies owed to the commands
                            // before it go first.
                            request.clear();
                            session
                                .batch
                                .charge(shared.stats.slot(thread), read_at.elapsed());
                            while !out.is_empty() {
                                if stream.writable().await.is_err() {
                                    return Close::Quietly;
                                }
                                match stream.try_write(&out) {
                                    Ok(n) => out.advance(n),
                                    Err(e) if e.kind() == WouldBlock => {}
                                    Err(_) => return Close::Quietly,
                                }
                            }
                            return Close::HandOff;
                        }
                        if session.blocked.is_some() {
                            pending = true;
                            break;
                        }
                    }
                    Ok(false) => break,
                    Err(e) => {
                        e.write_reply(&mut out);
                        closing = true;
                        break;
                    }
                }
            }
            // Release the last frame so the read buffer is ours alone again and can be reused
            // in place rather than reallocated.
            request.clear();
            drop(batch);
            shared.stats.add_commands(thread, executed);
            // The batch's one clock read for command statistics.
            if !session.batch.is_empty() {
                session
                    .batch
                    .charge(shared.stats.slot(thread), read_at.elapsed());
            }
            if executed > 0 {
                let since_created = read_at.saturating_duration_since(client.created);
                client
                    .last_active_ms
                    .store(since_created.as_millis() as u64, Relaxed);
            }
        }
        if let Some(subs) = session.subs.as_mut() {
            while let Ok(msg) = subs.rx.try_recv() {
                msg.write(&mut out, session.proto);
            }
        }
        if !out.is_empty() {
            match stream.try_write(&out) {
                Ok(n) => out.advance(n),
                Err(e) if e.kind() == WouldBlock => {}
                Err(_) => return Close::Quietly,
            }
        }
        if out.len() > output_limit {
            return Close::OutputBufferLimit;
        }
        if closing && out.is_empty() {
            return Close::Quietly;
        }
        if rbuf.len() > query_limit {
            return Close::QueryBufferLimit;
        }
        if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
            rbuf.reserve(READ_CHUNK);
        }
        let idle_deadline = shared
            .idle_deadline(last_active.into_std())
            .filter(|_| session.blocked.is_none())
            .map(Instant::from_std);
        let blocked = session.blocked;
        if blocked.is_some() != client.blocked.load(Relaxed) {
            client.blocked.store(blocked.is_some(), Relaxed);
        }
        let wait_deadline = blocked
            .and_then(|b| b.deadline)
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let subscribed = session.subs.is_some();

        tokio::select! {
            biased;
            _ = client.kill.notified() => return Close::Quietly,
            _ = shutdown.wait_for(|stop| *stop), if !closing => {
                closing = true;
                continue;
            }
            ready = stream.writable(), if !out.is_empty() => {
                if ready.is_err() {
                    return Close::Quietly;
                }
                continue;
            }
            // WAIT: every ack may be the one it waits for; time may run out.
            _ = acks.changed(), if blocked.is_some() => {
                let b = blocked.expect("guarded");
                let acked = shared.repl.acked(b.offset);
                if acked >= b.numreplicas {
                    sluice_resp::reply::integer(&mut out, acked as i64);
                    session.blocked = None;
                }
                continue;
            }
            _ = tokio::time::sleep_until(wait_deadline), if blocked.is_some_and(|b| b.deadline.is_some()) => {
                let b = blocked.expect("guarded");
                sluice_resp::reply::integer(&mut out, shared.repl.acked(b.offset) as i64);
                session.blocked = None;
                continue;
            }
            msg = async { session.subs.as_mut().expect("guarded").rx.recv().await }, if subscribed => {
                if let Some(msg) = msg {
                    msg.write(&mut out, session.proto);
                }
                continue;
            }
            ready = stream.readable(), if !closing => {
                if ready.is_err() {
                    return Close::Quietly;
                }
                match stream.try_read_buf(&mut rbuf) {
                    Ok(0) => return Close::Quietly,
                    Ok(_) => pending = true,
                    Err(e) if e.kind() == WouldBlock => continue,
                    Err(_) => return Close::Quietly,
                }
            }
            _ = tokio::time::sleep_until(idle_deadline.unwrap_or(last_active)), if idle_deadline.is_some() && !closing => {
                return Close::Idle;
            }
        }
    }
}
