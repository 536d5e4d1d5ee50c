//! The replica's side: the link to the primary. Redis's handshake, then a full sync (the
//! snapshot replaces the store) or a partial one (the store is kept), then the stream, applied
//! record by record. The link acks its offset every `ACK_EVERY` (200 ms) and whenever the
//! primary asks.
//!
//! Garbage from the primary closes the link, never the node; the link retries every second
//! until REPLICAOF changes, and the node keeps serving reads meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use sluice_repl::{Record, SnapshotReader, record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{LinkState, MasterAddr};
use crate::peer::Peer;
use crate::shared::Shared;
use sluice_resp::Value;
/// Wait between attempts after a failed or lost link.
const RETRY_EVERY: Duration = Duration::from_secs(1);

type LinkResult<T> = Result<T, String>;

/// Keeps this node replicating from whatever REPLICAOF names, for the life of the process.
pub async fn link(shared: Arc<Shared>) {
    let mut target = shared.repl.target();
    loop {
        let Some(addr) = target.borrow_and_update().clone() else {
            if target.changed().await.is_err() {
                return;
            }
            continue;
        };
        let outcome = tokio::select! {
            r = sync_from(&shared, &addr) => r,
            _ = target.changed() => Err("REPLICAOF changed".into()),
        };
        if let Err(why) = outcome {
            let mut inner = shared.repl.inner.lock();
            if inner.link_up_since.take().is_some() || inner.link != LinkState::Connect {
                sluice_log::log(&format!(
                    "Link with MASTER {}:{} down: {why}",
                    addr.host, addr.port
                ));
            }
            inner.link = LinkState::Connect;
            inner.link_down_since.get_or_insert_with(Instant::now);
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_EVERY) => {}
            _ = target.changed() => {}
        }
    }
}

fn set_link(shared: &Shared, state: LinkState) {
    shared.repl.inner.lock().link = state;
}

/// `REPLCONF ACK <offset>` on a link to a primary (or to a migration source).
pub async fn send_ack(stream: &mut TcpStream, offset: u64) -> LinkResult<()> {
    let off = offset.to_string();
    let msg = format!(
        "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n${}\r\n{off}\r\n",
        off.len()
    );
    stream
        .write_all(msg.as_bytes())
        .await
        .map_err(|e| e.to_string())
}

async fn sync_from(shared: &Arc<Shared>, addr: &MasterAddr) -> LinkResult<()> {
    set_link(shared, LinkState::Connecting);
    let mut peer = match shared
        .tls
        .as_ref()
        .filter(|_| shared.config.tls_replication)
    {
        Some(tls) => Peer::connect_tls(&addr.host, addr.port, tls.client.clone()).await?,
        None => Peer::connect(&addr.host, addr.port).await?,
    };

    let pong = peer.call(&[b"PING"]).await?;
    let pong_text = pong.text();
    if !(pong_text == "PONG" || pong_text.starts_with("NOAUTH") || pong_text.starts_with("NOPERM"))
    {
        return Err(format!("unexpected reply to PING: {pong_text}"));
    }
    if let Some(pass) = shared.live.masterauth() {
        let auth = sluice_client::Credentials {
            user: shared.config.masteruser.clone(),
            password: pass,
        };
        if let Err(reply) = peer.login(&auth).await {
            sluice_log::log(&format!(
                "MASTER {}:{} refused AUTH (check --masteruser/--masterauth): {reply}",
                addr.host, addr.port
            ));
            return Err(reply);
        }
    }
    // With `--tls-replication yes` the replica announces its TLS port, as Redis does: the
    // primary's INFO lists it, and Sentinel reaches the replica there.
    let port = match shared.config.tls_port {
        Some(tls) if shared.config.tls_replication => tls,
        _ => shared.local_addr.port(),
    };
    let port = port.to_string();
    let reply = peer
        .call(&[b"REPLCONF", b"listening-port", port.as_bytes()])
        .await?;
    if !reply.is_ok() {
        return Err(format!("REPLCONF listening-port refused: {}", reply.text()));
    }
    let capa = sluice_repl::CAPA.as_bytes();
    let reply = peer
        .call(&[
            b"REPLCONF",
            b"capa",
            b"eof",
            b"capa",
            b"psync2",
            b"capa",
            capa,
            b"capa",
            sluice_repl::OLDER_CAPA.as_bytes(),
        ])
        .await?;
    if !reply.is_ok() {
        return Err(format!("REPLCONF capa refused: {}", reply.text()));
    }
    let skew = super::skew::Skew::measure(&mut peer, &shared.clock, "MASTER").await;
    shared.repl.inner.lock().skew = skew;
    let primary = PrimaryInfo::read(&mut peer).await;
    refuse_a_primary_behind_us(shared, &primary)?;
    let (replid, offset) = {
        let mut inner = shared.repl.inner.lock();
        // Buckets loaded from this replica's snapshot are on the clock it was saved under. A
        // wall clock stepped while the node was down leaves each of their times off by the
        // step, which no snapshot can show: continue from them only where this clock and the
        // primary's agree, else take a full sync, whose times are moved by the difference
        // just measured.
        let agree = skew
            .ahead_ns()
            .is_some_and(|a| a.unsigned_abs() < super::skew::WINDOW_AGREE_NS.unsigned_abs());
        if std::mem::take(&mut inner.state_from_snapshot) && inner.synced && !agree {
            sluice_log::log(
                "The clocks of MASTER and this replica disagree: asking for a full sync instead of continuing from the snapshot, whose times are on the clock it was saved under",
            );
            inner.synced = false;
        }
        if inner.synced {
            (inner.replid.clone(), inner.offset.to_string())
        } else {
            ("?".to_string(), "-1".to_string())
        }
    };
    let reply = peer
        .call(&[b"PSYNC", replid.as_bytes(), offset.as_bytes()])
        .await?;
    let reply = match reply {
        Value::Simple(s) => s,
        other => return Err(format!("PSYNC refused: {}", other.text())),
    };
    let mut words = reply.split_whitespace();
    match words.next() {
        Some("FULLRESYNC") => {
            let id = words.next().filter(|id| id.len() == 40);
            let off = words.next().and_then(|o| o.parse::<u64>().ok());
            let (Some(id), Some(off)) = (id, off) else {
                return Err(format!("malformed FULLRESYNC: {reply}"));
            };
            set_link(shared, LinkState::Sync);
            let started = Instant::now();
            let snapshot = read_snapshot(&mut peer).await?;
            let len = snapshot.len();
            let loaded = {
                let reader =
                    SnapshotReader::new(&snapshot).map_err(|e| format!("snapshot refused: {e}"))?;
                let now = shared.clock.now();
                // From here until the sync ends the store holds part of a snapshot: no stream
                // position describes it (a snapshot saved now records none, and a reconnect
                // asks for a full sync).
                shared.repl.inner.lock().synced = false;
                shared.store.flush();
                // Leases of tokens this node gave as a primary count in a state the snapshot
                // replaces: forgotten, never returned into the primary's.
                shared.token_leases.clear();
                let mut n = 0u64;
                for rec in reader.iter() {
                    let rec = rec.map_err(|e| format!("snapshot refused: {e}"))?;
                    n += u64::from(!matches!(rec, Record::Time(_)));
                    skew.apply(&shared.store, rec, now);
                }
                n
            };
            let mut inner = shared.repl.inner.lock();
            inner.replid = id.to_string();
            inner.offset = off;
            inner.synced = true;
            // The stream the primary's continues, as it said just before: a snapshot it
            // saved of that one can then be told apart from what this replica holds.
            (inner.replid2, inner.second_offset) = match &primary {
                Some(p) if p.replid == id => (p.replid2.clone(), p.second_offset),
                _ => ("0".repeat(40), -1),
            };
            inner.second_is_own = false;
            sluice_log::log(&format!(
                "MASTER <-> REPLICA sync: loaded {loaded} entries ({len} bytes) in {} ms",
                started.elapsed().as_millis()
            ));
        }
        Some("CONTINUE") => {
            if let Some(id) = words.next().filter(|id| id.len() == 40) {
                let mut inner = shared.repl.inner.lock();
                // A new id continues the stream this replica held (Redis does the same).
                if inner.replid != id {
                    inner.replid2 = std::mem::replace(&mut inner.replid, id.to_string());
                    inner.second_offset = inner.offset as i64 + 1;
                    inner.second_is_own = false;
                }
            }
            sluice_log::log(&format!(
                "MASTER <-> REPLICA sync: partial resynchronization accepted from offset {offset}"
            ));
        }
        _ => return Err(format!("PSYNC refused: {reply}")),
    }
    {
        let mut inner = shared.repl.inner.lock();
        inner.link = LinkState::Connected;
        inner.link_up_since = Some(Instant::now());
        inner.link_down_since = None;
        inner.last_io = Instant::now();
    }
    sluice_log::log(&format!(
        "Link with MASTER {}:{} up: streaming",
        addr.host, addr.port
    ));
    stream_from(shared, peer.stream, peer.buf).await
}

/// What a primary says of its streams in `INFO replication` before PSYNC: its id, the stream
/// its own continues (`master_replid2`, up to `second_repl_offset` - 1), and, after a restart
/// from a snapshot, where that snapshot stands (`snapshot_replid`, `snapshot_repl_offset`).
#[derive(Debug)]
struct PrimaryInfo {
    replid: String,
    replid2: String,
    second_offset: i64,
    snapshot: Option<(String, u64)>,
}

impl PrimaryInfo {
    /// `None` when the primary does not answer INFO (a Redis that refuses it, say).
    async fn read(peer: &mut Peer) -> Option<PrimaryInfo> {
        let Ok(Value::Bulk(info)) = peer.call(&[b"INFO", b"replication"]).await else {
            return None;
        };
        let info = String::from_utf8_lossy(&info);
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let snapshot_at = field("snapshot_repl_offset").and_then(|o| o.parse::<u64>().ok());
        Some(PrimaryInfo {
            replid: field("master_replid")?,
            replid2: field("master_replid2").unwrap_or_else(|| "0".repeat(40)),
            second_offset: field("second_repl_offset")
                .and_then(|o| o.parse().ok())
                .unwrap_or(-1),
            snapshot: field("snapshot_replid").zip(snapshot_at),
        })
    }
}

/// Refuses to sync from a primary that restarted from a snapshot older than what this replica
/// holds: a full sync would wipe the newer buckets (every client spent since the snapshot
/// would get that quota again). The snapshot is older when it stands in the stream this
/// replica holds, or in the one that stream continues up to where it forked (a replica that
/// saved it, then was promoted: offsets run on across a promotion), at an offset this replica
/// has passed. A replica ahead of a newly promoted one is not refused: Sentinel promotes the
/// furthest. Nor is one that follows the primary's stream since its restart (it holds only
/// what that primary sent), nor one that left the stream by its own promotion (`REPLICAOF NO
/// ONE`, then `REPLICAOF`: the operator's way to take this primary's state).
fn refuse_a_primary_behind_us(shared: &Shared, primary: &Option<PrimaryInfo>) -> LinkResult<()> {
    let Some(p) = primary.as_ref() else {
        return Ok(());
    };
    let Some((snapshot_id, at)) = p.snapshot.as_ref() else {
        return Ok(());
    };
    let at = *at;
    let inner = shared.repl.inner.lock();
    if !inner.synced || p.replid == inner.replid {
        return Ok(());
    }
    let ours = *snapshot_id == inner.replid
        || (!inner.second_is_own
            && *snapshot_id == inner.replid2
            && (at as i64) < inner.second_offset);
    if ours && inner.offset > at {
        return Err(format!(
            "refusing a full sync: the primary restarted from a snapshot at offset {at} of stream {snapshot_id}, and this replica holds up to {}; keeping the newer buckets (promote this replica to keep them, or REPLICAOF NO ONE then REPLICAOF to take the primary's)",
            inner.offset
        ));
    }
    Ok(())
}

/// The most a snapshot read reserves ahead of the bytes that arrived.
const SNAPSHOT_CHUNK: usize = 1 << 20;

/// Reads `$<len>\r\n` and then `len` bytes of snapshot (no CRLF after them, as Redis sends
/// an RDB payload). Empty lines before the header are keepalives.
pub async fn read_snapshot(peer: &mut Peer) -> LinkResult<BytesMut> {
    let header = loop {
        let line = peer.line().await?;
        if !line.is_empty() {
            break line;
        }
    };
    let len = header
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| format!("malformed snapshot header: {header}"))?;
    while peer.buf.len() < len {
        // Room grows with what arrives, never with what the header claims: a garbage length
        // must not reserve memory the peer never sends.
        peer.buf.reserve((len - peer.buf.len()).min(SNAPSHOT_CHUNK));
        let read = peer
            .stream
            .read_buf(&mut peer.buf)
            .await
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("primary closed the connection during the snapshot".into());
        }
    }
    let snapshot = peer.buf.split_to(len);
    // What follows the snapshot gets a buffer of its own: the rest of this one shares the
    // snapshot's allocation, which would stay resident as long as the link lives.
    peer.buf = BytesMut::from(&peer.buf[..]);
    Ok(snapshot)
}

/// Applies the stream until the link fails.
async fn stream_from(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    mut buf: BytesMut,
) -> LinkResult<()> {
    let timeout = Duration::from_secs(crate::live::Live::get(&shared.live.repl_timeout).max(1));
    let mut ack_tick = tokio::time::interval(super::ACK_EVERY);
    let master = shared.clients.register(
        stream.peer_addr().map_err(|e| e.to_string())?,
        stream.local_addr().map_err(|e| e.to_string())?,
    );
    master.set_kind(crate::clients::ClientKind::Master);
    let skew = shared.repl.inner.lock().skew;
    // The silence allowed runs from the last read, not from each wait: the acks sent every
    // ACK_EVERY end a wait early, and must not restart it.
    let mut silent_until = tokio::time::Instant::now() + timeout;
    let result = async {
        loop {
            let mut ack_now = false;
            {
                let now = shared.clock.now();
                let mut applied = 0usize;
                loop {
                    match record::decode(&buf[applied..]) {
                        Ok(Some((rec, used))) => {
                            ack_now |= rec == Record::GetAck;
                            skew.apply(&shared.store, rec, now);
                            applied += used;
                        }
                        Ok(None) => break,
                        Err(e) => return Err(format!("bad record from the primary: {e}")),
                    }
                }
                if applied > 0 {
                    buf.advance(applied);
                    shared.repl.inner.lock().offset += applied as u64;
                }
            }
            if ack_now {
                let offset = shared.repl.inner.lock().offset;
                send_ack(&mut stream, offset).await?;
            }
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            tokio::select! {
                read = tokio::time::timeout_at(silent_until, stream.read_buf(&mut buf)) => {
                    match read {
                        Err(_) => return Err(format!("no data from the primary for {} s (repl-timeout)", timeout.as_secs())),
                        Ok(Err(e)) => return Err(e.to_string()),
                        Ok(Ok(0)) => return Err("primary closed the connection".into()),
                        Ok(Ok(_)) => {
                            shared.repl.inner.lock().last_io = Instant::now();
                            silent_until = tokio::time::Instant::now() + timeout;
                        }
                    }
                }
                _ = ack_tick.tick() => {
                    let offset = shared.repl.inner.lock().offset;
                    send_ack(&mut stream, offset).await?;
                }
                _ = master.kill.notified() => return Err("killed by CLIENT KILL".into()),
            }
        }
    }
    .await;
    shared.clients.unregister(master.id);
    result
}
