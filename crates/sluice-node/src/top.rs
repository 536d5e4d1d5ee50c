//! Heavy hitters: which keys a node denied and allowed most, over the last minute and the last
//! 15 minutes (`RL.TOP`, `sluice top`, `/dashboard`, `sluice_top_denied_requests`).
//!
//! # The summary
//! Each writer of a stats slot (a worker, the HTTP front, the gRPC front) keeps, per outcome, a
//! ring of [`STEPS`] summaries, one per [`STEP_MS`] of time. A summary is Misra–Gries's
//! "frequent items" with batched reductions (Agarwal et al., "Mergeable summaries"): a small
//! table of (key, rule) counters; when a new key finds it full ([`ROOM`] counters), the
//! (`KEEP`+1)-th largest count is subtracted from every counter, the ones that reach zero leave,
//! and the summary's `cut` grows by that amount. A key's true count then lies in
//! `[counter, counter + cut]`, and `cut` is at most `N / (KEEP + 1)` for `N` events, because
//! each reduction takes `cut`'s growth from at least `KEEP + 1` counters. Summaries merge by
//! adding counters and cuts, and the bound adds up the same way, so a window (several steps), a
//! node (several threads) and a cluster (several nodes) keep it.
//!
//! # What it costs a check
//! A denied check always enters the DENIED summary (a hit is a probe of a 128-slot index and an
//! add, under the slot's lock, which a reader takes one step at a time). An allowed check enters the ALLOWED summary with probability
//! 1 in [`SAMPLE`], with weight [`SAMPLE`]: between two samples a check costs one countdown in
//! the slot. The gaps between samples are geometric, so every check is sampled independently
//! (Bernoulli) and a scaled count is unbiased; its noise is stated in the README. A denied check
//! under a shadow rule counts as DENIED (the rule names it).
//!
//! # Memory
//! At most `ROOM` counters per summary (48 bytes each, and the key's allocation), keys cut to
//! [`KEY_MAX`] bytes: a slot holds at most `2 × STEPS × ROOM` counters (5,856), about 580 KB
//! with 32-byte keys and 1.1 MB with keys of `KEY_MAX` bytes. A summary frees its counters when
//! its step leaves the window, so a quiet slot holds 20 KB (the indexes).

use std::collections::HashMap;

use foldhash::fast::FixedState;
use parking_lot::Mutex;
use std::hash::BuildHasher;

use sluice_core::Nanos;

use crate::rule_id::RuleId;

/// Counters a summary keeps after a reduction: its bound is `N / (KEEP + 1)`.
pub const KEEP: usize = 32;
/// Counters a summary holds before a reduction.
const ROOM: usize = 48;
/// Slots of a summary's index (a power of two, well over `ROOM`).
const INDEX: usize = 128;
/// The time one summary of the ring covers.
pub const STEP_MS: u64 = 15_000;
/// Summaries in a ring: 15 minutes of steps and the one in progress.
pub const STEPS: usize = 61;
/// One allowed check in `SAMPLE` enters the ALLOWED summary, counted `SAMPLE` times.
pub const SAMPLE: u64 = 16;
/// Keys are kept to this many bytes; a longer one is cut and ends in `...`.
pub const KEY_MAX: usize = 128;

/// The outcome a summary counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Denied,
    Allowed,
}

/// The windows `RL.TOP` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The step in progress and the 4 before it: the last 60 to 75 s.
    Minute,
    /// Every step: the last 15 minutes to 15 minutes 15 s.
    Quarter,
}

impl Window {
    fn steps(self) -> usize {
        match self {
            Window::Minute => 5,
            Window::Quarter => STEPS,
        }
    }
}

#[derive(Debug)]
struct Counter {
    hash: u64,
    rule: RuleId,
    count: u64,
    last_ms: u64,
    key: Box<[u8]>,
}

/// One step's summary of one outcome.
#[derive(Debug)]
struct Summary {
    counters: Vec<Counter>,
    /// `index[h & (INDEX - 1)]`, probed linearly: 0 empty, else a counter's position + 1.
    index: [u8; INDEX],
    /// What every reduction subtracted, summed: the bound on each counter's under-count.
    cut: u64,
}

impl Summary {
    fn new() -> Summary {
        Summary {
            counters: Vec::new(),
            index: [0; INDEX],
            cut: 0,
        }
    }

    /// Empties the summary and hands its counters' memory back.
    fn clear(&mut self) {
        self.counters = Vec::new();
        self.index = [0; INDEX];
        self.cut = 0;
    }

    /// Where `key` (as kept) under `rule` is in the index, or the empty slot where it would go.
    fn probe(&self, hash: u64, rule: RuleId, key: &[u8]) -> (usize, Option<usize>) {
        let mut i = hash as usize & (INDEX - 1);
        loop {
            match self.index[i] {
                0 => return (i, None),
                n => {
                    let at = usize::from(n) - 1;
                    let c = &self.counters[at];
                    if c.hash == hash && c.rule == rule && c.key.as_ref() == key {
                        return (i, Some(at));
                    }
                }
            }
            i = (i + 1) & (INDEX - 1);
        }
    }

    /// Counts `key` (as kept: see [`kept`]), whose hash is `hash`.
    fn add(&mut self, hash: u64, rule: RuleId, key: &[u8], weight: u64, now_ms: u64) {
        let (mut slot, found) = self.probe(hash, rule, key);
        if let Some(at) = found {
            let c = &mut self.counters[at];
            c.count += weight;
            c.last_ms = c.last_ms.max(now_ms);
            return;
        }
        if self.counters.len() == ROOM {
            self.reduce();
            slot = self.probe(hash, rule, key).0;
        }
        if self.counters.capacity() == 0 {
            self.counters.reserve_exact(ROOM);
        }
        self.counters.push(Counter {
            hash,
            rule,
            count: weight,
            last_ms: now_ms,
            key: key.into(),
        });
        self.index[slot] = self.counters.len() as u8;
    }

    /// Subtracts the (`KEEP`+1)-th largest count from every counter; at most `KEEP` stay.
    fn reduce(&mut self) {
        let mut counts = [0u64; ROOM];
        for (c, n) in self.counters.iter().zip(counts.iter_mut()) {
            *n = c.count;
        }
        let counts = &mut counts[..self.counters.len()];
        let (_, &mut by, _) = counts.select_nth_unstable_by(KEEP, |a, b| b.cmp(a));
        // The (KEEP+1) largest lose `by` each; a smaller counter loses what it has.
        self.counters.retain_mut(|c| {
            c.count = c.count.saturating_sub(by);
            c.count > 0
        });
        self.cut += by;
        self.index = [0; INDEX];
        for at in 0..self.counters.len() {
            let c = &self.counters[at];
            let slot = self.probe(c.hash, c.rule, &c.key).0;
            self.index[slot] = at as u8 + 1;
        }
    }
}

/// A key as a summary keeps it: at most [`KEY_MAX`] bytes, a cut one ending in `...`.
fn kept(key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if key.len() <= KEY_MAX {
        return key.into();
    }
    let mut k = key[..KEY_MAX - 3].to_vec();
    k.extend_from_slice(b"...");
    k.into()
}

/// One outcome's ring of summaries.
#[derive(Debug)]
struct Ring {
    steps: Vec<Summary>,
    /// The step `steps[head]` covers: `now_ms / STEP_MS`.
    epoch: u64,
    head: usize,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            steps: (0..STEPS).map(|_| Summary::new()).collect(),
            epoch: 0,
            head: 0,
        }
    }

    /// Moves the head to `now_ms`'s step, clearing the steps it passes.
    fn advance(&mut self, now_ms: u64) {
        let epoch = now_ms / STEP_MS;
        if epoch <= self.epoch {
            return;
        }
        let passed = (epoch - self.epoch).min(STEPS as u64) as usize;
        for _ in 0..passed {
            self.head = (self.head + 1) % STEPS;
            self.steps[self.head].clear();
        }
        self.epoch = epoch;
    }

    fn add(&mut self, hash: u64, rule: RuleId, key: &[u8], weight: u64, now_ms: u64) {
        self.advance(now_ms);
        self.steps[self.head].add(hash, rule, key, weight, now_ms);
    }

    /// Adds the step `back` steps before `now_ms`'s into `into`.
    fn merge_step(&mut self, back: usize, now_ms: u64, into: &mut Merged) {
        self.advance(now_ms);
        let s = &self.steps[(self.head + STEPS - back) % STEPS];
        into.cut += s.cut;
        for c in &s.counters {
            let (count, last_ms) = into.counters.entry((c.rule, c.key.clone())).or_default();
            *count += c.count;
            *last_ms = (*last_ms).max(c.last_ms);
        }
    }
}

/// A slot's summaries, behind the lock a reader takes.
#[derive(Debug)]
struct Rings {
    denied: Ring,
    allowed: Ring,
}

/// The heavy hitters one stats slot writes. One writer; readers lock.
#[derive(Debug)]
pub struct SlotTop {
    rings: Mutex<Rings>,
    /// Allowed checks to pass before the next sample (written by the slot's thread only).
    skip: std::sync::atomic::AtomicU64,
}

fn hash(key: &[u8]) -> u64 {
    FixedState::with_seed(0x9e37_79b9_7f4a_7c15).hash_one(key)
}

impl Default for SlotTop {
    fn default() -> SlotTop {
        SlotTop::new()
    }
}

impl SlotTop {
    pub fn new() -> SlotTop {
        SlotTop {
            rings: Mutex::new(Rings {
                denied: Ring::new(),
                allowed: Ring::new(),
            }),
            skip: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Notes one check of `key` under `rule`: every denied one, one allowed in [`SAMPLE`].
    #[inline(always)]
    pub fn note(&self, rule: RuleId, key: &[u8], denied: bool, now: Nanos) {
        use std::sync::atomic::Ordering::Relaxed;
        if !denied {
            let skip = self.skip.load(Relaxed);
            if skip > 0 {
                self.skip.store(skip - 1, Relaxed);
                return;
            }
        }
        self.enter(rule, key, denied, now);
    }

    #[cold]
    #[inline(never)]
    fn enter(&self, rule: RuleId, key: &[u8], denied: bool, now: Nanos) {
        let now_ms = now.as_millis_floor();
        let key = kept(key);
        let h = hash(&key);
        let mut r = self.rings.lock();
        if denied {
            r.denied.add(h, rule, &key, 1, now_ms);
        } else {
            r.allowed.add(h, rule, &key, SAMPLE, now_ms);
            self.skip
                .store(geometric(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Adds this slot's `kind` summaries over `window` into `into`, taking the lock for one
    /// step at a time so the slot's own checks wait at most one step's merge.
    pub fn merge_into(&self, kind: Kind, window: Window, now_ms: u64, into: &mut Merged) {
        for back in 0..window.steps() {
            let mut r = self.rings.lock();
            let ring = match kind {
                Kind::Denied => &mut r.denied,
                Kind::Allowed => &mut r.allowed,
            };
            ring.merge_step(back, now_ms, into);
        }
    }
}

/// Failures before the next success of a 1-in-[`SAMPLE`] trial: the allowed checks to skip.
fn geometric() -> u64 {
    // A uniform in (0, 1], then inversion: floor(ln u / ln(1 - p)).
    let u = ((crate::rand::next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let p = 1.0 / SAMPLE as f64;
    (u.ln() / (1.0 - p).ln()).floor() as u64
}

/// One key of a merged window, as `RL.TOP` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEntry {
    pub key: Vec<u8>,
    pub rule: RuleId,
    /// The upper estimate: counted plus every cut that may hide some of it.
    pub count: u64,
    /// How much `count` may over-estimate.
    pub error: u64,
    pub last_ms: u64,
}

/// A key's `(count, last seen ms)` in a merge.
type Tally = (u64, u64);

/// Summaries added together: a window, then every slot of a node.
#[derive(Debug, Default)]
pub struct Merged {
    counters: HashMap<(RuleId, Box<[u8]>), Tally>,
    cut: u64,
}

impl Merged {
    /// The keys, largest estimate first, those of `rule` only when given, at most `count`.
    pub fn top(self, rule: Option<RuleId>, count: usize) -> Vec<TopEntry> {
        let cut = self.cut;
        let mut all: Vec<TopEntry> = self
            .counters
            .into_iter()
            .filter(|((r, _), _)| rule.is_none_or(|want| *r == want))
            .map(|((rule, key), (n, last_ms))| TopEntry {
                key: key.into_vec(),
                rule,
                count: n + cut,
                error: cut,
                last_ms,
            })
            .collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all.truncate(count);
        all
    }
}

/// Per-rule checks in [`RATE_STEP_MS`] steps over the last 15 minutes (`RL.RATES`), from
/// snapshots of the check counters taken at each step's end.
#[derive(Debug, Default)]
pub struct Rates {
    /// `(end of step in Unix ms, per rule name [allowed, denied, shadow-denied] since start)`,
    /// oldest first, at most [`RATE_STEPS`] + 1.
    snapshots: std::collections::VecDeque<(u64, HashMap<String, [u64; 3]>)>,
}

/// The step of `RL.RATES`.
pub const RATE_STEP_MS: u64 = 10_000;
/// Steps `RL.RATES` reports: 15 minutes.
pub const RATE_STEPS: usize = 90;

/// Per-rule totals `[allowed, denied, shadow-denied]` from the check counters.
pub type RuleTotals = HashMap<String, [u64; 3]>;

/// What `RL.RATES` reports of one rule: checks per step, oldest first (the type its readers
/// parse the reply into).
pub use sluice_client::top::RuleRates;

impl Rates {
    /// Takes a snapshot when `now_ms` is past the newest one's step; `totals` is called then only.
    /// The first is of zeros (the counters start at zero with the node, up to a tick before),
    /// so the checks of the node's first moments count in its first step.
    pub fn sample(&mut self, now_ms: u64, totals: impl FnOnce() -> RuleTotals) {
        let end = now_ms - now_ms % RATE_STEP_MS;
        if self.snapshots.back().is_some_and(|(at, _)| *at >= end) {
            return;
        }
        let totals = if self.snapshots.is_empty() {
            RuleTotals::new()
        } else {
            totals()
        };
        self.snapshots.push_back((end, totals));
        while self.snapshots.len() > RATE_STEPS + 1 {
            self.snapshots.pop_front();
        }
    }

    /// `(end of the newest step, per rule)`: the newest step is the one in progress, counted up
    /// to `now` from `current`. A step boundary passed but not yet sampled (the sampler runs
    /// every 100 ms) reads `current`; a step with no snapshot at either end counts 0. Rules are
    /// those with a count in the 15 minutes, retired ones included.
    pub fn report(&self, now_ms: u64, current: &RuleTotals) -> (u64, Vec<RuleRates>) {
        let passed = now_ms - now_ms % RATE_STEP_MS;
        let newest = passed + RATE_STEP_MS;
        let mut at: HashMap<u64, &RuleTotals> =
            self.snapshots.iter().map(|(t, m)| (*t, m)).collect();
        at.entry(passed).or_insert(current);
        at.insert(newest, current);
        let mut names: Vec<&String> = current
            .keys()
            .chain(self.snapshots.iter().flat_map(|(_, m)| m.keys()))
            .collect();
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let mut r = RuleRates {
                name: name.clone(),
                allowed: Vec::with_capacity(RATE_STEPS),
                denied: Vec::with_capacity(RATE_STEPS),
                shadow: Vec::with_capacity(RATE_STEPS),
            };
            for back in (0..RATE_STEPS as u64).rev() {
                let end = newest.saturating_sub(back * RATE_STEP_MS);
                let start = end.saturating_sub(RATE_STEP_MS);
                let step = match (at.get(&start), at.get(&end)) {
                    (Some(a), Some(b)) => {
                        let a = a.get(name).copied().unwrap_or_default();
                        let b = b.get(name).copied().unwrap_or_default();
                        [0, 1, 2].map(|i| b[i].saturating_sub(a[i]))
                    }
                    _ => [0; 3],
                };
                r.allowed.push(step[0]);
                r.denied.push(step[1]);
                r.shadow.push(step[2]);
            }
            if r.allowed
                .iter()
                .chain(&r.denied)
                .chain(&r.shadow)
                .any(|&n| n > 0)
            {
                out.push(r);
            }
        }
        (newest, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    fn top_of_all(s: &SlotTop) -> Vec<TopEntry> {
        let mut m = Merged::default();
        s.merge_into(Kind::Denied, Window::Minute, 1, &mut m);
        m.top(None, MAX_ALL)
    }

    const MAX_ALL: usize = 100_000;

    fn top_of(s: &SlotTop, kind: Kind, now_ms: u64) -> Vec<TopEntry> {
        let mut m = Merged::default();
        s.merge_into(kind, Window::Minute, now_ms, &mut m);
        m.top(None, 10)
    }

    #[test]
    fn a_hammered_key_leads_and_its_count_is_within_the_bound() {
        let s = SlotTop::new();
        let now = 1_000_000_000;
        // 20,000 distinct quiet keys denied once each, one key denied 3,000 times among them.
        let mut n = 0u64;
        for i in 0..20_000u32 {
            s.note(
                RuleId::UNNAMED,
                format!("quiet:{i}").as_bytes(),
                true,
                ms(now),
            );
            n += 1;
            if i % 7 == 0 {
                s.note(RuleId::UNNAMED, b"hot", true, ms(now));
                n += 1;
            }
        }
        let hot_true = 20_000u64.div_ceil(7);
        let top = top_of(&s, Kind::Denied, now);
        assert_eq!(top[0].key, b"hot");
        assert!(top[0].count >= hot_true, "{top:?}");
        assert!(top[0].count - top[0].error <= hot_true, "{top:?}");
        assert!(top[0].error <= n / (KEEP as u64 + 1), "{top:?} n={n}");
    }

    #[test]
    fn allowed_checks_are_sampled_and_scaled_without_bias() {
        let s = SlotTop::new();
        let now = 1_000_000_000;
        for _ in 0..160_000 {
            s.note(RuleId(3), b"k", false, ms(now));
        }
        let top = top_of(&s, Kind::Allowed, now);
        assert_eq!(top[0].key, b"k");
        assert_eq!(top[0].rule, RuleId(3));
        // 10,000 samples expected; 6 standard deviations (~1,500 of the scaled count each way).
        let c = top[0].count as i64;
        assert!((c - 160_000).abs() < 6 * 1_550, "{c}");
        assert_eq!(top[0].error, 0);
    }

    #[test]
    fn the_window_forgets_old_steps_and_the_quarter_keeps_them() {
        let s = SlotTop::new();
        let t0 = 10 * STEP_MS * 1_000;
        for _ in 0..5 {
            s.note(RuleId::UNNAMED, b"old", true, ms(t0));
        }
        let later = t0 + 6 * STEP_MS;
        s.note(RuleId::UNNAMED, b"new", true, ms(later));
        let minute = top_of(&s, Kind::Denied, later);
        assert_eq!(minute.len(), 1);
        assert_eq!(minute[0].key, b"new");
        let mut m = Merged::default();
        s.merge_into(Kind::Denied, Window::Quarter, later, &mut m);
        let quarter = m.top(None, 10);
        assert_eq!(quarter[0].key, b"old");
        assert_eq!(quarter[0].count, 5);
        // 16 minutes on, nothing is left.
        let mut m = Merged::default();
        s.merge_into(Kind::Denied, Window::Quarter, later + 64 * STEP_MS, &mut m);
        assert!(m.top(None, 10).is_empty());
    }

    #[test]
    fn rule_filters_and_long_keys_are_cut() {
        let s = SlotTop::new();
        let long = vec![b'x'; 500];
        s.note(RuleId(2), &long, true, ms(5));
        s.note(RuleId(2), b"a", true, ms(5));
        s.note(RuleId(4), b"a", true, ms(5));
        let mut m = Merged::default();
        s.merge_into(Kind::Denied, Window::Minute, 5, &mut m);
        let top = m.top(Some(RuleId(2)), 10);
        assert_eq!(top.len(), 2);
        assert!(top.iter().all(|e| e.rule == RuleId(2)));
        let cut = top.iter().find(|e| e.key.len() > 1).unwrap();
        assert_eq!(cut.key.len(), KEY_MAX);
        assert!(cut.key.ends_with(b"..."));
    }

    #[test]
    fn the_bound_holds_against_exact_counts_under_churn() {
        // Zipf-like traffic over many keys: every reported count is an upper bound within
        // `error` of the truth, and error stays at most N / (KEEP + 1).
        let s = SlotTop::new();
        let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut rng = 12345u64;
        let n = 50_000u64;
        for _ in 0..n {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = format!("k{}", (rng % 1000) * (rng % 1000) / 1000);
            *exact.entry(k.clone().into_bytes()).or_default() += 1;
            s.note(RuleId::UNNAMED, k.as_bytes(), true, ms(1));
        }
        let mut m = Merged::default();
        s.merge_into(Kind::Denied, Window::Minute, 1, &mut m);
        let top = m.top(None, 1000);
        assert!(!top.is_empty());
        for e in &top {
            let t = exact[&e.key];
            assert!(e.count >= t && e.count - e.error <= t, "{e:?} true {t}");
            assert!(e.error <= n / (KEEP as u64 + 1));
        }
        // Every key above the bound is reported.
        for (k, &t) in &exact {
            if t > n / (KEEP as u64 + 1) {
                assert!(top.iter().any(|e| &e.key == k), "{k:?} {t}");
            }
        }
    }

    #[test]
    fn a_reduction_never_takes_more_than_a_counter_holds() {
        // 33 keys twice, 15 once, then a new key: the 33rd largest count (2) is more than the
        // 15 small counters hold, which leave instead of wrapping below zero.
        let s = SlotTop::new();
        for round in 0..2 {
            for i in 0..33 {
                s.note(RuleId::UNNAMED, format!("big{i}").as_bytes(), true, ms(1));
            }
            if round == 0 {
                for i in 0..15 {
                    s.note(RuleId::UNNAMED, format!("small{i}").as_bytes(), true, ms(1));
                }
            }
        }
        s.note(RuleId::UNNAMED, b"new", true, ms(1));
        let top = top_of(&s, Kind::Denied, 1);
        let n = 33 * 2 + 15 + 1;
        for e in &top {
            assert!(e.count <= n, "{e:?}");
            assert!(e.error <= n / (KEEP as u64 + 1), "{e:?}");
        }
        assert_eq!(
            top.iter().find(|e| e.key == b"new").map(|e| e.count),
            Some(3)
        );
    }

    #[test]
    fn the_bound_holds_under_adversarial_orders() {
        // Orders that churn the table: bursts of fresh keys between repeats, sorted and
        // reversed runs, and one key that appears only after everything else.
        let orders: Vec<Vec<String>> = vec![
            (0..5000)
                .map(|i| format!("k{}", i % 97 + (i / 97) % 3 * 1000))
                .collect(),
            (0..5000)
                .map(|i| format!("k{}", if i % 3 == 0 { i } else { i % 40 }))
                .collect(),
            (0..5000).rev().map(|i| format!("k{}", i / 50)).collect(),
            (0..5000)
                .map(|i| {
                    if i < 4000 {
                        format!("u{i}")
                    } else {
                        "late".to_string()
                    }
                })
                .collect(),
        ];
        for keys in orders {
            let s = SlotTop::new();
            let mut exact: HashMap<&str, u64> = HashMap::new();
            for k in &keys {
                *exact.entry(k).or_default() += 1;
                s.note(RuleId::UNNAMED, k.as_bytes(), true, ms(1));
            }
            let n = keys.len() as u64;
            let top = top_of_all(&s);
            for e in &top {
                let t = exact[std::str::from_utf8(&e.key).unwrap()];
                assert!(e.count >= t && e.count - e.error <= t, "{e:?} true {t}");
                assert!(e.error <= n / (KEEP as u64 + 1), "{e:?}");
            }
            for (k, &t) in &exact {
                if t > n / (KEEP as u64 + 1) {
                    assert!(top.iter().any(|e| e.key == k.as_bytes()), "{k} {t}");
                }
            }
        }
    }

    #[test]
    fn colliding_hashes_keep_their_keys_apart() {
        let mut s = Summary::new();
        s.add(7, RuleId::UNNAMED, b"a", 1, 0);
        s.add(7, RuleId::UNNAMED, b"b", 1, 0);
        s.add(7, RuleId::UNNAMED, b"a", 1, 0);
        assert_eq!(s.counters.len(), 2);
        assert_eq!(s.counters[0].count, 2);
    }

    #[test]
    fn a_counter_is_the_48_bytes_the_docs_count() {
        assert_eq!(std::mem::size_of::<Counter>(), 48);
        let mut s = Summary::new();
        s.add(1, RuleId::UNNAMED, b"k", 1, 0);
        assert_eq!(s.counters.capacity(), ROOM);
    }

    #[test]
    fn rates_are_differences_of_snapshots_per_step() {
        let mut r = Rates::default();
        let mk = |a: u64, d: u64| -> RuleTotals { [("api".to_string(), [a, d, 0])].into() };
        // The first snapshot is zeros whatever the counters say: they counted since start.
        r.sample(100_000, || mk(7, 0));
        r.sample(110_000, || mk(50, 5));
        r.sample(115_000, || panic!("one snapshot per step"));
        let (end, rules) = r.report(115_000, &mk(70, 9));
        assert_eq!(end, 120_000);
        assert_eq!(rules.len(), 1);
        let api = &rules[0];
        assert_eq!(api.allowed.len(), RATE_STEPS);
        assert_eq!(api.allowed[RATE_STEPS - 1], 20);
        assert_eq!(api.denied[RATE_STEPS - 1], 4);
        assert_eq!(api.allowed[RATE_STEPS - 2], 50);
        assert_eq!(api.allowed[RATE_STEPS - 3], 0);
        // Just past a boundary the sampler has not reached yet: the step before it still
        // reads its counts (current stands in for the missing snapshot), not 0.
        let (_, rules) = r.report(120_050, &mk(75, 9));
        assert_eq!(rules[0].allowed[RATE_STEPS - 2], 25);
        assert_eq!(rules[0].allowed[RATE_STEPS - 1], 0);
        // A rule whose counters are gone (retired) keeps its history.
        let (_, rules) = r.report(115_000, &RuleTotals::new());
        assert_eq!(rules[0].name, "api");
        assert_eq!(rules[0].allowed[RATE_STEPS - 2], 50);
    }
}
