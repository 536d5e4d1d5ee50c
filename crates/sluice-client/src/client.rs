//! [`Client`]: routing (one node, a cluster, or a Sentinel-discovered primary) and the check
//! path with its gateway options.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use sluice_core::{Nanos, Params, State};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout_at};

use crate::limit::{Decision, FailMode, Limit, Source};
use crate::local::Expiring;
use crate::node::{BreakerState, CallError, Node, NodeOptions};

use sluice_resp::value::{self, Value};

/// Where the nodes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One node, `host:port`.
    Single(String),
    /// A cluster: seed nodes; the slot map comes from `CLUSTER SLOTS`, refreshed every second
    /// and at once on `MOVED`.
    Cluster(Vec<String>),
    /// The primary named `master_name`, asked of these Sentinels with
    /// `SENTINEL get-master-addr-by-name`; asked again every second and at once when the primary
    /// fails a call.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
}

impl std::fmt::Display for Topology {
    /// `host:port`, `cluster a,b,c`, or `sentinel NAME via a,b,c`: for log lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topology::Single(addr) => f.write_str(addr),
            Topology::Cluster(seeds) => write!(f, "cluster {}", seeds.join(",")),
            Topology::Sentinel {
                sentinels,
                master_name,
            } => write!(f, "sentinel {master_name} via {}", sentinels.join(",")),
        }
    }
}

/// A client's settings; `Config::new(topology)` has the defaults.
#[derive(Clone, Debug)]
pub struct Config {
    pub topology: Topology,
    /// The per-call deadline: a check that the node has not answered by then gets its fail mode.
    pub deadline: Duration,
    /// How many gateways share the limits (fail mode `local` holds limit ÷ gateways).
    pub gateways: u32,
    pub node: NodeOptions,
    /// Most keys held in each of the local maps (local buckets, blocked cache, approximate).
    pub max_local_keys: usize,
}

impl Config {
    pub fn new(topology: Topology) -> Config {
        Config {
            topology,
            deadline: Duration::from_millis(20),
            gateways: 1,
            node: NodeOptions::default(),
            max_local_keys: 100_000,
        }
    }
}

/// Why a check has no decision: the node refused the request itself (bad arguments,
/// `WRONGTYPE`), which no fail mode should paper over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError(pub String);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

/// One upstream as INFO shows it.
#[derive(Clone, Debug)]
pub struct Upstream {
    pub addr: Arc<str>,
    pub breaker: BreakerState,
    pub answered: u64,
    pub failed: u64,
}

/// A gateway's handle; cheap to clone, shared by every task. Dropping the last clone stops its
/// background work.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
enum Route {
    One(Arc<str>),
    /// 16384 owners (`None`: slot not covered).
    Slots(Vec<Option<Arc<str>>>),
}

/// Approximate-mode state of one key on this gateway.
#[derive(Debug)]
struct Approx {
    /// The node's last answer: remaining after the last sync, its reset and retry times.
    remaining: u64,
    reset_after_ms: i64,
    retry_after_ms: i64,
    /// What this gateway may admit before it syncs again ([`Limit::approx_share`]).
    share: u64,
    /// Units admitted here since the last completed sync (including those being synced).
    count: u64,
    /// Units admitted here that a denied sync could not charge; admit nothing while owed.
    debt: u64,
    syncing: bool,
    scheduled: bool,
    /// The last sync could not reach the node: callers waiting for one get the fail mode.
    unreachable: bool,
    last_sync: Instant,
    /// Bumped when a sync ends; callers waiting for a share watch it.
    synced: tokio::sync::watch::Sender<u64>,
}

impl Approx {
    fn new(d: &Decision, share: u64, now: Instant) -> Approx {
        Approx {
            remaining: if d.allowed { d.remaining } else { 0 },
            reset_after_ms: d.reset_after_ms,
            retry_after_ms: d.retry_after_ms,
            share,
            count: 0,
            debt: 0,
            syncing: false,
            scheduled: false,
            unreachable: false,
            last_sync: now,
            synced: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Takes a node's answer (a sync's or an exact check's) as the new global view.
    fn learn(&mut self, d: &Decision, share: u64, now: Instant) {
        self.remaining = if d.allowed { d.remaining } else { 0 };
        self.retry_after_ms = d.retry_after_ms;
        self.reset_after_ms = d.reset_after_ms;
        self.share = share;
        self.last_sync = now;
        self.unreachable = false;
    }
}

/// What approximate mode does with one request.
enum Step {
    Answer(Decision),
    /// Wait for the sync in flight (its generation now), then decide again.
    Wait(tokio::sync::watch::Receiver<u64>),
    /// Ask the node with this request's cost (first sight, a stale view, a cost over the share).
    Exact,
    /// The node could not be reached for the last sync.
    Fail,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    route: RwLock<Route>,
    nodes: Mutex<HashMap<Arc<str>, Arc<Node>>>,
    refresh: Notify,
    local: Mutex<Expiring<Option<State>>>,
    blocked: Mutex<Expiring<i64>>,
    approx: Mutex<Expiring<Approx>>,
    decisions: [AtomicU64; 6],
    /// RL.CHECK calls sent to a node (checks and syncs).
    node_calls: AtomicU64,
    epoch: Instant,
    rng: AtomicU64,
}

impl Client {
    /// Makes a client and resolves its topology once (bounded by a second); a topology that
    /// cannot be resolved yet is retried in the background, and checks meanwhile get their fail
    /// mode. Must be called inside a tokio runtime.
    pub async fn connect(config: Config) -> Client {
        let first = match &config.topology {
            Topology::Single(a) => a.clone(),
            Topology::Cluster(seeds) => seeds.first().cloned().unwrap_or_default(),
            Topology::Sentinel { .. } => String::new(),
        };
        let cap = config.max_local_keys;
        let seed = Instant::now().elapsed().as_nanos() as u64 ^ (std::process::id() as u64) << 32;
        let inner = Arc::new(Inner {
            route: RwLock::new(Route::One(first.into())),
            nodes: Mutex::new(HashMap::new()),
            refresh: Notify::new(),
            local: Mutex::new(Expiring::new(cap)),
            blocked: Mutex::new(Expiring::new(cap)),
            approx: Mutex::new(Expiring::new(cap)),
            decisions: Default::default(),
            node_calls: AtomicU64::new(0),
            epoch: Instant::now(),
            rng: AtomicU64::new(seed | 1),
            config,
        });
        if !matches!(inner.config.topology, Topology::Single(_)) {
            let _ = tokio::time::timeout(Duration::from_secs(1), inner.resolve()).await;
            tokio::spawn(refresher(Arc::downgrade(&inner)));
        }
        Client { inner }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Checks and consumes `cost` units of `limit` for `key`. `Err` only when the node refused
    /// the request itself; an unreachable, slow or broken node gives the limit's fail mode,
    /// within the deadline.
    pub async fn check(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
    ) -> Result<Decision, ReplyError> {
        let deadline = Instant::now() + self.inner.config.deadline;
        let decision = self.check_inner(key, limit, cost, deadline).await?;
        self.inner.decisions[decision.source.index()].fetch_add(1, Ordering::Relaxed);
        Ok(decision)
    }

    async fn check_inner(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        deadline: Instant,
    ) -> Result<Decision, ReplyError> {
        let inner = &self.inner;
        // Only a split key is built; otherwise the caller's bytes are used until a map keeps them.
        let sub;
        let (key, limit): (&[u8], Limit) = if limit.split > 1 && limit.sub_keys() > 1 {
            let k = limit.sub_keys();
            let i = inner.random() % k;
            let mut b = Vec::with_capacity(key.len() + 4);
            b.extend_from_slice(key);
            b.push(b'#');
            b.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            sub = b;
            (&sub, limit.sub_limit(i))
        } else {
            (key, *limit)
        };
        let now = Instant::now();
        if let Some(d) = inner.blocked(key, &limit, now) {
            return Ok(d);
        }
        if limit.approximate.is_some() {
            let first = self.approximate(key, &limit, cost, now);
            if let Some(d) = self.approx_steps(key, &limit, cost, deadline, first).await {
                return Ok(d);
            }
        }
        self.exact(key, &limit, cost, deadline, now).await
    }

    /// Approximate mode from `step` on: `None` when the node is to be asked with this request.
    async fn approx_steps(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        deadline: Instant,
        mut step: Step,
    ) -> Option<Decision> {
        loop {
            match step {
                Step::Answer(d) => return Some(d),
                Step::Fail => return Some(self.inner.fail(key, limit, cost)),
                Step::Exact => return None,
                Step::Wait(mut synced) => {
                    // A sync that ends (or an entry that goes: the sender drops) wakes us. A
                    // sync still in flight at the deadline (a busy gateway, not a dead node:
                    // that ends the sync) is a denial, never the fail mode: the share is used,
                    // and admitting more unseen would break the overshoot bound.
                    if timeout_at(deadline, synced.changed()).await.is_err() {
                        return Some(Decision {
                            allowed: false,
                            limit: limit.capacity(),
                            remaining: 0,
                            retry_after_ms: 1,
                            reset_after_ms: limit.period_ms() as i64,
                            source: Source::Approximate,
                        });
                    }
                }
            }
            step = self.approximate(key, limit, cost, Instant::now());
        }
    }

    /// The node's answer to this check (or its fail mode), learned by the local maps.
    async fn exact(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        deadline: Instant,
        now: Instant,
    ) -> Result<Decision, ReplyError> {
        let inner = &self.inner;
        let limit = *limit;
        let result = inner
            .call_key(key, rl_check_frame(key, &limit, cost), deadline)
            .await;
        inner.node_calls.fetch_add(1, Ordering::Relaxed);
        let decided = match result {
            Ok((v, addr)) => decision_from(&v, Source::Node(addr)).map(Some),
            Err(_) => Ok(None),
        };
        if limit.approximate.is_some() {
            let learned = decided.as_ref().ok().and_then(Option::as_ref);
            inner.learn_exact(key, &limit, learned, now);
        }
        match decided? {
            Some(d) => {
                inner.learn_denial(key, &limit, &d, now);
                Ok(d)
            }
            None => Ok(inner.fail(key, &limit, cost)),
        }
    }

    /// Approximate mode's step for one request: a local answer, a wait for the sync in flight,
    /// or the node (first sight of the key, a view older than an interval, a cost over the
    /// share). Never a local denial while the node may have room, except for one interval after
    /// the node itself said it had none (see [`Limit::undershoot_bound`]).
    fn approximate(&self, key: &[u8], limit: &Limit, cost: u64, now: Instant) -> Step {
        let Some(a) = limit.approximate else {
            return Step::Exact;
        };
        let mut table = self.inner.approx.lock();
        let Some((st, expires)) = table.get_mut(key, now) else {
            // First sight: this request asks the node; the others wait for its answer.
            let mut st = Approx::new(&Decision::unknown(), 0, now);
            st.syncing = true;
            let ttl = limit.period.max(a.sync_every);
            table.insert(Bytes::copy_from_slice(key), st, now + ttl, now);
            return Step::Exact;
        };
        *expires = (*expires).max(now + limit.period);
        let since = now.saturating_duration_since(st.last_sync);
        let fresh = since < a.sync_every;
        let fits = st.debt == 0 && st.count + cost <= st.share && (fresh || st.count > 0);
        // What the node had at the last answer, less what was admitted here since.
        let known_left = if st.debt > 0 {
            0
        } else {
            st.remaining.saturating_sub(st.count)
        };
        let mut sync_now = false;
        let step = if fits {
            st.count += cost;
            let used = st.count >= st.share || (a.sync_every_n > 0 && st.count >= a.sync_every_n);
            // Share used and the node had more: sync at once. Everything the node had is used:
            // the interval's sync charges it (nothing more can be known earlier).
            if used && st.remaining > st.count && !st.syncing {
                sync_now = true;
            } else if !st.syncing && !st.scheduled {
                st.scheduled = true;
                self.schedule_sync(key, limit, a.sync_every.saturating_sub(since));
            }
            Step::Answer(Decision {
                allowed: true,
                limit: limit.capacity(),
                remaining: st.remaining.saturating_sub(st.count),
                retry_after_ms: -1,
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else if st.syncing {
            Step::Wait(st.synced.subscribe())
        } else if st.unreachable && fresh {
            Step::Fail
        } else if known_left < cost && fresh {
            // The node had nothing more for this request at its last answer, less than an
            // interval ago: since then it gained at most one interval's refill, which a sync at
            // the interval's end (asked for here, if none is due) learns, traffic or not.
            if !st.scheduled {
                st.scheduled = true;
                self.schedule_sync(key, limit, a.sync_every.saturating_sub(since));
            }
            Step::Answer(Decision {
                allowed: false,
                limit: limit.capacity(),
                remaining: 0,
                retry_after_ms: st
                    .retry_after_ms
                    .max(a.sync_every.saturating_sub(since).as_millis() as i64)
                    .max(1),
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else if st.count > 0 || st.debt > 0 {
            // The share is used up and the node had more (or the view is old): sync, and wait.
            sync_now = true;
            Step::Wait(st.synced.subscribe())
        } else {
            // An old view and nothing to charge: this request asks the node; others wait.
            st.syncing = true;
            Step::Exact
        };
        if sync_now {
            st.syncing = true;
            drop(table);
            let inner = self.inner.clone();
            let (key, limit) = (Bytes::copy_from_slice(key), *limit);
            tokio::spawn(async move { inner.sync(key, limit).await });
        }
        step
    }

    /// A sync of `key` after `wait`, if there is still something to charge then, or the key
    /// is being denied because the node had nothing left.
    fn schedule_sync(&self, key: &[u8], limit: &Limit, wait: Duration) {
        let client = Arc::downgrade(&self.inner);
        let (key, limit) = (Bytes::copy_from_slice(key), *limit);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(inner) = client.upgrade() else {
                return;
            };
            let go = match inner.approx.lock().get_mut(&key, Instant::now()) {
                Some((st, _)) => {
                    st.scheduled = false;
                    // Something to charge, or a key denied for want of news (a `COST 0` read).
                    let go = !st.syncing && (st.count > 0 || st.debt > 0 || st.remaining == 0);
                    st.syncing |= go;
                    go
                }
                None => false,
            };
            if go {
                inner.sync(key, limit).await;
            }
        });
    }

    /// Raw passthrough of a keyed command (CL.THROTTLE, GCRA) to the key's owner, within the
    /// deadline.
    pub async fn command(&self, key: &[u8], args: &[&[u8]]) -> Result<Value, CallError> {
        let deadline = Instant::now() + self.inner.config.deadline;
        let mut frame = BytesMut::new();
        value::encode_command(&mut frame, args);
        self.inner
            .call_key(key, frame.freeze(), deadline)
            .await
            .map(|(v, _)| v)
    }

    /// The address of the node that owns `key` now.
    pub fn owner(&self, key: &[u8]) -> Option<Arc<str>> {
        self.inner.owner(key)
    }

    /// Decisions so far, by source, in [`Source::NAMES`] order.
    pub fn decisions(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.inner.decisions[i].load(Ordering::Relaxed))
    }

    /// RL.CHECK calls sent to nodes so far (checks and approximate syncs).
    pub fn node_calls(&self) -> u64 {
        self.inner.node_calls.load(Ordering::Relaxed)
    }

    /// Every node this client talks to, sorted by address.
    pub fn upstreams(&self) -> Vec<Upstream> {
        let mut v: Vec<Upstream> = self
            .inner
            .nodes
            .lock()
            .values()
            .map(|n| Upstream {
                addr: n.addr().clone(),
                breaker: n.breaker(),
                answered: n.answered.load(Ordering::Relaxed),
                failed: n.failed.load(Ordering::Relaxed),
            })
            .collect();
        v.sort_by(|a, b| a.addr.cmp(&b.addr));
        v
    }

    /// Entries held in the local maps: (local buckets, blocked keys, approximate keys).
    pub fn local_keys(&self) -> (usize, usize, usize) {
        (
            self.inner.local.lock().len(),
            self.inner.blocked.lock().len(),
            self.inner.approx.lock().len(),
        )
    }
}

/// A check's first step, taken without waiting ([`Client::check_now`]).
#[derive(Debug)]
pub enum Quick {
    /// Decided here: the blocked cache, or approximate mode's local answer.
    Now(Decision),
    /// It needs the node, or a sync in flight: finish it with [`Client::check_later`].
    Later(Later),
}

/// Where a check stands that [`Client::check_now`] could not decide.
pub struct Later(Option<Step>);

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Later")
    }
}

impl Client {
    /// [`Client::check`] as far as it goes without waiting: most checks of an approximate key
    /// are decided here, with no task and no await (what the sidecar does per request).
    pub fn check_now(&self, key: &[u8], limit: &Limit, cost: u64) -> Quick {
        if limit.split > 1 && limit.sub_keys() > 1 {
            return Quick::Later(Later(None));
        }
        let now = Instant::now();
        let d = match self.inner.blocked(key, limit, now) {
            Some(d) => d,
            None if limit.approximate.is_some() => match self.approximate(key, limit, cost, now) {
                Step::Answer(d) => d,
                Step::Fail => self.inner.fail(key, limit, cost),
                step => return Quick::Later(Later(Some(step))),
            },
            None => return Quick::Later(Later(None)),
        };
        self.count(&d);
        Quick::Now(d)
    }

    /// Finishes a check that [`Client::check_now`] left for later, within the deadline.
    pub async fn check_later(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        later: Later,
    ) -> Result<Decision, ReplyError> {
        let Some(step) = later.0 else {
            return self.check(key, limit, cost).await;
        };
        let deadline = Instant::now() + self.inner.config.deadline;
        let d = match self.approx_steps(key, limit, cost, deadline, step).await {
            Some(d) => d,
            None => {
                self.exact(key, limit, cost, deadline, Instant::now())
                    .await?
            }
        };
        self.count(&d);
        Ok(d)
    }
}

/// The sidecar's pipelined path: it sends a whole read's worth of plain checks to a node in one
/// batch ([`Node::send_raw`]) and forwards the replies as they came, so these pieces of
/// [`Client::check`] are offered one by one. Each counts its decision as `check` would.
impl Client {
    /// The connection to the node that owns `key` now, if one is known.
    pub fn node_for(&self, key: &[u8]) -> Option<Arc<Node>> {
        self.inner.owner(key).map(|addr| self.inner.node(&addr))
    }

    /// The deadline of a call that starts now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.inner.config.deadline
    }

    /// A denial from the blocked cache, if `key` is in it.
    pub fn cached_denial(&self, key: &[u8], limit: &Limit) -> Option<Decision> {
        let d = self.inner.blocked(key, limit, Instant::now())?;
        self.count(&d);
        Some(d)
    }

    /// A node's answer to a check sent outside [`Client::check`] (with the blocked cache on):
    /// counted as the node's decision, and a denial kept in the blocked cache until
    /// `retry_after_ms`. Only the two fields it needs, read from the reply in place.
    pub fn learn(&self, key: &[u8], allowed: bool, retry_after_ms: i64) {
        let inner = &self.inner;
        inner.node_calls.fetch_add(1, Ordering::Relaxed);
        inner.decisions[0].fetch_add(1, Ordering::Relaxed);
        if !allowed && retry_after_ms > 0 {
            let now = Instant::now();
            let until = now + Duration::from_millis(retry_after_ms as u64);
            let key = Bytes::copy_from_slice(key);
            inner.blocked.lock().insert(key, 0, until, now);
        }
    }

    /// Whether `key` is in the blocked cache now (the sidecar asks before it parses a check).
    pub fn is_blocked(&self, key: &[u8]) -> bool {
        let mut blocked = self.inner.blocked.lock();
        blocked.len() > 0 && blocked.get_mut(key, Instant::now()).is_some()
    }

    /// The limit's fail mode for a node that could not answer; with `unavailable` (a node that
    /// answered READONLY, LOADING...), the topology is looked up again.
    pub fn fail_mode(&self, key: &[u8], limit: &Limit, cost: u64, unavailable: bool) -> Decision {
        if unavailable {
            self.inner.refresh.notify_one();
        }
        let d = self.inner.fail(key, limit, cost);
        self.count(&d);
        d
    }

    fn count(&self, d: &Decision) {
        self.inner.decisions[d.source.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// `RL.CHECK key limit <period>ms [BURST b] COST c ALGO a`, written straight into one buffer
/// (this runs on every check that reaches a node).
fn rl_check_frame(key: &[u8], limit: &Limit, cost: u64) -> Bytes {
    let mut digits = [
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    ];
    let [l, p, c] = &mut digits;
    let limit_s = l.format(limit.limit).as_bytes();
    let mut period = [0u8; 24];
    let ms = p.format(limit.period_ms()).as_bytes();
    period[..ms.len()].copy_from_slice(ms);
    period[ms.len()..ms.len() + 2].copy_from_slice(b"ms");
    let period = &period[..ms.len() + 2];
    let cost_s = c.format(cost).as_bytes();
    let mut burst_buf = itoa::Buffer::new();
    let burst = limit.burst.map(|b| burst_buf.format(b).as_bytes());
    let algo = limit.algo.name().as_bytes();
    let mut out = BytesMut::with_capacity(96 + key.len());
    match burst {
        Some(b) => value::encode_command(
            &mut out,
            &[
                &b"RL.CHECK"[..],
                key,
                limit_s,
                period,
                b"BURST",
                b,
                b"COST",
                cost_s,
                b"ALGO",
                algo,
            ],
        ),
        None => value::encode_command(
            &mut out,
            &[
                &b"RL.CHECK"[..],
                key,
                limit_s,
                period,
                b"COST",
                cost_s,
                b"ALGO",
                algo,
            ],
        ),
    }
    out.freeze()
}

fn decision_from(v: &Value, source: Source) -> Result<Decision, ReplyError> {
    if let Value::Error(e) = v {
        return Err(ReplyError(e.clone()));
    }
    match v.ints().as_deref() {
        Some(&[allowed, limit, remaining, retry, reset]) => Ok(Decision {
            allowed: allowed == 1,
            limit: limit.max(0) as u64,
            remaining: remaining.max(0) as u64,
            retry_after_ms: retry,
            reset_after_ms: reset,
            source,
        }),
        _ => Err(ReplyError(format!(
            "ERR unexpected RL.CHECK reply from the node: {v:?}"
        ))),
    }
}

impl Inner {
    /// A denial cached from the node's last answer for `key`, if it still holds.
    fn blocked(&self, key: &[u8], limit: &Limit, now: Instant) -> Option<Decision> {
        if !limit.blocked_cache {
            return None;
        }
        let mut blocked = self.blocked.lock();
        let (_, until) = blocked.get_mut(key, now)?;
        let wait = until.saturating_duration_since(now);
        Some(Decision {
            allowed: false,
            limit: limit.capacity(),
            remaining: 0,
            retry_after_ms: wait.as_millis() as i64 + 1,
            reset_after_ms: limit.period_ms() as i64,
            source: Source::BlockedCache,
        })
    }

    /// Keeps a node's denial of `key` in the blocked cache until its `retry_after`.
    fn learn_denial(&self, key: &[u8], limit: &Limit, d: &Decision, now: Instant) {
        if limit.blocked_cache && !d.allowed && d.retry_after_ms > 0 {
            let until = Instant::now() + Duration::from_millis(d.retry_after_ms as u64);
            let key = Bytes::copy_from_slice(key);
            self.blocked.lock().insert(key, 0, until, now);
        }
    }

    fn random(&self) -> u64 {
        // splitmix64 over a shared counter: good enough to spread sub-keys.
        let mut z = self
            .rng
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn now_nanos(&self) -> Nanos {
        Nanos(self.epoch.elapsed().as_nanos() as u64 + Nanos::PER_SEC)
    }

    fn node(&self, addr: &Arc<str>) -> Arc<Node> {
        self.nodes
            .lock()
            .entry(addr.clone())
            .or_insert_with(|| Node::spawn(addr.clone(), self.config.node))
            .clone()
    }

    fn owner(&self, key: &[u8]) -> Option<Arc<str>> {
        match &*self.route.read() {
            Route::One(a) => (!a.is_empty()).then(|| a.clone()),
            Route::Slots(owners) => owners[usize::from(sluice_cluster::key_slot(key))].clone(),
        }
    }

    /// Sends `frame` to `key`'s owner; follows one `MOVED` within the deadline.
    async fn call_key(
        &self,
        key: &[u8],
        frame: Bytes,
        deadline: Instant,
    ) -> Result<(Value, Arc<str>), CallError> {
        let mut addr = match (self.owner(key), &self.config.topology) {
            (Some(addr), _) => addr,
            // No owner known for the slot yet (a table not fetched, or not there when it was):
            // ask for the map again, and ask a seed meanwhile; its MOVED is followed below.
            (None, Topology::Cluster(seeds)) if !seeds.is_empty() => {
                self.refresh.notify_one();
                seeds[0].as_str().into()
            }
            (None, _) => return Err(CallError::Down),
        };
        for _ in 0..2 {
            let node = self.node(&addr);
            match node.call(frame.clone(), deadline).await {
                Ok(Value::Error(e)) if e.starts_with("MOVED ") => {
                    let mut parts = e.split_whitespace().skip(1);
                    let (Some(slot), Some(to)) = (
                        parts.next().and_then(|s| s.parse::<usize>().ok()),
                        parts.next(),
                    ) else {
                        return Ok((Value::Error(e), addr));
                    };
                    let to: Arc<str> = to.into();
                    if let Route::Slots(owners) = &mut *self.route.write()
                        && slot < owners.len()
                    {
                        owners[slot] = Some(to.clone());
                    }
                    self.refresh.notify_one();
                    addr = to;
                }
                Ok(Value::Error(e)) if cannot_answer(&e) => {
                    // A replica, a loading node, a primary without its replicas, a cluster that
                    // is down: this node cannot decide now. Look the primary up again.
                    self.refresh.notify_one();
                    return Err(CallError::Unavailable);
                }
                Ok(v) => return Ok((v, addr)),
                Err(e) => {
                    if !matches!(self.config.topology, Topology::Single(_)) {
                        self.refresh.notify_one();
                    }
                    return Err(e);
                }
            }
        }
        Err(CallError::Down)
    }

    /// The fail-mode answer.
    fn fail(&self, key: &[u8], limit: &Limit, cost: u64) -> Decision {
        let capacity = limit.capacity();
        let period_ms = limit.period_ms() as i64;
        match limit.fail_mode {
            FailMode::Open => Decision {
                allowed: true,
                limit: capacity,
                remaining: capacity.saturating_sub(cost),
                retry_after_ms: -1,
                reset_after_ms: 0,
                source: Source::FailOpen,
            },
            FailMode::Closed => Decision {
                allowed: false,
                limit: capacity,
                remaining: 0,
                retry_after_ms: (period_ms / limit.limit.max(1) as i64).max(1),
                reset_after_ms: period_ms,
                source: Source::FailClosed,
            },
            FailMode::Local => self.local_bucket(key, limit, cost),
        }
    }

    /// Fail mode `local`: the same algorithm on an in-process bucket of limit ÷ gateways.
    fn local_bucket(&self, key: &[u8], limit: &Limit, cost: u64) -> Decision {
        let g = u64::from(self.config.gateways.max(1));
        let params = Params {
            limit: (limit.limit / g).max(1),
            period: Nanos(limit.period.as_nanos() as u64),
            burst: (limit.capacity() / g).max(1),
            cost,
        };
        let now = Instant::now();
        let mut table = self.local.lock();
        let mut slot = table.get_mut(key, now).and_then(|(s, _)| s.take());
        let result = sluice_core::check(&mut slot, limit.algo, &params, self.now_nanos(), false);
        let denied = |retry| Decision {
            allowed: false,
            limit: params.burst,
            remaining: 0,
            retry_after_ms: retry,
            reset_after_ms: limit.period_ms() as i64,
            source: Source::LocalBucket,
        };
        match result {
            Ok(d) => {
                if let Some(s) = slot {
                    let ttl = Duration::from_nanos(d.reset_after.0);
                    table.insert(Bytes::copy_from_slice(key), Some(s), now + ttl, now);
                } else {
                    table.remove(key);
                }
                Decision {
                    allowed: d.allowed,
                    limit: d.limit,
                    remaining: d.remaining,
                    retry_after_ms: d.retry_after_ms(),
                    reset_after_ms: d.reset_after_ms(),
                    source: Source::LocalBucket,
                }
            }
            // A cost over the share's capacity: it can never fit here.
            Err(_) => denied(limit.period_ms() as i64),
        }
    }

    /// One approximate-mode sync of `key`: charge the local count (and any debt) on the node.
    async fn sync(&self, key: Bytes, limit: Limit) {
        let (sent, owed) = {
            let mut t = self.approx.lock();
            match t.get_mut(&key, Instant::now()) {
                Some((st, _)) => (st.count, st.debt),
                None => return,
            }
        };
        let capacity = limit.capacity();
        let charge = (sent + owed).min(capacity);
        let deadline = Instant::now() + self.config.deadline.max(Duration::from_millis(100));
        let first = self
            .call_key(&key, rl_check_frame(&key, &limit, charge), deadline)
            .await;
        self.node_calls.fetch_add(1, Ordering::Relaxed);
        let reply = first
            .ok()
            .and_then(|(v, _)| decision_from(&v, Source::Approximate).ok());
        let (mut charged, mut last) = match reply {
            Some(d) if d.allowed => (charge, Some(d)),
            other => (0, other),
        };
        // Denied: take what the node still has, so the debt is as small as it can be.
        if let Some(d) = &last
            && !d.allowed
            && d.remaining > 0
        {
            let drain = d.remaining.min(sent + owed);
            let r = self
                .call_key(&key, rl_check_frame(&key, &limit, drain), deadline)
                .await;
            self.node_calls.fetch_add(1, Ordering::Relaxed);
            if let Some(d2) = r
                .ok()
                .and_then(|(v, _)| decision_from(&v, Source::Approximate).ok())
                && d2.allowed
            {
                charged = drain;
                last = Some(Decision {
                    allowed: false,
                    remaining: 0,
                    ..d2
                });
            }
        }
        let now = Instant::now();
        let mut t = self.approx.lock();
        if let Some((st, _)) = t.get_mut(&key, now) {
            st.syncing = false;
            match last {
                Some(d) => {
                    // Everything sent is now either charged or owed.
                    st.count = st.count.saturating_sub(sent);
                    st.debt = sent + owed - charged;
                    let left = if d.allowed { d.remaining } else { 0 };
                    st.learn(&d, limit.approx_share(left, self.config.gateways), now);
                }
                None => {
                    st.unreachable = true;
                    st.last_sync = now;
                }
            }
            st.synced.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    /// The answer to an approximate key's exact check (first sight, an old view): the new
    /// global view, or (`None`: no answer) the node marked unreachable for an interval. What
    /// was counted here and not yet charged stays counted. Wakes the requests that waited.
    fn learn_exact(&self, key: &[u8], limit: &Limit, d: Option<&Decision>, since: Instant) {
        let now = Instant::now();
        let mut table = self.approx.lock();
        let st = match table.get_mut(key, now) {
            Some((st, _)) => st,
            None => {
                let Some(d) = d else { return };
                let ttl = Duration::from_millis(d.reset_after_ms.max(0) as u64).max(limit.period);
                table.insert(
                    Bytes::copy_from_slice(key),
                    Approx::new(d, 0, now),
                    now + ttl,
                    since,
                );
                let Some((st, _)) = table.get_mut(key, now) else {
                    return;
                };
                st
            }
        };
        st.syncing = false;
        match d {
            Some(d) => {
                let left = if d.allowed { d.remaining } else { 0 };
                st.learn(d, limit.approx_share(left, self.config.gateways), now);
            }
            None => {
                st.unreachable = true;
                st.last_sync = now;
            }
        }
        st.synced.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Resolves the topology once: the cluster's slot map, or the Sentinel's primary.
    async fn resolve(&self) {
        let deadline = || Instant::now() + Duration::from_millis(500);
        match &self.config.topology {
            Topology::Single(_) => {}
            Topology::Cluster(seeds) => {
                let mut candidates: Vec<Arc<str>> = self.nodes.lock().keys().cloned().collect();
                candidates.extend(seeds.iter().map(|s| Arc::from(s.as_str())));
                candidates.dedup();
                let mut frame = BytesMut::new();
                value::encode_command(&mut frame, &["CLUSTER", "SLOTS"]);
                let frame = frame.freeze();
                for addr in candidates {
                    if let Ok(v) = self.node(&addr).call(frame.clone(), deadline()).await
                        && let Some(owners) = slot_owners(&v)
                    {
                        *self.route.write() = Route::Slots(owners);
                        return;
                    }
                }
            }
            Topology::Sentinel {
                sentinels,
                master_name,
            } => {
                let mut frame = BytesMut::new();
                value::encode_command(
                    &mut frame,
                    &["SENTINEL", "get-master-addr-by-name", master_name],
                );
                let frame = frame.freeze();
                for s in sentinels {
                    // Sentinels get plain connections, not in `nodes`: they are not upstreams.
                    if let Some(addr) = ask_sentinel(s, &frame).await {
                        let changed = match &*self.route.read() {
                            Route::One(a) => **a != *addr,
                            Route::Slots(_) => true,
                        };
                        if changed {
                            *self.route.write() = Route::One(addr.into());
                        }
                        return;
                    }
                }
            }
        }
    }
}

async fn ask_sentinel(sentinel: &str, frame: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(sentinel).await.ok()?;
        s.write_all(frame).await.ok()?;
        let mut buf = BytesMut::with_capacity(256);
        loop {
            if s.read_buf(&mut buf).await.ok()? == 0 {
                return None;
            }
            if let Some(v) = value::decode(&mut buf).ok()? {
                return Some(v);
            }
        }
    };
    let v = tokio::time::timeout(Duration::from_millis(500), io)
        .await
        .ok()??;
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Bulk(host), Value::Bulk(port)] => Some(format!(
                "{}:{}",
                String::from_utf8_lossy(host),
                String::from_utf8_lossy(port)
            )),
            _ => None,
        },
        _ => None,
    }
}

/// The error replies that mean "this node cannot decide now" rather than "this request is
/// wrong": the rule's fail mode applies to them. `WRONGTYPE`, `ERR` and the rest are the
/// request's own fault and are passed on.
pub fn cannot_answer(error: &str) -> bool {
    let class = error.split(' ').next().unwrap_or_default();
    matches!(
        class,
        "NOREPLICAS" | "READONLY" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN"
    )
}

/// `CLUSTER SLOTS` as 16384 owners.
fn slot_owners(v: &Value) -> Option<Vec<Option<Arc<str>>>> {
    let Value::Array(ranges) = v else { return None };
    let mut owners = vec![None; 16384];
    for r in ranges {
        let Value::Array(r) = r else { return None };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (r.first(), r.get(1), r.get(2))
        else {
            return None;
        };
        let (Some(Value::Bulk(host)), Some(Value::Int(port))) = (node.first(), node.get(1)) else {
            return None;
        };
        let addr: Arc<str> = format!("{}:{port}", String::from_utf8_lossy(host)).into();
        let (start, end) = (usize::try_from(*start).ok()?, usize::try_from(*end).ok()?);
        for o in owners.get_mut(start..=end)? {
            *o = Some(addr.clone());
        }
    }
    Some(owners)
}

/// Re-resolves every second, and at once (at most every 50 ms) when a call asks for it.
async fn refresher(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let notified = async {
            strong.refresh.notified().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        strong.resolve().await;
        drop(strong);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
