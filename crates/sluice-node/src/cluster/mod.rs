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
pub mod window;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use sluice_cluster::{SlotTable, key_slot};

/// What a node knows of the table, as one connection caches it.
#[derive(Debug)]
pub struct View {
    pub table: Arc<SlotTable>,
    /// The shard this node belongs to, as primary or replica.
    pub my_shard: Option<usize>,
    pub primary: bool,
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
    /// As an old owner in a handover: the moving slots' writes wait (`-TRYAGAIN`).
    pause: window::SlotWindow,
    /// How many pauses were asked for: the number of the last one.
    pauses: AtomicU64,
    /// As a new owner: slots a table gave this node while their import still streams wait
    /// (`-TRYAGAIN` for every command) until the old owner closes the feed, at most
    /// [`sluice_cluster::MAX_PAUSE_MS`].
    hold: window::SlotWindow,
    pub imports: Imports,
    /// Held through [`Cluster::install`].
    installing: Mutex<()>,
    /// TLS ports of peers the table does not name yet (`CLUSTER IMPORT ... TLS-PORT n`), by
    /// their plain `host:port`.
    tls_hints: Mutex<std::collections::HashMap<(String, u16), u16>>,
    /// Work for the control loop.
    pub jobs: crate::jobs::Jobs<Job>,
    /// Per thread that checks keys: set while it runs a batch of commands (a worker) or one
    /// check (a front). A pause, and a handover, wait until every other one has been outside
    /// a batch once, so a write that passed the slot check just before is applied (and
    /// journaled) before the pause's offset is taken or the feeds close. The workers come
    /// first, then the [`FRONTS`], numbered as their stats slots are.
    in_batch: Box<[crossbeam_utils::CachePadded<AtomicBool>]>,
    /// Tests only: runs after a command passed the slot check, before it is applied.
    #[cfg(test)]
    passed: Mutex<Option<tests::Hook>>,
}

/// The threads besides the workers whose checks reach the store: the HTTP front's
/// (`Stats::http_slot`) and the gRPC front's (`Stats::grpc_slot`). Each takes
/// [`Cluster::batch`] with its stats slot's number around a check, as a worker does around
/// a batch.
pub const FRONTS: usize = 2;

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
    /// `port` is the plain port; [`Redirect::for_client`] picks the TLS one for TLS clients.
    Moved {
        slot: u16,
        host: String,
        port: u16,
        tls_port: Option<u16>,
    },
    CrossSlot,
    Down,
    TryAgain,
}

impl Redirect {
    /// The redirect as a client on a TLS connection (`tls`) or a plain one is sent it: to the
    /// owner's TLS port, or its plain port.
    pub fn for_client(self, tls: bool) -> Redirect {
        match self {
            Redirect::Moved {
                slot,
                host,
                port,
                tls_port,
            } => Redirect::Moved {
                slot,
                host,
                port: match tls_port {
                    Some(t) if tls => t,
                    _ => port,
                },
                tls_port: None,
            },
            other => other,
        }
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
            pause: window::SlotWindow::default(),
            pauses: AtomicU64::new(0),
            hold: window::SlotWindow::default(),
            imports: Imports::default(),
            installing: Mutex::new(()),
            tls_hints: Mutex::default(),
            jobs: crate::jobs::Jobs::default(),
            in_batch: (0..threads.max(1) + FRONTS)
                .map(|_| crossbeam_utils::CachePadded::new(AtomicBool::new(false)))
                .collect(),
            #[cfg(test)]
            passed: Mutex::default(),
        };
        cluster.persist_table(table.as_ref())?;
        if let Some(t) = table {
            cluster.set_view(t);
        }
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

    /// Remembers the TLS port of the peer at plain `host:port` (see `tls_hints`).
    pub fn learn_tls_port(&self, host: &str, port: u16, tls_port: u16) {
        let mut hints = self.tls_hints.lock();
        // Bounded: an admin tool names a handful of sources.
        if hints.len() >= 1024 {
            hints.clear();
        }
        hints.insert((host.to_owned(), port), tls_port);
    }

    /// The TLS port of the peer at `host:port` (either of its ports): by the table, else by
    /// what `CLUSTER IMPORT` said; `Err` when the table names the peer without one.
    pub fn tls_port_of(&self, host: &str, port: u16) -> Result<Option<u16>, String> {
        let view = self.view();
        let node = view.as_ref().and_then(|v| {
            v.table
                .shards
                .iter()
                .flat_map(|s| std::iter::once(&s.primary).chain(&s.replicas))
                .find(|n| n.host == host && n.listens_on(port))
        });
        match node {
            Some(n) => n.tls_port.map(Some).ok_or_else(|| {
                format!("{host}:{port} has no TLS port in the cluster table (--tls-cluster yes)")
            }),
            None => Ok(self.tls_hints.lock().get(&(host.to_owned(), port)).copied()),
        }
    }

    /// The current table's epoch (0: none).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn view(&self) -> Option<Arc<View>> {
        self.view.read().clone()
    }

    /// Writes the id and `table` to the config file: a temporary file, fsynced, then renamed,
    /// so a crash leaves the old file whole.
    fn persist_table(&self, table: Option<&SlotTable>) -> std::io::Result<()> {
        let mut text = format!("myid {}\n", self.myid);
        if let Some(t) = table {
            text.push_str(&t.encode());
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
    /// the current table stays. The table is written to the config file before it is served:
    /// a node that cannot keep a table does not serve it either.
    ///
    /// Slots it gives this node that an import is still streaming are held (see `hold`) from
    /// before the table is served.
    pub fn install(&self, table: SlotTable) -> Result<(), String> {
        // One install at a time: the epoch check, the file and the view move together even
        // when the admin tool, etcd's watch and a peer's push bring tables at once.
        let _one = self.installing.lock();
        let current = self.epoch();
        if table.epoch <= current {
            return Err(format!(
                "table epoch {} is not newer than this node's epoch {current}",
                table.epoch
            ));
        }
        self.persist_table(Some(&table))
            .map_err(|e| format!("cannot write the cluster config file: {e}"))?;
        let epoch = table.epoch;
        let before = self.view();
        self.hold_arriving(&before, &table);
        self.set_view(table);
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

    /// Holds the slots `table` gives this primary that it did not serve under `before` and
    /// that an import of this node is still streaming: their last changes are still on the
    /// way from the old owner, which closes the feed once it took the table.
    fn hold_arriving(&self, before: &Option<Arc<View>>, table: &SlotTable) {
        let Some(me) = table
            .shard_of(&self.myid)
            .filter(|_| table.is_primary(&self.myid))
        else {
            return;
        };
        let served_before = |slot: u16| {
            before
                .as_ref()
                .is_some_and(|v| v.primary && v.my_shard == Some(v.table.owner(slot)))
        };
        let until = Instant::now() + std::time::Duration::from_millis(sluice_cluster::MAX_PAUSE_MS);
        for import in self.imports.all().iter().filter(|i| i.is_active()) {
            let arriving = import
                .ranges
                .iter()
                .flat_map(|&(a, b)| a..=b)
                .filter(|&s| table.owner(s) == me && !served_before(s));
            let arriving: Vec<(u16, u16)> = arriving.map(|s| (s, s)).collect();
            if !arriving.is_empty() {
                self.hold.open(arriving, until);
            }
        }
    }

    /// Whether this node serves any slot of `ranges` as their primary, without holding it:
    /// an import of them that still streams is too late, and ends.
    pub fn serves_unheld(&self, ranges: &[(u16, u16)]) -> bool {
        self.serving(ranges)
            .is_some_and(|mut slots| slots.any(|(s, mine)| mine && !self.hold.holds(s)))
    }

    /// Whether this node serves every slot of `ranges` as their primary.
    pub fn serves_all(&self, ranges: &[(u16, u16)]) -> bool {
        self.serving(ranges)
            .is_some_and(|mut slots| slots.all(|(_, mine)| mine))
    }

    /// Each slot of `ranges` and whether this node serves it as its primary under the current
    /// table; `None` when it is no shard's primary.
    fn serving<'r>(
        &self,
        ranges: &'r [(u16, u16)],
    ) -> Option<impl Iterator<Item = (u16, bool)> + 'r> {
        let v = self.view()?;
        let me = v.my_shard.filter(|_| v.primary)?;
        Some(
            ranges
                .iter()
                .flat_map(|&(a, b)| a..=b)
                .map(move |s| (s, v.table.owner(s) == me)),
        )
    }

    /// Ends the hold on `ranges`: their import ended.
    pub fn release(&self, ranges: &[(u16, u16)]) {
        self.hold.release(ranges);
    }

    /// Marks `thread` (a worker, or a front by its stats slot, see [`FRONTS`]) as running a
    /// batch until the guard drops.
    pub fn batch(&self, thread: usize) -> Batch<'_> {
        let flag = &self.in_batch[thread % self.in_batch.len()];
        flag.store(true, Ordering::SeqCst);
        Batch(flag)
    }

    /// Pauses writes to `slots` until `until` or the next table. Returns once every write that
    /// passed the slot check before the pause has been applied (see [`Cluster::settle`]), with
    /// the pause's number for [`Cluster::unpause_if`].
    pub fn pause(&self, slots: &[(u16, u16)], until: Instant, caller: usize) -> u64 {
        let n = self.pauses.fetch_add(1, Ordering::AcqRel) + 1;
        self.pause.replace(slots, until);
        self.settle(Some(caller));
        n
    }

    /// Ends pause number `n` if it is still the last one and no table came since: the
    /// connection that asked for it is gone.
    pub fn unpause_if(&self, n: u64, epoch: u64) -> bool {
        let current = self.pauses.load(Ordering::Acquire) == n && self.epoch() == epoch;
        if current && self.pause.is_open() {
            self.unpause();
            return true;
        }
        false
    }

    /// Waits (100 ms at most) until each worker and front but `caller` has been seen outside
    /// a batch: every command that passed the slot check before now has been applied and
    /// journaled.
    pub fn settle(&self, caller: Option<usize>) {
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        let n = self.in_batch.len();
        for (i, flag) in self.in_batch.iter().enumerate() {
            if caller.is_some_and(|c| c % n == i) {
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
        self.pause.close();
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
                if self.hold.holds(slot) || (write && self.pause.holds(slot)) {
                    return Err(Redirect::TryAgain);
                }
                #[cfg(test)]
                if let Some(hook) = self.passed.lock().clone() {
                    (hook.0)(self);
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
            tls_port: p.tls_port,
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
        /// Fires (its sender dropped) when the connection that asked for the import closes:
        /// an import whose slots are not this node's yet is then abandoned.
        asker: tokio::sync::oneshot::Receiver<()>,
    },
    /// Close the migration feeds and drop the keys of slots this node no longer serves
    /// (after a new table took some).
    HandOver,
    /// Lift pause number `pause` when the connection that asked for it closes, unless a table
    /// or another pause came first.
    PauseAsked {
        pause: u64,
        asker: tokio::sync::oneshot::Receiver<()>,
    },
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

impl ImportState {
    /// Still loading or streaming: its source may send more.
    pub fn is_active(&self) -> bool {
        self.state == "syncing" || self.state == "streaming"
    }
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

    /// The slots of every import still loading or streaming, but import number `except`.
    pub fn active_slots_except(&self, except: usize) -> Box<[bool; sluice_cluster::SLOTS]> {
        let mut slots = Box::new([false; sluice_cluster::SLOTS]);
        for (i, import) in self.0.lock().iter().enumerate() {
            if i != except && import.is_active() {
                for &(a, b) in &import.ranges {
                    slots[usize::from(a)..=usize::from(b)].fill(true);
                }
            }
        }
        slots
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
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// What [`Cluster::check`] runs, in tests, once a command passed the slot check.
    #[derive(Clone)]
    pub struct Hook(pub Arc<dyn Fn(&Cluster) + Send + Sync>);

    impl std::fmt::Debug for Hook {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Hook")
        }
    }

    /// A node in cluster mode with one worker that serves every slot.
    fn sole_node(dir: &std::path::Path) -> Arc<crate::shared::Shared> {
        use clap::Parser as _;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("nodes.conf");
        let config = crate::config::Config::parse_from([
            "sluice",
            "--port",
            "0",
            "--threads",
            "1",
            "--cluster",
            "yes",
            "--cluster-config-file",
            file.to_str().unwrap(),
        ]);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 7000));
        let shared = crate::shared::Shared::new(
            config,
            addr,
            crate::cmd::STATS_ROWS,
            crate::cmd::acl_catalog(),
        )
        .unwrap();
        let cluster = shared.cluster.as_ref().unwrap();
        let me = sluice_cluster::Node::plain(cluster.myid.clone(), "127.0.0.1", 7000);
        cluster
            .install(sluice_cluster::create(1, vec![(me, vec![])]))
            .unwrap();
        cluster.loading.store(false, Ordering::Release);
        Arc::new(shared)
    }

    /// A check of the HTTP front (`/v1/check`'s session) and of the gRPC front that passed
    /// the slot check just before a pause is applied before the pause returns: the old owner's
    /// offset, and the feeds it closes at the handover, hold it. Each front's check is held
    /// after its slot check until the pause is open, then a little longer.
    #[test]
    fn a_pause_waits_for_the_fronts_checks() {
        for front in ["http", "grpc"] {
            let dir = std::env::temp_dir().join(format!(
                "sluice-pause-fronts-{front}-{}",
                std::process::id()
            ));
            let shared = sole_node(&dir);
            let cluster = shared.cluster.as_ref().unwrap();
            let passed = Arc::new(AtomicUsize::new(0));
            let seen = passed.clone();
            *cluster.passed.lock() = Some(Hook(Arc::new(move |c: &Cluster| {
                seen.fetch_add(1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(5);
                while !c.pause.is_open() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(20));
            })));
            let key = b"k";
            let checker = {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let user = shared.acl.default_user();
                    match front {
                        "http" => {
                            let front = crate::http::Front::new(shared.clone());
                            let reply = front.exec_as(&user, &["RL.CHECK", "k", "5", "3600"]);
                            assert!(matches!(reply, sluice_resp::Value::Array(_)), "{reply:?}");
                        }
                        _ => {
                            use sluice_grpc::Node as _;
                            let front = crate::grpc::Front {
                                shared: shared.clone(),
                            };
                            let check = sluice_envoy::service::Check {
                                key: b"k",
                                limit: 5,
                                period: sluice_core::Nanos::from_secs(3600),
                                cost: 1,
                                algo: sluice_core::Algo::Fixed,
                            };
                            let now = shared.clock.now();
                            let checked = front.check(&mut None, &user, &check, now);
                            assert!(matches!(checked, sluice_grpc::Checked::Decided(Ok(_))));
                        }
                    }
                })
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while passed.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(passed.load(Ordering::SeqCst), 1, "{front}: no slot check");
            let until = Instant::now() + Duration::from_secs(10);
            cluster.pause(&[(0, 16383)], until, 0);
            let applied = shared.store.exists(key, shared.clock.now());
            checker.join().unwrap();
            assert!(
                applied,
                "{front}: the pause returned before the check it let through was applied"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

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
        let me = sluice_cluster::Node::plain(c.myid.clone(), "127.0.0.1", 7000);
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

    /// A table that cannot be written to the config file is not served either: the caller is
    /// told it was refused, and the node still serves the table it had.
    #[test]
    fn a_table_that_cannot_be_kept_is_not_served() {
        let dir = std::env::temp_dir().join(format!("sluice-cluster-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = Cluster::open(dir.join("nodes.conf"), 1).unwrap();
        let me = sluice_cluster::Node::plain(c.myid.clone(), "127.0.0.1", 7000);
        let table = sluice_cluster::create(1, vec![(me, vec![])]);
        c.install(table.clone()).unwrap();
        // The directory becomes a plain file: the config file cannot be written (even by root).
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, "not a directory").unwrap();
        let refused = c.install(table.with_epoch(2));
        assert!(refused.is_err_and(|e| e.contains("cannot write the cluster config file")));
        assert_eq!(c.epoch(), 1, "the refused table is served");
        assert_eq!(c.view().unwrap().table.epoch, 1);
        let _ = std::fs::remove_file(&dir);
    }
}
