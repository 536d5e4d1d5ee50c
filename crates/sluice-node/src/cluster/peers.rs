//! The table's exchange with the other nodes when the cluster keeps no etcd: asked of every
//! peer at start and every few seconds, and pushed to them after a promotion.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_cluster::SlotTable;

use super::adopt::{adopt, connect_peer, peers, reapply_promotion};
use crate::shared::Shared;
use sluice_resp::Value;

/// How often a node without etcd asks its peers whether the table moved on (a push it missed
/// while it was up, or a promotion elsewhere).
const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// At start: asks every peer of the stored table for its table and adopts the newest, before
/// this node serves a key. A peer that does not answer is skipped; with none answering, the
/// stored table stands (and says so in the log). Then asks again every [`REFRESH_EVERY`], so a
/// node never serves for long from a table older than one a peer holds.
pub async fn refresh_from_peers(shared: Arc<Shared>) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    let mut first = true;
    loop {
        refresh_once(&shared, first).await;
        if first {
            cluster.loading.store(false, Ordering::Release);
            first = false;
        }
        tokio::time::sleep(REFRESH_EVERY).await;
    }
}

async fn refresh_once(shared: &Arc<Shared>, verbose: bool) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    let peers = peers(shared);
    let mut answered = 0;
    let mut newest: Option<SlotTable> = None;
    for (host, port) in &peers {
        let got = async {
            let mut p = connect_peer(shared, host, *port).await?;
            match p.call(&[b"CLUSTER", b"GETTABLE"]).await? {
                Value::Bulk(text) => SlotTable::decode(&String::from_utf8_lossy(&text))
                    .map(Some)
                    .map_err(|e| e.to_string()),
                Value::Nil => Ok(None),
                other => Err(other.text()),
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(2), got).await {
            Ok(Ok(table)) => {
                answered += 1;
                if let Some(t) = table
                    && newest.as_ref().is_none_or(|n| t.epoch > n.epoch)
                {
                    newest = Some(t);
                }
            }
            Ok(Err(e)) if verbose => {
                sluice_log::log(&format!("peer {host}:{port} gave no table: {e}"))
            }
            Err(_) if verbose => {
                sluice_log::log(&format!("peer {host}:{port} did not answer in time"))
            }
            _ => {}
        }
    }
    if let Some(t) = newest
        && t.epoch > cluster.epoch()
    {
        let epoch = t.epoch;
        match adopt(shared, t) {
            Ok(()) => sluice_log::log(&format!(
                "Adopted a newer table (epoch {epoch}) from a peer"
            )),
            Err(e) => sluice_log::log(&format!("A peer's newer table was refused: {e}")),
        }
    } else if verbose && !peers.is_empty() && answered == 0 {
        sluice_log::log("No peer answered: serving with the stored table");
    }
}

/// Sends this node's table to every peer (after a promotion), each in its own call; a peer
/// that is down learns it when it starts and asks. A peer that holds a table at least as new
/// (another shard's promotion in the same moment) is read back, this node's promotion is
/// applied on top of it under a higher epoch, and the result is sent again.
pub async fn push_table(shared: Arc<Shared>) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    for _ in 0..5 {
        let Some(view) = cluster.view() else {
            return;
        };
        let text = view.table.encode();
        let mut theirs: Option<SlotTable> = None;
        for (host, port) in peers(&shared) {
            let sent = async {
                let mut p = connect_peer(&shared, &host, port).await?;
                let reply = p.call(&[b"CLUSTER", b"SETTABLE", text.as_bytes()]).await?;
                let reply = reply.text();
                let table = if reply.contains("not newer") {
                    match p.call(&[b"CLUSTER", b"GETTABLE"]).await? {
                        Value::Bulk(t) => SlotTable::decode(&String::from_utf8_lossy(&t)).ok(),
                        _ => None,
                    }
                } else {
                    None
                };
                Ok::<_, String>((reply, table))
            };
            match tokio::time::timeout(std::time::Duration::from_secs(2), sent).await {
                Ok(Ok((reply, table))) => {
                    sluice_log::log(&format!(
                        "Table epoch {} sent to {host}:{port}: {reply}",
                        view.table.epoch
                    ));
                    if let Some(t) = table
                        && t != *view.table
                        && theirs.as_ref().is_none_or(|b| t.epoch > b.epoch)
                    {
                        theirs = Some(t);
                    }
                }
                Ok(Err(e)) => sluice_log::log(&format!("Table not sent to {host}:{port}: {e}")),
                Err(_) => sluice_log::log(&format!("Table not sent to {host}:{port}: timed out")),
            }
        }
        let Some(theirs) = theirs else {
            return;
        };
        match reapply_promotion(&cluster.myid, &view.table, theirs) {
            Some(merged) => {
                let epoch = merged.epoch;
                if let Err(e) = adopt(&shared, merged) {
                    sluice_log::log(&format!("Merged table epoch {epoch} refused: {e}"));
                    return;
                }
                sluice_log::log(&format!(
                    "A peer held a concurrent table: this node's promotion re-applied on it as epoch {epoch}"
                ));
            }
            None => return,
        }
    }
}
