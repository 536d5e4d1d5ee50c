//! Named rules: limits managed centrally instead of passed on every call.
//!
//! A rule is a name and a [`RuleSpec`] (limit, period, burst, algorithm, fail mode, shadow,
//! floor, rollout). Every change makes a new version; the history of each rule is kept, so a
//! rollback is one command. `RL.HIT name subject` checks the bucket `name:subject` with the
//! rule's current version (or, under a staged rollout, the previous one for the subjects
//! outside the rollout's share).
//!
//! # Where rules come from
//! - Memory (the default): `RL.RULE SET|DEL|ROLLBACK` change this node's rules only.
//! - A file (`--rules FILE`, [`file`]): loaded at start, reloaded when it changes; `RL.RULE`
//!   writes are refused (edit the file).
//! - etcd (`--rules-etcd`, [`etcd`]): every node watches the prefix; `RL.RULE` writes go to
//!   etcd and come back through the watch; versions are etcd revisions.
//!
//! Rules are not carried by replication: a replica reads the same file or etcd prefix as its
//! primary, and answers `RL.RULE GET|LIST|HISTORY` from it.
//!
//! # Invariants
//! - The spec text (`LIMIT 100 PERIOD 1m ...`, [`RuleSpec::to_text`]) is one grammar for
//!   `RL.RULE SET`, etcd values, the file's entries and `RL.RULE HISTORY`; every source is
//!   validated by the same [`parse_spec`] (RL.CHECK's argument checks included).
//! - A floor is a rate: each version states it in its own period, and a version whose limit
//!   is below its floor is refused.
//! - The request path reads the rules through a per-thread copy of an immutable map, renewed
//!   when the generation moves: no lock and no shared write per `RL.HIT`.

pub mod etcd;
pub mod file;
pub mod handle;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_core::scope::{Scope, Selector, parse_route, parse_tier};
use sluice_core::{Algo, Nanos, Params};

use sluice_core::spec::{
    PeriodError, SpecError, count, parse_algo, parse_period, parse_u64, validate,
};

/// The longest period a rule may have: a year. RL.CHECK allows more; a rule longer than this
/// is far more likely a unit mistake than a limit anyone means.
pub const MAX_RULE_PERIOD: Nanos = Nanos(365 * 86_400 * Nanos::PER_SEC);

/// What a gateway does when it cannot reach Sluice for this rule (carried for the gateway;
/// the server itself always decides): the gateway library's own type.
pub use sluice_core::spec::FailMode;

/// A refused rule or rule command: the whole error line (`ERR ...`), as RL.RULE answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError(pub String);

impl RuleError {
    pub fn msg(line: impl Into<String>) -> RuleError {
        RuleError(line.into())
    }

    /// The line without Redis's `ERR ` prefix, for logs.
    pub fn text(&self) -> &str {
        self.0.trim_start_matches("ERR ")
    }
}

impl From<SpecError> for RuleError {
    fn from(e: SpecError) -> RuleError {
        RuleError(format!("ERR {e}"))
    }
}

/// One version of a rule, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    pub limit: u64,
    pub period: Nanos,
    pub burst: Option<u64>,
    pub algo: Algo,
    pub failmode: FailMode,
    pub shadow: bool,
    /// The lowest limit this rule may have, per its own period.
    pub floor: Option<u64>,
    /// Percent of subjects this version applies to (the rest keep the previous version).
    pub rollout: u8,
    /// `GLOBAL`: the limit is shared by every region; this region enforces its share of it
    /// (see [`Rules::set_region_shares`]).
    pub global: bool,
    /// `SCOPE`, `TIER`, `ROUTE`: which requests `RL.ALLOW` counts here, and by what.
    pub selector: Selector,
}

impl RuleSpec {
    /// The check's parameters at `cost`.
    pub fn params(&self, cost: u64) -> Params {
        Params {
            limit: self.limit,
            period: self.period,
            burst: self.burst.unwrap_or(self.limit),
            cost,
        }
    }

    /// The spec text: what `RL.RULE SET name` takes after the name.
    pub fn to_text(&self) -> String {
        let mut t = format!("LIMIT {} PERIOD {}", self.limit, period_text(self.period));
        if let Some(b) = self.burst {
            t.push_str(&format!(" BURST {b}"));
        }
        t.push_str(&format!(" ALGO {}", self.algo.name()));
        t.push_str(&format!(" FAILMODE {}", self.failmode.name()));
        if self.shadow {
            t.push_str(" SHADOW");
        }
        if let Some(f) = self.floor {
            t.push_str(&format!(" FLOOR {f}"));
        }
        if self.rollout < 100 {
            t.push_str(&format!(" ROLLOUT {}", self.rollout));
        }
        if self.global {
            t.push_str(" GLOBAL");
        }
        t.push_str(&self.selector.to_text());
        t
    }

    /// This spec as a region enforces it under `share` (parts per million of the whole):
    /// limit and burst are `floor(x × share)`, at least 1 (a check needs a limit of 1 or
    /// more). The period, algorithm and everything else stay.
    pub fn regional(&self, share: u32) -> RuleSpec {
        let scale = |x: u64| {
            let scaled =
                u128::from(x) * u128::from(share.min(SHARE_WHOLE)) / u128::from(SHARE_WHOLE);
            u64::try_from(scaled).unwrap_or(u64::MAX).max(1)
        };
        RuleSpec {
            limit: scale(self.limit),
            burst: self.burst.map(scale),
            ..self.clone()
        }
    }

    /// This version's floor carried over from `prev` when it states none: the same rate,
    /// expressed in this version's period (rounded up).
    fn inherit_floor(&mut self, prev: &RuleSpec) {
        if self.floor.is_none()
            && let Some(f) = prev.floor
        {
            let scaled = (u128::from(f) * u128::from(self.period.0))
                .div_ceil(u128::from(prev.period.0.max(1)));
            self.floor = Some(u64::try_from(scaled).unwrap_or(u64::MAX));
        }
    }

    fn check_floor(&self, name: &str) -> Result<(), RuleError> {
        match self.floor {
            Some(f) if self.limit < f => Err(RuleError::msg(format!(
                "ERR rule '{name}': LIMIT {} per {} is below its FLOOR {f} per {}; lower the FLOOR explicitly if this is meant",
                self.limit,
                period_text(self.period),
                period_text(self.period),
            ))),
            _ => Ok(()),
        }
    }
}

/// A whole share, in parts per million: shares are integers so that every node of a region
/// computes the same regional limit from the same published share.
pub const SHARE_WHOLE: u32 = 1_000_000;

/// A period as the shortest exact text with a unit (`1m`, `500ms`, `90s`).
pub fn period_text(p: Nanos) -> String {
    let ns = p.0;
    for (unit, per) in [
        ("d", 86_400 * Nanos::PER_SEC),
        ("h", 3600 * Nanos::PER_SEC),
        ("m", 60 * Nanos::PER_SEC),
        ("s", Nanos::PER_SEC),
        ("ms", Nanos::PER_MS),
    ] {
        if ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{}ms", ns.div_ceil(Nanos::PER_MS))
}

/// Whether `name` may name a rule: 1–64 of `A-Z a-z 0-9 _ . -` (no `:`, so `name:subject`
/// is unambiguous), and not an option word of RL.HITS.
pub fn check_name(name: &[u8]) -> Result<&str, RuleError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
        && !name.eq_ignore_ascii_case(b"COST")
        && !name.eq_ignore_ascii_case(b"KEYS");
    match std::str::from_utf8(name) {
        Ok(s) if ok => Ok(s),
        _ => Err(RuleError::msg(format!(
            "ERR invalid rule name '{}': use 1-64 of A-Z a-z 0-9 _ . - (not COST or KEYS)",
            String::from_utf8_lossy(name)
        ))),
    }
}

/// Parses and validates a spec from its words (`LIMIT n WINDOW w|PERIOD w [BURST b] [ALGO a]
/// [FAILMODE open|closed|local] [SHADOW] [FLOOR n] [ROLLOUT pct] [GLOBAL] [SCOPE user|ip|key]
/// [TIER name] [ROUTE prefix]`).
pub fn parse_spec<'a>(mut words: impl Iterator<Item = &'a [u8]>) -> Result<RuleSpec, RuleError> {
    let mut limit = None;
    let mut period = None;
    let mut period_word: Option<&str> = None;
    let mut burst = None;
    let mut algo = Algo::Token;
    let mut failmode = FailMode::Open;
    let mut shadow = false;
    let mut floor = None;
    let mut rollout = 100u8;
    let mut global = false;
    let mut selector = Selector::default();
    while let Some(word) = words.next() {
        let is = |name: &str| word.eq_ignore_ascii_case(name.as_bytes());
        let mut value = |name: &str| {
            words
                .next()
                .ok_or_else(|| RuleError::msg(format!("ERR {name} needs a value")))
        };
        match () {
            _ if is("LIMIT") => limit = Some(count(value("LIMIT")?, "LIMIT")?),
            // One setting, two names: `WINDOW` as the JSON bodies and the docs call it, and
            // `PERIOD`, the word of `RL.CHECK`, of the spec text, and of older rules.
            _ if is("PERIOD") || is("WINDOW") => {
                let name = if is("WINDOW") { "WINDOW" } else { "PERIOD" };
                if let Some(first) = period_word.filter(|w| *w != name) {
                    return Err(RuleError::msg(format!(
                        "ERR {first} and {name} are the same setting (PERIOD is an alias of WINDOW): give one"
                    )));
                }
                period_word = Some(name);
                let p = value(name)?;
                let parsed = parse_period(p).map_err(|e| match e {
                    PeriodError::Format => RuleError::msg(format!(
                        "ERR {name} '{}' must be a positive duration such as 500ms, 10s, 1m, 1h or 1d",
                        String::from_utf8_lossy(p)
                    )),
                    overflow => SpecError::from(overflow).into(),
                })?;
                if parsed > MAX_RULE_PERIOD {
                    return Err(RuleError::msg(format!(
                        "ERR {name} '{}' is absurd for a rule: at most 365d",
                        String::from_utf8_lossy(p)
                    )));
                }
                period = Some(parsed);
            }
            _ if is("BURST") => burst = Some(count(value("BURST")?, "BURST")?),
            _ if is("ALGO") => {
                algo = parse_algo(value("ALGO")?)?;
            }
            _ if is("FAILMODE") => {
                let m = value("FAILMODE")?;
                failmode = FailMode::parse(m).map_err(|_| {
                    RuleError::msg(format!(
                        "ERR unknown FAILMODE '{}'; expected open, closed or local",
                        String::from_utf8_lossy(m)
                    ))
                })?;
            }
            _ if is("SHADOW") => shadow = true,
            _ if is("GLOBAL") => global = true,
            _ if is("FLOOR") => floor = Some(count(value("FLOOR")?, "FLOOR")?),
            _ if is("ROLLOUT") => {
                let r = value("ROLLOUT")?;
                rollout = parse_u64(r)
                    .filter(|r| (1..=100).contains(r))
                    .ok_or_else(|| {
                        RuleError::msg("ERR ROLLOUT must be a percentage from 1 to 100")
                    })? as u8;
            }
            _ if is("SCOPE") => {
                let s = value("SCOPE")?;
                selector.scope = Some(Scope::parse(s).ok_or_else(|| {
                    RuleError::msg(format!(
                        "ERR unknown SCOPE '{}'; expected user, ip or key",
                        String::from_utf8_lossy(s)
                    ))
                })?);
            }
            _ if is("TIER") => {
                selector.tier = Some(
                    parse_tier(value("TIER")?).map_err(|e| RuleError::msg(format!("ERR {e}")))?,
                );
            }
            _ if is("ROUTE") => {
                selector.route = Some(
                    parse_route(value("ROUTE")?).map_err(|e| RuleError::msg(format!("ERR {e}")))?,
                );
            }
            _ => {
                return Err(RuleError::msg(format!(
                    "ERR unknown rule option '{}'",
                    String::from_utf8_lossy(word)
                )));
            }
        }
    }
    let limit = limit.ok_or_else(|| RuleError::msg("ERR a rule needs LIMIT n"))?;
    let period = period.ok_or_else(|| RuleError::msg("ERR a rule needs WINDOW w (or PERIOD w)"))?;
    validate(algo, limit, period, burst, 1)?;
    Ok(RuleSpec {
        limit,
        period,
        burst,
        algo,
        failmode,
        shadow,
        floor,
        rollout,
        global,
        selector,
    })
}

/// One version in a rule's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub version: u64,
    pub spec: RuleSpec,
}

/// Per-rule counters, kept across versions.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests an enforcing version denied.
    pub denied: AtomicU64,
    /// Requests a shadow version would have denied (and allowed).
    pub shadow_denied: AtomicU64,
    /// The rule's id in the metrics ([`crate::stats::RuleId`]), interned on its first check;
    /// 0 until then.
    pub metric: std::sync::atomic::AtomicU16,
}

/// A rule as the request path sees it.
#[derive(Debug)]
pub struct Live {
    pub name: Box<str>,
    pub current: Version,
    /// The version before `current`, for the subjects outside a staged rollout.
    pub previous: Option<RuleSpec>,
    /// A GLOBAL rule whose region enforces more than it may keep without etcd: what it falls
    /// to when that share lapses. `None` for every other rule.
    pub lapsed: Option<Box<Lapsed>>,
    pub counters: Arc<Counters>,
}

/// A GLOBAL rule's specs once its region's share has lapsed: at the share a region keeps
/// without etcd (its minimum), from the deadline its region thread last renewed on.
#[derive(Debug)]
pub struct Lapsed {
    /// From this instant on (the server clock, as a check's `now`), these specs apply.
    pub from: Nanos,
    pub current: RuleSpec,
    pub previous: Option<RuleSpec>,
}

impl Live {
    /// The version that applies to `subject` at `now`: under `ROLLOUT pct`, the `pct`% of
    /// subjects whose stable hash falls below it get the current version, the others the
    /// previous one; a GLOBAL rule past its share's deadline, at the minimum share.
    pub fn spec_for(&self, subject: &[u8], now: Nanos) -> &RuleSpec {
        let (current, previous) = self.versions_at(now);
        match previous {
            Some(prev) if current.rollout < 100 => {
                if rollout_bucket(subject) < u32::from(current.rollout) {
                    current
                } else {
                    prev
                }
            }
            _ => current,
        }
    }

    /// The current version's spec as checks at `now` see it.
    pub fn current_at(&self, now: Nanos) -> &RuleSpec {
        self.versions_at(now).0
    }

    /// The current and previous specs at `now`. The request path's one test of a share's
    /// deadline: a rule that is not GLOBAL pays for a `None`.
    fn versions_at(&self, now: Nanos) -> (&RuleSpec, Option<&RuleSpec>) {
        match &self.lapsed {
            Some(l) if now >= l.from => (&l.current, l.previous.as_ref()),
            _ => (&self.current.spec, self.previous.as_ref()),
        }
    }
}

/// A subject's rollout bucket, 0..100: CRC-32 of the subject, the same on every node and
/// across restarts.
pub fn rollout_bucket(subject: &[u8]) -> u32 {
    crc32fast::hash(subject) % 100
}

/// A rule's history.
#[derive(Debug, Default)]
struct History {
    versions: Vec<Version>,
    deleted: bool,
    counters: Arc<Counters>,
}

/// The rules of this node.
#[derive(Debug)]
pub struct Rules {
    /// Distinguishes registries in one process (tests run several) for the per-thread copies.
    id: u64,
    generation: AtomicU64,
    histories: Mutex<BTreeMap<String, History>>,
    live: Mutex<Arc<LiveSet>>,
    /// This region's shares of its GLOBAL rules, when regions are on.
    shares: Mutex<RegionShares>,
    /// Where rules come from; decides what RL.RULE writes do.
    pub source: Source,
}

/// This region's shares of the GLOBAL rules, in parts per million of [`SHARE_WHOLE`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct RegionShares {
    /// The share of a GLOBAL rule with none of its own, and the most any share keeps past
    /// `valid_until`; `None` (no regions): the whole limit, for ever.
    default: Option<u32>,
    by_rule: HashMap<String, u32>,
    /// Until when `by_rule` holds (the server clock): from then on each check enforces at
    /// most `default`, until the region thread renews the deadline. So no pause, hang or
    /// dead thread can stretch a share past the lease that claims it in etcd.
    valid_until: Nanos,
}

impl RegionShares {
    fn of(&self, name: &str) -> Option<u32> {
        self.by_rule.get(name).copied().or(self.default)
    }

    /// When `name`'s share lapses and to what, if it is above what it lapses to.
    fn lapse(&self, name: &str) -> Option<(Nanos, u32)> {
        let floor = self.default?;
        let share = *self.by_rule.get(name)?;
        (share > floor).then_some((self.valid_until, floor))
    }
}

/// Looked up by every RL.HIT: ahash, not SipHash (rule names are the server's, not hostile).
type LiveSet = HashMap<Box<[u8]>, Arc<Live>, ahash::RandomState>;

/// Where this node's rules come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Memory,
    File(std::path::PathBuf),
    Etcd,
}

thread_local! {
    static VIEW: RefCell<Option<(u64, u64, Arc<LiveSet>)>> = const { RefCell::new(None) };
}

impl Rules {
    pub fn new(source: Source) -> Rules {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Rules {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(1),
            histories: Mutex::new(BTreeMap::new()),
            live: Mutex::new(Arc::new(LiveSet::default())),
            shares: Mutex::new(RegionShares::default()),
            source,
        }
    }

    /// Runs `f` on the live rule `name` (`None` if there is none).
    pub fn with<R>(&self, name: &[u8], f: impl FnOnce(Option<&Live>) -> R) -> R {
        self.view(|set| f(set.get(name).map(|l| &**l)))
    }

    /// Runs `f` on this thread's copy of the live set, fetched again when it is stale (another
    /// `Rules`, or a generation ago).
    fn view<R>(&self, f: impl FnOnce(&LiveSet) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        VIEW.with(|view| {
            let mut view = view.borrow_mut();
            let fresh = matches!(&*view, Some((id, g, _)) if *id == self.id && *g == generation);
            if !fresh {
                *view = Some((self.id, generation, self.live.lock().clone()));
            }
            let set = &view.as_ref().expect("just set").2;
            f(set)
        })
    }

    /// Sets this region's shares of its GLOBAL rules (parts per million): `by_rule` for the
    /// rules named until `valid_until` (the server clock), `default` for every other GLOBAL
    /// rule and for every rule from `valid_until` on, if it is less. The live rules are
    /// rebuilt only if something changed, so the request path sees the new regional limits
    /// at its next check, and a bucket keeps its state (capped), as for any limit change.
    pub fn set_region_shares(
        &self,
        default: u32,
        by_rule: HashMap<String, u32>,
        valid_until: Nanos,
    ) {
        let next = RegionShares {
            default: Some(default.min(SHARE_WHOLE)),
            by_rule,
            valid_until,
        };
        let histories = self.histories.lock();
        {
            let mut shares = self.shares.lock();
            if *shares == next {
                return;
            }
            *shares = next;
        }
        self.publish(&histories);
    }

    /// The share of GLOBAL rule `name` the checks at `now` enforce (`None` without regions).
    pub fn region_share(&self, name: &str, now: Nanos) -> Option<u32> {
        let shares = self.shares.lock();
        match shares.lapse(name) {
            Some((from, floor)) if now >= from => Some(floor),
            _ => shares.of(name),
        }
    }

    /// The GLOBAL rules' names, sorted.
    pub fn global_names(&self) -> Vec<String> {
        let histories = self.histories.lock();
        histories
            .iter()
            .filter(|(_, h)| !h.deleted && h.versions.last().is_some_and(|v| v.spec.global))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// `spec` as a region holding `share` of it enforces it.
    fn effective(share: Option<u32>, spec: &RuleSpec) -> RuleSpec {
        match share {
            Some(share) if spec.global => spec.regional(share),
            _ => spec.clone(),
        }
    }

    /// Runs `f` on every live rule (RL.ALLOW finds the rules that apply to a request), through
    /// the same per-thread copy as [`Rules::with`].
    pub fn with_all<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &Live>) -> R) -> R {
        self.view(|set| f(&mut set.values().map(|l| &**l)))
    }

    /// Rebuilds the live map after a change (the caller holds `histories`).
    fn publish(&self, histories: &BTreeMap<String, History>) {
        let shares = self.shares.lock().clone();
        let set: LiveSet = histories
            .iter()
            .filter(|(_, h)| !h.deleted)
            .filter_map(|(name, h)| {
                let last = h.versions.last()?;
                let before = h.versions.len().checked_sub(2).map(|i| &h.versions[i].spec);
                let share = shares.of(name);
                let current = Version {
                    version: last.version,
                    spec: Self::effective(share, &last.spec),
                };
                let previous = before.map(|spec| Self::effective(share, spec));
                let global = last.spec.global || before.is_some_and(|s| s.global);
                let lapsed = shares.lapse(name).filter(|_| global).map(|(from, floor)| {
                    Box::new(Lapsed {
                        from,
                        current: Self::effective(Some(floor), &last.spec),
                        previous: before.map(|spec| Self::effective(Some(floor), spec)),
                    })
                });
                Some((
                    name.as_bytes().into(),
                    Arc::new(Live {
                        name: name.as_str().into(),
                        current,
                        previous,
                        lapsed,
                        counters: h.counters.clone(),
                    }),
                ))
            })
            .collect();
        *self.live.lock() = Arc::new(set);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The spec `spec` becomes once checked against the rule's current version: its floor
    /// inherited, and refused if below it.
    pub fn prepare(&self, name: &str, mut spec: RuleSpec) -> Result<RuleSpec, RuleError> {
        let histories = self.histories.lock();
        if let Some(prev) = histories
            .get(name)
            .filter(|h| !h.deleted)
            .and_then(|h| h.versions.last())
        {
            spec.inherit_floor(&prev.spec);
        }
        spec.check_floor(name)?;
        Ok(spec)
    }

    /// Records `spec` as a new version of `name` (numbered `version`, or the next one);
    /// returns its number. The spec must have been [`prepare`](Rules::prepare)d.
    pub fn install(&self, name: &str, spec: RuleSpec, version: Option<u64>) -> u64 {
        let mut histories = self.histories.lock();
        let h = histories.entry(name.to_string()).or_default();
        // etcd: the writer installs its revision at once, and its watch brings it again.
        if let (Some(n), Some(last)) = (version, h.versions.last())
            && last.version >= n
        {
            return n;
        }
        let number = version.unwrap_or_else(|| h.versions.last().map_or(1, |v| v.version + 1));
        h.versions.push(Version {
            version: number,
            spec,
        });
        h.deleted = false;
        self.publish(&histories);
        number
    }

    /// Deletes `name` (its history is kept for ROLLBACK); false if it was not live.
    pub fn delete(&self, name: &str) -> bool {
        let mut histories = self.histories.lock();
        let Some(h) = histories.get_mut(name).filter(|h| !h.deleted) else {
            return false;
        };
        h.deleted = true;
        self.publish(&histories);
        true
    }

    /// Replaces every rule with `rules` (a file reload): a rule whose spec changed gets a new
    /// version, a rule no longer listed is deleted. Every spec is checked against its floor
    /// first; on any refusal nothing changes.
    pub fn replace_all(&self, rules: BTreeMap<String, RuleSpec>) -> Result<usize, RuleError> {
        let mut histories = self.histories.lock();
        let mut prepared = Vec::new();
        for (name, mut spec) in rules {
            let current = histories
                .get(&name)
                .filter(|h| !h.deleted)
                .and_then(|h| h.versions.last());
            if let Some(prev) = current {
                spec.inherit_floor(&prev.spec);
            }
            spec.check_floor(&name)?;
            let unchanged = current.is_some_and(|v| v.spec == spec);
            prepared.push((name, spec, unchanged));
        }
        let mut changes = 0;
        let listed: std::collections::BTreeSet<String> =
            prepared.iter().map(|(n, _, _)| n.clone()).collect();
        for (name, h) in histories.iter_mut() {
            if !h.deleted && !listed.contains(name) {
                h.deleted = true;
                changes += 1;
            }
        }
        for (name, spec, unchanged) in prepared {
            if unchanged {
                continue;
            }
            let h = histories.entry(name).or_default();
            let version = h.versions.last().map_or(1, |v| v.version + 1);
            h.versions.push(Version { version, spec });
            h.deleted = false;
            changes += 1;
        }
        if changes > 0 {
            self.publish(&histories);
        }
        Ok(changes)
    }

    /// The live rule `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Live>> {
        self.live.lock().get(name.as_bytes()).cloned()
    }

    /// Live rule names, sorted.
    pub fn names(&self) -> Vec<String> {
        let histories = self.histories.lock();
        histories
            .iter()
            .filter(|(_, h)| !h.deleted)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every version of `name`, oldest first (also after DEL); `None` if never set.
    pub fn history(&self, name: &str) -> Option<Vec<Version>> {
        self.histories.lock().get(name).map(|h| h.versions.clone())
    }

    /// The spec ROLLBACK restores: version `to`, or the one before the current version.
    pub fn rollback_target(&self, name: &str, to: Option<u64>) -> Result<RuleSpec, RuleError> {
        let histories = self.histories.lock();
        let h = histories
            .get(name)
            .ok_or_else(|| RuleError::msg(format!("ERR no such rule '{name}'")))?;
        let found = match to {
            Some(v) => h.versions.iter().find(|x| x.version == v),
            None if h.deleted => h.versions.last(),
            None => h.versions.len().checked_sub(2).map(|i| &h.versions[i]),
        };
        let mut spec = found
            .ok_or_else(|| {
                RuleError::msg(match to {
                    Some(v) => format!("ERR rule '{name}' has no version {v}"),
                    None => format!("ERR rule '{name}' has no earlier version to roll back to"),
                })
            })?
            .spec
            .clone();
        // A rollback applies to every subject at once.
        spec.rollout = 100;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Result<RuleSpec, String> {
        parse_spec(text.split_whitespace().map(str::as_bytes)).map_err(|e| e.0)
    }

    #[test]
    fn spec_text_round_trips() {
        for text in [
            "LIMIT 100 PERIOD 1m ALGO TOKEN FAILMODE open",
            "LIMIT 5 PERIOD 500ms BURST 10 ALGO GCRA FAILMODE closed SHADOW FLOOR 2 ROLLOUT 25",
            "LIMIT 7 PERIOD 90s ALGO SLIDING FAILMODE local",
            "LIMIT 1000 PERIOD 1m ALGO TOKEN FAILMODE open GLOBAL",
            "LIMIT 50 PERIOD 1m ALGO TOKEN FAILMODE open SCOPE user TIER free ROUTE /api",
            "LIMIT 9 PERIOD 1s ALGO TOKEN FAILMODE closed SCOPE ip",
        ] {
            assert_eq!(spec(text).unwrap().to_text(), text);
        }
    }

    #[test]
    fn validation_names_the_problem() {
        let err = |t: &str| spec(t).unwrap_err();
        assert!(err("LIMIT 5 PERIOD 0").contains("PERIOD '0' must be a positive duration"));
        assert!(err("LIMIT 5 PERIOD 400d").contains("absurd"));
        assert!(err("LIMIT 5 PERIOD 1m ALGO fancy").contains("unknown ALGO 'fancy'"));
        assert!(err("LIMIT 0 PERIOD 1m").contains("LIMIT must be a positive integer"));
        assert!(err("PERIOD 1m").contains("needs LIMIT"));
        assert!(err("LIMIT 5").contains("needs WINDOW"));
        assert!(err("LIMIT 5 WINDOW 1m PERIOD 1m").contains("same setting"));
        assert_eq!(
            spec("LIMIT 5 WINDOW 90s").unwrap(),
            spec("LIMIT 5 PERIOD 90s").unwrap()
        );
        assert_eq!(
            spec("LIMIT 5 window 1m").unwrap().period,
            Nanos::from_secs(60)
        );
        assert!(err("LIMIT 5 PERIOD 1m ROLLOUT 0").contains("ROLLOUT must be a percentage"));
        assert!(err("LIMIT 5 PERIOD 1m ROLLOUT 101").contains("ROLLOUT must be a percentage"));
        assert!(err("LIMIT 5 PERIOD 1m BURST 9 ALGO FIXED").contains("BURST applies to"));
        assert!(err("LIMIT 5 PERIOD 1m FAILMODE maybe").contains("unknown FAILMODE"));
        assert!(err("LIMIT 5 PERIOD 1m FLOOR").contains("FLOOR needs a value"));
        assert!(err("LIMIT 5 PERIOD 1m COLOR red").contains("unknown rule option 'COLOR'"));
        assert!(err("LIMIT 5 PERIOD 1m SCOPE org").contains("unknown SCOPE 'org'"));
        assert!(err("LIMIT 5 PERIOD 1m ROUTE api").contains("ROUTE must be a path prefix"));
        assert!(err("LIMIT 5 PERIOD 1m TIER").contains("TIER needs a value"));
        assert!(check_name(b"user-api.v2_x").is_ok());
        for bad in [&b""[..], b"a:b", b"a b", b"cost", b"KEYS", &[b'x'; 65]] {
            assert!(check_name(bad).is_err());
        }
    }

    #[test]
    fn floors_are_rates_carried_across_versions() {
        let rules = Rules::new(Source::Memory);
        let s = rules
            .prepare("r", spec("LIMIT 100 PERIOD 1m FLOOR 50").unwrap())
            .unwrap();
        rules.install("r", s, None);
        // 10 per minute is below 50 per minute.
        let e = rules
            .prepare("r", spec("LIMIT 10 PERIOD 1m").unwrap())
            .unwrap_err()
            .0;
        assert!(e.contains("below its FLOOR 50"), "{e}");
        // 60 per hour is 1 per minute: below the floor stated per hour (3000).
        let e = rules
            .prepare("r", spec("LIMIT 60 PERIOD 1h").unwrap())
            .unwrap_err()
            .0;
        assert!(e.contains("FLOOR 3000 per 1h"), "{e}");
        let ok = rules
            .prepare("r", spec("LIMIT 6000 PERIOD 1h").unwrap())
            .unwrap();
        assert_eq!(ok.floor, Some(3000));
    }

    #[test]
    fn global_rules_enforce_the_regions_share() {
        let rules = Rules::new(Source::Memory);
        rules.install(
            "g",
            spec("LIMIT 1000 PERIOD 1m BURST 50 GLOBAL").unwrap(),
            None,
        );
        rules.install("l", spec("LIMIT 1000 PERIOD 1m").unwrap(), None);
        // No regions: the whole limit.
        assert_eq!(rules.get("g").unwrap().current.spec.limit, 1000);
        let until = Nanos::from_secs(100);
        rules.set_region_shares(250_000, HashMap::from([("g".to_string(), 600_000)]), until);
        let g = rules.get("g").unwrap();
        assert_eq!(
            (g.current.spec.limit, g.current.spec.burst),
            (600, Some(30))
        );
        // A rule that is not GLOBAL is untouched by shares.
        assert_eq!(rules.get("l").unwrap().current.spec.limit, 1000);
        assert!(rules.get("l").unwrap().lapsed.is_none());
        // floor(limit × share), at least 1; the default share for rules not named.
        rules.set_region_shares(333_333, HashMap::new(), until);
        assert_eq!(rules.get("g").unwrap().current.spec.limit, 333);
        rules.set_region_shares(0, HashMap::new(), until);
        assert_eq!(rules.get("g").unwrap().current.spec.limit, 1);
        // The declared spec is unchanged in the history.
        assert_eq!(rules.history("g").unwrap()[0].spec.limit, 1000);
        assert_eq!(rules.global_names(), vec!["g".to_string()]);
    }

    #[test]
    fn a_share_past_its_deadline_falls_to_the_minimum_on_the_request_path() {
        let rules = Rules::new(Source::Memory);
        rules.install("g", spec("LIMIT 1000 PERIOD 1m GLOBAL").unwrap(), None);
        rules.install("l", spec("LIMIT 1000 PERIOD 1m").unwrap(), None);
        let until = Nanos::from_secs(100);
        let shares = |g| HashMap::from([("g".to_string(), g), ("l".to_string(), 600_000)]);
        rules.set_region_shares(250_000, shares(600_000), until);
        let g = rules.get("g").unwrap();
        let just_before = Nanos(until.0 - 1);
        assert_eq!(g.spec_for(b"u", just_before).limit, 600);
        // From the deadline on, with no word from the region thread: the minimum.
        assert_eq!(g.spec_for(b"u", until).limit, 250);
        assert_eq!(g.current_at(Nanos::MAX).limit, 250);
        // Renewed: the share again, to the new deadline.
        let renewed = Nanos::from_secs(200);
        rules.set_region_shares(250_000, shares(600_000), renewed);
        let g = rules.get("g").unwrap();
        assert_eq!(g.spec_for(b"u", until).limit, 600);
        assert_eq!(g.spec_for(b"u", renewed).limit, 250);
        // A share at or below the minimum has nothing to lapse; a rule that is not GLOBAL
        // never lapses.
        rules.set_region_shares(250_000, shares(100_000), until);
        assert!(rules.get("g").unwrap().lapsed.is_none());
        assert_eq!(
            rules.get("g").unwrap().spec_for(b"u", Nanos::MAX).limit,
            100
        );
        assert!(rules.get("l").unwrap().lapsed.is_none());
        assert_eq!(
            rules.get("l").unwrap().spec_for(b"u", Nanos::MAX).limit,
            1000
        );
        // Both versions of a staged rollout lapse.
        rules.install(
            "g",
            spec("LIMIT 500 PERIOD 1m GLOBAL ROLLOUT 50").unwrap(),
            None,
        );
        rules.set_region_shares(250_000, shares(600_000), until);
        let g = rules.get("g").unwrap();
        let limits = |now| {
            let mut l: Vec<u64> = (0..200)
                .map(|i| g.spec_for(format!("u{i}").as_bytes(), now).limit)
                .collect();
            l.sort_unstable();
            l.dedup();
            l
        };
        assert_eq!(limits(just_before), vec![300, 600]);
        assert_eq!(limits(until), vec![125, 250]);
    }

    #[test]
    fn rollout_splits_subjects_stably() {
        let rules = Rules::new(Source::Memory);
        rules.install("r", spec("LIMIT 100 PERIOD 1m").unwrap(), None);
        rules.install("r", spec("LIMIT 5 PERIOD 1m ROLLOUT 20").unwrap(), None);
        let live = rules.get("r").unwrap();
        let on_new = (0..10_000)
            .filter(|i| {
                live.spec_for(format!("user:{i}").as_bytes(), Nanos::ZERO)
                    .limit
                    == 5
            })
            .count();
        assert!((1_700..2_300).contains(&on_new), "{on_new} of 10000");
        // The same subject always lands on the same side.
        for i in 0..100 {
            let s = format!("user:{i}");
            assert_eq!(
                live.spec_for(s.as_bytes(), Nanos::ZERO).limit,
                live.spec_for(s.as_bytes(), Nanos::ZERO).limit
            );
            assert_eq!(
                live.spec_for(s.as_bytes(), Nanos::ZERO).limit == 5,
                rollout_bucket(s.as_bytes()) < 20
            );
        }
    }
}
