//! The slot table's durable home when a cluster runs with `--etcd URL`.
//!
//! One key (`<prefix>table`) holds the table's text. Writers (the admin tool, a promoted
//! replica) replace it with a compare-and-swap: the new epoch must be higher than the stored
//! one, and the key must not have changed since it was read (its mod revision). Nodes read it
//! before they serve and then watch it.

use sluice_cluster::SlotTable;

use crate::Client;

/// The key that holds the table under `prefix`.
pub fn table_key(prefix: &str) -> String {
    format!("{}table", prefix)
}

/// The stored table and the key's mod revision (`None`: no table yet).
pub async fn read(client: &mut Client, key: &str) -> Result<Option<(SlotTable, i64)>, String> {
    Ok(read_at(client, key).await?.table)
}

/// A read of the table key: the table and its mod revision, and the store's revision at the
/// time of the read.
#[derive(Debug)]
pub struct Read {
    /// The stored table and the key's mod revision (`None`: no table yet).
    pub table: Option<(SlotTable, i64)>,
    /// The store's revision when it was read: a watch that follows the read starts after it.
    /// Never the key's mod revision, which etcd may have compacted: a watch from a compacted
    /// revision is cancelled at once.
    pub revision: i64,
}

/// The stored table, its mod revision, and the store's revision at the time of the read.
pub async fn read_at(client: &mut Client, key: &str) -> Result<Read, String> {
    let resp = client
        .get(key.as_bytes(), 0)
        .await
        .map_err(|e| format!("etcd get {key}: {e}"))?;
    let revision = resp.header.as_ref().map_or(0, |h| h.revision);
    let Some(kv) = resp.kvs.first() else {
        return Ok(Read {
            table: None,
            revision,
        });
    };
    let text = std::str::from_utf8(&kv.value).map_err(|_| "the stored table is not text")?;
    let table = SlotTable::decode(text).map_err(|e| format!("the stored table is invalid: {e}"))?;
    Ok(Read {
        table: Some((table, kv.mod_revision)),
        revision,
    })
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
