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

pub mod adopt;
pub mod control;
pub mod etcd;
pub mod migrate;
pub mod peers;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use sluice_cluster::{SLOTS, SlotTable, key_slot};

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
    pub imports: Imports,
    /// Work for the control loop.
    pub jobs: crate::jobs::Jobs<Job>,
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
            imports: Imports::default(),
            jobs: crate::jobs::Jobs::default(),
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

/// Work for the cluster control loop (`control`): what a command or a new table starts
/// but must not run on a worker thread.
#[derive(Debug)]
pub enum Job {
    /// Import slots from their old owner (CLUSTER IMPORT).
    Import {
        host: String,
        port: u16,
        ranges: Vec<(u16, u16)>,
    },
    /// Drop the keys of slots this node no longer serves (after a new table).
    DropUnowned,
    /// Send this node's table to every other node of it, and to etcd if the cluster keeps it
    /// there (after a promotion).
    PushTable,
}

/// One import's progress, for `CLUSTER IMPORT-STATUS`.
#[derive(Debug, Clone)]
pub struct ImportState {
    pub source: String,
    pub ranges: Vec<(u16, u16)>,
    /// `syncing`, `streaming`, `closed` or `failed: <why>`.
    pub state: String,
    pub entries: u64,
    pub offset: u64,
}

/// Every import this node ran since start.
#[derive(Debug, Default)]
pub struct Imports(Mutex<Vec<ImportState>>);

impl Imports {
    pub fn update(&self, index: usize, f: impl FnOnce(&mut ImportState)) {
        if let Some(s) = self.0.lock().get_mut(index) {
            f(s);
        }
    }

    /// Records a new import; returns its index for [`Imports::update`].
    pub fn start(&self, state: ImportState) -> usize {
        let mut all = self.0.lock();
        all.push(state);
        all.len() - 1
    }

    pub fn all(&self) -> Vec<ImportState> {
        self.0.lock().clone()
    }
}

/// Parses `start-end` (or a single slot) into an inclusive range.
pub fn parse_range(arg: &[u8]) -> Option<(u16, u16)> {
    let text = std::str::from_utf8(arg).ok()?;
    let (a, b) = text.split_once('-').unwrap_or((text, text));
    let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
    (a <= b && usize::from(b) < sluice_cluster::SLOTS).then_some((a, b))
}

pub fn format_ranges(ranges: &[(u16, u16)]) -> Vec<String> {
    ranges.iter().map(|(a, b)| format!("{a}-{b}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range(b"0-100"), Some((0, 100)));
        assert_eq!(parse_range(b"7"), Some((7, 7)));
        assert_eq!(parse_range(b"100-0"), None);
        assert_eq!(parse_range(b"0-16384"), None);
        assert_eq!(parse_range(b"x"), None);
    }

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
