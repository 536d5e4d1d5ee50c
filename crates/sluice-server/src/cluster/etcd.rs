//! The slot table's durable home when `--etcd URL` is given.
//!
//! One key (`<prefix>table`) holds the table's text. Writers (the admin tool, a promoted
//! replica) replace it with a compare-and-swap: the new epoch must be higher than the stored
//! one, and the key must not have changed since it was read (its mod revision). Every node
//! reads it before it serves a key and then watches it, so a node that was down while the table
//! changed comes back with the current one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_cluster::SlotTable;
use sluice_etcd::Client;

use crate::shared::Shared;

/// How long to wait before reconnecting to etcd after an error.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The key that holds the table under `prefix`.
pub fn table_key(prefix: &str) -> String {
    format!("{}table", prefix)
}

pub async fn connect(url: &str) -> Result<Client, String> {
    tokio::time::timeout(Duration::from_secs(5), Client::connect(url))
        .await
        .map_err(|_| format!("etcd at {url} did not answer"))?
        .map_err(|e| format!("cannot connect to etcd at {url}: {e}"))
}

/// The stored table and the key's mod revision (`None`: no table yet).
pub async fn read(client: &mut Client, key: &str) -> Result<Option<(SlotTable, i64)>, String> {
    let resp = client
        .get(key.as_bytes(), 0)
        .await
        .map_err(|e| format!("etcd get {key}: {e}"))?;
    let Some(kv) = resp.kvs.first() else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&kv.value).map_err(|_| "the stored table is not text")?;
    let table = SlotTable::decode(text).map_err(|e| format!("the stored table is invalid: {e}"))?;
    Ok(Some((table, kv.mod_revision)))
}

/// Stores `table` if its epoch is higher than the stored one's and nobody wrote the key in
/// between. Returns the stored epoch on refusal.
pub async fn compare_and_swap(
    client: &mut Client,
    key: &str,
    table: &SlotTable,
) -> Result<(), String> {
    let current = read(client, key).await?;
    let read_at = match &current {
        Some((stored, _)) if stored.epoch >= table.epoch => {
            return Err(format!(
                "etcd holds epoch {}, not older than {}",
                stored.epoch, table.epoch
            ));
        }
        Some((_, rev)) => Some(*rev),
        None => None,
    };
    let stored = client
        .put_unless_changed(key.as_bytes(), table.encode().as_bytes(), read_at)
        .await
        .map_err(|e| format!("etcd txn: {e}"))?;
    if stored {
        Ok(())
    } else {
        Err("the table in etcd changed meanwhile; read it again".into())
    }
}

/// A node's side: read the table before serving, then follow every change. Runs for the life
/// of the process on the replication thread.
pub async fn follow(shared: Arc<Shared>, url: String, key: String) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    loop {
        match follow_once(&shared, &url, &key).await {
            Ok(()) => {}
            Err(e) => crate::log(&format!("etcd: {e}; retrying")),
        }
        if cluster.loading.load(Ordering::Acquire) {
            crate::log(
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
        crate::log(&format!(
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
                Err(e) => crate::log(&format!("etcd holds an invalid table, ignored: {e}")),
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
        && let Err(e) = super::adopt(shared, table)
    {
        crate::log(&format!("etcd table refused: {e}"));
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
                crate::log(&format!("Stored table epoch {} in etcd", table.epoch));
                return;
            }
            Ok(Some(stored)) => {
                let Some(merged) = super::reapply_promotion(&cluster.myid, &table, stored) else {
                    return;
                };
                if let Err(e) = super::adopt(&shared, merged.clone()) {
                    crate::log(&format!("Merged table refused: {e}"));
                    return;
                }
                table = merged;
                continue;
            }
            Err(e) => crate::log(&format!("Storing table epoch {} in etcd: {e}", table.epoch)),
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}
