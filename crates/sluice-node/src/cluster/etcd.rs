//! A node's tasks when the slot table lives in etcd (`--etcd URL`; the key and its
//! compare-and-swap are `sluice_etcd::table`'s): read it before serving a key and follow every
//! change, so a node that was down while the table changed comes back with the current one;
//! after a promotion, store the new table.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_cluster::SlotTable;
use sluice_etcd::connect;
use sluice_etcd::table::{compare_and_swap, read, table_key};

use crate::shared::Shared;

/// How long to wait before reconnecting to etcd after an error.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// A node's side: read the table before serving, then follow every change. Runs for the life
/// of the process on the replication thread.
pub async fn follow(shared: Arc<Shared>, url: String, key: String) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    loop {
        match follow_once(&shared, &url, &key).await {
            Ok(()) => {}
            Err(e) => sluice_log::log(&format!("etcd: {e}; retrying")),
        }
        if cluster.loading.load(Ordering::Acquire) {
            sluice_log::log(
                "etcd not reachable yet: this node serves no key until it has read the table",
            );
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

async fn follow_once(shared: &Arc<Shared>, url: &str, key: &str) -> Result<(), String> {
    let cluster = shared.cluster.as_ref().ok_or("not in cluster mode")?;
    let mut client = connect(url).await?;
    let rev = match read(&mut client, key).await? {
        Some((table, rev)) => {
            adopt_if_newer(shared, table);
            rev
        }
        None => 0,
    };
    if cluster.loading.swap(false, Ordering::AcqRel) {
        sluice_log::log(&format!(
            "Read the cluster table from etcd ({key}); serving"
        ));
    }
    let mut stream = client
        .watch(key.as_bytes(), false, rev + 1)
        .await
        .map_err(|e| format!("etcd watch: {e}"))?;
    while let Some(resp) = stream
        .message()
        .await
        .map_err(|e| format!("etcd watch: {e}"))?
    {
        for event in &resp.events {
            let Some(kv) = &event.kv else { continue };
            match std::str::from_utf8(&kv.value)
                .map_err(|e| e.to_string())
                .and_then(|t| SlotTable::decode(t).map_err(|e| e.to_string()))
            {
                Ok(table) => adopt_if_newer(shared, table),
                Err(e) => sluice_log::log(&format!("etcd holds an invalid table, ignored: {e}")),
            }
        }
    }
    Err("the watch ended".into())
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
