//! [`Client`]: routing (one node, a cluster, or a Sentinel-discovered primary) and the check
//! path with its gateway options.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use sluice_core::{Algo, Nanos, State};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::limit::{Decision, FailMode, Limit, Source};
use crate::local::Expiring;
use crate::node::{BreakerState, CallError, Credentials, Node, NodeOptions, Secure, cannot_answer};

mod approx;
mod outage;

use approx::Approx;
pub use approx::{Later, Quick};
pub use outage::{Debt, Settled};
use outage::{LEFT_WORTH_KEEPING, Left, local_share, local_start};

use sluice_resp::value::{self, Value};

/// Where the nodes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One node, `host:port`, or `unix:PATH` for its `--unixsocket`.
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
    /// How many gateways share the limits (fail mode `local` holds a 1/gateways share of each).
    pub gateways: u32,
    pub node: NodeOptions,
    /// Most keys held in each of the local maps (local buckets, blocked cache, approximate).
    pub max_local_keys: usize,
    /// Log in to every node as this user (`AUTH [user] password` on each connection).
    pub auth: Option<Arc<Credentials>>,
    /// Reach every node over TLS with this config (the node's `--tls-port`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Reach the Sentinels over TLS too (their `tls-port`), with the same config as the nodes
    /// (`tls`, which it needs): Sentinel's own port may be plain or TLS whatever the nodes'
    /// are, so this is a choice of its own.
    pub sentinel_tls: bool,
}

impl Config {
    pub fn new(topology: Topology) -> Config {
        Config {
            topology,
            deadline: Duration::from_millis(20),
            gateways: 1,
            node: NodeOptions::default(),
            max_local_keys: 100_000,
            auth: None,
            tls: None,
            sentinel_tls: false,
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
    /// Whether the last dial reached it; `None` before the first dial ends.
    pub reachable: Option<bool>,
    /// Times it became unreachable (the first failed dial counts), and times it came back.
    pub went_down: u64,
    pub came_back: u64,
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

#[derive(Debug)]
struct Inner {
    config: Config,
    route: RwLock<Route>,
    nodes: Mutex<HashMap<Arc<str>, Arc<Node>>>,
    refresh: Notify,
    local: Mutex<Expiring<Option<State>>>,
    blocked: Mutex<Expiring<i64>>,
    approx: Mutex<Expiring<Approx>>,
    /// What the node last said a spent key had left, until the key would be full again: fail
    /// mode `local` starts each outage's bucket from it.
    last: Mutex<Expiring<Left>>,
    /// What fail mode `local` admitted and no node has been charged for yet (`outage`).
    debts: Mutex<Expiring<Debt>>,
    decisions: [AtomicU64; 6],
    /// RL.CHECK calls sent to a node (checks and syncs).
    node_calls: AtomicU64,
    epoch: Instant,
    rng: AtomicU64,
    /// This client's name as a lease holder on the nodes (`RL.LEASE ... HOLDER`): random,
    /// so two gateways never share a lease.
    holder: Bytes,
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
        let seed = fresh_seed();
        let inner = Arc::new(Inner {
            route: RwLock::new(Route::One(first.into())),
            nodes: Mutex::new(HashMap::new()),
            refresh: Notify::new(),
            local: Mutex::new(Expiring::new(cap)),
            blocked: Mutex::new(Expiring::new(cap)),
            approx: Mutex::new(Expiring::new(cap)),
            last: Mutex::new(Expiring::new(cap)),
            debts: Mutex::new(Expiring::new(cap)),
            decisions: Default::default(),
            node_calls: AtomicU64::new(0),
            epoch: Instant::now(),
            rng: AtomicU64::new(seed | 1),
            holder: Bytes::from(format!("{:016x}", fresh_seed())),
            config,
        });
        if !matches!(inner.config.topology, Topology::Single(_)) {
            let _ = tokio::time::timeout(Duration::from_secs(1), inner.resolve()).await;
            tokio::spawn(refresher(Arc::downgrade(&inner)));
        }
        // Dial the upstreams known now, before any check: one that cannot be reached is said
        // at start (see `node`'s Reachability), not at the first check.
        for addr in inner.known_upstreams() {
            inner.node(&addr);
        }
        Client { inner }
    }

    /// Waits until one upstream has been reached (connected, past TLS and AUTH), or
    /// `deadline`; `false` if none was by then. For a gateway that must not start blind.
    pub async fn wait_reachable(&self, deadline: Instant) -> bool {
        loop {
            let reached = self
                .inner
                .known_upstreams()
                .iter()
                .any(|addr| self.inner.node(addr).reachable() == Some(true));
            if reached {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
        // What an outage admitted here is charged first, so the node decides this check with
        // it counted; a node that does not take it cannot answer the check either.
        let result = match inner.charge_debt(key, deadline).await {
            true => {
                inner
                    .call_key(key, rl_check_frame(key, &limit, cost), deadline)
                    .await
            }
            false => Err(CallError::Unavailable),
        };
        inner.node_calls.fetch_add(1, Ordering::Relaxed);
        let late = matches!(result, Err(CallError::Timeout));
        let decided = match result {
            Ok((v, addr)) => decision_from(&v, Source::Node(addr)).map(Some),
            Err(_) => Ok(None),
        };
        match decided? {
            Some(d) => {
                inner.learn_denial(key, &limit, &d, now);
                inner.answered(key, d.fields(), now);
                Ok(d)
            }
            None => Ok(inner.fail(key, &limit, cost, late)),
        }
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
                reachable: n.reachable(),
                went_down: n.went_down(),
                came_back: n.came_back(),
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
    /// counted as the node's decision, a denial kept in the blocked cache until
    /// `retry_after_ms`, what a spent key has left kept for fail mode `local`, and the key's
    /// local bucket, if an outage left one, dropped. The reply's five integers, read in place
    /// by the caller.
    pub fn learn(&self, key: &[u8], reply: [i64; 5]) {
        let [allowed, _, _, retry_after_ms, _] = reply;
        let inner = &self.inner;
        inner.node_calls.fetch_add(1, Ordering::Relaxed);
        inner.decisions[0].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if allowed != 1 && retry_after_ms > 0 {
            let until = now + Duration::from_millis(retry_after_ms as u64);
            let key = Bytes::copy_from_slice(key);
            inner.blocked.lock().insert(key, 0, until, now);
        }
        inner.answered(key, reply, now);
    }

    /// Takes `key`'s debt, what fail mode `local` admitted while no node could answer, to
    /// charge it: the caller sends [`Debt::frame`] ahead of the key's next check, on the same
    /// connection, and reports how it ended with [`Client::settled`]. `None`: nothing owed.
    pub fn take_debt(&self, key: &[u8]) -> Option<Debt> {
        self.inner.take_debt(key)
    }

    /// How a debt's settle ended ([`Settled`] says what each case does with the debt); a
    /// reply is learned as any answer of the node's.
    pub fn settled(&self, key: &[u8], debt: Debt, how: Settled<'_>) {
        self.inner.settled(key, debt, how);
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
        let d = self.inner.fail(key, limit, cost, false);
        self.count(&d);
        d
    }

    /// The limit's fail mode for a check whose reply missed its deadline: the node may still
    /// apply it, so what fail mode `local` admits for it is not owed to the node (charging it
    /// too would count the request twice).
    pub fn fail_mode_late(&self, key: &[u8], limit: &Limit, cost: u64) -> Decision {
        let d = self.inner.fail(key, limit, cost, true);
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

    /// A node's answer for `key` (RL.CHECK's or RL.SETTLE's five integers): the key's local
    /// bucket, if an outage left one, is dropped, so the next outage starts from this answer;
    /// and what a spent key has left is kept until it would be full again: only for a key spent
    /// by an eighth of its capacity or more ([`LEFT_WORTH_KEEPING`]), so that a stream of keys
    /// checked once costs the request path nothing here.
    fn answered(&self, key: &[u8], reply: [i64; 5], now: Instant) {
        let [_, limit, remaining, retry_after_ms, reset_after_ms] = reply;
        {
            let mut local = self.local.lock();
            if local.len() > 0 {
                local.remove(key);
            }
        }
        let (limit, remaining) = (limit.max(0) as u64, remaining.max(0) as u64);
        let spent = limit.saturating_sub(remaining);
        if spent == 0 || spent < limit / LEFT_WORTH_KEEPING || reset_after_ms <= 0 {
            return;
        }
        let full_at = now + Duration::from_millis(reset_after_ms as u64);
        let left = Left::from_reply(remaining, retry_after_ms, now);
        let mut last = self.last.lock();
        match last.get_mut(key, now) {
            Some((was, until)) => {
                *was = left;
                *until = full_at;
            }
            None => last.insert(Bytes::copy_from_slice(key), left, full_at, now),
        }
    }

    /// What the node last said `key` had left; `None` if it said nothing lately or the key
    /// has refilled since.
    fn left(&self, key: &[u8], now: Instant) -> Option<Left> {
        let mut last = self.last.lock();
        if last.len() == 0 {
            return None;
        }
        last.get_mut(key, now).map(|(v, _)| *v)
    }

    /// `debt` added to what `key` owes, all of it forgotten at the later of the two `until`s.
    fn owe(&self, key: &[u8], debt: Debt, now: Instant) {
        if debt.units == 0 || debt.until <= now {
            return;
        }
        let mut debts = self.debts.lock();
        match debts.get_mut(key, now) {
            Some((owed, until)) => {
                owed.units = owed.units.saturating_add(debt.units);
                owed.limit = debt.limit;
                owed.until = owed.until.max(debt.until);
                *until = owed.until;
            }
            None => debts.insert(Bytes::copy_from_slice(key), debt, debt.until, now),
        }
    }

    /// What `key` owes now, left owed.
    fn owed(&self, key: &[u8], now: Instant) -> u64 {
        let mut debts = self.debts.lock();
        if debts.len() == 0 {
            return 0;
        }
        debts.get_mut(key, now).map_or(0, |(d, _)| d.units)
    }

    /// Takes what `key` owes, to charge it.
    fn take_debt(&self, key: &[u8]) -> Option<Debt> {
        let mut debts = self.debts.lock();
        if debts.len() == 0 {
            return None;
        }
        let debt = debts.get_mut(key, Instant::now()).map(|(d, _)| *d)?;
        debts.remove(key);
        Some(debt)
    }

    /// Charges what `key` owes, if anything and if its node answered its last call, ahead of
    /// its check: `false` if the node did not take it now (it cannot answer, or not in time),
    /// and so would not answer the check either.
    async fn charge_debt(&self, key: &[u8], deadline: Instant) -> bool {
        let Some(debt) = self.take_debt(key) else {
            return true;
        };
        if !self.owner(key).is_some_and(|a| self.node(&a).answering()) {
            // Not sent: owed still, and the check goes on (it finds out what the node says).
            self.owe(key, debt, Instant::now());
            return true;
        }
        let reply = self.call_key(key, debt.frame(key), deadline).await;
        let unexpected;
        let how = match &reply {
            Ok((Value::Error(e), _)) => Settled::Refused(e),
            Ok((v, _)) => match v.ints().as_deref() {
                Some(&[a, b, c, d, e]) => Settled::Charged([a, b, c, d, e]),
                _ => {
                    unexpected = format!("ERR unexpected RL.SETTLE reply: {v:?}");
                    Settled::Refused(&unexpected)
                }
            },
            // `call_key` turns NOREPLICAS, READONLY... into this.
            Err(CallError::Unavailable) => Settled::Refused("NOREPLICAS"),
            Err(CallError::Timeout) => Settled::Late,
            Err(_) => Settled::Lost,
        };
        self.settled(key, debt, how)
    }

    /// See [`Client::settled`]; `false` when the node did not take the settle now.
    fn settled(&self, key: &[u8], debt: Debt, how: Settled<'_>) -> bool {
        let now = Instant::now();
        match how {
            Settled::Charged(reply) => self.answered(key, reply, now),
            Settled::Refused(e) if !cannot_answer(e) => {}
            Settled::Late => return false,
            Settled::Refused(_) | Settled::Lost => {
                self.owe(key, debt, now);
                return false;
            }
        }
        true
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
            .or_insert_with(|| {
                Node::spawn(
                    addr.clone(),
                    self.config.node,
                    Secure {
                        tls: self.config.tls.clone(),
                        auth: self.config.auth.clone(),
                    },
                )
            })
            .clone()
    }

    /// The upstreams known now: the routed node or the slot owners, and a cluster's seeds.
    fn known_upstreams(&self) -> Vec<Arc<str>> {
        let mut addrs: Vec<Arc<str>> = match &*self.route.read() {
            Route::One(a) if a.is_empty() => Vec::new(),
            Route::One(a) => vec![a.clone()],
            Route::Slots(owners) => owners.iter().flatten().cloned().collect(),
        };
        if let Topology::Cluster(seeds) = &self.config.topology {
            addrs.extend(seeds.iter().map(|s| Arc::from(s.as_str())));
        }
        addrs.sort();
        addrs.dedup();
        addrs
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

    /// The fail-mode answer; `late`: the check was sent and its reply missed the deadline (see
    /// [`Client::fail_mode_late`]).
    fn fail(&self, key: &[u8], limit: &Limit, cost: u64, late: bool) -> Decision {
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
            FailMode::Local => self.local_bucket(key, limit, cost, late),
        }
    }

    /// Fail mode `local`: an in-process token bucket of this gateway's share of the limit
    /// ([`local_share`]), started at an outage's first check from what the node last said the
    /// key had left, less what this gateway still owes it ([`local_start`]). What it admits is
    /// owed to the node until charged (`outage`), unless the check was sent and is `late`.
    fn local_bucket(&self, key: &[u8], limit: &Limit, cost: u64, late: bool) -> Decision {
        let g = self.config.gateways;
        let params = local_share(limit, g, cost);
        let now = Instant::now();
        let (left, owed) = (self.left(key, now), self.owed(key, now));
        let clock = self.now_nanos();
        let mut table = self.local.lock();
        let mut slot = table.get_mut(key, now).and_then(|(s, _)| s.take());
        if slot.is_none() {
            slot = Some(local_start(limit, &params, g, left, owed, now, clock));
        }
        let result = sluice_core::check(&mut slot, Algo::Token, &params, clock, false);
        match result {
            Ok(d) => {
                let full_at = now + Duration::from_nanos(d.reset_after.0);
                if let Some(s) = slot {
                    table.insert(Bytes::copy_from_slice(key), Some(s), full_at, now);
                } else {
                    table.remove(key);
                }
                drop(table);
                if d.allowed && !late && Debt::chargeable(limit) {
                    let debt = Debt {
                        limit: *limit,
                        units: cost,
                        until: full_at,
                    };
                    self.owe(key, debt, now);
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
            Err(_) => Decision {
                allowed: false,
                limit: params.burst,
                remaining: 0,
                retry_after_ms: limit.period_ms() as i64,
                reset_after_ms: limit.period_ms() as i64,
                source: Source::LocalBucket,
            },
        }
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
                let tls = self
                    .config
                    .tls
                    .as_ref()
                    .filter(|_| self.config.sentinel_tls);
                for s in sentinels {
                    // Sentinels get connections of their own, not in `nodes`: they are not
                    // upstreams.
                    if let Some(addr) = ask_sentinel(s, &frame, tls).await {
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

/// Sends `frame` on `s` and reads one reply.
async fn one_reply<S>(mut s: S, frame: &[u8]) -> Option<Value>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
}

/// The primary's `host:port` by the Sentinel at `sentinel` (over TLS with `tls`).
async fn ask_sentinel(
    sentinel: &str,
    frame: &[u8],
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Option<String> {
    let io = async {
        let tcp = tokio::net::TcpStream::connect(sentinel).await.ok()?;
        match tls {
            None => one_reply(tcp, frame).await,
            Some(config) => {
                let host = sentinel.rsplit_once(':').map_or(sentinel, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let stream = connector.connect(name, tcp).await.ok()?;
                one_reply(stream, frame).await
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

/// A seed that differs between processes and between clients of one process: the standard
/// library's per-process random keys, hashed with a counter (a pid alone is the same in every
/// container that runs the gateway as pid 1).
fn fresh_seed() -> u64 {
    use std::hash::BuildHasher;
    static CLIENTS: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new()
        .hash_one(CLIENTS.fetch_add(1, Ordering::Relaxed) ^ u64::from(std::process::id()))
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

#[cfg(test)]
mod tests {
    /// Two clients of one process (and so two gateways in containers that all run as pid 1)
    /// draw different sub-keys: their seeds differ.
    #[test]
    fn seeds_differ_between_clients() {
        let seeds: std::collections::HashSet<u64> = (0..64).map(|_| super::fresh_seed()).collect();
        assert_eq!(seeds.len(), 64);
    }
}
