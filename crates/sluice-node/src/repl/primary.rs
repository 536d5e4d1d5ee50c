//! The primary's side: the flusher that turns shard journals into the stream, and one feed
//! task per replica that sends it its sync and then the stream, and reads its acks.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_repl::{Record, SnapshotWriter, record};
use sluice_resp::{Parser, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use super::{Attach, Handoff, PsyncRequest, SlotFilter, Sync};
use crate::shared::Shared;

/// Every `--repl-flush-ms`, drains the journals into the stream (a PING when idle). With no
/// stream (no replica or migration feed has attached yet) it sleeps instead.
pub async fn flusher(shared: Arc<Shared>) {
    let every = Duration::from_millis(shared.config.repl_flush_ms.max(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        shared.repl.streaming().await;
        tick.tick().await;
        shared.repl.flush(&shared.store, false);
    }
}

/// Serves one replica from PSYNC to disconnect.
pub async fn feed(shared: Arc<Shared>, h: Handoff) {
    let client = h.request.client.clone();
    let what = match h.request.filter {
        None => format!(
            "replica {} (listening port {})",
            h.request.peer, h.request.listening_port
        ),
        Some(_) => format!("slot migration feed to {}", h.request.peer),
    };
    match feed_inner(&shared, h).await {
        Ok(()) => sluice_log::log(&format!("Connection with {what} closed")),
        Err(e) => sluice_log::log(&format!("Connection with {what} ended: {e}")),
    }
    shared.repl.detach(client.id);
    shared.clients.unregister(client.id);
}

async fn feed_inner(shared: &Arc<Shared>, h: Handoff) -> std::io::Result<()> {
    let Handoff { stream, request: h } = h;
    stream.set_nonblocking(true)?;
    let stream = TcpStream::from_std(stream)?;
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let attach = match shared.repl.attach(&shared.store, &h) {
        Ok(a) => a,
        Err(msg) => {
            writer.write_all(format!("-{msg}\r\n").as_bytes()).await?;
            return Ok(());
        }
    };
    let client = h.client.clone();
    let id = client.id;
    let Attach {
        replid,
        how,
        rx,
        queued,
    } = attach;

    let sync = async {
        match how {
            Sync::Full(offset) => send_full(shared, &h, &mut writer, &replid, offset).await?,
            Sync::Partial(chunks) => send_partial(&h, &mut writer, &replid, chunks).await?,
        }
        shared.repl.set_online(id);
        stream_changes(&mut writer, rx, h.filter.as_ref(), &queued).await
    };
    let acks = read_acks(shared, &mut reader, id);

    tokio::select! {
        r = sync => r,
        r = acks => r,
        _ = client.kill.notified() => Ok(()),
    }
}

/// A full resync: `+FULLRESYNC`, then a snapshot of the store (of the moving slots only, for a
/// migration feed) as one bulk string.
async fn send_full(
    shared: &Arc<Shared>,
    h: &PsyncRequest,
    writer: &mut OwnedWriteHalf,
    replid: &str,
    offset: u64,
) -> std::io::Result<()> {
    if h.filter.is_some() {
        sluice_log::log(&format!(
            "Slot migration feed to {}: snapshot of its slots, then their changes from offset {offset}",
            h.peer
        ));
    } else {
        sluice_log::log(&format!(
            "Replica {} (listening port {}) asks for a sync: full resync from offset {offset}",
            h.peer, h.listening_port
        ));
    }
    writer
        .write_all(format!("+FULLRESYNC {replid} {offset}\r\n").as_bytes())
        .await?;
    let started = Instant::now();
    let snap_shared = shared.clone();
    let snap_filter = h.filter.clone();
    let (bytes, count) = tokio::task::spawn_blocking(move || {
        let mut w = SnapshotWriter::new();
        let now = snap_shared.clock.now();
        let count = match snap_filter {
            None => snap_shared.store.snapshot_into(&mut w, now),
            Some(f) => snap_shared
                .store
                .snapshot_where(&mut w, now, |k| f[usize::from(sluice_cluster::key_slot(k))]),
        };
        (w.finish(), count)
    })
    .await
    .map_err(std::io::Error::other)?;
    let taken = started.elapsed();
    writer
        .write_all(format!("${}\r\n", bytes.len()).as_bytes())
        .await?;
    writer.write_all(&bytes).await?;
    sluice_log::log(&format!(
        "Synchronization with replica {} succeeded: {count} entries, {} bytes (snapshot {} ms, sent {} ms)",
        h.peer,
        bytes.len(),
        taken.as_millis(),
        started.elapsed().as_millis()
    ));
    Ok(())
}

/// A partial resync: `+CONTINUE`, then the backlog from the replica's offset.
async fn send_partial(
    h: &PsyncRequest,
    writer: &mut OwnedWriteHalf,
    replid: &str,
    chunks: Vec<Bytes>,
) -> std::io::Result<()> {
    sluice_log::log(&format!(
        "Partial resynchronization request from {} accepted: sending {} bytes of backlog",
        h.peer,
        chunks.iter().map(|c| c.len()).sum::<usize>()
    ));
    writer
        .write_all(format!("+CONTINUE {replid}\r\n").as_bytes())
        .await?;
    for c in chunks {
        writer.write_all(&c).await?;
    }
    Ok(())
}

/// The stream: whatever the flusher queues, in order; a migration feed carries only its slots'
/// records, each chunk followed by where it stands in this node's stream. Ends (with an error)
/// when the flusher drops this feed.
async fn stream_changes(
    writer: &mut OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<(Bytes, u64)>,
    filter: Option<&SlotFilter>,
    queued: &AtomicUsize,
) -> std::io::Result<()> {
    let mut filtered = Vec::new();
    while let Some((chunk, end)) = rx.recv().await {
        match filter {
            None => writer.write_all(&chunk).await?,
            Some(f) => {
                filtered.clear();
                filter_chunk(&chunk, f, &mut filtered);
                Record::Offset(end).encode(&mut filtered);
                writer.write_all(&filtered).await?;
            }
        }
        queued.fetch_sub(chunk.len(), Relaxed);
    }
    Err(std::io::Error::other(
        "dropped from the stream (output buffer limit, a role change, or the end of a slot migration)",
    ))
}

/// The replica's side of the link: REPLCONF ACK <offset>, nothing else matters.
async fn read_acks(
    shared: &Arc<Shared>,
    reader: &mut OwnedReadHalf,
    id: u64,
) -> std::io::Result<()> {
    let mut parser = Parser::new(shared.config.limits());
    let mut request = Request::default();
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        if reader.read_buf(&mut buf).await? == 0 {
            return Err(std::io::Error::other("replica closed the connection"));
        }
        loop {
            match parser.parse_into(&mut buf, &mut request) {
                Ok(true) => {
                    if let Some(offset) = ack_offset(&request) {
                        shared.repl.ack(id, offset);
                    }
                }
                Ok(false) => break,
                Err(_) => {
                    return Err(std::io::Error::other("protocol error from replica"));
                }
            }
        }
        request.clear();
    }
}

/// The offset of a `REPLCONF ACK <offset>`; `None` for anything else.
fn ack_offset(request: &Request) -> Option<u64> {
    let is_ack = request.len() == 3
        && request
            .arg(0)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"REPLCONF"))
        && request
            .arg(1)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"ACK"));
    is_ack
        .then(|| request.arg(2))
        .flatten()
        .and_then(|o| std::str::from_utf8(o).ok()?.parse::<u64>().ok())
}

/// Appends to `out` the records of `chunk` that a migration feed with `filter` carries: the
/// moving slots' keys, and the link's own PING/GETACK. FLUSHALL is not carried: it would empty
/// the importing node, whose other slots are not the source's to flush.
fn filter_chunk(chunk: &[u8], filter: &super::SlotFilter, out: &mut Vec<u8>) {
    let mut rest = chunk;
    while let Ok(Some((rec, used))) = record::decode(rest) {
        let keep = match (&rec, rec.key()) {
            (_, Some(key)) => filter[usize::from(sluice_cluster::key_slot(key))],
            (Record::Ping | Record::GetAck, None) => true,
            (_, None) => false,
        };
        if keep {
            out.extend_from_slice(&rest[..used]);
        }
        rest = &rest[used..];
    }
}
