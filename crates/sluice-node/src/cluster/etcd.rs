//! A node's tasks when the slot table lives in etcd (`--etcd URL`; the key and its
//! compare-and-swap are `sluice_etcd::table`'s): read it before serving a key and follow every
//! change, so a node that was down while the table changed comes back with the current one;
//! after a promotion, store the new table.
//!
//! The watch starts after the store's revision at the read, never at the key's own mod
//! revision, which etcd may have compacted. A watch etcd cancels (a compaction), ends or fails
//! is re-established from a fresh read, logged and counted
//! (`sluice_etcd_watch_restarts_total{watch="table"}`); a read every [`READ_EVERY`] backs it
//! up, so no lost watch leaves a node on an old table for longer than that.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_cluster::SlotTable;
use sluice_etcd::table::{compare_and_swap, read, read_at, table_key};
use sluice_etcd::{Ended, connect};

use crate::shared::Shared;

/// How long to wait before reconnecting to etcd after an error.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How often the table is read afresh while the watch runs: a change the watch missed is
/// found within this long, whatever became of the watch.
const READ_EVERY: Duration = Duration::from_secs(30);

/// A node's side: read the table before serving, then follow every change. Runs for the life
/// of the process on the replication thread.
pub async fn follow(shared: Arc<Shared>, url: String, key: String) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    loop {
        match follow_once(&shared, &url, &key).await {
            Ended::Unwatched(e) => sluice_log::log(&format!("etcd: {e}; retrying")),
            Ended::Watch(e) => {
                shared
                    .stats
                    .table_watch_restarts
                    .fetch_add(1, Ordering::Relaxed);
                sluice_log::log(&format!(
                    "Cluster table watch restarted: {e}; reading {key} afresh"
                ));
            }
        }
        if cluster.loading.load(Ordering::Acquire) {
            sluice_log::log(
                "etcd not reachable yet: this node serves no key until it has read the table",
            );
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Reads the table, adopts it if newer, then watches the key from the revision of that read
/// on (reading it again every [`READ_EVERY`]) until the watch ends.
async fn follow_once(shared: &Arc<Shared>, url: &str, key: &str) -> Ended {
    let Some(cluster) = shared.cluster.as_ref() else {
        return Ended::Unwatched("not in cluster mode".into());
    };
    let mut client = match connect(url).await {
        Ok(c) => c,
        Err(e) => return Ended::Unwatched(e),
    };
    let first = match read_at(&mut client, key).await {
        Ok(r) => r,
        Err(e) => return Ended::Unwatched(e),
    };
    let mut seen = first.revision;
    if let Some((table, _)) = first.table {
        adopt_if_newer(shared, table);
    }
    if cluster.loading.swap(false, Ordering::AcqRel) {
        sluice_log::log(&format!(
            "Read the cluster table from etcd ({key}); serving"
        ));
    }
    let mut stream = match client.watch(key.as_bytes(), false, seen + 1).await {
        Ok(s) => s,
        Err(e) => return Ended::Unwatched(format!("etcd watch: {e}")),
    };
    let mut read_every =
        tokio::time::interval_at(tokio::time::Instant::now() + READ_EVERY, READ_EVERY);
    loop {
        tokio::select! {
            msg = stream.events() => {
                let resp = match msg {
                    Ok(resp) => resp,
                    Err(ended) => return ended,
                };
                for event in &resp.events {
                    let Some(kv) = &event.kv else { continue };
                    seen = seen.max(kv.mod_revision);
                    match std::str::from_utf8(&kv.value)
                        .map_err(|e| e.to_string())
                        .and_then(|t| SlotTable::decode(t).map_err(|e| e.to_string()))
                    {
                        Ok(table) => adopt_if_newer(shared, table),
                        Err(e) => sluice_log::log(&format!("etcd holds an invalid table, ignored: {e}")),
                    }
                }
            }
            _ = read_every.tick() => {
                // A failed read is left to the watch: it fails too if etcd is gone.
                let Ok(read) = read_at(&mut client, key).await else { continue };
                if let Some((table, rev)) = read.table
                    && rev > seen
                {
                    let epoch = table.epoch;
                    adopt_if_newer(shared, table);
                    return Ended::Watch(format!(
                        "a periodic read found epoch {epoch} (revision {rev}) the watch had not delivered"
                    ));
                }
            }
        }
    }
}

fn adopt_if_newer(shared: &Shared, table: SlotTable) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    if table.epoch > cluster.epoch()
        && let Err(e) = super::adopt::adopt(shared, table)
    {
        sluice_log::log(&format!("etcd table refused: {e}"));
    }
}

/// A promoted replica's write of its new table. If etcd holds a table at least as new
/// (another shard's promotion), this node's promotion is applied on top of it and written again.
pub async fn store(shared: Arc<Shared>, table: SlotTable) {
    let (Some(url), Some(cluster)) = (&shared.config.etcd, shared.cluster.as_ref()) else {
        return;
    };
    let key = table_key(&shared.config.etcd_prefix);
    let mut table = table;
    for _ in 0..5 {
        let result = async {
            let mut client = connect(url).await?;
            match compare_and_swap(&mut client, &key, &table).await {
                Ok(()) => Ok(None),
                Err(e) => match read(&mut client, &key).await? {
                    Some((stored, _)) if stored.epoch >= table.epoch => Ok(Some(stored)),
                    _ => Err(e),
                },
            }
        }
        .await;
        match result {
            Ok(None) => {
                sluice_log::log(&format!("Stored table epoch {} in etcd", table.epoch));
                return;
            }
            Ok(Some(stored)) => {
                let Some(merged) = super::adopt::reapply_promotion(&cluster.myid, &table, stored)
                else {
                    return;
                };
                if let Err(e) = super::adopt::adopt(&shared, merged.clone()) {
                    sluice_log::log(&format!("Merged table refused: {e}"));
                    return;
                }
                table = merged;
                continue;
            }
            Err(e) => sluice_log::log(&format!("Storing table epoch {} in etcd: {e}", table.epoch)),
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}
