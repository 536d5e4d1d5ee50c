//! Replication: Redis's model, streaming states instead of commands.
//!
//! Two lines run through a node, and this module is the second:
//! - the request path (worker threads) changes the store; with replication on, each change
//!   appends one record to its shard's journal under the lock it already holds, and that is
//!   all it does for replication;
//! - the replication path (the `sluice-repl` thread, [`run`]) drains every journal each
//!   `--repl-flush-ms` into the backlog and each replica's queue ([`primary`]), and on a
//!   replica keeps the link to its primary and applies what arrives ([`replica`]).
//!
//! A replica connects with Redis's handshake (PING, AUTH, REPLCONF listening-port and capa,
//! PSYNC). The connection that sends PSYNC is handed from its worker thread to this thread,
//! which answers `+FULLRESYNC` (then a snapshot taken shard by shard while the stream queues)
//! or `+CONTINUE` (then the backlog from the replica's offset), and streams from then on.
//! The primary never waits for a replica: a replica that does not keep up is cut at
//! `--client-output-buffer-limit-replica` and resyncs.
//!
//! [`Repl`] is the state both paths and the commands (ROLE, INFO, WAIT, REPLICAOF) share.

pub mod min_replicas;
pub mod primary;
pub mod replica;
pub mod skew;
pub mod thread;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use sluice_repl::{Backlog, Record};
use sluice_store::Store;
use tokio::sync::{Notify, mpsc, watch};

use crate::clients::ClientHandle;
use crate::config::Config;

/// How often an idle stream carries a PING (Redis: repl-ping-replica-period, 10 s; shorter
/// here so `master_last_io_seconds_ago` stays small and a dead primary shows quickly).
pub const PING_EVERY: Duration = Duration::from_secs(1);
/// How often a replica acks its offset (Redis: every second). Five times a second here, so
/// `--min-replicas-max-lag 1` holds with room to spare and a primary cut off from its
/// replicas learns it within the lag, not a second later.
pub const ACK_EVERY: Duration = Duration::from_millis(200);

pub use crate::config::MasterAddr;

/// The replica link's state, as ROLE names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    Connect,
    Connecting,
    Sync,
    Connected,
}

impl LinkState {
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Connect => "connect",
            LinkState::Connecting => "connecting",
            LinkState::Sync => "sync",
            LinkState::Connected => "connected",
        }
    }
}

/// A replica as its primary sees it.
#[derive(Debug)]
pub struct ReplicaSlot {
    pub client: u64,
    pub ip: IpAddr,
    /// The port it listens on (REPLCONF listening-port), which Sentinel connects to.
    pub port: u16,
    pub online: bool,
    /// The offset it last acked.
    pub ack: u64,
    pub last_ack: Instant,
    tx: mpsc::UnboundedSender<(Bytes, u64)>,
    /// Bytes queued for it and not yet written: past the limit it is cut.
    queued: Arc<AtomicUsize>,
    /// Set for a slot migration feed: another primary importing these slots, not a replica
    /// (INFO, ROLE, WAIT and Sentinel never see it).
    pub filter: Option<SlotFilter>,
}

/// The slots a migration feed carries.
pub type SlotFilter = Arc<[bool; sluice_cluster::SLOTS]>;

/// Replication state under one mutex: touched per flush, per ack and by the commands that
/// report it, never per check.
#[derive(Debug)]
pub struct Inner {
    /// As a primary: our replication id. As a replica: our primary's.
    pub replid: String,
    /// The id we replicated from before a promotion (INFO `master_replid2`).
    pub replid2: String,
    pub second_offset: i64,
    /// `replid2` is the stream this node itself left when it was promoted (`REPLICAOF NO
    /// ONE`), not one a primary said its stream continues: a replica refuses a primary's older
    /// snapshot of that stream only in the second case (promoting it is how an operator
    /// chooses to take another primary's state).
    pub second_is_own: bool,
    /// This replica's buckets were loaded from its own snapshot at start and no sync has
    /// followed: they are on the clock the snapshot was saved under.
    pub state_from_snapshot: bool,
    /// As a primary: the stream's end (master_repl_offset). As a replica: bytes applied.
    pub offset: u64,
    /// Created when the first replica connects; from then on every change is journaled.
    pub backlog: Option<Backlog>,
    pub replicas: Vec<ReplicaSlot>,
    /// Some while this node is a replica.
    pub master: Option<MasterAddr>,
    pub link: LinkState,
    pub link_up_since: Option<Instant>,
    pub link_down_since: Option<Instant>,
    pub last_io: Instant,
    /// When the stream last carried anything (PINGs fill silences).
    last_stream: Instant,
    /// As a replica: `replid` and `offset` name a primary's stream we have applied, so a
    /// reconnect asks to continue it.
    pub synced: bool,
    /// The size of the last flush: the next one's buffer starts that large, so draining the
    /// journals copies each record once instead of regrowing the buffer.
    flush_hint: usize,
    /// As a primary restarted from a snapshot it saved: its previous stream's id and the
    /// snapshot's offset in it (INFO `snapshot_replid`, `snapshot_repl_offset`).
    pub restarted: Option<crate::persist::Origin>,
    /// As a replica: how far our clock is ahead of the primary's, measured when the link
    /// came up (`master_clock_offset_ms`).
    pub skew: skew::Skew,
}

/// Counters for INFO stats.
#[derive(Debug, Default)]
pub struct ReplStats {
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
}

/// Work for the replication thread.
#[derive(Debug)]
pub enum Job {
    /// A connection that sent PSYNC (or CLUSTER MIGRATE-FEED): stream to it.
    Feed(Handoff),
}

/// A PSYNC connection handed from its worker thread to the replication thread.
#[derive(Debug)]
pub struct Handoff {
    pub stream: std::net::TcpStream,
    pub request: PsyncRequest,
}

/// What a replica asked for, and who it is.
#[derive(Debug)]
pub struct PsyncRequest {
    pub peer: SocketAddr,
    pub client: Arc<ClientHandle>,
    /// REPLCONF listening-port (0 if it sent none).
    pub listening_port: u16,
    pub replid: Vec<u8>,
    pub offset: i64,
    /// A slot migration feed's slots (CLUSTER MIGRATE-FEED), `None` for a replica.
    pub filter: Option<SlotFilter>,
}

/// Shared replication state. See the module docs.
#[derive(Debug)]
pub struct Repl {
    pub inner: Mutex<Inner>,
    /// True on a read-only replica: one relaxed load on the write path.
    readonly: AtomicBool,
    /// `replica-read-only` (CONFIG SET changes it; [`Repl::set_replica_read_only`]).
    replica_read_only: AtomicBool,
    /// Bumped whenever a replica acks (WAIT waits on it).
    acks: watch::Sender<u64>,
    /// REPLICAOF's target, watched by the link task.
    target: watch::Sender<Option<MasterAddr>>,
    /// Told when the first replica or migration feed creates the backlog: until then the
    /// flusher sleeps instead of waking worker 0 every millisecond for nothing.
    backlog_created: Notify,
    /// Work for the replication thread.
    pub jobs: crate::jobs::Jobs<Job>,
    pub stats: ReplStats,
    /// `min-replicas-to-write` / `min-replicas-max-lag`: whether writes answer `-NOREPLICAS`.
    pub min_replicas: min_replicas::MinReplicas,
    /// Worker 0's runtime: the flusher and the streams to replicas run there, between that
    /// worker's batches, so a flush costs no thread switch (on a busy core, waking another
    /// thread every millisecond preempts the worker mid-batch and stalls its clients).
    pub stream_runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    backlog_size: usize,
    replica_output_limit: usize,
}

/// A fresh 40-hex-character id (run ids, replication ids).
pub fn random_id() -> String {
    let mut bytes = [0u8; 20];
    let from_urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !from_urandom {
        // No /dev/urandom: the clock and the pid, spread by the std hasher's random keys.
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        (std::time::SystemTime::now(), std::process::id()).hash(&mut h);
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            i.hash(&mut h);
            chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Repl {
    /// Whether a replica refuses writes (`replica-read-only`).
    pub fn replica_read_only(&self) -> bool {
        self.replica_read_only.load(Relaxed)
    }

    /// CONFIG SET replica-read-only: takes effect at once on a replica. Under the link's lock,
    /// so a REPLICAOF at the same moment sees either value whole.
    pub fn set_replica_read_only(&self, on: bool) {
        let inner = self.inner.lock();
        self.replica_read_only.store(on, Relaxed);
        self.readonly.store(inner.master.is_some() && on, Relaxed);
    }

    pub fn new(config: &Config) -> Repl {
        let master = config.replicaof.clone();
        let repl = Repl {
            inner: Mutex::new(Inner {
                replid: random_id(),
                replid2: "0".repeat(40),
                second_offset: -1,
                second_is_own: false,
                state_from_snapshot: false,
                offset: 0,
                backlog: None,
                replicas: Vec::new(),
                master: master.clone(),
                link: LinkState::Connect,
                link_up_since: None,
                link_down_since: None,
                last_io: Instant::now(),
                last_stream: Instant::now(),
                synced: false,
                flush_hint: 0,
                skew: skew::Skew::default(),
                restarted: None,
            }),
            readonly: AtomicBool::new(false),
            replica_read_only: AtomicBool::new(config.replica_read_only),
            acks: watch::channel(0).0,
            target: watch::channel(master.clone()).0,
            backlog_created: Notify::new(),
            jobs: crate::jobs::Jobs::default(),
            stats: ReplStats::default(),
            min_replicas: min_replicas::MinReplicas::new(
                config.min_replicas_to_write,
                config.min_replicas_max_lag,
            ),
            stream_runtime: std::sync::OnceLock::new(),
            backlog_size: usize::try_from(config.repl_backlog_size).unwrap_or(usize::MAX),
            replica_output_limit: usize::try_from(config.client_output_buffer_limit_replica)
                .unwrap_or(usize::MAX),
        };
        repl.readonly
            .store(master.is_some() && config.replica_read_only, Relaxed);
        if master.is_some() {
            sluice_log::set_role(b'S');
        }
        repl.refresh_good_replicas();
        repl
    }

    /// Counts the replicas that acked within `min-replicas-max-lag` and decides whether writes
    /// answer `-NOREPLICAS` ([`min_replicas`]).
    pub fn refresh_good_replicas(&self) {
        let inner = self.inner.lock();
        self.min_replicas.refresh(
            inner.master.is_none(),
            inner.replicas().map(|r| (r.online, r.last_ack)),
            Instant::now(),
        );
    }

    /// True when writes must answer `-READONLY` (a replica with `replica-read-only yes`).
    #[inline]
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Relaxed)
    }

    pub fn is_replica(&self) -> bool {
        self.inner.lock().master.is_some()
    }

    /// Gives the replication thread work that must not run on a worker thread.
    pub fn submit(&self, job: Job) {
        self.jobs.submit(job);
    }

    /// Returns once there is a stream to flush: a backlog exists.
    pub async fn streaming(&self) {
        loop {
            // Armed before the check, so a backlog created in between still wakes it.
            let created = self.backlog_created.notified();
            if self.inner.lock().backlog.is_some() {
                return;
            }
            created.await;
        }
    }

    pub fn acks(&self) -> watch::Receiver<u64> {
        self.acks.subscribe()
    }

    /// Replicas whose acked offset has reached `offset`.
    pub fn acked(&self, offset: u64) -> usize {
        self.inner
            .lock()
            .replicas()
            .filter(|r| r.online && r.ack >= offset)
            .count()
    }

    /// Slot migration feeds: how many, and the lowest offset they acked.
    pub fn feeds_acked(&self) -> (usize, u64) {
        let inner = self.inner.lock();
        let feeds = inner.replicas.iter().filter(|r| r.filter.is_some());
        feeds.fold((0, u64::MAX), |(n, min), r| (n + 1, min.min(r.ack)))
    }

    /// Where a snapshot begun now stands in a replication stream, whatever this node's role
    /// (Redis's `repl-id` and `repl-offset`): a primary's own stream, at its end after the
    /// journals were flushed; a replica's primary's stream, at the offset it has applied
    /// (`None` before its first sync). Every entry read after is at least as new as that
    /// offset: a replica bumps its offset only after it applied the records.
    pub fn origin(&self, store: &Store) -> Option<crate::persist::Origin> {
        let mut inner = self.inner.lock();
        if inner.master.is_some() {
            return inner.synced.then(|| crate::persist::Origin {
                replid: inner.replid.clone(),
                offset: inner.offset,
            });
        }
        let offset = self.flush_locked(&mut inner, store, false);
        Some(crate::persist::Origin {
            replid: inner.replid.clone(),
            offset,
        })
    }

    /// The node loaded a snapshot of `origin` at start. A replica (`--replicaof`) holds its
    /// primary's stream up to there, and asks to continue it, as Redis's replica does with a
    /// cached master: the records from there on are states, so those it already holds apply
    /// again harmlessly. A primary goes on as [`Repl::restarted_from`] says.
    pub fn loaded(&self, origin: crate::persist::Origin) {
        let mut inner = self.inner.lock();
        if inner.master.is_none() {
            drop(inner);
            return self.restarted_from(origin);
        }
        sluice_log::log(&format!(
            "The snapshot stands at offset {} of stream {}: asking the primary to continue from there",
            origin.offset, origin.replid
        ));
        inner.replid = origin.replid;
        inner.offset = origin.offset;
        inner.synced = true;
        inner.state_from_snapshot = true;
    }

    /// A primary restarted from a snapshot of `origin`: it knows its old stream up to there
    /// (`master_replid2`, `second_repl_offset`), and goes on from there under a new id. A
    /// replica holding more of the old stream, or of a stream that continued it (a replica
    /// promoted after it saved the snapshot), sees that it is ahead of this node.
    pub fn restarted_from(&self, origin: crate::persist::Origin) {
        let mut inner = self.inner.lock();
        sluice_log::log(&format!(
            "This node's previous stream {} is known up to offset {} (the snapshot): a replica holding more of it is ahead of this node and will not be wiped",
            origin.replid, origin.offset
        ));
        inner.replid2 = origin.replid.clone();
        inner.second_offset = origin.offset as i64 + 1;
        inner.offset = origin.offset;
        inner.restarted = Some(origin);
    }

    /// Closes every slot migration feed (its slots were handed over, or the move failed),
    /// after it got every change journaled so far.
    pub fn close_feeds(&self, store: &Store) {
        let mut inner = self.inner.lock();
        self.flush_locked(&mut inner, store, false);
        inner.replicas.retain(|r| r.filter.is_none());
    }

    /// `REPLICAOF host port`: become a replica of `to` (drops our replicas, stops journaling).
    /// `REPLICAOF NO ONE` (`None`): become a primary under a new replication id, keeping
    /// every bucket. Returns false if nothing changed (already replicating from `to`).
    pub fn set_master(&self, store: &Store, to: Option<MasterAddr>) -> bool {
        let mut inner = self.inner.lock();
        if inner.master == to && to.is_some() {
            return false;
        }
        match &to {
            Some(addr) => {
                sluice_log::log(&format!(
                    "Connecting to MASTER {}:{} (REPLICAOF)",
                    addr.host, addr.port
                ));
                // Our own replicas would follow a stream we no longer own.
                inner.replicas.clear();
                inner.backlog = None;
                store.set_journaling(false);
                inner.link = LinkState::Connect;
                inner.link_up_since = None;
                inner.link_down_since.get_or_insert_with(Instant::now);
            }
            None if inner.master.is_some() => {
                sluice_log::log(
                    "MASTER MODE enabled (REPLICAOF NO ONE): keeping every bucket, new replication id",
                );
                inner.replid2 = std::mem::replace(&mut inner.replid, random_id());
                inner.second_offset = inner.offset as i64 + 1;
                inner.second_is_own = true;
                inner.link_up_since = None;
                inner.link_down_since = None;
            }
            None => {}
        }
        inner.master = to.clone();
        sluice_log::set_role(if to.is_some() { b'S' } else { b'M' });
        self.readonly
            .store(to.is_some() && self.replica_read_only(), Relaxed);
        drop(inner);
        self.refresh_good_replicas();
        self.target.send_replace(to);
        true
    }

    /// Drains every shard journal into the stream: the backlog and each replica's queue.
    /// With `getack`, also asks every replica to ack at once (WAIT). Returns the stream's end
    /// offset.
    pub fn flush(&self, store: &Store, getack: bool) -> u64 {
        let mut inner = self.inner.lock();
        self.flush_locked(&mut inner, store, getack)
    }

    fn flush_locked(&self, inner: &mut Inner, store: &Store, getack: bool) -> u64 {
        if inner.backlog.is_none() {
            return inner.offset;
        }
        let mut buf = Vec::with_capacity(inner.flush_hint * 2 + 4096);
        store.drain_journal(&mut buf);
        inner.flush_hint = buf.len();
        if getack {
            Record::GetAck.encode(&mut buf);
        } else if buf.is_empty() && inner.last_stream.elapsed() >= PING_EVERY {
            Record::Ping.encode(&mut buf);
        }
        let Some(backlog) = inner.backlog.as_mut() else {
            return inner.offset;
        };
        if buf.is_empty() {
            return backlog.end();
        }
        let chunk = Bytes::from(buf);
        backlog.push(chunk.clone());
        inner.offset = backlog.end();
        let end = inner.offset;
        inner.last_stream = Instant::now();
        let limit = self.replica_output_limit;
        inner.replicas.retain(|r| {
            let queued = r.queued.fetch_add(chunk.len(), Relaxed) + chunk.len();
            if limit > 0 && queued > limit {
                sluice_log::log(&format!(
                    "Replica {}:{} (id={}) reached the replica output buffer limit ({} bytes queued): cutting it; it will resync",
                    r.ip, r.port, r.client, queued
                ));
                return false;
            }
            r.tx.send((chunk.clone(), end)).is_ok()
        });
        inner.offset
    }

    /// Registers a replica that sent PSYNC and decides how it syncs. Turns journaling on
    /// with the first replica.
    fn attach(&self, store: &Store, h: &PsyncRequest) -> Result<Attach, String> {
        let mut inner = self.inner.lock();
        if inner.master.is_some() {
            return Err(
                "NOMASTERLINK Sluice replicas do not serve replicas: connect to the primary".into(),
            );
        }
        if inner.backlog.is_none() {
            store.set_journaling(true);
            inner.backlog = Some(Backlog::new(inner.offset, self.backlog_size));
            self.backlog_created.notify_one();
            sluice_log::log(&format!(
                "Replication backlog created ({} bytes): journaling every change from offset {}",
                self.backlog_size, inner.offset
            ));
        }
        let end = self.flush_locked(&mut inner, store, false);
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        if let Some(o) = &inner.restarted
            && h.replid == o.replid.as_bytes()
            && h.offset > o.offset as i64
        {
            sluice_log::log(&format!(
                "Replica {} holds offset {} of this node's previous stream, past the snapshot this node restarted from (offset {}): it is ahead of this node and will refuse a full sync. To keep its newer buckets, promote it (REPLICAOF NO ONE there, then REPLICAOF it here)",
                h.peer, h.offset, o.offset
            ));
        }
        let wants_continue =
            h.filter.is_none() && h.replid == inner.replid.as_bytes() && h.offset >= 0;
        let partial = if wants_continue {
            inner
                .backlog
                .as_ref()
                .and_then(|b| b.since(h.offset as u64))
        } else {
            None
        };
        let how = match partial {
            Some(bytes) => {
                self.stats.sync_partial_ok.fetch_add(1, Relaxed);
                Sync::Partial(bytes)
            }
            None if h.filter.is_some() => Sync::Full(end),
            None => {
                if h.replid != b"?" {
                    self.stats.sync_partial_err.fetch_add(1, Relaxed);
                }
                self.stats.sync_full.fetch_add(1, Relaxed);
                Sync::Full(end)
            }
        };
        inner.replicas.push(ReplicaSlot {
            client: h.client.id,
            ip: h.peer.ip(),
            port: h.listening_port,
            online: matches!(how, Sync::Partial(_)),
            ack: if wants_continue { h.offset as u64 } else { 0 },
            last_ack: Instant::now(),
            tx,
            queued: queued.clone(),
            filter: h.filter.clone(),
        });
        Ok(Attach {
            replid: inner.replid.clone(),
            how,
            rx,
            queued,
        })
    }

    /// Runs `f` on the replica (or feed) of connection `client`, if it is still attached.
    fn with_replica(&self, client: u64, f: impl FnOnce(&mut ReplicaSlot)) {
        if let Some(r) = self
            .inner
            .lock()
            .replicas
            .iter_mut()
            .find(|r| r.client == client)
        {
            f(r);
        }
    }

    fn set_online(&self, client: u64) {
        self.with_replica(client, |r| r.online = true);
        self.refresh_good_replicas();
    }

    fn ack(&self, client: u64, offset: u64) {
        self.with_replica(client, |r| {
            r.ack = r.ack.max(offset);
            r.last_ack = Instant::now();
        });
        self.refresh_good_replicas();
        self.acks.send_modify(|n| *n += 1);
    }

    fn detach(&self, client: u64) {
        self.inner.lock().replicas.retain(|r| r.client != client);
        self.refresh_good_replicas();
    }

    fn target(&self) -> watch::Receiver<Option<MasterAddr>> {
        self.target.subscribe()
    }
}

/// How a replica that sent PSYNC will sync.
#[derive(Debug)]
enum Sync {
    /// Snapshot, then the stream from this offset.
    Full(u64),
    /// The backlog from the replica's offset, then the stream.
    Partial(Vec<Bytes>),
}

#[derive(Debug)]
struct Attach {
    replid: String,
    how: Sync,
    rx: mpsc::UnboundedReceiver<(Bytes, u64)>,
    queued: Arc<AtomicUsize>,
}

impl Inner {
    /// The replicas proper (not slot migration feeds): what INFO, ROLE and WAIT count.
    pub fn replicas(&self) -> impl Iterator<Item = &ReplicaSlot> {
        self.replicas.iter().filter(|r| r.filter.is_none())
    }
}
