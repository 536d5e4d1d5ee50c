//! What a node does with a table it is given: install it and act on it (drop the keys of
//! slots handed over), re-apply its own promotion on a concurrent table, and whom and with what
//! password it tells. The tasks that fetch and send tables (`cluster::peers`, `cluster::etcd`)
//! and the control loop build on these.

use std::sync::Arc;

use sluice_cluster::{SLOTS, SlotTable, key_slot};

use super::{Cluster, Job, View};
use crate::peer::Peer;
use crate::shared::Shared;

/// Installs a table pushed by the admin tool or a peer, then does what follows from it: a
/// node that handed slots over closes their migration feeds and drops their keys
/// ([`hand_over`], on the control loop).
pub fn adopt(shared: &Shared, table: SlotTable) -> Result<(), String> {
    let cluster = shared
        .cluster
        .as_ref()
        .ok_or("ERR This instance has cluster support disabled")?;
    let before = cluster.view();
    cluster.install(table)?;
    let after = cluster.view();
    let owned = |v: &Option<Arc<View>>| -> Vec<bool> {
        let mut set = vec![false; SLOTS];
        if let Some(v) = v
            && v.primary
            && let Some(me) = v.my_shard
        {
            for r in v.table.ranges.iter().filter(|r| r.shard == me) {
                for s in r.start..=r.end {
                    set[usize::from(s)] = true;
                }
            }
        }
        set
    };
    let (was, is) = (owned(&before), owned(&after));
    if was.iter().zip(&is).any(|(w, i)| *w && !*i) {
        cluster.jobs.submit(Job::HandOver);
    }
    Ok(())
}

/// After a table that took slots from this node: every write that passed the slot check
/// under the old table is applied, then the feeds get everything journaled so far and close
/// (the new owners hold those slots until then), then the handed-over keys go.
pub fn hand_over(shared: &Shared) {
    if let Some(cluster) = shared.cluster.as_ref() {
        cluster.settle(None);
    }
    shared.repl.close_feeds(&shared.store);
    drop_unowned(shared);
}

/// Deletes the keys of slots this primary does not serve (journaled: its replicas follow).
pub fn drop_unowned(shared: &Shared) {
    let Some(view) = shared.cluster.as_ref().and_then(Cluster::view) else {
        return;
    };
    // A replica follows its primary's deletes; a node outside the table serves nothing.
    if view.my_shard.is_some() && !view.primary {
        return;
    }
    let me = view.my_shard;
    let dropped = shared.store.delete_where(shared.clock.now(), |k| {
        Some(view.table.owner(key_slot(k))) != me
    });
    if dropped > 0 {
        sluice_log::log(&format!(
            "Dropped {dropped} keys of slots handed over to other nodes"
        ));
    }
}

/// Every node of the table but this one, as `host:port`.
pub fn peers(shared: &Shared) -> Vec<(String, u16)> {
    let Some(cluster) = shared.cluster.as_ref() else {
        return Vec::new();
    };
    let Some(view) = cluster.view() else {
        return Vec::new();
    };
    view.table
        .shards
        .iter()
        .flat_map(|s| std::iter::once(&s.primary).chain(&s.replicas))
        .filter(|n| n.id != cluster.myid)
        .map(|n| (n.host.clone(), n.port))
        .collect()
}

/// Who a node logs in as at its cluster peers (table fetch and push, slot import, gRPC
/// forwarding): `--masteruser`/`--masterauth`, as Redis Cluster nodes use them to reach each
/// other, or else the `default` user with this node's own `requirepass`, which the nodes of
/// one cluster share.
pub fn peer_credentials(shared: &Shared) -> Option<sluice_client::Credentials> {
    match shared.live.masterauth() {
        Some(pass) => Some(sluice_client::Credentials {
            user: shared.config.masteruser.clone(),
            password: pass,
        }),
        None => shared
            .requirepass
            .read()
            .clone()
            .map(|password| sluice_client::Credentials {
                user: None,
                password,
            }),
    }
}

/// Connects to the cluster peer at `host:port` and logs in ([`peer_credentials`]): every
/// node-to-node call (table fetch and push, slot import, forwarded checks) starts here.
/// `port` may be either of the peer's ports, as the table or a `MOVED` names it. With
/// `--tls-cluster yes` the call goes over TLS to the TLS port the table (or `CLUSTER IMPORT`)
/// gives the peer, with this node's certificate as the client's (a peer nothing names is reached
/// over TLS at `port` itself); a peer the table names without a TLS port is refused then.
pub async fn connect_peer(shared: &Shared, host: &str, port: u16) -> Result<Peer, String> {
    let mut peer = match (&shared.tls, shared.config.tls_cluster) {
        (Some(tls), true) => {
            let port = tls_port_of(shared, host, port)?;
            Peer::connect_tls(host, port, tls.client.clone()).await?
        }
        _ => Peer::connect(host, port).await?,
    };
    if let Some(auth) = peer_credentials(shared) {
        peer.login(&auth).await?;
    }
    Ok(peer)
}

/// The TLS port of the peer at `host:port` ([`Cluster::tls_port_of`]), or `port` itself for a
/// peer nothing names.
fn tls_port_of(shared: &Shared, host: &str, port: u16) -> Result<u16, String> {
    match shared.cluster.as_ref() {
        Some(c) => Ok(c.tls_port_of(host, port)?.unwrap_or(port)),
        None => Ok(port),
    }
}

/// `theirs` (a table at least as new as `mine`, from a peer or etcd) with this node's
/// promotion applied on top under a higher epoch; `None` if it already has it.
pub fn reapply_promotion(myid: &str, mine: &SlotTable, theirs: SlotTable) -> Option<SlotTable> {
    if theirs.is_primary(myid) {
        return None;
    }
    theirs.promote(myid, theirs.epoch.max(mine.epoch) + 1)
}

/// After `REPLICAOF NO ONE` on a replica of the cluster: it takes over its shard's slots
/// under a higher epoch and tells every node.
pub fn promoted(shared: &Shared) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    let Some(view) = cluster.view() else {
        return;
    };
    if view.primary || view.my_shard.is_none() {
        return;
    }
    let Some(table) = view.table.promote(&cluster.myid, view.table.epoch + 1) else {
        return;
    };
    match adopt(shared, table) {
        Ok(()) => cluster.jobs.submit(Job::PushTable),
        Err(e) => sluice_log::log(&format!("Promoted, but the new table was refused: {e}")),
    }
}
