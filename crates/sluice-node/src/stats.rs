//! Server counters for INFO and `/metrics`. Hot counters are per thread and cache-padded, so
//! threads never share a written cache line; readers sum them.
//!
//! # Per-thread slots
//! Each worker thread owns one [`ThreadStats`] slot, and the gRPC thread (Envoy's rate limit
//! service) owns the one after them. A slot has one writer, so its counters are bumped with a
//! plain load and store (no locked read-modify-write on the request path); readers on other
//! threads load them with `Relaxed` and sum.
//!
//! # Commands
//! Per command (a row of the command table): calls, failed and rejected calls (Redis's
//! `commandstats` meanings), nanoseconds spent and a latency histogram. The clock is read once
//! per read batch, not per command: a batch's time is split evenly over the commands it ran
//! (exact for one command per batch; for a pipelined batch each command is charged the batch
//! average), and its calls are counted then too, so a command on the request path only notes
//! its row in the connection's [`Batch`].
//!
//! # Checks
//! Per (rule, algorithm): allowed, denied, shadow-denied and near-limit checks. A rule is a small
//! interned id ([`RuleId`]); unnamed checks (a plain RL.CHECK) use [`RuleId::UNNAMED`], so they
//! are labelled by algorithm only and cardinality stays bounded by the rules configured.
//!
//! The registry of names is bounded: at most [`MAX_RULES`] − 2 names at once (past them a rule
//! counts under [`RuleId::OTHER`], named `other`), and names of rules that no longer exist leave
//! it ([`Stats::retire_rules`], at each scrape and each Envoy config reload), their ids free
//! for new names. A freed id's counters are not written back to zero (a slot has one writer):
//! the registry keeps what they held when the name left, and readers subtract it.
//!
//! # CONFIG RESETSTAT
//! Counters are never written by a reader: a reset records the current sums as a baseline that
//! INFO subtracts. `/metrics` reports the raw sums, so Prometheus counters stay monotonic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};
use sluice_core::{Algo, Decision, Nanos};

pub use crate::rule_id::{MAX_RULES, RuleId};
use crate::top::{Kind, Merged, Rates, RuleRates, RuleTotals, SlotTop, TopEntry, Window};

/// How many samples of the command counter `instantaneous_ops_per_sec` averages over (as Redis).
const OPS_SAMPLES: usize = 16;

/// Latency histogram buckets: values below 16 ns one bucket each, then 8 buckets per power of
/// two (at most 12.5% wide), up to 2^34 ns (17 s); longer lands in the last bucket.
pub const LATENCY_BUCKETS: usize = 256;

/// How long a retired rule id keeps its name before a new rule may take it: longer than
/// `RL.TOP`'s longest window, which names the rules of the keys it counted.
const REUSE_AFTER: Duration = Duration::from_secs(16 * 60);

/// The algorithms, in the order of their counters (their declaration order: `algo as usize`).
pub const ALGOS: [Algo; 6] = Algo::ALL;

/// TLS handshakes the node refused, on any of its ports. A process-wide counter, not a field
/// of [`Stats`]: it is counted where a session's bytes are driven (`wire`, `tls`), which hold
/// no `Shared`, and one process is one node. Bumped on the failure path only.
pub static TLS_HANDSHAKES_REFUSED: AtomicU64 = AtomicU64::new(0);

/// What became of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    /// Over the limit but let through: the rule is in shadow mode.
    ShadowDenied,
    /// Allowed with under 20% of the limit left (counted besides `Allowed`).
    NearLimit,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::ShadowDenied,
        Outcome::NearLimit,
    ];
}

/// One command's counters in one slot.
#[derive(Debug)]
struct CmdCounters {
    calls: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    nanos: AtomicU64,
    latency: Box<[AtomicU64]>,
}

impl CmdCounters {
    fn new() -> CmdCounters {
        CmdCounters {
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            latency: (0..LATENCY_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// A single-writer add: only the slot's own thread writes it (see the module docs).
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// How many check counters a slot has: `[rule][algo][outcome]`, flattened.
const CHECKS: usize = MAX_RULES * ALGOS.len() * Outcome::ALL.len();

/// The counters one thread writes.
#[derive(Debug)]
pub struct ThreadStats {
    cmds: Box<[CmdCounters]>,
    /// Inline and of a constant length, so an index the type bounds needs no check.
    checks: [AtomicU64; CHECKS],
    /// The keys this thread denied and allowed most (`RL.TOP`).
    pub top: SlotTop,
}

fn check_index(rule: RuleId, algo: Algo, outcome: Outcome) -> usize {
    let rule = usize::from(rule.0).min(MAX_RULES - 1);
    (rule * ALGOS.len() + algo as usize) * Outcome::ALL.len() + outcome as usize
}

impl ThreadStats {
    fn new(commands: usize) -> ThreadStats {
        ThreadStats {
            cmds: (0..commands).map(|_| CmdCounters::new()).collect(),
            checks: [const { AtomicU64::new(0) }; CHECKS],
            top: SlotTop::new(),
        }
    }

    /// Counts a call of command `cmd` that ran and answered an error (its call is counted
    /// with its batch, see [`Batch`]).
    pub fn fail(&self, cmd: usize) {
        if let Some(c) = self.cmds.get(cmd) {
            bump(&c.failed, 1);
        }
    }

    /// Counts a call of `cmd` refused before it ran (arity, auth, redirect, read-only...).
    pub fn reject(&self, cmd: usize) {
        if let Some(c) = self.cmds.get(cmd) {
            bump(&c.rejected, 1);
        }
    }

    /// Counts `calls` calls of `cmd` that took `each` apiece.
    #[inline]
    pub fn time(&self, cmd: usize, calls: u64, each: Duration) {
        if let Some(c) = self.cmds.get(cmd) {
            let ns = u64::try_from(each.as_nanos()).unwrap_or(u64::MAX);
            bump(&c.calls, calls);
            bump(&c.nanos, ns.saturating_mul(calls));
            bump(&c.latency[latency_bucket(ns)], calls);
        }
    }

    /// Counts one check of `key` under `rule` with `algo`: allowed or denied from `decision`,
    /// denied ones as shadow-denied when the rule is in shadow mode; and notes the key in the
    /// heavy hitters (`RL.TOP`).
    #[inline(always)]
    pub fn check(
        &self,
        rule: RuleId,
        algo: Algo,
        decision: &Decision,
        shadow: bool,
        key: &[u8],
        now: Nanos,
    ) {
        self.top.note(rule, key, !decision.allowed, now);
        let outcome = match (decision.allowed, shadow) {
            (true, _) => Outcome::Allowed,
            (false, false) => Outcome::Denied,
            (false, true) => Outcome::ShadowDenied,
        };
        bump(&self.checks[check_index(rule, algo, outcome)], 1);
        if decision.allowed && decision.remaining.saturating_mul(5) < decision.limit {
            bump(&self.checks[check_index(rule, algo, Outcome::NearLimit)], 1);
        }
    }
}

/// The histogram bucket of a latency in nanoseconds.
pub fn latency_bucket(ns: u64) -> usize {
    if ns < 16 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (msb - 3)) & 7) as usize;
    (16 + (msb - 4) * 8 + sub).min(LATENCY_BUCKETS - 1)
}

/// The largest latency (ns) bucket `i` holds: what a percentile falling in it reports.
pub fn latency_bucket_upper(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let msb = (i - 16) / 8 + 4;
    let sub = ((i - 16) % 8) as u64;
    (1u64 << msb) + ((sub + 1) << (msb - 3)) - 1
}

/// One command's totals over every slot.
#[derive(Debug, Clone, Default)]
pub struct CmdTotals {
    pub calls: u64,
    pub failed: u64,
    pub rejected: u64,
    pub nanos: u64,
    pub latency: Vec<u64>,
}

impl CmdTotals {
    /// The latency (ns) at or under which `q` (0..=1) of the timed calls fell.
    pub fn percentile(&self, q: f64) -> u64 {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return latency_bucket_upper(i);
            }
        }
        latency_bucket_upper(LATENCY_BUCKETS - 1)
    }

    /// Adds `other`'s counts to these (several commands' totals as one).
    pub fn plus(&mut self, other: &CmdTotals) {
        self.calls += other.calls;
        self.failed += other.failed;
        self.rejected += other.rejected;
        self.nanos += other.nanos;
        self.latency
            .resize(self.latency.len().max(other.latency.len()), 0);
        for (a, b) in self.latency.iter_mut().zip(&other.latency) {
            *a += b;
        }
    }

    fn minus(&mut self, base: &CmdTotals) {
        self.calls = self.calls.saturating_sub(base.calls);
        self.failed = self.failed.saturating_sub(base.failed);
        self.rejected = self.rejected.saturating_sub(base.rejected);
        self.nanos = self.nanos.saturating_sub(base.nanos);
        for (a, b) in self.latency.iter_mut().zip(&base.latency) {
            *a = a.saturating_sub(*b);
        }
    }
}

/// Rule names and their ids, interned once per rule (never on the request path).
#[derive(Debug)]
struct RuleNames {
    ids: HashMap<String, RuleId>,
    /// By id, `None` for a free one; never longer than [`RuleId::OTHER`].
    names: Vec<Option<String>>,
    /// Ids whose names were retired, for the next new names.
    /// With when each left: an id is reused once `RL.TOP`'s windows have forgotten it
    /// ([`REUSE_AFTER`]), sooner only when no other id is left; until then it keeps its name.
    free: Vec<(RuleId, std::time::Instant)>,
    /// Per check counter: what it held, summed over the slots, when its id's name was retired.
    base: Box<[u64]>,
    /// The rule names Envoy's config may count under ([`Stats::set_envoy_rules`]).
    envoy: std::collections::HashSet<String>,
}

impl RuleNames {
    /// The name of `id`: empty for the unnamed rule, `other` past the bound, `None` for a
    /// free id.
    fn name(&self, id: RuleId) -> Option<&str> {
        if id == RuleId::OTHER {
            return Some("other");
        }
        self.names.get(usize::from(id.0))?.as_deref()
    }
}

#[derive(Debug)]
pub struct Stats {
    commands: Box<[CachePadded<AtomicU64>]>,
    slots: Box<[CachePadded<ThreadStats>]>,
    rules: RwLock<RuleNames>,
    /// CONFIG RESETSTAT's baseline, per command.
    baseline: Mutex<Vec<CmdTotals>>,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Times the etcd watch of the cluster table (`--etcd`) and of the rules
    /// (`--rules-etcd`) was re-established from a fresh read: cancelled by a compaction,
    /// ended, failed, or behind a periodic read. Metrics only (INFO does not show them).
    pub table_watch_restarts: AtomicU64,
    pub rules_watch_restarts: AtomicU64,
    /// CONFIG RESETSTAT's baseline of [`TLS_HANDSHAKES_REFUSED`].
    tls_refused_base: AtomicU64,
    ops: Mutex<OpsSampler>,
    /// Per-rule check counts, step by step (`RL.RATES`).
    rates: Mutex<Rates>,
}

#[derive(Debug, Default)]
struct OpsSampler {
    last_total: u64,
    last_at_ms: u64,
    samples: [u64; OPS_SAMPLES],
    next: usize,
}

impl Stats {
    /// Counters for `threads` worker threads plus the gRPC and HTTP threads, over a command table of
    /// `commands` rows.
    pub fn new(threads: usize, commands: usize) -> Stats {
        Stats {
            commands: (0..threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            slots: (0..threads + 2)
                .map(|_| CachePadded::new(ThreadStats::new(commands)))
                .collect(),
            rules: RwLock::new(RuleNames {
                ids: HashMap::new(),
                names: vec![Some(String::new())],
                free: Vec::new(),
                base: vec![0; CHECKS].into_boxed_slice(),
                envoy: std::collections::HashSet::new(),
            }),
            baseline: Mutex::new(vec![CmdTotals::default(); commands]),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            table_watch_restarts: AtomicU64::new(0),
            rules_watch_restarts: AtomicU64::new(0),
            tls_refused_base: AtomicU64::new(0),
            ops: Mutex::new(OpsSampler::default()),
            rates: Mutex::new(Rates::default()),
        }
    }

    /// The slot thread `thread` writes: a worker's index, or [`Stats::grpc_slot`].
    #[inline]
    pub fn slot(&self, thread: usize) -> &ThreadStats {
        &self.slots[thread]
    }

    /// The slot of the gRPC thread.
    pub fn grpc_slot(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot of the HTTP front's thread (`--http-port`).
    pub fn http_slot(&self) -> usize {
        self.slots.len() - 2
    }

    /// The id of rule `name`, interned on first use; [`RuleId::OTHER`] once the registry is
    /// full, [`RuleId::UNNAMED`] for the empty name.
    pub fn rule_id(&self, name: &str) -> RuleId {
        if name.is_empty() {
            return RuleId::UNNAMED;
        }
        if let Some(id) = self.rules.read().ids.get(name) {
            return *id;
        }
        let mut rules = self.rules.write();
        if let Some(id) = rules.ids.get(name) {
            return *id;
        }
        let forgotten = rules
            .free
            .iter()
            .position(|(_, at)| at.elapsed() >= REUSE_AFTER);
        let id = if let Some(i) = forgotten {
            rules.free.swap_remove(i).0
        } else if rules.names.len() < usize::from(RuleId::OTHER.0) {
            rules.names.push(None);
            RuleId(rules.names.len() as u16 - 1)
        } else if let Some(i) = (0..rules.free.len()).min_by_key(|&i| rules.free[i].1) {
            rules.free.swap_remove(i).0
        } else {
            return RuleId::OTHER;
        };
        rules.names[usize::from(id.0)] = Some(name.to_string());
        rules.ids.insert(name.to_string(), id);
        id
    }

    /// The rule names the Envoy config now loaded may count under: [`Stats::retire_rules`]
    /// keeps them.
    pub fn set_envoy_rules(&self, names: std::collections::HashSet<String>) {
        self.rules.write().envoy = names;
    }

    /// Drops from the registry every name neither `exists` (a rule of this node) nor the Envoy
    /// config's; their ids are free again, their counters remembered as the new baseline.
    pub fn retire_rules(&self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<(String, RuleId)> = {
            let rules = self.rules.read();
            rules
                .ids
                .iter()
                .filter(|(name, _)| !exists(name) && !rules.envoy.contains(*name))
                .map(|(name, id)| (name.clone(), *id))
                .collect()
        };
        if gone.is_empty() {
            return;
        }
        let mut rules = self.rules.write();
        for (name, id) in gone {
            if rules.ids.remove(&name).is_none() {
                continue;
            }
            for algo in ALGOS {
                for outcome in Outcome::ALL {
                    let i = check_index(id, algo, outcome);
                    rules.base[i] = self.check_sum(i);
                }
            }
            // The name stays until the id is reused: RL.TOP's windows still name it.
            rules.free.push((id, std::time::Instant::now()));
        }
    }

    /// Names in the registry now (the unnamed rule not counted).
    pub fn rule_names(&self) -> usize {
        self.rules.read().ids.len()
    }

    /// Check counter `i` summed over every slot.
    fn check_sum(&self, i: usize) -> u64 {
        self.slots
            .iter()
            .fold(0u64, |n, s| n.wrapping_add(s.checks[i].load(Relaxed)))
    }

    /// Checks made under rule `name` since start (allowed, denied and shadow-denied, every
    /// algorithm and thread): a region's demand is the rate of this count.
    pub fn rule_checks(&self, name: &str) -> u64 {
        let rules = self.rules.read();
        let Some(&rule) = rules.ids.get(name) else {
            return 0;
        };
        let mut n = 0u64;
        for algo in ALGOS {
            for outcome in [Outcome::Allowed, Outcome::Denied, Outcome::ShadowDenied] {
                let i = check_index(rule, algo, outcome);
                n = n.wrapping_add(self.check_sum(i).wrapping_sub(rules.base[i]));
            }
        }
        n
    }

    /// Counts `n` commands executed on `thread`.
    pub fn add_commands(&self, thread: usize, n: u64) {
        if n > 0 {
            self.commands[thread].fetch_add(n, Relaxed);
        }
    }

    pub fn total_commands(&self) -> u64 {
        self.commands.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Command `cmd`'s totals over every slot, since start.
    pub fn command_raw(&self, cmd: usize) -> CmdTotals {
        let mut t = CmdTotals {
            latency: vec![0; LATENCY_BUCKETS],
            ..CmdTotals::default()
        };
        for slot in self.slots.iter() {
            let Some(c) = slot.cmds.get(cmd) else {
                continue;
            };
            t.calls += c.calls.load(Relaxed);
            t.failed += c.failed.load(Relaxed);
            t.rejected += c.rejected.load(Relaxed);
            t.nanos += c.nanos.load(Relaxed);
            for (sum, b) in t.latency.iter_mut().zip(c.latency.iter()) {
                *sum += b.load(Relaxed);
            }
        }
        t
    }

    /// Command `cmd`'s totals since the last CONFIG RESETSTAT.
    pub fn command(&self, cmd: usize) -> CmdTotals {
        let mut t = self.command_raw(cmd);
        if let Some(base) = self.baseline.lock().get(cmd) {
            t.minus(base);
        }
        t
    }

    /// Check counters summed over every slot: `(rule name, algo, outcome, count)` for each
    /// non-zero counter of a rule in the registry. The unnamed rule's name is empty; rules past
    /// the registry's bound are `other`.
    pub fn checks(&self) -> Vec<(String, Algo, Outcome, u64)> {
        let rules = self.rules.read();
        let mut out = Vec::new();
        for rule in 0..MAX_RULES {
            let Some(name) = rules.name(RuleId(rule as u16)) else {
                continue;
            };
            for algo in ALGOS {
                for outcome in Outcome::ALL {
                    let i = check_index(RuleId(rule as u16), algo, outcome);
                    let n = self.check_sum(i).wrapping_sub(rules.base[i]);
                    if n != 0 {
                        out.push((name.to_string(), algo, outcome, n));
                    }
                }
            }
        }
        out
    }

    /// CONFIG RESETSTAT: INFO's command statistics and counters start again from zero.
    pub fn reset(&self) {
        let now: Vec<CmdTotals> = (0..self.slots[0].cmds.len())
            .map(|i| self.command_raw(i))
            .collect();
        *self.baseline.lock() = now;
        self.connections_received.store(0, Relaxed);
        self.rejected_connections.store(0, Relaxed);
        self.tls_refused_base
            .store(TLS_HANDSHAKES_REFUSED.load(Relaxed), Relaxed);
    }

    /// TLS handshakes refused since start or the last CONFIG RESETSTAT, as INFO shows them.
    pub fn tls_handshakes_refused(&self) -> u64 {
        TLS_HANDSHAKES_REFUSED
            .load(Relaxed)
            .saturating_sub(self.tls_refused_base.load(Relaxed))
    }

    /// The keys most `kind` over `window`, every slot merged, of `rule` only when given: at
    /// most `count`, largest first (`RL.TOP`).
    pub fn top(
        &self,
        kind: Kind,
        window: Window,
        rule: Option<RuleId>,
        count: usize,
        now: Nanos,
    ) -> Vec<TopEntry> {
        let mut merged = Merged::default();
        for slot in self.slots.iter() {
            slot.top
                .merge_into(kind, window, now.as_millis_floor(), &mut merged);
        }
        merged.top(rule, count)
    }

    /// The id `name` already has, without interning it: `None` for a name never counted.
    pub fn known_rule(&self, name: &str) -> Option<RuleId> {
        if name.is_empty() {
            return Some(RuleId::UNNAMED);
        }
        if name == "other" {
            return Some(RuleId::OTHER);
        }
        self.rules.read().ids.get(name).copied()
    }

    /// The name of rule `id` (empty for the unnamed rule, `other` past the bound).
    pub fn rule_name(&self, id: RuleId) -> String {
        self.rules.read().name(id).unwrap_or_default().to_string()
    }

    /// Per rule name, `[allowed, denied, shadow-denied]` summed over algorithms.
    fn rule_totals(&self) -> RuleTotals {
        let mut t = RuleTotals::new();
        for (name, _, outcome, n) in self.checks() {
            let i = match outcome {
                Outcome::Allowed => 0,
                Outcome::Denied => 1,
                Outcome::ShadowDenied => 2,
                Outcome::NearLimit => continue,
            };
            t.entry(name).or_default()[i] += n;
        }
        t
    }

    /// Per-rule checks in steps over the last 15 minutes (`RL.RATES`): the end of the newest
    /// step (the one in progress) and each rule's counts.
    pub fn rates(&self, now: Nanos) -> (u64, Vec<RuleRates>) {
        let current = self.rule_totals();
        self.rates.lock().report(now.as_millis_floor(), &current)
    }

    /// Takes one sample of the command rate, and at each `RL.RATES` step one of the rules'
    /// counters; called every 100 ms by one thread.
    pub fn sample_ops(&self, now_ms: u64) {
        self.rates.lock().sample(now_ms, || self.rule_totals());
        let total = self.total_commands();
        let mut s = self.ops.lock();
        if s.last_at_ms != 0 && now_ms > s.last_at_ms {
            let rate = total.saturating_sub(s.last_total) * 1000 / (now_ms - s.last_at_ms);
            let i = s.next;
            s.samples[i] = rate;
            s.next = (i + 1) % OPS_SAMPLES;
        }
        s.last_total = total;
        s.last_at_ms = now_ms;
    }

    pub fn instantaneous_ops_per_sec(&self) -> u64 {
        let s = self.ops.lock();
        s.samples.iter().sum::<u64>() / OPS_SAMPLES as u64
    }
}

/// The commands one read batch ran, for charging the batch's time to them: the connection
/// notes each command's row, then reads the clock once and calls [`Batch::charge`].
#[derive(Debug, Default)]
pub struct Batch {
    /// The row of the batch's first command and how many calls of it ran since the batch began
    /// or another command came (clients mostly repeat one command, so this is the whole batch).
    row: u16,
    repeats: u32,
    /// Earlier `(row, calls)` runs of a batch that mixes commands.
    ran: Vec<(u16, u32)>,
}

impl Batch {
    #[inline]
    pub fn note(&mut self, cmd: usize) {
        let cmd = cmd as u16;
        if self.row == cmd || self.repeats == 0 {
            self.row = cmd;
            self.repeats += 1;
        } else {
            self.ran.push((self.row, self.repeats));
            self.row = cmd;
            self.repeats = 1;
        }
    }

    /// True if no command ran since the last charge: the current run is empty only then.
    pub fn is_empty(&self) -> bool {
        self.repeats == 0
    }

    /// Splits `elapsed` evenly over the batch's calls and charges them to `slot`; empties the batch.
    pub fn charge(&mut self, slot: &ThreadStats, elapsed: Duration) {
        let calls = self.repeats + self.ran.iter().map(|&(_, n)| n).sum::<u32>();
        if calls > 0 {
            let each = elapsed / calls;
            for &(cmd, n) in &self.ran {
                slot.time(usize::from(cmd), u64::from(n), each);
            }
            slot.time(usize::from(self.row), u64::from(self.repeats), each);
        }
        self.ran.clear();
        self.repeats = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts one check of key `k` in slot `slot`.
    fn count(s: &Stats, slot: usize, rule: RuleId, algo: Algo, d: Decision, shadow: bool) {
        s.slot(slot).check(rule, algo, &d, shadow, b"k", Nanos(0));
    }

    fn decision(allowed: bool, remaining: u64, limit: u64) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after: (!allowed).then_some(Nanos(1)),
            reset_after: Nanos(1),
        }
    }

    #[test]
    fn buckets_are_ordered_and_bounded() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            1_000,
            65_536,
            1 << 33,
            u64::MAX,
        ] {
            let b = latency_bucket(ns);
            assert!(b >= last, "{ns}");
            assert!(b < LATENCY_BUCKETS);
            if b < LATENCY_BUCKETS - 1 {
                assert!(latency_bucket_upper(b) >= ns, "{ns} above its bucket");
                assert!(ns >= latency_bucket_upper(b.saturating_sub(1)) || b == 0);
            }
            last = b;
        }
        // Powers of two start a bucket, so a `le = 2^k` boundary is exact.
        for k in 4..34 {
            assert_eq!(
                latency_bucket_upper(latency_bucket(1 << k) - 1),
                (1 << k) - 1
            );
        }
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let s = Stats::new(2, 3);
        for _ in 0..99 {
            s.slot(0).time(1, 1, Duration::from_micros(10));
        }
        s.slot(1).time(1, 1, Duration::from_millis(5));
        let t = s.command(1);
        let p50 = t.percentile(0.5);
        assert!((10_000..=11_300).contains(&p50), "{p50}");
        let p999 = t.percentile(0.999);
        assert!((5_000_000..=5_700_000).contains(&p999), "{p999}");
        assert_eq!(t.nanos, 99 * 10_000 + 5_000_000);
    }

    #[test]
    fn resetstat_starts_info_over_but_not_the_raw_counters() {
        let s = Stats::new(1, 2);
        s.slot(0).time(0, 2, Duration::from_nanos(5));
        s.slot(0).fail(0);
        s.slot(0).reject(0);
        assert_eq!(
            (
                s.command(0).calls,
                s.command(0).failed,
                s.command(0).rejected
            ),
            (2, 1, 1)
        );
        s.reset();
        assert_eq!(s.command(0).calls, 0);
        s.slot(0).time(0, 1, Duration::from_nanos(5));
        assert_eq!(s.command(0).calls, 1);
        assert_eq!(s.command_raw(0).calls, 3);
    }

    #[test]
    fn checks_count_per_rule_algo_and_outcome() {
        let s = Stats::new(2, 1);
        let login = s.rule_id("login");
        assert_eq!(s.rule_id("login"), login);
        assert_ne!(login, RuleId::UNNAMED);
        count(
            &s,
            0,
            RuleId::UNNAMED,
            Algo::Token,
            decision(true, 9, 10),
            false,
        );
        count(
            &s,
            1,
            RuleId::UNNAMED,
            Algo::Token,
            decision(true, 1, 10),
            false,
        );
        count(&s, 0, login, Algo::Fixed, decision(false, 0, 10), true);
        count(&s, 0, login, Algo::Fixed, decision(false, 0, 10), false);
        let mut got = s.checks();
        got.sort_by_key(|(r, a, o, _)| (r.clone(), a.name(), *o as u8));
        assert_eq!(
            got,
            vec![
                (String::new(), Algo::Token, Outcome::Allowed, 2),
                (String::new(), Algo::Token, Outcome::NearLimit, 1),
                ("login".into(), Algo::Fixed, Outcome::Denied, 1),
                ("login".into(), Algo::Fixed, Outcome::ShadowDenied, 1),
            ]
        );
    }

    #[test]
    fn the_registry_is_bounded_and_forgets_gone_rules() {
        let s = Stats::new(1, 1);
        let ids: Vec<RuleId> = (0..1000).map(|i| s.rule_id(&format!("r{i}"))).collect();
        assert_eq!(s.rule_names(), MAX_RULES - 2);
        assert!(ids[MAX_RULES..].iter().all(|&id| id == RuleId::OTHER));
        let r1 = s.rule_id("r1");
        count(&s, 0, r1, Algo::Fixed, decision(true, 0, 10), false);
        count(
            &s,
            0,
            RuleId::OTHER,
            Algo::Fixed,
            decision(true, 0, 10),
            false,
        );
        s.set_envoy_rules(["r2".to_string()].into());
        // r1 and r2 remain: one exists, one is Envoy's.
        s.retire_rules(|n| n == "r1");
        assert_eq!(s.rule_names(), 2);
        assert_eq!(s.rule_checks("r1"), 1);
        let mut named: Vec<String> = s.checks().into_iter().map(|c| c.0).collect();
        named.dedup();
        assert_eq!(named, ["r1", "other"]);
        // r1 goes; its id comes back for a new name, whose counts start at zero.
        s.retire_rules(|_| false);
        assert_eq!(s.rule_names(), 1);
        let fresh = s.rule_id("fresh");
        assert_ne!(fresh, RuleId::OTHER);
        assert_eq!(s.rule_checks("fresh"), 0);
        assert!(s.checks().iter().all(|c| c.0 == "other"));
        count(&s, 0, fresh, Algo::Fixed, decision(false, 0, 10), false);
        assert_eq!(s.rule_checks("fresh"), 1);
    }

    #[test]
    fn a_batch_splits_its_time_over_its_calls() {
        let s = Stats::new(1, 3);
        let mut b = Batch::default();
        b.note(2);
        b.note(2);
        b.note(1);
        b.note(2);
        b.charge(s.slot(0), Duration::from_micros(4));
        assert_eq!(s.command(2).nanos, 3000);
        assert_eq!(s.command(1).nanos, 1000);
        assert_eq!(s.command(2).latency.iter().sum::<u64>(), 3);
        assert!(b.is_empty());
    }
}
