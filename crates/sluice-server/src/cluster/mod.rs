//! Cluster mode: this node's view of the slot table, and the check every keyed command passes.
//!
//! The table (crate `sluice-cluster`) is computed by the admin tool and pushed to every node
//! (`CLUSTER SETTABLE`); a node never computes placement itself. A node accepts a table only
//! with a higher epoch, keeps it in `--cluster-config-file` with its own id, and at start asks
//! the peers its table names for a newer one before it serves a key, so a node that was down
//! while the table changed never serves from a stale one.
//!
//! The request path reads the table without a lock: the current table sits behind an epoch
//! counter, and each connection keeps an `Arc` of the [`View`] it last saw, refreshed when the
//! epoch moves. The check is the key's CRC16 slot, one array lookup and a compare.

pub mod etcd;
pub mod migrate;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use sluice_cluster::{SLOTS, SlotTable, key_slot};

use crate::cmd::CmdError;
use crate::peer::{Peer, Reply};
use crate::repl::Job;
use crate::shared::Shared;

/// What a node knows of the table, as one connection caches it.
#[derive(Debug)]
pub struct View {
    pub table: Arc<SlotTable>,
    /// The shard this node belongs to, as primary or replica.
    pub my_shard: Option<usize>,
    pub primary: bool,
}

/// Slots whose writes wait while their buckets move (answered `-TRYAGAIN`), until `until`.
#[derive(Debug)]
struct Pause {
    slots: Box<[bool; SLOTS]>,
    until: Instant,
}

/// A node's cluster state.
#[derive(Debug)]
pub struct Cluster {
    pub myid: String,
    config_file: PathBuf,
    view: RwLock<Option<Arc<View>>>,
    /// The epoch of `view` (0: no table yet). Bumped after `view` is replaced.
    epoch: AtomicU64,
    /// True until the peers have been asked for a newer table at start.
    pub loading: AtomicBool,
    pausing: AtomicBool,
    pause: Mutex<Option<Pause>>,
    pub imports: migrate::Imports,
    /// Per worker thread: set while it runs a batch of commands. A pause waits until every
    /// other worker has been outside a batch once, so a write that passed the slot check just
    /// before the pause is applied (and journaled) before the pause's offset is taken.
    in_batch: Box<[crossbeam_utils::CachePadded<AtomicBool>]>,
}

/// A worker's batch, for [`Cluster::pause`]; clears the flag when dropped.
#[derive(Debug)]
pub struct Batch<'a>(&'a AtomicBool);

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Why a keyed command is not served here, as the Redis Cluster error a client expects.
#[derive(Debug)]
pub enum Redirect {
    Moved { slot: u16, host: String, port: u16 },
    CrossSlot,
    Down,
    TryAgain,
}

impl Redirect {
    pub fn into_error(self) -> CmdError {
        CmdError::msg(match self {
            Redirect::Moved { slot, host, port } => format!("MOVED {slot} {host}:{port}"),
            Redirect::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".into(),
            Redirect::Down => "CLUSTERDOWN Hash slot not served".into(),
            Redirect::TryAgain => {
                "TRYAGAIN Slot is being migrated; retry in a few milliseconds".into()
            }
        })
    }
}

/// What the config file holds: the node's id and its last table.
fn parse_config(text: &str) -> Result<(String, Option<SlotTable>), String> {
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let id = first
        .strip_prefix("myid ")
        .map(str::trim)
        .filter(|id| id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or("first line is not `myid <40 hex characters>`")?;
    let table = if rest.trim().is_empty() {
        None
    } else {
        Some(SlotTable::decode(rest).map_err(|e| e.to_string())?)
    };
    Ok((id.to_string(), table))
}

impl Cluster {
    /// Loads (or creates) the config file: a new node gets a new id and no table.
    pub fn open(config_file: PathBuf, threads: usize) -> std::io::Result<Cluster> {
        let (myid, table) = match std::fs::read_to_string(&config_file) {
            Ok(text) => parse_config(&text).map_err(|e| {
                std::io::Error::other(format!(
                    "cluster config file {} is invalid: {e}",
                    config_file.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (crate::repl::random_id(), None),
            Err(e) => return Err(e),
        };
        let cluster = Cluster {
            myid,
            config_file,
            view: RwLock::new(None),
            epoch: AtomicU64::new(0),
            loading: AtomicBool::new(true),
            pausing: AtomicBool::new(false),
            pause: Mutex::new(None),
            imports: migrate::Imports::default(),
            in_batch: (0..threads.max(1))
                .map(|_| crossbeam_utils::CachePadded::new(AtomicBool::new(false)))
                .collect(),
        };
        if let Some(t) = table {
            cluster.set_view(t);
        }
        cluster.persist()?;
        Ok(cluster)
    }

    fn set_view(&self, table: SlotTable) {
        let my_shard = table.shard_of(&self.myid);
        let primary = table.is_primary(&self.myid);
        let epoch = table.epoch;
        *self.view.write() = Some(Arc::new(View {
            table: Arc::new(table),
            my_shard,
            primary,
        }));
        self.epoch.store(epoch, Ordering::Release);
    }

    /// The current table's epoch (0: none).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn view(&self) -> Option<Arc<View>> {
        self.view.read().clone()
    }

    /// Writes the id and table to the config file: a temporary file, fsynced, then renamed,
    /// so a crash leaves the old file whole.
    fn persist(&self) -> std::io::Result<()> {
        let mut text = format!("myid {}\n", self.myid);
        if let Some(v) = self.view() {
            text.push_str(&v.table.encode());
        }
        let tmp = self.config_file.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.config_file)
    }

    /// Installs `table` if its epoch is higher than the current one. On refusal, says why;
    /// the current table stays.
    pub fn install(&self, table: SlotTable) -> Result<(), String> {
        let current = self.epoch();
        if table.epoch <= current {
            return Err(format!(
                "table epoch {} is not newer than this node's epoch {current}",
                table.epoch
            ));
        }
        let epoch = table.epoch;
        let before = self.view();
        self.set_view(table);
        self.persist()
            .map_err(|e| format!("cannot write the cluster config file: {e}"))?;
        // A new table ends any pause: moved slots now redirect, kept ones are served.
        self.unpause();
        let now = self.view();
        let slots = |v: &Option<Arc<View>>| {
            v.as_ref()
                .and_then(|v| v.my_shard.map(|s| v.table.slots_of(s)))
                .unwrap_or(0)
        };
        sluice_log::log(&format!(
            "Cluster table epoch {epoch} installed: this node serves {} slots (was {})",
            slots(&now),
            slots(&before)
        ));
        Ok(())
    }

    /// Marks worker `thread` as running a batch until the guard drops.
    pub fn batch(&self, thread: usize) -> Batch<'_> {
        let flag = &self.in_batch[thread % self.in_batch.len()];
        flag.store(true, Ordering::SeqCst);
        Batch(flag)
    }

    /// Pauses writes to `slots` until `until` or the next table. Returns once every write that
    /// passed the slot check before the pause has been applied: each other worker has been
    /// seen outside a batch (the caller's own batch is the one running this).
    pub fn pause(&self, slots: &[(u16, u16)], until: Instant, caller: usize) {
        let mut set = Box::new([false; SLOTS]);
        for &(a, b) in slots {
            for s in a..=b {
                set[usize::from(s)] = true;
            }
        }
        *self.pause.lock() = Some(Pause { slots: set, until });
        self.pausing.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        for (i, flag) in self.in_batch.iter().enumerate() {
            if i == caller % self.in_batch.len() {
                continue;
            }
            // Batches last microseconds; yield rather than spin so the waited-for worker runs
            // even where it shares this core.
            while flag.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::yield_now();
            }
        }
    }

    pub fn unpause(&self) {
        self.pausing.store(false, Ordering::Release);
        *self.pause.lock() = None;
    }

    /// Whether `slot`'s writes are paused (the caller checked `pausing` first).
    #[cold]
    fn paused(&self, slot: u16) -> bool {
        let mut pause = self.pause.lock();
        match pause.as_ref() {
            Some(p) if Instant::now() < p.until => p.slots[usize::from(slot)],
            _ => {
                *pause = None;
                self.pausing.store(false, Ordering::Release);
                false
            }
        }
    }

    /// Where `key`'s writes go: MOVED to its slot's primary (CLUSTERDOWN without a table).
    pub fn moved(&self, key: &[u8]) -> Redirect {
        let Some(view) = self.view() else {
            return Redirect::Down;
        };
        let slot = key_slot(key);
        let p = &view.table.shards[view.table.owner(slot)].primary;
        Redirect::Moved {
            slot,
            host: p.host.clone(),
            port: p.port,
        }
    }

    /// The check of a keyed command: `Ok` to serve it here, else the redirect.
    ///
    /// `cached` is the connection's view, refreshed here when the epoch moved; `keys` are the
    /// command's key arguments; `write` whether it changes state; `readonly` whether the
    /// connection sent READONLY (a replica then serves its shard's reads).
    pub fn check<'k>(
        &self,
        cached: &mut Option<Arc<View>>,
        mut keys: impl Iterator<Item = &'k [u8]>,
        write: bool,
        readonly: bool,
    ) -> Result<(), Redirect> {
        let epoch = self.epoch.load(Ordering::Acquire);
        if epoch == 0 || self.loading.load(Ordering::Acquire) {
            return Err(Redirect::Down);
        }
        if cached.as_ref().is_none_or(|v| v.table.epoch != epoch) {
            *cached = self.view();
        }
        let Some(view) = cached.as_ref() else {
            return Err(Redirect::Down);
        };
        let Some(first) = keys.next() else {
            return Ok(());
        };
        let slot = key_slot(first);
        for k in keys {
            if key_slot(k) != slot {
                return Err(Redirect::CrossSlot);
            }
        }
        let owner = view.table.owner(slot);
        if view.my_shard == Some(owner) {
            if view.primary {
                if write && self.pausing.load(Ordering::SeqCst) && self.paused(slot) {
                    return Err(Redirect::TryAgain);
                }
                return Ok(());
            }
            if readonly && !write {
                return Ok(());
            }
        }
        let p = &view.table.shards[owner].primary;
        Err(Redirect::Moved {
            slot,
            host: p.host.clone(),
            port: p.port,
        })
    }
}

/// Installs a table pushed by the admin tool or a peer, then does what follows from it: a
/// node that handed slots over closes their migration feeds and drops their keys.
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
        shared.repl.close_feeds();
        shared.repl.submit(Job::DropUnowned);
    }
    Ok(())
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
fn peers(shared: &Shared) -> Vec<(String, u16)> {
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

/// The password a node sends its cluster peers (table fetch and push, slot import):
/// `--masterauth`, as Redis Cluster nodes use it to reach each other, or else this node's own
/// `requirepass`, which the nodes of one cluster share.
pub fn peer_password(shared: &Shared) -> Option<String> {
    shared
        .config
        .masterauth
        .clone()
        .or_else(|| shared.requirepass.read().clone())
}

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
    let password = peer_password(shared);
    let mut answered = 0;
    let mut newest: Option<SlotTable> = None;
    for (host, port) in &peers {
        let got = async {
            let mut p = Peer::connect_auth(host, *port, password.as_deref()).await?;
            match p.call(&[b"CLUSTER", b"GETTABLE"]).await? {
                Reply::BulkString(text) => SlotTable::decode(&String::from_utf8_lossy(&text))
                    .map(Some)
                    .map_err(|e| e.to_string()),
                Reply::Null => Ok(None),
                other => Err(crate::peer::text(&other)),
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
        let password = peer_password(&shared);
        for (host, port) in peers(&shared) {
            let sent = async {
                let mut p = Peer::connect_auth(&host, port, password.as_deref()).await?;
                let reply = p.call(&[b"CLUSTER", b"SETTABLE", text.as_bytes()]).await?;
                let reply = crate::peer::text(&reply);
                let table = if reply.contains("not newer") {
                    match p.call(&[b"CLUSTER", b"GETTABLE"]).await? {
                        Reply::BulkString(t) => {
                            SlotTable::decode(&String::from_utf8_lossy(&t)).ok()
                        }
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
        Ok(()) => shared.repl.submit(Job::PushTable),
        Err(e) => sluice_log::log(&format!("Promoted, but the new table was refused: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_round_trip_and_refusals() {
        let dir = std::env::temp_dir().join(format!("sluice-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nodes.conf");
        let _ = std::fs::remove_file(&file);
        let c = Cluster::open(file.clone(), 1).unwrap();
        assert_eq!(c.epoch(), 0);
        let me = sluice_cluster::Node {
            id: c.myid.clone(),
            host: "127.0.0.1".into(),
            port: 7000,
        };
        let table = sluice_cluster::create(3, vec![(me, vec![])]);
        c.install(table.clone()).unwrap();
        assert!(
            c.install(table.with_epoch(2)).is_err(),
            "lower epoch refused"
        );
        assert_eq!(c.epoch(), 3);
        // A restart comes back with the same id and table.
        let again = Cluster::open(file.clone(), 1).unwrap();
        assert_eq!(again.myid, c.myid);
        assert_eq!(again.epoch(), 3);
        std::fs::write(&file, "garbage").unwrap();
        assert!(Cluster::open(file, 1).is_err());
    }
}
