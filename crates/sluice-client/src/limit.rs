//! What a gateway asks ([`Limit`] with its per-limit options) and what it gets ([`Decision`]).

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Algo;

pub use sluice_core::spec::FailMode;

/// Local pre-aggregation: count locally, sync the sum in one `RL.CHECK ... COST n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Approximate {
    /// Sync at least this often while a key is counted (also the local quota's window).
    pub sync_every: Duration,
    /// Sync once this many units were counted locally; 0: only by time. It also caps the local
    /// quota, so a smaller `n` gives a tighter bound.
    pub sync_every_n: u64,
}

/// One limit and its gateway options. `Limit::new(100, Duration::from_secs(60))` is RL.CHECK's
/// `key 100 60s`, exact, fail-open, with the blocked cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub limit: u64,
    /// Whole milliseconds (the node's finest period unit); at least 1 ms.
    pub period: Duration,
    pub burst: Option<u64>,
    pub algo: Algo,
    pub fail_mode: FailMode,
    /// After a denial, answer the same key locally until its `retry_after` passes.
    pub blocked_cache: bool,
    /// Spread the key over `split` sub-keys `key#0..key#{split-1}`, one picked at random per
    /// request. Their limits (and bursts) sum exactly to `limit` (and `burst`): sub-key `i`
    /// gets `limit ÷ split`, plus one for the first `limit mod split`. 1: no split.
    ///
    /// A sub-key needs a limit of at least 1, so no more sub-keys are used than `limit` (and
    /// `burst`); the sidecar and RL.CHECK refuse a larger `SPLIT` (`sluice_core::spec::check_split`).
    ///
    /// The cost: `remaining` is one sub-key's, so approximate, and a caller can be denied by one
    /// sub-key while another has room: the total admitted is under `limit` when traffic is
    /// uneven, and never over it.
    pub split: u32,
    pub approximate: Option<Approximate>,
}

impl Limit {
    pub fn new(limit: u64, period: Duration) -> Limit {
        Limit {
            limit,
            period,
            burst: None,
            algo: Algo::Token,
            fail_mode: FailMode::Open,
            blocked_cache: true,
            split: 1,
            approximate: None,
        }
    }

    pub fn burst(mut self, burst: u64) -> Limit {
        self.burst = Some(burst);
        self
    }

    pub fn algo(mut self, algo: Algo) -> Limit {
        self.algo = algo;
        self
    }

    pub fn fail_mode(mut self, mode: FailMode) -> Limit {
        self.fail_mode = mode;
        self
    }

    pub fn blocked_cache(mut self, on: bool) -> Limit {
        self.blocked_cache = on;
        self
    }

    pub fn split(mut self, k: u32) -> Limit {
        self.split = k.max(1);
        self
    }

    /// How many sub-keys a split uses: `split`, but no more than the limit or the burst.
    pub fn sub_keys(&self) -> u64 {
        u64::from(self.split)
            .min(self.limit)
            .min(self.burst.unwrap_or(u64::MAX))
            .max(1)
    }

    /// Sub-key `i`'s limit (of [`Limit::sub_keys`]): the shares sum exactly to the whole.
    pub fn sub_limit(&self, i: u64) -> Limit {
        let k = self.sub_keys();
        let share = |whole: u64| whole / k + u64::from(i < whole % k);
        Limit {
            limit: share(self.limit),
            burst: self.burst.map(share),
            split: 1,
            ..*self
        }
    }

    pub fn approximate(mut self, sync_every: Duration, sync_every_n: u64) -> Limit {
        self.approximate = Some(Approximate {
            sync_every,
            sync_every_n,
        });
        self
    }

    /// The capacity used (BURST if given, else the limit).
    pub fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    pub(crate) fn period_ms(&self) -> u64 {
        (self.period.as_millis() as u64).max(1)
    }

    /// In approximate mode, the most one gateway admits without the node having counted it:
    /// `Q = min(sync_every_n, ⌈limit × sync_every ÷ period⌉)` (the first term only when
    /// `sync_every_n > 0`), at least 1. `None` when exact.
    pub fn approx_quota(&self) -> Option<u64> {
        let a = self.approximate?;
        let per_interval = (u128::from(self.limit) * a.sync_every.as_nanos())
            .div_ceil(self.period.as_nanos().max(1));
        let mut q = u64::try_from(per_interval).unwrap_or(u64::MAX);
        if a.sync_every_n > 0 {
            q = q.min(a.sync_every_n);
        }
        Some(q.max(1))
    }

    /// The overshoot bound of approximate mode with `gateways` gateways on one key: at most this
    /// many requests are admitted beyond what the exact limiter would have admitted over any
    /// span, `gateways × Q` with `Q` from [`Limit::approx_quota`] — that is, gateways × sync
    /// interval × rate, rounded up, or gateways × `sync_every_n` if that is smaller.
    ///
    /// Why: the node counts every request it is sent and admits at most what the exact limiter
    /// would. A gateway admits locally only while its count not yet charged on the node (local
    /// count since the last completed sync, plus the debt of a sync the node denied) is under
    /// `Q`, and admits nothing while it owes; a denied sync drains what the node still has and
    /// carries the rest as debt, sent again at every sync until the node has taken it. So at any
    /// instant each gateway holds at most `Q` admitted-but-uncharged units, and the fleet at most
    /// `gateways × Q`. `0` when exact. (It assumes the key stays in the gateway's approximate
    /// map: a gateway tracking more hot keys than `Config::max_local_keys` forgets some, with
    /// their uncharged count.)
    pub fn overshoot_bound(&self, gateways: u32) -> u64 {
        self.approx_quota()
            .map_or(0, |q| q.saturating_mul(u64::from(gateways.max(1))))
    }
}

/// Where a decision came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The node at this address answered.
    Node(Arc<str>),
    /// A denial cached from the node's last answer for this key.
    BlockedCache,
    /// The in-process bucket of fail mode `local`.
    LocalBucket,
    /// Fail mode `open`.
    FailOpen,
    /// Fail mode `closed`.
    FailClosed,
    /// Approximate mode, between syncs: the last global answer plus the local count.
    Approximate,
}

impl Source {
    pub const NAMES: [&'static str; 6] = [
        "node",
        "blocked_cache",
        "local_bucket",
        "fail_open",
        "fail_closed",
        "approximate",
    ];

    /// Index into [`Source::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Source::Node(_) => 0,
            Source::BlockedCache => 1,
            Source::LocalBucket => 2,
            Source::FailOpen => 3,
            Source::FailClosed => 4,
            Source::Approximate => 5,
        }
    }
}

/// RL.CHECK's five fields, and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    /// -1 when allowed; else milliseconds until this request would be allowed.
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    pub source: Source,
}

impl Decision {
    /// The five integers of an `RL.CHECK` reply.
    pub fn fields(&self) -> [i64; 5] {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        [
            i64::from(self.allowed),
            clamp(self.limit),
            clamp(self.remaining),
            self.retry_after_ms,
            self.reset_after_ms,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overshoot_bound_is_gateways_times_interval_times_rate() {
        // 1000/s synced every 50 ms: 50 per gateway per interval, 4 gateways: 200.
        let l = Limit::new(1000, Duration::from_secs(1)).approximate(Duration::from_millis(50), 0);
        assert_eq!(l.approx_quota(), Some(50));
        assert_eq!(l.overshoot_bound(4), 200);
        // sync_every_n caps the quota.
        let l = l.approximate(Duration::from_millis(50), 20);
        assert_eq!(l.overshoot_bound(4), 80);
        // Rounded up, never zero: 10/min synced every 100 ms.
        let l = Limit::new(10, Duration::from_secs(60)).approximate(Duration::from_millis(100), 0);
        assert_eq!(l.approx_quota(), Some(1));
        assert_eq!(Limit::new(10, Duration::from_secs(1)).overshoot_bound(8), 0);
    }

    #[test]
    fn split_shares_sum_to_the_whole() {
        let l = Limit::new(10, Duration::from_secs(1)).split(3);
        assert_eq!(l.sub_keys(), 3);
        let shares: Vec<u64> = (0..3).map(|i| l.sub_limit(i).limit).collect();
        assert_eq!(shares, [4, 3, 3]);
        // More sub-keys than the limit: one per unit, never a share of 0 rounded up to 1.
        let l = Limit::new(10, Duration::from_secs(1)).split(1000);
        assert_eq!(l.sub_keys(), 10);
        assert_eq!((0..10).map(|i| l.sub_limit(i).limit).sum::<u64>(), 10);
        // The burst splits the same way, and bounds the sub-keys too.
        let l = Limit::new(100, Duration::from_secs(1)).burst(5).split(8);
        assert_eq!(l.sub_keys(), 5);
        assert_eq!(
            (0..5).map(|i| l.sub_limit(i).burst.unwrap()).sum::<u64>(),
            5
        );
        assert_eq!((0..5).map(|i| l.sub_limit(i).limit).sum::<u64>(), 100);
    }
}
