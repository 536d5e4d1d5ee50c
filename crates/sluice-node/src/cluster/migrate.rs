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

/// How long a table that gives this node an import's slots may take to arrive after the
/// import ended (the old owner may take it first), as long as an old owner's pause may last.
const HOLD: Duration = Duration::from_millis(sluice_cluster::MAX_PAUSE_MS);

/// How often an import acks its position without being asked.
const ACK_EVERY: Duration = Duration::from_millis(100);

/// Imports `ranges` from `host:port` until the source closes the feed (the cluster control
/// loop runs this). `asker` fires when the connection that asked for it closes: an import
/// whose slots this node does not serve yet is then abandoned.
///
/// Whatever ends it, its slots' hold ends with it; copies of slots that did not become this
/// node's (within [`sluice_cluster::MAX_PAUSE_MS`], for a table still on its way) are dropped.
pub async fn run(
    shared: Arc<Shared>,
    host: String,
    port: u16,
    ranges: Vec<(u16, u16)>,
    asker: tokio::sync::oneshot::Receiver<()>,
) {
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
    // An abandoned import already waited for a table that would give it the slots.
    let (outcome, table_wait) = tokio::select! {
        r = import(&shared, index, &host, port, &ranges) => (r, HOLD),
        why = abandoned(cluster, &ranges, asker) => (Err(why), Duration::ZERO),
    };
    let state = match outcome {
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
    cluster.release(&ranges);
    keep_or_drop(&shared, cluster, index, &ranges, table_wait).await;
}

/// The table gave this node the slots but the old owner still feeds them a second later:
/// whoever pushes tables (the admin tool) stopped before reaching it. Pushes the table to
/// every node of it once, so the old owner hands over instead of waiting out its pause.
/// `owned` is when this node first served the slots, and whether it told the others.
fn tell_the_old_owner(
    cluster: &super::Cluster,
    ranges: &[(u16, u16)],
    owned: &mut (Option<Instant>, bool),
) {
    if owned.1 || !cluster.serves_all(ranges) {
        return;
    }
    if owned.0.get_or_insert_with(Instant::now).elapsed() >= Duration::from_secs(1) {
        sluice_log::log(
            "The old owner still feeds slots this node was given: pushing it the table",
        );
        cluster.jobs.submit(super::Job::PushTable);
        owned.1 = true;
    }
}

/// Resolves once the connection that asked for the import closed while this node does not
/// serve its slots; after the table gave them to this node, never.
async fn abandoned(
    cluster: &super::Cluster,
    ranges: &[(u16, u16)],
    asker: tokio::sync::oneshot::Receiver<()>,
) -> String {
    let _ = asker.await;
    // A table that gives this node the slots may be on its way (through etcd, or a peer).
    let deadline = Instant::now() + HOLD;
    while !cluster.serves_all(ranges) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if cluster.serves_all(ranges) {
        std::future::pending::<()>().await;
    }
    "the connection that asked for it closed before the handover".into()
}

/// Keeps the copies if the slots are this node's, waiting out a table still on its way; else
/// drops them, so an abandoned import holds no memory. Slots that another import (number
/// `index` is this one) is still filling are left to it.
async fn keep_or_drop(
    shared: &Shared,
    cluster: &super::Cluster,
    index: usize,
    ranges: &[(u16, u16)],
    table_wait: Duration,
) {
    let deadline = Instant::now() + table_wait;
    while !cluster.serves_all(ranges) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if cluster.serves_all(ranges) {
        return;
    }
    let view = cluster.view();
    // A later import of the same slots (a rerun) is filling them now: its copies stay.
    let others = cluster.imports.active_slots_except(index);
    let mine = |slot: u16| {
        others[usize::from(slot)]
            || view
                .as_ref()
                .is_some_and(|v| v.primary && v.my_shard == Some(v.table.owner(slot)))
    };
    let dropped = shared.store.delete_where(shared.clock.now(), |k| {
        let s = sluice_cluster::key_slot(k);
        ranges.iter().any(|&(a, b)| (a..=b).contains(&s)) && !mine(s)
    });
    sluice_log::log(&format!(
        "Dropped {dropped} copied keys of slots {} that did not become this node's",
        format_ranges(ranges).join(" ")
    ));
}

async fn import(
    shared: &Arc<Shared>,
    index: usize,
    host: &str,
    port: u16,
    ranges: &[(u16, u16)],
) -> Result<(), String> {
    let cluster = shared.cluster.as_ref().ok_or("not in cluster mode")?;
    if cluster.serves_unheld(ranges) {
        return Err("this node already serves some of those slots".into());
    }
    let in_ranges = |k: &[u8]| {
        let s = sluice_cluster::key_slot(k);
        ranges.iter().any(|&(a, b)| (a..=b).contains(&s))
    };
    // Leftovers of an earlier, failed import of these slots: this node does not serve them
    // yet, so nothing else wrote them.
    shared.store.delete_where(shared.clock.now(), in_ranges);

    let mut peer = super::adopt::connect_peer(shared, host, port).await?;
    let capa = sluice_repl::CAPA.as_bytes();
    let reply = peer.call(&[b"REPLCONF", b"capa", capa]).await?;
    if !reply.is_ok() {
        return Err(format!("REPLCONF refused: {}", reply.text()));
    }
    let source = format!("{host}:{port}");
    let skew = crate::repl::skew::Skew::measure(&mut peer, &shared.clock, &source).await;
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
        if let Some(key) = rec.key()
            && !matches!(rec, Record::Del { .. })
            && !in_ranges(key)
        {
            return Err("the source sent a key outside the requested slots".into());
        }
        if !matches!(rec, Record::Time(_)) {
            entries += 1;
        }
        skew.apply(&shared.store, rec, now);
    }
    sluice_log::log(&format!(
        "Importing slots {} from {host}:{port}{}: loaded {entries} entries ({} bytes) in {} ms; streaming",
        listed.join(" "),
        if peer.tls { " over TLS" } else { "" },
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
        ..
    } = peer;
    let mut offset = 0u64;
    let mut tick = tokio::time::interval(ACK_EVERY);
    // A GETACK is answered once the OFFSET record that closes its chunk is in: the source's
    // handover waits for exactly that offset, and the two can arrive in separate reads.
    let mut want_ack = false;
    // Since when the table gives this node the slots while the feed still streams, and
    // whether it told the old owner.
    let mut owned = (None, false);
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
                        rec => skew.apply(&shared.store, rec, now),
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
            _ = tick.tick() => {
                // The table gave this node the slots and their hold ran out: the old owner
                // never closed the feed, and this node serves what arrived.
                if cluster.serves_unheld(ranges) {
                    return Err("the old owner did not hand over within the hold; serving what arrived".into());
                }
                tell_the_old_owner(cluster, ranges, &mut owned);
                crate::repl::replica::send_ack(&mut stream, offset).await?
            }
        }
    }
}
