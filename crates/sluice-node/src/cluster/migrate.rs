//! Slot migration, the importing side: a primary taking over slots pulls their buckets from
//! the old owner with the replication machinery, filtered to those slots.
//!
//! The steps (the admin tool drives them, see `admin`):
//! 1. `CLUSTER IMPORT host port ranges` on the new owner starts [`import`]: it connects to
//!    the old owner and sends `CLUSTER MIGRATE-FEED ranges`, which the old owner answers like a
//!    PSYNC: a snapshot of those slots' entries, then the stream of their changes, each chunk
//!    followed by an OFFSET record (where it stands in the old owner's stream).
//! 2. `CLUSTER PAUSE ms ranges` on the old owner holds those slots' writes (`-TRYAGAIN`) and
//!    returns its stream offset; once the feed acked it (`CLUSTER MIGRATE-STATUS`), the new
//!    owner holds every change.
//! 3. The new table goes to the new owner, then the old, then everyone: the old owner answers
//!    MOVED from then on, closes the feed and drops the keys it handed over.
//!
//! Nothing here may leave a slot served by two nodes or by none: until step 3 only the old
//! owner serves the slots; a failure before it leaves the old table in force.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Buf;
use sluice_repl::{Record, SnapshotReader, record};
use tokio::io::AsyncReadExt;

use super::{ImportState, format_ranges};
use crate::peer::Peer;
use crate::shared::Shared;
use sluice_resp::Value;

/// How often an import acks its position without being asked.
const ACK_EVERY: Duration = Duration::from_millis(100);

/// Imports `ranges` from `host:port` until the source closes the feed (the cluster control
/// loop runs this).
pub async fn run(shared: Arc<Shared>, host: String, port: u16, ranges: Vec<(u16, u16)>) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    let index = cluster.imports.start(ImportState {
        source: format!("{host}:{port}"),
        ranges: ranges.clone(),
        state: "syncing".into(),
        entries: 0,
        offset: 0,
    });
    let state = match import(&shared, index, &host, port, &ranges).await {
        Ok(()) => "closed".to_string(),
        Err(e) => {
            sluice_log::log(&format!(
                "Import of slots {} from {host}:{port} ended: {e}",
                format_ranges(&ranges).join(" ")
            ));
            format!("failed: {e}")
        }
    };
    cluster.imports.update(index, |s| s.state = state);
}

async fn import(
    shared: &Arc<Shared>,
    index: usize,
    host: &str,
    port: u16,
    ranges: &[(u16, u16)],
) -> Result<(), String> {
    let cluster = shared.cluster.as_ref().ok_or("not in cluster mode")?;
    let in_ranges = |k: &[u8]| {
        let s = sluice_cluster::key_slot(k);
        ranges.iter().any(|&(a, b)| (a..=b).contains(&s))
    };
    // Leftovers of an earlier, failed import of these slots: this node does not serve them
    // yet, so nothing else wrote them.
    shared.store.delete_where(shared.clock.now(), in_ranges);

    let mut peer =
        Peer::connect_auth(host, port, super::adopt::peer_password(shared).as_deref()).await?;
    let capa = sluice_repl::CAPA.as_bytes();
    let reply = peer.call(&[b"REPLCONF", b"capa", capa]).await?;
    if !reply.is_ok() {
        return Err(format!("REPLCONF refused: {}", reply.text()));
    }
    let listed = format_ranges(ranges);
    let mut args: Vec<&[u8]> = vec![b"CLUSTER", b"MIGRATE-FEED"];
    args.extend(listed.iter().map(|r| r.as_bytes()));
    let reply = peer.call(&args).await?;
    match &reply {
        Value::Simple(s) if s.starts_with("FULLRESYNC") => {}
        other => return Err(format!("MIGRATE-FEED refused: {}", other.text())),
    }
    let started = Instant::now();
    let snapshot = crate::repl::replica::read_snapshot(&mut peer).await?;
    let reader = SnapshotReader::new(&snapshot).map_err(|e| format!("snapshot refused: {e}"))?;
    let now = shared.clock.now();
    let mut entries = 0u64;
    for rec in reader.iter() {
        let rec = rec.map_err(|e| format!("snapshot refused: {e}"))?;
        if let Record::Limiter { key, .. } | Record::Counter { key, .. } = &rec
            && !in_ranges(key)
        {
            return Err("the source sent a key outside the requested slots".into());
        }
        shared.store.apply(rec, now);
        entries += 1;
    }
    sluice_log::log(&format!(
        "Importing slots {} from {host}:{port}: loaded {entries} entries ({} bytes) in {} ms; streaming",
        listed.join(" "),
        snapshot.len(),
        started.elapsed().as_millis()
    ));
    cluster.imports.update(index, |s| {
        s.state = "streaming".into();
        s.entries = entries;
    });

    let Peer {
        mut stream,
        mut buf,
    } = peer;
    let mut offset = 0u64;
    let mut tick = tokio::time::interval(ACK_EVERY);
    // A GETACK is answered once the OFFSET record that closes its chunk is in: the source's
    // handover waits for exactly that offset, and the two can arrive in separate reads.
    let mut want_ack = false;
    loop {
        let mut ack_now = false;
        let now = shared.clock.now();
        let mut used_total = 0;
        loop {
            match record::decode(&buf[used_total..]) {
                Ok(Some((rec, used))) => {
                    used_total += used;
                    match rec {
                        Record::Offset(n) => {
                            offset = n;
                            ack_now |= std::mem::take(&mut want_ack);
                        }
                        Record::GetAck => want_ack = true,
                        Record::Ping => {}
                        rec => shared.store.apply(rec, now),
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(format!("bad record from the source: {e}")),
            }
        }
        buf.advance(used_total);
        if used_total > 0 {
            cluster.imports.update(index, |s| s.offset = offset);
        }
        if ack_now {
            crate::repl::replica::send_ack(&mut stream, offset).await?;
        }
        buf.reserve(64 * 1024);
        tokio::select! {
            read = stream.read_buf(&mut buf) => match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            },
            _ = tick.tick() => crate::repl::replica::send_ack(&mut stream, offset).await?,
        }
    }
}
